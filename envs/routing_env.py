"""One Gymnasium env over an llmsim cluster: a semi-MDP whose decision point, actions, observations and reward plug in.

Decision points
* ``decision="arrival"``: one step per request the router must place. Each arrival is deferred to the
  agent (``DEFER``) and decided at its arrival instant, exactly as a router would; a held (waiting) request
  sits in the central queue and is offered again at the next completion or ``tick``.
* ``decision="tick"``: every ``tick`` seconds (0.02 s in spec 001) the agent decides for the head of the
  central queue: route it or wait. Ticks with an empty queue are skipped unless ``tick_when_empty``
  (per-tick reward terms are still accumulated at every tick).
* Drain: once no request will arrive and none is held, the episode goes on with wait-only steps, one at
  each instant where a request finishes or is dropped, so every outcome is rewarded when it happens.

Steps are semi-MDP transitions: ``info["dt"]`` is the simulated time since the previous decision (discount
by ``gamma ** (dt / tau)``; the dts of an episode add up to its simulated span).

Actions: Discrete(K + 2) in every env: index i < K chooses instance i (``action="instance*"``) or model i
(``"model*"``: the request goes to the least-loaded replica of that model), K is wait and K + 1 is drop.
The mask offers wait / drop only where the kind says (``instance_wait``, ``instance_drop``,
``instance_wait_drop``, ...). An unmasked agent may still pick them: wait is always executable (costed and
bounded, below); drop where it is not offered is carried out as wait, so no env loses a request to an
action its setting does not have.

Waiting is bounded: a request held ``max_wait_s`` seconds since its arrival is routed by the fallback
(``wait_fallback="least_loaded"``: fewest requests among the instances that can serve it, as the router
observes them; ``"drop"``: dropped) at the next tick, and the reward's ``timeouts`` / ``dropped`` term
charges it.

Episodes hold K requests (``num_requests``); they terminate when nothing is left to simulate and truncate
at ``time_limit`` seconds of simulated time (default: the last arrival + ``max_wait_s`` + ``drain_time``);
whatever is unfinished then is dropped as ``episode_truncated`` (reward term ``cut_off``).
``reset(seed=...)`` draws a new workload realisation; ``fixed_workload_seed`` (or
``reset(options={"workload_seed": s})``) pins one.

Observations and rewards read only the public :class:`~llmsim.state.cluster_state.ClusterState`: ``state()`` is what the
router sees (the last scrape with ``view_staleness``), ``true_state()`` the exact one rewards judge by
(``true_progress()``: its backlog numbers without building it). They are built without syncing the engines
(``ClusterView.live_state(sync=False)``, exact), and ticks with nothing to decide between two events are
accounted without an event each (:meth:`RoutingEnv._quiet_ticks`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import gymnasium as gym
import numpy as np

from llmsim.cluster import Cluster, InstanceConfig
from llmsim.cluster.config import instances_from_specs
from llmsim.cluster.driver import ClusterDriver
from llmsim.envs import pd_stage
from llmsim.envs.actions import ActionSpec, decode_action, fill_mask
from llmsim.envs.observations import ObsBuilder, make_obs
from llmsim.envs.predictors.base import Predictor, make_predictor
from llmsim.envs.rewards import Reward, make_reward
from llmsim.envs.rewards.base import CUT_OFF_REASON
from llmsim.envs.schema import ACTIONS as ACTIONS
from llmsim.envs.schema import EnvOptions, action_layout
from llmsim.envs.workloads import EnvWorkload, make_workload
from llmsim.errors import ConfigError, LLMSimError
from llmsim.event_loop import ARRIVAL, ROUTE
from llmsim.request import Request
from llmsim.routing import DEFER, DROP, WAIT, Router
from llmsim.schema import SLO
from llmsim.state.cluster_state import ClusterState

WAIT_TIMEOUT_REASON = "wait_timeout"


class InvalidAction(LLMSimError):
    """An action outside the env's action space (what Gymnasium's own envs reject with an error)."""


def check_action(action: Any, n: int) -> int:
    """The action as an int in [0, n): Python / numpy integers (or 0-d / 1-element integer arrays) only."""
    a = action
    if isinstance(a, np.ndarray) and a.size == 1 and np.issubdtype(a.dtype, np.integer):
        a = a.reshape(()).item()
    if isinstance(a, bool | np.bool_) or not isinstance(a, int | np.integer):
        raise InvalidAction(f"action {action!r} ({type(action).__name__}) is not valid for Discrete({n}): "
                            f"expected an integer in [0, {n - 1}]")
    a = int(a)
    if not 0 <= a < n:
        raise InvalidAction(f"action {a} is out of range for Discrete({n}): expected an integer in [0, {n - 1}]")
    return a


class _AgentRouter(Router):
    """Hands every routing decision to the env (DEFER) or parks requests for the tick agent (WAIT)."""

    name = "gym_agent"

    def __init__(self, env: RoutingEnv) -> None:
        super().__init__(0)
        self.env = env
        self.decision = WAIT if env.decision == "tick" else DEFER

    def route(self, req: Request, view: Any) -> int:
        self.env.handle_arrival(req)
        return pd_stage.route_new(self.env, req, view, self.decision)

    def route_decode(self, req: Request, view: Any) -> int:
        return pd_stage.route_decode(self.env, req, view)


class RoutingEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(
        self,
        instances: list[InstanceConfig | dict[str, Any]],
        workload: EnvWorkload | dict[str, Any],
        *,
        num_requests: int = 1000,
        decision: str = "arrival",
        tick: float = 0.02,
        tick_when_empty: bool = False,
        action: str = "instance",
        observation: str | dict[str, Any] | ObsBuilder = "flat",
        reward: str | dict[str, Any] | Reward = "latency",
        predictor: str | dict[str, Any] | Predictor | None = "oracle",
        time_limit: float | None = None,
        drain_time: float = 600.0,
        max_wait_s: float | None = 10.0,
        wait_fallback: str = "least_loaded",
        view_staleness: float = 0.0,
        slo: SLO | dict[str, Any] | None = None,
        max_waiting: int | None = None,
        fixed_workload_seed: int | None = None,
        metrics_interval: float = 1.0,
        on_unservable: str = "drop",
        colocation_interference: float = 1.0,
        stage: str = "prefill",
        first_stage: str = "least_kv",
        kv_link: str = "infiniband",
        kv_transfer: str = "overlap",
    ) -> None:
        super().__init__()
        opts = EnvOptions(
            num_requests=num_requests, decision=decision, tick=tick, tick_when_empty=tick_when_empty, action=action,
            time_limit=time_limit, drain_time=drain_time, max_wait_s=max_wait_s, wait_fallback=wait_fallback,
            view_staleness=view_staleness, max_waiting=max_waiting, fixed_workload_seed=fixed_workload_seed,
            metrics_interval=metrics_interval, on_unservable=on_unservable,
            colocation_interference=colocation_interference, stage=stage, first_stage=first_stage, kv_link=kv_link,
            kv_transfer=kv_transfer,
        )
        if opts.decision == "tick" and "wait" not in opts.action:
            raise ConfigError("env.action: decision='tick' needs an action with wait ('instance_wait' or "
                              f"'instance_wait_drop'; the agent may hold the head of the queue), got {opts.action!r}")
        cfgs = instances_from_specs(list(instances) if isinstance(instances, tuple) else instances, "env.instances")
        # profiles are built once and shared by every episode's cluster
        self.instance_configs = [dataclasses.replace(c, profile=c.build_profile()) for c in cfgs]
        self.workload = make_workload(workload)
        self.task_names = list(getattr(self.workload, "task_names", []))
        for k in ("num_requests", "decision", "tick", "tick_when_empty", "time_limit", "drain_time", "max_wait_s",
                  "wait_fallback", "view_staleness", "max_waiting", "fixed_workload_seed", "metrics_interval",
                  "on_unservable", "colocation_interference", "stage", "first_stage", "kv_link", "kv_transfer"):
            setattr(self, k, getattr(opts, k))
        self.action_kind = opts.action
        self.slo = SLO.parse(slo)
        self.predictor = make_predictor(predictor)
        self.reward_fn = make_reward(reward)
        self.obs_builder = make_obs(observation)

        self.num_instances = n = len(self.instance_configs)
        self.instance_models = [c.profile.model.name for c in self.instance_configs]
        self.models = list(dict.fromkeys(self.instance_models))
        self.model_specs = {c.profile.model.name: c.profile.model for c in self.instance_configs}
        self.inst_model_idx = np.array([self.models.index(m) for m in self.instance_models], dtype=np.int64)
        self.replicas = [[k for k in range(n) if self.instance_models[k] == m] for m in self.models]
        self.actions = ActionSpec.build(opts.action, self.instance_models, opts.max_waiting)  # envs/actions.py
        self.n_choices, self.offer_wait, self.offer_drop = action_layout(opts.action, n, len(self.models))
        self.wait_action, self.drop_action = self.n_choices, self.n_choices + 1
        self.action_space = gym.spaces.Discrete(self.n_choices + 2)
        self.cluster: Cluster | None = None
        self.stage_router = pd_stage.first_stage_router(self)
        self.pending_stage = "prefill"
        self.stage_fallbacks = 0
        self._build_cluster([])
        pd_stage.check_stage(self)
        self.observation_space = self.obs_builder.bind(self)
        self._mask = np.zeros(self.n_choices + 2, dtype=np.bool_)

    # ------------------------------------------------------------------ episode lifecycle
    def _build_cluster(self, reqs: list[Request]) -> None:
        # arrival mode: a held request is offered again at every tick (and completion); tick mode ticks itself
        retry = None if self.decision == "tick" else self.tick
        self.cluster = Cluster(self.instance_configs, _AgentRouter(self), view_staleness=self.view_staleness,
                               metrics_interval=self.metrics_interval, central_queue_tick=retry,
                               on_unservable=self.on_unservable,
                               colocation_interference=self.colocation_interference, kv_link=self.kv_link,
                               kv_transfer=self.kv_transfer)
        self.cluster.recorder.subscribe(self._on_finish)  # after the cluster's own observer
        self.driver = ClusterDriver(self.cluster)
        self._preds: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.routed_quality: dict[int, float] = {}
        self._requests = reqs
        self._by_id = {r.id: r for r in reqs}
        self._events = self._version = 0
        self._state_key: tuple[int, int] | None = None
        self._mask_key: tuple[int, int] | None = None
        self._true_key: tuple[int, int] | None = None
        self._state: ClusterState | None = None
        self._true: ClusterState | None = None
        self._at: tuple[float, int] | None = None  # the instant of a tick evaluated without its event

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        opts = options or {}
        wseed = opts.get("workload_seed", self.fixed_workload_seed)
        if wseed is None:
            wseed = int(self.np_random.integers(2**31 - 1))
        self.workload_seed = int(wseed)
        self.predictor.reset(int(self.np_random.integers(2**31 - 1)))
        reqs = self.workload.requests(self.workload_seed, self.num_requests)
        self._build_cluster(reqs)
        last = reqs[-1].arrival if reqs else 0.0
        self.limit = self.time_limit if self.time_limit is not None else \
            last + (self.max_wait_s or 0.0) + self.drain_time
        self.steps = self.num_decisions = self.completed = self.agent_dropped = self.timeouts = 0
        self.stage_fallbacks = 0
        self.terminated = self.truncated = False
        self._tick_due = False
        self._n_drops = self._outcomes = 0
        self._released_wait = 0.0
        self._episode_reward = 0.0
        self._episode_components: dict[str, float] = dict.fromkeys(self.reward_fn.components, 0.0)
        self.reward_fn.reset(self)
        self.obs_builder.reset(self)
        drv = self.driver
        drv.start(reqs)
        if self.decision == "tick":
            self._tick_k = 1  # ticks at k * tick exactly (no accumulated rounding)
            drv.call_at(self.tick, self._on_tick)
        self.pending: Request | None = None
        self._t_prev = drv.now
        self._advance()
        self._t_prev = drv.now
        self._released_wait = 0.0  # waits before the first decision belong to no step
        obs = self.obs_builder.build(self, self.state(), self.pending)
        return obs, self._info({}, 0.0, final=self.terminated or self.truncated)

    def handle_arrival(self, req: Request) -> None:
        """A request reached the router: predict it once, tell the observation builder, bound its wait."""
        if req.id in self._preds:
            return  # a retry of a held request
        self._preds[req.id] = self.predictor.predict(req, self.models)
        self.obs_builder.on_arrival(self, req)

    def _on_finish(self, req: Request) -> None:
        self.completed += 1
        self._outcomes += 1
        self.reward_fn.on_finish(req, req.instance)
        self._preds.pop(req.id, None)
        self.routed_quality.pop(req.id, None)

    def _on_tick(self) -> None:
        c, drv = self.cluster, self.driver
        if self.max_wait_s is not None:
            held = drv.held  # in arrival order: the agent only ever takes the head
            while held and held[0].arrival + self.max_wait_s <= drv.now:
                self._expire(drv.take_held(), ROUTE)
        self.reward_fn.on_tick(self)
        if drv.held or self.tick_when_empty:
            self._tick_due = True
        if not c.done:
            self._tick_k += 1
            if not (drv.held or drv.deferred or self.tick_when_empty or (self._outcomes and c.arrivals_done)):
                self._quiet_ticks()
            drv.call_at(self._tick_k * self.tick, self._on_tick)

    def _quiet_ticks(self) -> None:
        """The ticks strictly before the next event (within the time limit), with nothing to decide: each only
        adds its per-tick reward terms, which depend on the state at its instant, where only decode runs have
        moved. Account for them here, with that state (``ClusterView.live_state(at=...)``), instead of one
        event each; the chain goes on with an event at the first tick at or after the next event. The same
        rewards, in the same steps (no step can end between two events without an outcome: the caller checked),
        for rewards whose ``on_tick`` reads only the env's states (``Reward.tick_reads_state``)."""
        t_next = self.driver.next_event_time()
        tick, limit = self.tick, self.limit
        k = self._tick_k
        t = k * tick
        if not (t < t_next and t <= limit and t_next < math.inf):
            return
        rf = self.reward_fn
        if type(rf).on_tick is Reward.on_tick:  # nothing to account: skip to the next event
            while t < t_next and t <= limit:
                k += 1
                t = k * tick
        elif rf.tick_reads_state:
            try:
                while t < t_next and t <= limit:
                    self._at = (t, ROUTE)
                    rf.on_tick(self)
                    k += 1
                    t = k * tick
            finally:
                self._at = None
        self._tick_k = k

    # ------------------------------------------------------------------ what builders and rewards read
    def state(self) -> ClusterState:
        """The ClusterState the agent's router observes now (stale with ``view_staleness``); cached per instant."""
        if self._at is not None:  # a tick without its event (_quiet_ticks)
            view = self.cluster.view
            return view.state(at=self._at) if self.view_staleness > 0 else view.live_state(at=self._at)
        key = (self._events, self._version)
        if self._state_key != key:
            self._state = self.cluster.view.state() if self.view_staleness > 0 else self.true_state()
            self._state_key = key
        return self._state

    def true_state(self) -> ClusterState:
        """The simulator's exact ClusterState now (rewards judge by it); cached per instant."""
        if self._at is not None:  # a tick without its event (_quiet_ticks)
            return self.cluster.view.live_state(at=self._at)
        key = (self._events, self._version)
        if self._true_key != key:
            self._true = self.cluster.view.live_state(sync=False)  # engines materialised only for rows read
            self._true_key = key
        return self._true

    def true_progress(self) -> tuple[int, tuple[tuple[int, float], ...]]:
        """``(central_queue, ((num_requests, progress) per instance))`` of ``true_state()``, without building it
        (``ClusterView.live_progress``: a per-tick reward's hot path)."""
        return self.cluster.view.live_progress(self._at)

    def predictions(self, req: Request) -> tuple[np.ndarray, np.ndarray]:
        """Predicted (output tokens, quality) of ``req`` on each of ``self.models``."""
        p = self._preds.get(req.id)
        if p is None:
            p = self._preds[req.id] = self.predictor.predict(req, self.models)
        return p

    @property
    def episode_requests(self) -> list[Request]:
        """This episode's K requests, in arrival order."""
        return self._requests

    def request(self, request_id: int) -> Request:
        """The episode's request ``request_id`` with its hidden ground truth (for rewards, never observations)."""
        return self._by_id[request_id]

    # ------------------------------------------------------------------ stepping
    def _advance(self) -> None:
        """Run the simulation to the next decision point (or drain step), the end, or the time limit."""
        c, drv = self.cluster, self.driver
        step, peek = drv.step, drv.next_event_time
        dropped = drv.drops
        tick_mode = self.decision == "tick"
        limit = self.limit
        self._outcomes = 0
        self.pending = None
        self.pending_stage = "prefill"
        while True:
            r_pd = drv.pending_decode() if c.transfers is not None else None
            if r_pd is not None:  # a prefilled request waits for the agent's decode choice (envs/pd_stage.py)
                self.pending, self.pending_stage = r_pd, "decode"
                return
            if tick_mode:
                if self._tick_due:
                    self._tick_due = False
                    held = drv.held  # the cluster replaces this queue on retries: read it fresh
                    if held or self.tick_when_empty:
                        self.pending = held[0] if held else None
                        return
            elif drv.deferred:
                r = drv.deferred[0]
                if self.max_wait_s is None or drv.now - r.arrival < self.max_wait_s:
                    self.pending = r
                    return
                self._expire(drv.take_deferred(), drv.phase)  # a held request offered again too late
                continue
            if len(dropped) != self._n_drops:
                self._collect_drops()
            if drv.only_bookkeeping_left:  # let the scrapes record the final state, and end
                while drv.pending_events and peek() <= limit:
                    self._events += 1
                    step()
                self.terminated = True
                return
            t = peek()
            if self._outcomes and t > drv.now and c.arrivals_done and not drv.held and not drv.deferred:
                return  # a drain step: nothing to decide, but something happened at this instant
            if t > limit:
                self.truncated = True
                if limit > drv.now:
                    drv.advance_to(limit)  # the clock reaches the limit (no event on the way)
                return
            self._events += 1
            step()

    def decode(self, action: int) -> int:
        """Instance index, WAIT or DROP for an action (a model choice: its least-loaded replica that fits);
        envs/actions.py, shared with the exported-policy router."""
        req = getattr(self, "pending", None)  # decode() may be asked before the first reset()
        return decode_action(action, self.actions, None if req is None else req.prompt_tokens,
                             lambda: self.state().instances)

    @property
    def reward_scale(self) -> float:
        """Factor from the raw ``info["reward_components"]`` to reward units (an agent shaping with a component,
        e.g. HuRL's ``heuristic``, adds ``weight * reward_scale * component``)."""
        return float(self.reward_fn.scale)

    def heuristic_action(self, router: Router) -> int:
        """The action an llmsim router takes for the pending request, so heuristics run inside the env with the
        same decision points, waits and rewards as a learned policy. The router sees the env's (possibly stale)
        view and the request's prediction for the first model; WAIT / DROP map to the wait / drop actions, an
        instance to itself (``instance*``) or to its model (``model*``). With nothing pending: the no-op."""
        req = self.pending
        if req is None:
            return self.wait_action if self.offer_wait else 0
        if req.predicted_output is None:
            lens, _ = self.predictions(req)
            req.predicted_output = float(lens[0])
        view = self.cluster.view
        d = router.route_decode(req, view) if self.pending_stage == "decode" else router.route(req, view)
        if d == WAIT:
            return self.wait_action
        if d == DROP:
            return self.drop_action
        return int(self.inst_model_idx[d]) if self.action_kind.startswith("model") else int(d)

    def step(self, action: int):
        if self.terminated or self.truncated:
            raise RuntimeError("step() called after the episode ended; call reset()")
        action = check_action(action, int(self.action_space.n))
        req = self.pending
        d = self.decode(action)
        if req is not None:
            self.num_decisions += 1
            self.reward_fn.before_action(self, req, d if d >= 0 else None)
            self._take(req, d)
            self._collect_drops()  # an action's own drop belongs to this step, before the drain check resets
        self.steps += 1
        self.pending = None
        self._version += 1
        self._advance()
        now = self.driver.now
        self.reward_fn.on_wait(self._held_seconds(self._t_prev, now))
        if self.terminated or self.truncated:
            self._finish_episode()
        dt = now - self._t_prev
        self._t_prev = now
        reward, comps = self.reward_fn.end_step(self, dt)
        self._episode_reward += reward
        ec = self._episode_components
        for k, v in comps.items():
            ec[k] += v
        obs = self.obs_builder.build(self, self.state(), self.pending)
        done = self.terminated or self.truncated
        return obs, float(reward), self.terminated, self.truncated, self._info(comps, dt, done)

    def _take(self, req: Request, d: int) -> None:
        """Carry out the agent's decision ``d`` for the pending request."""
        drv = self.driver
        if self.pending_stage == "decode":
            pd_stage.take_decode(self, d)
            return
        if self.decision == "tick":
            if d != WAIT:
                drv.take_held()
                self._apply(req, d, ROUTE)
            return
        phase = drv.phase
        drv.take_deferred()
        self._apply(req, d, phase)
        if d == WAIT and phase != ARRIVAL:
            drv.hold(req)  # the cluster only parks arrivals; re-queue a retried request

    def _apply(self, req: Request, d: int, phase: int) -> None:
        if d >= 0:
            lens, quals = self.predictions(req)
            j = self.inst_model_idx[d]
            req.predicted_output = float(lens[j])
            self.routed_quality[req.id] = float(quals[j])
        elif d == DROP:
            self.agent_dropped += 1
        self.driver.decide(req, d, phase)

    # ------------------------------------------------------------------ outcomes: drops, waits, timeouts
    def _collect_drops(self) -> None:
        """Hand every new drop of the cluster's recorder (whatever its cause) to the reward."""
        dropped = self.driver.drops
        by_id = self._by_id
        for entry in dropped[self._n_drops:]:
            req = by_id[entry[0]]  # entries start with the request id; the reason is on the request
            self.reward_fn.on_drop(req, req.dropped)
            self._preds.pop(req.id, None)
            self.routed_quality.pop(req.id, None)
            self._outcomes += 1
        self._n_drops = len(dropped)

    def _held_seconds(self, t0: float, t1: float) -> float:
        """Request-seconds spent in the central queue over (t0, t1], including requests released meanwhile."""
        drv = self.driver
        s = self._released_wait
        self._released_wait = 0.0
        for q in (drv.held, drv.deferred):
            for r in q:
                a = r.arrival
                s += t1 - (a if a > t0 else t0)
        return s

    def _expire(self, req: Request, phase: int) -> None:
        """A request held ``max_wait_s`` since its arrival (taken off the queue by the caller): route it by the
        fallback, or drop it. Checked where held requests are looked at anyway (the tick in tick mode, each
        retry in arrival mode), so it happens within one ``tick`` of the deadline and costs no event."""
        drv = self.driver
        self._released_wait += drv.now - max(req.arrival, self._t_prev)
        self.timeouts += 1
        k = self._least_loaded(req) if self.wait_fallback == "least_loaded" else -1
        if k < 0:
            drv.give_up(req, WAIT_TIMEOUT_REASON)
        else:
            self._apply(req, k, phase)
            self.reward_fn.on_timeout(req)
        self._version += 1

    def _least_loaded(self, req: Request) -> int:
        """The instance with the fewest requests that can serve ``req`` (as observed; ties: lowest index)."""
        best, best_n = -1, 0
        for k, inst in enumerate(self.state().instances):
            if inst.can_serve(req.prompt_tokens) and (best < 0 or inst.num_requests < best_n):
                best, best_n = k, inst.num_requests
        return best

    def _finish_episode(self) -> None:
        """Account for everything still open: cut off by the time limit, or never routed."""
        if self.truncated:
            self.driver.cut_off(self._requests, CUT_OFF_REASON)
        self.driver.finish()
        self._collect_drops()

    # ------------------------------------------------------------------ masks and info
    def action_masks(self) -> np.ndarray:
        """Valid actions (MaskablePPO convention): choices whose instance (or a replica of the model) can serve
        the request and is not full (``max_waiting``), then wait / drop where offered. With nothing to decide
        (a drain step, an empty tick) every action is a no-op and the mask marks the env's usual no-op: wait
        where the env offers it, else every choice (never drop). The rule is envs/actions.py's ``fill_mask``."""
        key = (self._events, self._version)
        if self._mask_key == key:
            return self._mask.copy()  # asked again at the same instant (the learner, then info)
        self._mask_key = key
        req = self.pending
        fill_mask(self._mask, self.actions, None if req is None else req.prompt_tokens,
                  lambda: self.state().instances)
        pd_stage.stage_mask(self, self._mask)
        return self._mask.copy()

    def _info(self, comps: dict[str, float], dt: float, final: bool) -> dict[str, Any]:
        c, drv = self.cluster, self.driver
        info: dict[str, Any] = {
            "reward_components": dict(comps),
            "dt": dt,
            "time": drv.now,
            "decisions": self.num_decisions,
            "arrived": c.num_arrived,
            "completed": self.completed,
            "dropped": len(drv.drops),
            "agent_dropped": self.agent_dropped,
            "timeouts": self.timeouts,
            "central_queue": len(drv.held),
            "action_mask": self.action_masks(),
        }
        if final:
            from llmsim.simulation.run import collect

            info["episode_reward"] = self._episode_reward
            info["episode_components"] = dict(self._episode_components)
            info["summary"] = collect(c, self.slo).summary
        return info

    def summary(self) -> dict[str, Any]:
        from llmsim.simulation.run import collect

        return collect(self.cluster, self.slo).summary
