"""Observation builder interface: a fixed space, filled from the cluster at each decision point."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import gymnasium as gym

    from envs.core import RoutingEnv
    from llmsim.request import Request


class ObsBuilder:
    name = "obs"

    def bind(self, env: RoutingEnv) -> gym.Space:
        """Size buffers for ``env``'s cluster and return the observation space (called once)."""
        raise NotImplementedError

    def reset(self, env: RoutingEnv) -> None:
        pass

    def on_arrival(self, env: RoutingEnv, req: Request) -> None:
        pass

    def build(self, env: RoutingEnv, req: Request | None) -> Any:
        """Observation for deciding ``req`` (None: nothing to decide, e.g. the terminal state)."""
        raise NotImplementedError
