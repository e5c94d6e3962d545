"""One Gymnasium env over an llmsim cluster: a semi-MDP whose decision points, actions, observations and reward plug in.

:class:`RoutingEnv` is ``llmsim/Routing-v0`` and the base of the papers' testbeds (:mod:`llmsim.envs.testbeds`). Its
parts live in their own rooms: the config (:mod:`llmsim.envs.config`), the decision points and how decisions are
carried out (:mod:`llmsim.envs.decision_points`), what became of the requests (:mod:`llmsim.envs.outcomes`), the
action layout and masks (:mod:`llmsim.envs.actions`), the P/D stage (:mod:`llmsim.envs.pd_stage`), and the plug-ins
(observations, rewards, predictors), which see the env only through :mod:`llmsim.envs.context`.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from llmsim.cluster import Cluster, InstanceConfig
from llmsim.cluster.config import instances_from_specs
from llmsim.cluster.driver import ClusterDriver
from llmsim.compiled import engine_name
from llmsim.envs.actions import ActionSpec, InvalidAction, check_action, decode_action, fill_mask
from llmsim.envs.config import ACTIONS, RoutingEnvConfig, action_layout
from llmsim.envs.decision_points import WAIT_TIMEOUT_REASON, AgentRouter, DecisionPoints
from llmsim.envs.observations import make_obs
from llmsim.envs.outcomes import Outcomes
from llmsim.envs.pd_stage import StageRouting
from llmsim.envs.predictors.base import make_predictor
from llmsim.envs.rewards import make_reward
from llmsim.envs.workloads import make_workload
from llmsim.errors import ConfigError, LLMSimError
from llmsim.metrics.episode_summary import summary_of
from llmsim.request import Request
from llmsim.routing import DROP, WAIT, Router
from llmsim.schema import SLO
from llmsim.state.cluster_state import ClusterState
from llmsim.workload.base import check_int

__all__ = ["ACTIONS", "WAIT_TIMEOUT_REASON", "InvalidAction", "RoutingEnv", "RoutingEnvConfig", "UnsupportedRenderMode"]


RESET_OPTIONS = ("workload_seed",)


def reset_workload_seed(options: Mapping[str, Any] | None, fixed: int | None) -> int | None:
    """``reset(options=...)``'s workload seed (else ``fixed``), checked: a misspelt option would leave the episode
    on a fresh random workload instead of the pinned one."""
    if options is not None and not isinstance(options, Mapping):
        raise ConfigError(f"reset options: expected a mapping like {{'workload_seed': 7}} or None, got {options!r}")
    opts = dict(options or {})
    for key in opts:
        if key not in RESET_OPTIONS:
            hint = difflib.get_close_matches(str(key), RESET_OPTIONS, n=1)
            raise ConfigError(f"reset options: unknown key {key!r}{f' (did you mean {hint[0]!r}?)' if hint else ''}; "
                              f"allowed keys: {list(RESET_OPTIONS)}")
    wseed = opts.get("workload_seed", fixed)
    return None if wseed is None else check_int("reset options.workload_seed", wseed, ge=0)


class UnsupportedRenderMode(ConfigError, TypeError):
    """A ``render_mode`` the envs do not have. A TypeError too, as for an unknown keyword: tools that try a render
    mode and fall back without it on TypeError (stable-baselines3's ``make_vec_env``) still build the env."""


def check_render_mode(render_mode: object) -> None:
    """Gymnasium's ``render_mode`` keyword: only None (no rendering), which ``gym.make``/``make_vec`` may pass."""
    if render_mode is not None:
        raise UnsupportedRenderMode(f"env.render_mode: {render_mode!r} is not supported: these envs do not render "
                                    "(metadata['render_modes'] is empty); leave it unset or None")


def with_profiles(configs: list[InstanceConfig]) -> list[InstanceConfig]:
    """Each instance with its profile built; a model or GPU without one names the instance, as the CLI does."""
    out = []
    for i, c in enumerate(configs):
        try:
            out.append(dataclasses.replace(c, profile=c.build_profile()))
        except LLMSimError as e:
            raise type(e)(f"env.instances[{i}] ({c.model} on {c.gpu}): {e}") from None
    return out


class RoutingEnv(gym.Env):
    """``llmsim/Routing-v0``: route the requests of a simulated LLM-serving cluster, one decision at a time.

    ## Description
    Requests arrive at a router in front of N serving instances (an llmsim cluster: engines with vLLM-like batching,
    KV caches and measured step times). The agent is that router: at each decision point it sends the request being
    decided to an instance (or to a model's least-loaded replica), holds it in the central queue, or drops it. The
    env is a semi-MDP: decisions happen at irregular simulated times and ``info["dt"]`` says how much simulated time
    a step covered (discount by ``gamma ** (dt / tau)``; the dts of an episode add up to its span). Decision points:
    every arrival (``decision="arrival"``), or every ``tick`` seconds for the head of the central queue
    (``decision="tick"``), plus, in a disaggregated cluster, each prefilled request's decode instance (``stage``);
    after the last arrival the episode goes on with wait-only drain steps, one at each instant with an outcome.
    The papers' testbeds are subclasses with their own defaults: QoSEdge-v0 (the QoS-aware edge router, "QoS-Aware
    LLM Routing for Edge Computing with Multiple Experts"), WorkloadRouter-v0 ("Intelligent Router for LLM
    Workloads") and BestEffort-v0 ("Learned Best-Effort LLM Serving").

    ## Action Space
    ``Discrete(K + 2)`` in every env: index i < K chooses instance i (``action="instance*"``, K = instances) or model
    i (``"model*"``, K = distinct models of ``env.models``: its least-loaded replica that can serve the request);
    K is wait (``env.wait_action``) and K + 1 is drop (``env.drop_action``). ``env.action_masks()`` (MaskablePPO's
    convention) offers the choices that can serve the request and are not full (``max_waiting``), and wait / drop
    where the kind offers them (``instance_wait``, ``instance_drop``, ``instance_wait_drop``, ...). An unmasked
    agent may still pick them: wait is always carried out (costed and bounded by ``max_wait_s``), and drop where
    it is not offered is carried out as wait. Anything but an integer in range raises :class:`InvalidAction`.

    ## Observation Space
    The ``observation`` builder's (:mod:`llmsim.envs.observations`), filled from the public
    :class:`~llmsim.state.cluster_state.ClusterState` the router observes (stale with ``view_staleness``) and the
    predictor's outputs for the request being decided: ``flat`` (default; the WorkloadRouter paper's 3 + 6N
    vector in [0, 1], prompt feature up to 4), ``graph`` (the QoS-aware edge router's heterogeneous graph as a Dict
    of padded arrays and masks), ``expert_flat`` or ``model`` (BestEffort's model-selection features).

    ## Rewards
    The ``reward`` (:mod:`llmsim.envs.rewards`; default ``latency``: -e2e latency / 10 s per completion, or SLO
    attainment when targets are given), plus the outcome terms every reward carries: -1 per request dropped for
    any reason, cut off by the time limit, truncated at ``max_model_len`` or routed by the wait fallback, and
    -``wait_cost`` per request-second held. ``step`` returns everything accumulated since the previous decision;
    ``info["reward_components"]`` the unweighted components.

    ## Starting State
    ``reset(seed=s)`` draws a new workload realisation of ``num_requests`` requests (and a predictor seed) from
    ``env.np_random``; ``fixed_workload_seed`` or ``reset(options={"workload_seed": w})`` pins one. The first
    observation is the first decision point.

    ## Episode End
    ``terminated``: nothing is left to simulate (every request finished or was dropped). ``truncated``: the next
    event lies past the time limit (``time_limit`` s, default the last arrival + ``max_wait_s`` + ``drain_time``);
    what is unfinished then is dropped as ``episode_truncated``. The final ``info`` adds ``episode_reward``,
    ``episode_components`` and ``summary`` (the CLI's summary of the episode, with ``slo``'s attainment).

    ## Arguments
    ``RoutingEnv(config)`` with a :class:`~llmsim.envs.config.RoutingEnvConfig` or a mapping of its keys, or the
    keys as keyword arguments: ``gym.make("llmsim/Routing-v0", instances=[{"model": "qwen2.5-7b", "count": 2}],
    workload={...}, reward="utility", decision="tick", action="instance_wait")``. Keys: ``instances`` (default 4 x
    llama-2-7b on A100-80GB), ``workload`` (default the WorkloadRouter task mix, Poisson 10 req/s),
    ``observation``, ``reward``, ``predictor`` (``oracle``, ``noisy``, ``zero``, ``ablate``), ``slo``,
    ``num_requests`` (1000), ``decision``, ``tick`` (0.02 s), ``tick_when_empty``, ``action``, ``time_limit``,
    ``drain_time`` (600 s), ``max_wait_s`` (10 s), ``wait_fallback`` (``least_loaded`` or ``drop``), ``view_staleness``,
    ``max_waiting``, ``fixed_workload_seed``, ``metrics_interval``, ``on_unservable``, ``colocation_interference``,
    ``stage``, ``first_stage``, ``kv_link``, ``kv_transfer``; and Gymnasium's ``render_mode`` (None only: nothing
    renders). A bad value fails with one line naming it (``env.tick: ...``).
    """

    metadata = {"render_modes": []}

    def __init__(self, config: RoutingEnvConfig | Mapping[str, Any] | None = None, render_mode: str | None = None,
                 **options: Any) -> None:
        super().__init__()
        check_render_mode(render_mode)
        cfg = self.config = RoutingEnvConfig.of(config, **options)
        # profiles are built once and shared by every episode's cluster
        self.instance_configs = with_profiles(instances_from_specs(cfg.instances, "env.instances"))
        self.workload = make_workload(cfg.workload)
        self.task_names = list(getattr(self.workload, "task_names", []))
        for k in ("num_requests", "decision", "tick", "tick_when_empty", "time_limit", "drain_time", "max_wait_s",
                  "wait_fallback", "view_staleness", "max_waiting", "fixed_workload_seed", "metrics_interval",
                  "on_unservable", "colocation_interference", "stage", "first_stage", "kv_link", "kv_transfer"):
            setattr(self, k, getattr(cfg, k))
        self.action_kind = cfg.action
        self.slo = SLO.parse(cfg.slo)
        self.predictor = make_predictor(cfg.predictor)
        self.predictor_seed = 0  # the predictor's seed this episode (drawn at reset)
        self.reward_fn = make_reward(cfg.reward)
        self.obs_builder = make_obs(cfg.observation)
        self.num_instances = n = len(self.instance_configs)
        self.instance_models = [c.profile.model.name for c in self.instance_configs]
        self.models = list(dict.fromkeys(self.instance_models))
        self.workload.check_models(self.models)
        self.model_specs = {c.profile.model.name: c.profile.model for c in self.instance_configs}
        self.inst_model_idx = np.array([self.models.index(m) for m in self.instance_models], dtype=np.int64)
        self.replicas = [[k for k in range(n) if self.instance_models[k] == m] for m in self.models]
        self.actions = ActionSpec.build(cfg.action, self.instance_models, cfg.max_waiting)  # envs/actions.py
        self.n_choices, self.offer_wait, self.offer_drop = action_layout(cfg.action, n, len(self.models))
        self.wait_action, self.drop_action = self.n_choices, self.n_choices + 1
        self.action_space = gym.spaces.Discrete(self.n_choices + 2)
        self.stages = StageRouting(cfg.stage, cfg.first_stage)
        self.points = DecisionPoints(cfg, self, self.reward_fn, self.stages)
        self._build_episode([])
        self.stages.check(self.cluster.transfers is not None, cfg.decision, cfg.action)
        self.observation_space = self.obs_builder.bind(self)
        self._mask = np.zeros(self.n_choices + 2, dtype=np.bool_)
        self._has_episode = False  # step() before the first reset() is the caller's error, said in one line

    # ------------------------------------------------------------------ episode lifecycle
    def _build_episode(self, reqs: list[Request]) -> None:
        """A fresh cluster for ``reqs``, its driver, the router's book and the outcome accounting."""
        # arrival mode: a held request is offered again at every tick (and completion); tick mode ticks itself
        retry = None if self.decision == "tick" else self.tick
        self.cluster = Cluster(self.instance_configs, AgentRouter(self.handle_arrival, self.stages, self.decision),
                               view_staleness=self.view_staleness, metrics_interval=self.metrics_interval,
                               central_queue_tick=retry, on_unservable=self.on_unservable,
                               unservable_key="env.on_unservable",  # the env's key, not the simulator CLI's
                               colocation_interference=self.colocation_interference, kv_link=self.kv_link,
                               kv_transfer=self.kv_transfer)
        self.driver = ClusterDriver(self.cluster)
        self._preds: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.routed_quality: dict[int, float] = {}
        self.outcomes = Outcomes(self.reward_fn, self.driver, reqs, self._preds, self.routed_quality)
        self.cluster.recorder.subscribe(self.outcomes.on_finish)  # after the cluster's own observer
        self._state_key: tuple[int, int] | None = None
        self._mask_key: tuple[int, int] | None = None
        self._true_key: tuple[int, int] | None = None
        self._state: ClusterState | None = None
        self._true: ClusterState | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        wseed = reset_workload_seed(options, self.fixed_workload_seed)
        if wseed is None:
            wseed = int(self.np_random.integers(2**31 - 1))
        self.workload_seed = int(wseed)
        self.predictor_seed = int(self.np_random.integers(2**31 - 1))  # public: a router with its own predictor
        self.predictor.reset(self.predictor_seed)  # (an export run in the simulator) draws the same noise
        reqs = self.workload.requests(self.workload_seed, self.num_requests)
        self._build_episode(reqs)
        last = reqs[-1].arrival if reqs else 0.0
        limit = self.time_limit if self.time_limit is not None else last + (self.max_wait_s or 0.0) + self.drain_time
        self.steps = self.num_decisions = 0
        self._has_episode = True
        self._decided: int | None = None
        self.stages.fallbacks = 0
        self._episode_reward = 0.0
        self._episode_components: dict[str, float] = dict.fromkeys(self.reward_fn.components, 0.0)
        self.reward_fn.reset(self)
        self.obs_builder.reset(self)
        self.driver.start(reqs)
        pts = self.points
        pts.begin(self.cluster, self.driver, self.outcomes, limit)
        pts.advance()
        pts.last_decision_at = self.driver.now
        self.outcomes.released_wait = 0.0  # waits before the first decision belong to no step
        final = pts.terminated or pts.truncated
        comps: dict[str, float] = {}
        if final:  # over before the first decision (a time limit before it): every request still counts
            self.outcomes.close(pts.truncated)
            self._episode_reward, comps = self.reward_fn.end_step(self, 0.0)
            self._episode_components.update(comps)
        obs = self.obs_builder.build(self, self.state(), pts.pending)
        return obs, self._info(comps, 0.0, final=final)

    def handle_arrival(self, req: Request) -> None:
        """A request reached the router: predict it once, tell the observation builder."""
        if req.id in self._preds:
            return  # a retry of a held request
        self._preds[req.id] = self.predictor.predict(req, self.models)
        self.obs_builder.on_arrival(self, req)

    def step(self, action: int):
        pts = self.points
        if not self._has_episode:
            raise RuntimeError("step() called before reset(); call reset() first")
        if pts.terminated or pts.truncated:
            if self.steps == 0:  # reset() again would end the same way: say why
                why = (f"its time limit ({pts.limit:g} s of simulated time) comes before the first decision; raise "
                       "env.time_limit" if pts.truncated else "every request was dropped before the first decision "
                       "(reset's info['summary']['dropped_by_reason'] says why)")
                raise RuntimeError(f"step() called on an episode that ended at reset: {why}")
            raise RuntimeError("step() called after the episode ended; call reset()")
        action = check_action(action, int(self.action_space.n))
        req = pts.pending
        d = self.decode(action)
        self._decided = None if req is None or d == WAIT else req.id  # the request this step placed or dropped
        if req is not None:
            self.num_decisions += 1
            self.reward_fn.before_action(self, req, d if d >= 0 else None)
            pts.take(req, d)
            self.outcomes.collect_drops()  # an action's own drop belongs to this step, before the drain check resets
        self.steps += 1
        pts.version += 1
        pts.advance()
        now = self.driver.now
        self.reward_fn.on_wait(self.outcomes.held_seconds(pts.last_decision_at, now))
        done = pts.terminated or pts.truncated
        if done:
            self.outcomes.close(pts.truncated)
        dt = now - pts.last_decision_at
        pts.last_decision_at = now
        reward, comps = self.reward_fn.end_step(self, dt)
        self._episode_reward += reward
        ec = self._episode_components
        for k, v in comps.items():
            ec[k] += v
        obs = self.obs_builder.build(self, self.state(), pts.pending)
        return obs, float(reward), pts.terminated, pts.truncated, self._info(comps, dt, done)

    # ------------------------------------------------------------------ the decision point, for agents and tests
    @property
    def pending(self) -> Request | None:
        """The request being decided (None: a drain step, an empty tick, or the end)."""
        return self.points.pending

    @property
    def pending_stage(self) -> str:
        """``"prefill"`` (a new request) or ``"decode"`` (a prefilled request's decode instance, envs/pd_stage.py)."""
        return self.points.pending_stage

    @property
    def terminated(self) -> bool:
        return self.points.terminated

    @property
    def truncated(self) -> bool:
        return self.points.truncated

    @property
    def limit(self) -> float:
        """The episode's time limit (simulated seconds; set by reset)."""
        return self.points.limit

    @property
    def completed(self) -> int:
        return self.outcomes.completed

    @property
    def agent_dropped(self) -> int:
        return self.outcomes.agent_dropped

    @property
    def timeouts(self) -> int:
        return self.outcomes.timeouts

    @property
    def stage_fallbacks(self) -> int:
        return self.stages.fallbacks

    @property
    def episode_requests(self) -> list[Request]:
        """This episode's K requests, in arrival order."""
        return self.outcomes.requests

    # ------------------------------------------------------------------ what builders and rewards read (context.py)
    def state(self) -> ClusterState:
        """The ClusterState the agent's router observes now (stale with ``view_staleness``); cached per instant."""
        pts = self.points
        if pts.at is not None:  # a tick without its event (DecisionPoints.quiet_ticks)
            view = self.cluster.view
            return view.state(at=pts.at) if self.view_staleness > 0 else view.live_state(at=pts.at)
        key = (pts.events, pts.version)
        if self._state_key != key:
            self._state = self.cluster.view.state() if self.view_staleness > 0 else self.true_state()
            self._state_key = key
        return self._state  # type: ignore[return-value]

    def true_state(self) -> ClusterState:
        """The simulator's exact ClusterState now (rewards judge by it); cached per instant."""
        pts = self.points
        if pts.at is not None:  # a tick without its event (DecisionPoints.quiet_ticks)
            return self.cluster.view.live_state(at=pts.at)
        key = (pts.events, pts.version)
        if self._true_key != key:
            self._true = self.cluster.view.live_state(sync=False)  # engines materialised only for rows read
            self._true_key = key
        return self._true  # type: ignore[return-value]

    def true_progress(self) -> tuple[int, tuple[tuple[int, float], ...]]:
        """``(central_queue, ((num_requests, progress) per instance))`` of ``true_state()``, without building it
        (``ClusterView.live_progress``: a per-tick reward's hot path)."""
        return self.cluster.view.live_progress(self.points.at)

    def predictions(self, req: Request) -> tuple[np.ndarray, np.ndarray]:
        """Predicted (output tokens, quality) of ``req`` on each of ``self.models``."""
        p = self._preds.get(req.id)
        if p is None:
            p = self._preds[req.id] = self.predictor.predict(req, self.models)
        return p

    def prefix_hit_tokens(self, instance: int, req: Request) -> int:
        """Prompt tokens of ``req`` that instance ``instance``'s prefix cache holds now (the cluster view's)."""
        return self.cluster.view.prefix_hit_tokens(instance, req)

    def __deepcopy__(self, memo: dict[int, Any]) -> RoutingEnv:
        """A what-if copy (Python's own deep copy of every attribute). The compiled engine's classes cannot be
        copied (their constructors need arguments), so there the copy is refused in one line naming the fix."""
        if engine_name() == "compiled":
            raise LLMSimError("an env on the compiled engine cannot be copied (copy.deepcopy, a what-if): run it on "
                              "the Python engine (`python -m llmsim.compile clean` removes the build)")
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return new

    def replace_upcoming(self, requests: list[Request]) -> None:
        """A planner's what-if, on a copy of the env (``copy.deepcopy``, Python engine): the requests that have not
        arrived yet become ``requests`` (as many, in arrival order, none before now; they take over the ids)."""
        self.outcomes.replace_upcoming(self.cluster.num_arrived, requests)
        self.driver.replace_upcoming(requests)

    def request(self, request_id: int) -> Request:
        """The episode's request ``request_id`` with its hidden ground truth (for rewards, never observations)."""
        return self.outcomes.by_id[request_id]

    # ------------------------------------------------------------------ actions, masks and info
    def decode(self, action: int) -> int:
        """Instance index, WAIT or DROP for an action (a model choice: its least-loaded replica that fits);
        envs/actions.py, shared with the exported-policy router."""
        req = self.points.pending  # (None before the first reset)
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
        req = self.points.pending
        if req is None:
            return self.wait_action if self.offer_wait else 0
        if req.predicted_output is None:
            lens, _ = self.predictions(req)
            req.predicted_output = float(lens[0])
        view = self.cluster.view
        d = router.route_decode(req, view) if self.points.pending_stage == "decode" else router.route(req, view)
        return self.decision_action(d)

    def decision_action(self, d: int) -> int:
        """The action that stands for a router's decision ``d``: WAIT / DROP the wait / drop actions, an instance
        itself (``instance*``) or its model (``model*``)."""
        if d == WAIT:
            return self.wait_action
        if d == DROP:
            return self.drop_action
        return int(self.inst_model_idx[d]) if self.action_kind.startswith("model") else int(d)

    def action_masks(self) -> np.ndarray:
        """Valid actions (MaskablePPO convention): choices whose instance (or a replica of the model) can serve
        the request and is not full (``max_waiting``), then wait / drop where offered. With nothing to decide
        (a drain step, an empty tick) every action is a no-op and the mask marks the env's usual no-op: wait
        where the env offers it, else every choice (never drop). The rule is envs/actions.py's ``fill_mask``."""
        pts = self.points
        key = (pts.events, pts.version)
        if self._mask_key == key:
            return self._mask.copy()  # asked again at the same instant (the learner, then info)
        self._mask_key = key
        req = pts.pending
        fill_mask(self._mask, self.actions, None if req is None else req.prompt_tokens,
                  lambda: self.state().instances)
        if self.cluster.transfers is not None:
            self.stages.restrict_mask(self._mask, self.cluster.view, req, pts.pending_stage == "decode",
                                      self.n_choices, self.action_kind.startswith("instance"))
        return self._mask.copy()

    def _info(self, comps: dict[str, float], dt: float, final: bool) -> dict[str, Any]:
        c, drv, out = self.cluster, self.driver, self.outcomes
        info: dict[str, Any] = {
            "reward_components": comps,  # (a fresh dict: the reward starts a new one each step)
            "request_rewards": self.reward_fn.take_credits(),  # each request's own part of the reward, by id
            "dt": dt,
            "time": drv.now,
            "decisions": self.num_decisions,
            "arrived": c.num_arrived,
            "completed": out.completed,
            "dropped": len(drv.drops),
            "agent_dropped": out.agent_dropped,
            "timeouts": out.timeouts,
            # every request waiting for the router, the one to decide next included: the observed
            # ClusterState.central_queue (held ones, and arrivals being offered), in either decision mode
            "central_queue": len(drv.held) + len(drv.deferred),
            "action_mask": self.action_masks(),
        }
        if self._decided is not None:  # absent, not None, otherwise: vector envs stack a key's values in an array
            info["decided"] = self._decided
        if final:
            info["episode_reward"] = self._episode_reward
            info["episode_components"] = dict(self._episode_components)
            info["summary"] = self.summary()
        return info

    def render(self) -> None:
        """Nothing to draw: ``render_mode`` is None, for which Gymnasium's ``render`` returns None."""
        return None

    def summary(self) -> dict[str, Any]:
        """The episode's summary so far (the CLI's numbers: ``collect``'s summary, without its tables), with the
        trace rows its workload read but left out (``workload_skipped``, by reason) when it reads a trace, as a
        simulator run reports them: nothing is dropped in silence."""
        summary = summary_of(self.cluster, self.slo)
        if self.workload.skipped is not None:
            summary["workload_skipped"] = dict(self.workload.skipped)
        return summary
