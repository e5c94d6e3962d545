"""Running simulations: ``simulate(instances, requests, policy)`` -> ``SimResult`` (:mod:`llmsim.simulation.run`) and
the router-call telemetry recorded along a run (:mod:`llmsim.simulation.telemetry`)."""

from llmsim.metrics.result import SimResult
from llmsim.simulation.run import collect, simulate

__all__ = ["SimResult", "collect", "simulate"]
