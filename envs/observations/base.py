"""Observation builder interface: a fixed space, filled from the public cluster state at each decision point.

A builder reads only what a router may know: the :class:`~llmsim.state.cluster_state.ClusterState` it is given (stale
with ``view_staleness``), the request being decided, the predictor's outputs and the router's own
bookkeeping (:class:`~llmsim.envs.context.ObservationContext`), plus any history it keeps itself
(``on_arrival``). So the same builder runs in front of real backends, on a state built from their metrics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import gymnasium as gym

    from llmsim.envs.context import ObservationContext
    from llmsim.request import Request
    from llmsim.state.cluster_state import ClusterState


class ObsBuilder:
    name = "obs"
    reads_quality = False  # features from each request's predicted quality per model (a live request may lack it)

    def bind(self, env: ObservationContext) -> gym.Space:
        """Size buffers for ``env``'s cluster and return the observation space (called once)."""
        raise NotImplementedError

    def reset(self, env: ObservationContext) -> None:
        pass

    def on_arrival(self, env: ObservationContext, req: Request) -> None:
        pass

    def build(self, env: ObservationContext, state: ClusterState, req: Request | None) -> Any:
        """Observation for deciding ``req`` (None: nothing to decide, e.g. a drain step or the terminal state)."""
        raise NotImplementedError
