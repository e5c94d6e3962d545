"""The semi-MDP's decision points: where the simulation stops for the agent, and how its decisions are carried out.

* ``decision="arrival"``: the cluster's router (:class:`AgentRouter`) hands every new request to the agent (``DEFER``);
  the simulation stops at its arrival instant and the decision is applied there, exactly as a router would. A held
  (waiting) request sits in the central queue and is offered again at the next completion or retry tick.
* ``decision="tick"``: arrivals queue centrally (``WAIT``); every ``tick`` seconds the agent decides for the head of
  the queue. Ticks with an empty queue are skipped unless ``tick_when_empty`` (per-tick reward terms are still
  accumulated at every tick; :meth:`DecisionPoints.quiet_ticks` accounts for the ticks between two events without an
  event each).
* Drain: once no request will arrive and none is held, the episode goes on with wait-only steps, one at each instant
  where a request finishes or is dropped, so every outcome is rewarded when it happens.
* A disaggregated cluster adds decode decisions (:mod:`llmsim.envs.pd_stage`); a request held ``max_wait_s`` is routed
  by the wait fallback where held requests are looked at anyway (the tick, or a retry), costing no event.

Everything here goes through the cluster's driver API (:class:`llmsim.cluster.driver.ClusterDriver`), never its queues.
``events`` and ``version`` identify the instant (the env caches its states on them); ``at`` is the instant of a
tick evaluated without its event.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from llmsim.envs.rewards.base import Reward
from llmsim.event_loop import ARRIVAL, ROUTE
from llmsim.routing import DEFER, DROP, WAIT, Router

if TYPE_CHECKING:
    from collections.abc import Callable

    from llmsim.cluster import Cluster
    from llmsim.cluster.driver import ClusterDriver
    from llmsim.envs.config import RoutingEnvConfig
    from llmsim.envs.context import RewardContext
    from llmsim.envs.outcomes import Outcomes
    from llmsim.envs.pd_stage import StageRouting
    from llmsim.request import Request
    from llmsim.state.view import RouterView

WAIT_TIMEOUT_REASON = "wait_timeout"


class AgentRouter(Router):
    """The cluster's router in an env: hands every routing decision to the agent (DEFER) or parks requests for the
    tick agent (WAIT); ``on_arrival`` hears of each request reaching the router."""

    name = "gym_agent"

    def __init__(self, on_arrival: Callable[[Request], None], stages: StageRouting, decision: str) -> None:
        super().__init__(0)
        self.on_arrival = on_arrival
        self.stages = stages
        self.decision = WAIT if decision == "tick" else DEFER

    def route(self, req: Request, view: RouterView) -> int:
        self.on_arrival(req)
        return self.stages.route_new(req, view, self.decision)

    def route_decode(self, req: Request, view: RouterView) -> int:
        return self.stages.route_decode(req, view)


class DecisionPoints:
    """The semi-MDP's clock over one episode's cluster: :meth:`advance` runs the simulation to the next decision
    point (``pending``: the request to decide, None for a drain step or the end), :meth:`take` carries out a decision.

    ``ctx`` is the env as rewards see it (predictions, the observed state for the wait fallback)."""

    def __init__(self, cfg: RoutingEnvConfig, ctx: RewardContext, reward: Reward, stages: StageRouting) -> None:
        self.tick_mode = cfg.decision == "tick"
        self.tick = cfg.tick
        self.tick_when_empty = cfg.tick_when_empty
        self.max_wait_s = cfg.max_wait_s
        self.wait_fallback = cfg.wait_fallback
        self.ctx = ctx
        self.reward = reward
        self.stages = stages
        self.pending: Request | None = None
        self.pending_stage = "prefill"
        self.terminated = self.truncated = False
        self.limit = math.inf
        self.events = self.version = 0
        self.at: tuple[float, int] | None = None
        self.last_decision_at = 0.0  # when the previous step ended (its dt starts there)

    def begin(self, cluster: Cluster, driver: ClusterDriver, outcomes: Outcomes, limit: float) -> None:
        """A new episode on ``cluster`` (started by the caller) that is truncated at ``limit``."""
        self.cluster, self.driver, self.outcomes = cluster, driver, outcomes
        self.limit = limit
        self.pending = None
        self.pending_stage = "prefill"
        self.terminated = self.truncated = False
        self.tick_due = False
        self.events = self.version = 0
        self.at = None
        if self.tick_mode:
            self.tick_k = 1  # ticks at k * tick exactly (no accumulated rounding)
            driver.call_at(self.tick, self.on_tick)
        self.last_decision_at = driver.now

    # ------------------------------------------------------------------ stepping
    def advance(self) -> None:
        """Run the simulation to the next decision point (or drain step), the end, or the time limit."""
        c, drv, out = self.cluster, self.driver, self.outcomes
        step, peek = drv.step, drv.next_event_time
        dropped = drv.drops
        tick_mode = self.tick_mode
        limit = self.limit
        out.in_step = 0
        self.pending = None
        self.pending_stage = "prefill"
        while True:
            r_pd = drv.pending_decode() if c.transfers is not None else None
            if r_pd is not None:  # a prefilled request waits for the agent's decode choice (envs/pd_stage.py)
                self.pending, self.pending_stage = r_pd, "decode"
                return
            if tick_mode:
                if self.tick_due:
                    self.tick_due = False
                    held = drv.held  # the cluster replaces this queue on retries: read it fresh
                    if held or self.tick_when_empty:
                        self.pending = held[0] if held else None
                        return
            elif drv.deferred:
                r = drv.deferred[0]
                if self.max_wait_s is None or drv.now - r.arrival < self.max_wait_s:
                    self.pending = r
                    return
                self.expire(drv.take_deferred(), drv.phase)  # a held request offered again too late
                continue
            if len(dropped) != out.n_drops:
                out.collect_drops()
            if drv.only_bookkeeping_left:  # let the scrapes record the final state, and end
                while drv.pending_events and peek() <= limit:
                    self.events += 1
                    step()
                self.terminated = True
                return
            t = peek()
            if out.in_step and t > drv.now and c.arrivals_done and not drv.held and not drv.deferred:
                return  # a drain step: nothing to decide, but something happened at this instant
            if t > limit:
                self.truncated = True
                if limit > drv.now:
                    drv.advance_to(limit)  # the clock reaches the limit (no event on the way)
                return
            self.events += 1
            step()

    def on_tick(self) -> None:
        """A decision tick (tick mode): expire held requests, charge the reward's tick terms, schedule the next."""
        c, drv = self.cluster, self.driver
        if self.max_wait_s is not None:
            held = drv.held  # in arrival order: the agent only ever takes the head
            while held and held[0].arrival + self.max_wait_s <= drv.now:
                self.expire(drv.take_held(), ROUTE)
        self.reward.on_tick(self.ctx)
        if drv.held or self.tick_when_empty:
            self.tick_due = True
        if not c.done:
            self.tick_k += 1
            if not (drv.held or drv.deferred or self.tick_when_empty or (self.outcomes.in_step and c.arrivals_done)):
                self.quiet_ticks()
            drv.call_at(self.tick_k * self.tick, self.on_tick)

    def quiet_ticks(self) -> None:
        """The ticks strictly before the next event (within the time limit), with nothing to decide: each only
        adds its per-tick reward terms, which depend on the state at its instant, where only decode runs have
        moved. Account for them here, with that state (``ClusterView.live_state(at=...)``), instead of one
        event each; the chain goes on with an event at the first tick at or after the next event. The same
        rewards, in the same steps (no step can end between two events without an outcome: the caller checked),
        for rewards whose ``on_tick`` reads only the env's states (``Reward.tick_reads_state``)."""
        t_next = self.driver.next_event_time()
        tick, limit = self.tick, self.limit
        k = self.tick_k
        t = k * tick
        if not (t < t_next and t <= limit and t_next < math.inf):
            return
        rf = self.reward
        if type(rf).on_tick is Reward.on_tick:  # nothing to account: skip to the next event
            while t < t_next and t <= limit:
                k += 1
                t = k * tick
        elif rf.tick_reads_state:
            ctx = self.ctx
            try:
                while t < t_next and t <= limit:
                    self.at = (t, ROUTE)
                    rf.on_tick(ctx)
                    k += 1
                    t = k * tick
            finally:
                self.at = None
        self.tick_k = k

    # ------------------------------------------------------------------ decisions
    def take(self, req: Request, d: int) -> None:
        """Carry out the agent's decision ``d`` (instance, WAIT or DROP) for the pending request."""
        drv = self.driver
        if self.pending_stage == "decode":
            self.stages.take_decode(drv, d)
            return
        if self.tick_mode:
            if d != WAIT:
                drv.take_held()
                self.apply(req, d, ROUTE)
            return
        phase = drv.phase
        drv.take_deferred()
        self.apply(req, d, phase)
        if d == WAIT and phase != ARRIVAL:
            drv.hold(req)  # the cluster only parks arrivals; re-queue a retried request

    def apply(self, req: Request, d: int, phase: int) -> None:
        """Decision ``d`` for ``req`` at ``phase``; a routed request carries its prediction on the chosen model."""
        ctx = self.ctx
        if d >= 0:
            lens, quals = ctx.predictions(req)
            j = ctx.inst_model_idx[d]
            req.predicted_output = float(lens[j])
            ctx.routed_quality[req.id] = float(quals[j])
        elif d == DROP:
            self.outcomes.agent_dropped += 1
        self.driver.decide(req, d, phase)

    def expire(self, req: Request, phase: int) -> None:
        """A request held ``max_wait_s`` since its arrival (taken off the queue by the caller): route it by the
        fallback, or drop it. Checked where held requests are looked at anyway (the tick in tick mode, each
        retry in arrival mode), so it happens within one ``tick`` of the deadline and costs no event."""
        drv = self.driver
        self.outcomes.timed_out(req, drv.now, self.last_decision_at)
        k = self.least_loaded(req) if self.wait_fallback == "least_loaded" else -1
        if k < 0:
            drv.give_up(req, WAIT_TIMEOUT_REASON)
        else:
            self.apply(req, k, phase)
            self.reward.on_timeout(req)
        self.version += 1

    def least_loaded(self, req: Request) -> int:
        """The instance with the fewest requests that can serve ``req`` (as observed; ties: lowest index)."""
        best, best_n = -1, 0
        for k, inst in enumerate(self.ctx.state().instances):
            if inst.can_serve(req.prompt_tokens) and (best < 0 or inst.num_requests < best_n):
                best, best_n = k, inst.num_requests
        return best
