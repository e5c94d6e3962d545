"""The cluster: instances behind a router (:mod:`llmsim.cluster.cluster`), its periodic clock, the router's view,
the P/D KV copies, the configs that build it and the driver API for outside steppers (:mod:`llmsim.cluster.driver`)."""

from llmsim.cluster.cluster import Cluster
from llmsim.cluster.config import InstanceConfig
from llmsim.cluster.view import ClusterOpsView, ClusterView

__all__ = ["Cluster", "ClusterOpsView", "ClusterView", "InstanceConfig"]
