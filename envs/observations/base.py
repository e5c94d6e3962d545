"""Observation builder interface: a fixed space, filled from the public cluster state at each decision point.

A builder reads only what a router may know: the :class:`~llmsim.state.cluster_state.ClusterState` it is given (stale
with ``view_staleness``), the request being decided, the predictor's outputs and the router's own
bookkeeping (:class:`~llmsim.envs.context.ObservationContext`), plus any history it keeps itself
(``on_arrival``). So the same builder runs in front of real backends, on a state built from their metrics.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any

from llmsim.errors import ConfigError

if TYPE_CHECKING:
    import gymnasium as gym

    from llmsim.envs.context import ObservationContext
    from llmsim.request import Request
    from llmsim.state.cluster_state import ClusterState


def positive(key: str, value: Any, integer: bool = False) -> Any:
    """``value`` unchanged if it is a positive (integer) number; else one line naming ``observation.<key>``: a zero
    scale or cap would otherwise divide by zero, or build an empty space, deep in the first reset."""
    kind = Integral if integer else Real
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value) or not value > 0:
        raise ConfigError(f"observation.{key}: expected a positive {'integer' if integer else 'number'}, got {value!r}")
    return value


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
