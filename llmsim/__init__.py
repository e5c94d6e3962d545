"""llmsim: a discrete-event simulator of LLM-serving clusters (no torch, gymnasium or hydra here)."""

from llmsim import compiled as _compiled

_compiled.activate()  # the engine's compiled modules, when built and matching the sources (llmsim/compiled.py)

# ruff: noqa: E402  (the engine is imported after the compiled build is found)

from llmsim.cluster import Cluster, ClusterView, InstanceConfig
from llmsim.engine.config import EngineConfig
from llmsim.metrics.result import SimResult
from llmsim.request import Request
from llmsim.schema import SLO
from llmsim.simulation.run import simulate
from llmsim.state import LAYOUT_VERSION, ClusterState, InstanceRequests, InstanceState, RequestState, StaleStateError

__version__ = "0.1.0"

__all__ = ["LAYOUT_VERSION", "SLO", "Cluster", "ClusterState", "ClusterView", "EngineConfig", "InstanceConfig",
           "InstanceRequests", "InstanceState", "Request", "RequestState", "SimResult", "StaleStateError", "simulate"]
