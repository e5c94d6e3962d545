"""llmsim: a discrete-event simulator of LLM-serving clusters (no torch, gymnasium or hydra here)."""

from llmsim.cluster import Cluster, ClusterView, InstanceConfig
from llmsim.engine import EngineConfig
from llmsim.metrics import SLO
from llmsim.request import Request
from llmsim.sim import SimResult, simulate

__version__ = "0.1.0"

__all__ = ["SLO", "Cluster", "ClusterView", "EngineConfig", "InstanceConfig", "Request", "SimResult", "simulate"]
