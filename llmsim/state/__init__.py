"""The public, versioned cluster state: what any decision (router, env observation, reward, live router) may read.

``ClusterState`` is one snapshot of every instance and its requests (:mod:`llmsim.state.cluster_state`);
``StateView`` serves a router from a ``ClusterState`` alone (:mod:`llmsim.state.state_view`), as the live router
does; ``ModelHostState`` describes a multi-model instance's models (:mod:`llmsim.state.model_host`).
"""

from llmsim.state.cluster_state import (
    LAYOUT_VERSION,
    ClusterState,
    InstanceRequests,
    InstanceState,
    RequestState,
    StaleStateError,
)
from llmsim.state.model_host import ModelHostState
from llmsim.state.state_view import StateView

__all__ = ["LAYOUT_VERSION", "ClusterState", "InstanceRequests", "InstanceState", "ModelHostState", "RequestState",
           "StaleStateError", "StateView"]
