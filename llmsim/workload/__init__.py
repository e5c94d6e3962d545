"""Lazy request streams: trace readers, synthetic arrivals and lengths, and stream transforms.

``build_workload(cfg, seed)`` turns a plain dict (a Hydra ``conf/workload/*.yaml``) into a
:class:`Workload`; see docs/workloads.md for every kind and key. The ideal prefix hit rate of a stream is in
:mod:`llmsim.workload.prefix_hits` (a command too, so it is not imported here).
"""

from __future__ import annotations

from llmsim.workload.arrivals import (
    ARRIVAL_PRESETS,
    ArrivalProcess,
    GammaArrivals,
    Phase,
    PhasedArrivals,
    PoissonArrivals,
    RandomPhases,
    square_wave,
)
from llmsim.workload.base import Workload, WorkloadStats
from llmsim.workload.config import build_arrival, build_length, build_lengths, build_workload
from llmsim.workload.lengths import (
    LENGTH_PRESETS,
    Empirical,
    Fixed,
    Independent,
    LengthModel,
    LogNormal,
    PairModel,
    Uniform,
)
from llmsim.workload.prefix import PromptPool, SharedPrefixWorkload
from llmsim.workload.sessions import SessionIds
from llmsim.workload.synthetic import SyntheticWorkload
from llmsim.workload.traces import AzureTrace, BurstGPTTrace, CsvTrace, MooncakeTrace
from llmsim.workload.transforms import Limited, PromptCapped, RateScaled, Windowed

__all__ = [
    "ARRIVAL_PRESETS",
    "LENGTH_PRESETS",
    "ArrivalProcess",
    "AzureTrace",
    "BurstGPTTrace",
    "CsvTrace",
    "Empirical",
    "Fixed",
    "GammaArrivals",
    "Independent",
    "LengthModel",
    "Limited",
    "LogNormal",
    "MooncakeTrace",
    "PairModel",
    "Phase",
    "PhasedArrivals",
    "PoissonArrivals",
    "PromptCapped",
    "PromptPool",
    "RandomPhases",
    "RateScaled",
    "SessionIds",
    "SharedPrefixWorkload",
    "SyntheticWorkload",
    "Uniform",
    "Windowed",
    "Workload",
    "WorkloadStats",
    "build_arrival",
    "build_length",
    "build_lengths",
    "build_workload",
    "square_wave",
]
