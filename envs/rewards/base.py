"""Reward interface: components accumulate from simulator hooks and are emitted once per env step.

Attribution of delayed rewards: a request's latency is known only when it finishes. Every hook fires
when the simulator processes the event; ``end_step`` then hands over everything accumulated since the
previous decision. So the reward returned by ``step(a_t)`` holds (i) the action-time terms of ``a_t``
(penalties estimated before the action is applied) and (ii) the completions that happened while the
simulation ran from decision t to decision t+1 (including the final drain on the last step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from envs.core import RoutingEnv
    from llmsim.instance import Instance
    from llmsim.request import Request


class Reward:
    """Base class. Subclasses list ``components`` and their default ``weights`` (total = weighted sum)."""

    name: ClassVar[str] = "reward"
    components: ClassVar[tuple[str, ...]] = ()
    default_weights: ClassVar[dict[str, float]] = {}

    def __init__(self, weights: dict[str, float] | None = None) -> None:
        w = dict(self.default_weights)
        if weights:
            unknown = set(weights) - set(self.components)
            if unknown:
                raise ValueError(f"reward {self.name!r}: unknown component(s) {sorted(unknown)}; "
                                 f"components are {list(self.components)}")
            w.update(weights)
        self.weights = w
        self._acc = dict.fromkeys(self.components, 0.0)

    # hooks -------------------------------------------------------------------------------
    def reset(self, env: RoutingEnv) -> None:
        self.env = env
        self._acc = dict.fromkeys(self.components, 0.0)

    def before_action(self, env: RoutingEnv, req: Request | None, target: int | None) -> None:
        """Called with the request being decided and the instance it goes to (None: wait / drop)."""

    def on_finish(self, req: Request, inst: Instance) -> None:
        pass

    def on_drop(self, req: Request) -> None:
        pass

    def on_tick(self, env: RoutingEnv) -> None:
        """Called at every decision tick (tick mode), including ticks that are not decision points."""

    def on_step_end(self, env: RoutingEnv) -> None:
        """Called once per env step after the simulation has advanced (per-step state terms)."""

    # output ------------------------------------------------------------------------------
    def add(self, key: str, value: float) -> None:
        self._acc[key] += value

    def end_step(self, env: RoutingEnv) -> tuple[float, dict[str, float]]:
        self.on_step_end(env)
        comps = self._acc
        self._acc = dict.fromkeys(self.components, 0.0)
        w = self.weights
        total = 0.0
        for k, v in comps.items():
            total += w.get(k, 0.0) * v
        return total, comps
