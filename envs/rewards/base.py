"""Reward interface: components accumulate from simulator hooks and are emitted once per env step.

Attribution (a semi-MDP step runs from one decision to the next, ``info["dt"]`` simulated seconds): every
hook fires when the simulator processes the event, and ``end_step`` hands over everything accumulated
since the previous decision. So the reward returned by ``step(a_t)`` holds (i) the action-time terms of
``a_t`` (penalties estimated before the action is applied, from the true state) and (ii) every outcome
between decision t and decision t+1: completions, and drops of any cause. After the last arrival the env
keeps stepping (wait-only drain steps at each instant with an outcome), so no outcome is lumped into one
final step.

Every reward also carries the generic outcome components (weight 1 by default, values <= 0), so that no
way of losing a request is free and none is cheaper than another by accident:

* ``dropped``: -1 per request dropped for any reason (the agent's DROP, a route to an instance that can
  never serve it, ``env.on_unservable``, the engine, the wait-timeout fallback ``drop``, never routed);
* ``cut_off``: -1 per request still unfinished when the episode is truncated by its time limit;
* ``truncated``: -1 per completion whose output was cut at the instance's ``max_model_len``;
* ``timeouts``: -1 per request routed by the wait-timeout fallback (it waited ``max_wait_s``);
* ``waiting``: -``wait_cost`` per request-second spent held in the central queue (default 0.1: ten
  seconds of waiting cost as much as a drop).

The step reward is ``scale * sum(weights[c] * component[c])``; ``info["reward_components"]`` holds the
unweighted components. ``scale`` (per reward class, overridable) makes a typical step of order 1.

Per-request credit: the part of a step's reward that one request's outcome earned (its completion terms, its drop
or cut-off) is also kept by request id (:meth:`take_credits`, the env's ``info["request_rewards"]``), so a learner
can credit it to the decision that placed the request instead of the step in which it happened to finish
(agents/loop.py, ``reward_credit: request``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from llmsim.envs.options import non_negative, positive
from llmsim.errors import ConfigError

if TYPE_CHECKING:
    from llmsim.envs.context import RewardContext
    from llmsim.request import Request

GENERIC = ("dropped", "cut_off", "truncated", "timeouts", "waiting")
CUT_OFF_REASON = "episode_truncated"


class Reward:
    """Base class. Subclasses list their ``own_components`` and default ``weights`` (total = scaled weighted sum)."""

    name: ClassVar[str] = "reward"
    own_components: ClassVar[tuple[str, ...]] = ()
    default_weights: ClassVar[dict[str, float]] = {}
    default_scale: ClassVar[float] = 1.0
    # on_tick reads the env only through state() / true_state() and static facts (nothing else that changes
    # with time): the env may then evaluate ticks between two events without an event each (llmsim.envs.routing_env)
    tick_reads_state: ClassVar[bool] = False

    def __init__(self, weights: dict[str, float] | None = None, scale: float | None = None,
                 wait_cost: float = 0.1) -> None:
        self.components = tuple(dict.fromkeys(self.own_components + GENERIC))
        w = dict.fromkeys(GENERIC, 1.0)
        w.update(self.default_weights)
        if weights:
            unknown = set(weights) - set(self.components)
            if unknown:
                raise ConfigError(f"reward.weights: reward {self.name!r} has no component(s) {sorted(unknown)}; "
                                  f"components are {list(self.components)}")
            w.update(weights)
        self.weights = w
        self.scale = float(self.default_scale if scale is None else positive("reward.scale", scale))
        self.wait_cost = float(non_negative("reward.wait_cost", wait_cost))
        self._acc = dict.fromkeys(self.components, 0.0)
        self._credits: dict[int, float] = {}

    # hooks -------------------------------------------------------------------------------
    def reset(self, env: RewardContext) -> None:
        self.env = env
        self._acc = dict.fromkeys(self.components, 0.0)
        self._credits = {}

    def before_action(self, env: RewardContext, req: Request, target: int | None) -> None:
        """Called with the request being decided and the instance it goes to (None: wait / drop)."""

    def on_finish(self, req: Request, k: int) -> None:
        """A completion on instance ``k``; subclasses add their terms and call this (output truncation)."""
        if req.truncated:
            self.credit(req, "truncated", -1.0)

    def on_drop(self, req: Request, reason: str) -> None:
        """A request dropped for ``reason`` (every cause reaches here, the agent's DROP included)."""
        self.credit(req, "cut_off" if reason == CUT_OFF_REASON else "dropped", -1.0)

    def on_timeout(self, req: Request) -> None:
        """A held request that waited ``max_wait_s`` and was routed by the env's fallback."""
        self.credit(req, "timeouts", -1.0)

    def on_wait(self, request_seconds: float) -> None:
        """Request-seconds spent held in the central queue during this step."""
        self._acc["waiting"] -= self.wait_cost * request_seconds

    def on_tick(self, env: RewardContext) -> None:
        """Called at every decision tick (tick mode), including ticks that are not decision points."""

    def on_step_end(self, env: RewardContext, dt: float) -> None:
        """Called once per env step after the simulation has advanced ``dt`` seconds (per-step state terms)."""

    # output ------------------------------------------------------------------------------
    def add(self, key: str, value: float) -> None:
        self._acc[key] += value

    def credit(self, req: Request, key: str, value: float) -> None:
        """``add`` a term that ``req``'s own outcome earned, and keep its weighted value by request id."""
        self._acc[key] += value
        w = self.weights.get(key, 0.0)
        if w:
            self._credits[req.id] = self._credits.get(req.id, 0.0) + w * value

    def take_credits(self) -> dict[int, float]:
        """The step's per-request parts of the reward (reward units), by request id; cleared for the next step."""
        out = {k: self.scale * v for k, v in self._credits.items()}
        self._credits = {}
        return out

    def end_step(self, env: RewardContext, dt: float) -> tuple[float, dict[str, float]]:
        self.on_step_end(env, dt)
        comps = self._acc
        self._acc = dict.fromkeys(self.components, 0.0)
        w = self.weights
        total = 0.0
        for k, v in comps.items():
            total += w.get(k, 0.0) * v
        return self.scale * total, comps
