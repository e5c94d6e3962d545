"""One Gymnasium env over an llmsim cluster; decision point, actions, observations and reward plug in.

Decision points
* ``decision="arrival"``: one step per request the router must place. Each arrival is deferred to the
  agent (``DEFER``) and decided at its arrival instant, exactly as a router would; with a wait action a
  held request sits in the central queue and is offered again at the next completion or tick.
* ``decision="tick"``: every ``tick`` seconds (0.02 s in spec 001) the agent decides for the head of the
  central queue: route it or wait. Ticks with an empty queue are skipped unless ``tick_when_empty``
  (per-tick reward terms are still accumulated at every tick).

Actions (``action=``): ``instance`` Discrete(N); ``instance_wait`` / ``instance_drop`` Discrete(N+1) with
the last index meaning wait / drop; ``model`` Discrete(M) over ``env.models`` with the request sent to
the least-loaded (fewest running + waiting + swapped) replica of that model, ties to the lowest index.

Episodes hold K requests (``num_requests``); they terminate when every request has finished or been
dropped and truncate when simulated time passes ``time_limit``. ``reset(seed=...)`` draws a new workload
realisation; ``fixed_workload_seed`` (or ``reset(options={"workload_seed": s})``) pins one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np

from envs.observations import ObsBuilder, make_obs
from envs.predictors import Predictor, make_predictor
from envs.rewards import Reward, make_reward
from envs.schema import ACTIONS as ACTIONS
from envs.schema import EnvOptions
from envs.workloads import EnvWorkload, make_workload
from llmsim.cluster import Cluster, InstanceConfig
from llmsim.config import instances_from_specs
from llmsim.errors import ConfigError, LLMSimError
from llmsim.policies import DEFER, DROP, WAIT, Router
from llmsim.request import Request
from llmsim.schema import SLO
from llmsim.simenv import ARRIVAL, ROUTE


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
        env = self.env
        if req.id not in env._preds:
            env._on_arrival(req)
        return self.decision


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
        slo: SLO | dict[str, Any] | None = None,
        max_waiting: int | None = None,
        fixed_workload_seed: int | None = None,
        metrics_interval: float = 1.0,
        on_unservable: str = "drop",
        colocation_interference: float = 1.0,
    ) -> None:
        super().__init__()
        opts = EnvOptions(
            num_requests=num_requests, decision=decision, tick=tick, tick_when_empty=tick_when_empty, action=action,
            time_limit=time_limit, max_waiting=max_waiting, fixed_workload_seed=fixed_workload_seed,
            metrics_interval=metrics_interval, on_unservable=on_unservable,
            colocation_interference=colocation_interference,
        )
        if opts.decision == "tick" and opts.action != "instance_wait":
            raise ConfigError("env.action: decision='tick' needs action='instance_wait' (the agent may hold the "
                              f"head of the queue), got {opts.action!r}")
        cfgs = instances_from_specs(list(instances) if isinstance(instances, tuple) else instances, "env.instances")
        # profiles are built once and shared by every episode's cluster
        self.instance_configs = [dataclasses.replace(c, profile=c.build_profile()) for c in cfgs]
        self.workload = make_workload(workload)
        self.task_names = list(getattr(self.workload, "task_names", []))
        self.num_requests = opts.num_requests
        self.decision = opts.decision
        self.tick = opts.tick
        self.tick_when_empty = opts.tick_when_empty
        self.action_kind = opts.action
        self.time_limit = float("inf") if opts.time_limit is None else opts.time_limit
        self.slo = SLO.parse(slo)
        self.max_waiting = opts.max_waiting
        self.fixed_workload_seed = opts.fixed_workload_seed
        self.metrics_interval = opts.metrics_interval
        self.on_unservable = opts.on_unservable
        self.colocation_interference = opts.colocation_interference
        self.predictor = make_predictor(predictor)
        self.reward_fn = make_reward(reward)
        self.obs_builder = make_obs(observation)

        self.num_instances = n = len(self.instance_configs)
        self.instance_models = [c.profile.model.name for c in self.instance_configs]
        self.models = list(dict.fromkeys(self.instance_models))
        self.inst_model_idx = np.array([self.models.index(m) for m in self.instance_models], dtype=np.int64)
        self.replicas = [[k for k in range(n) if self.instance_models[k] == m] for m in self.models]
        n_act = {"instance": n, "instance_wait": n + 1, "instance_drop": n + 1,
                 "model": len(self.models)}[action]
        self.action_space = gym.spaces.Discrete(n_act)
        self.special_action = {"instance_wait": WAIT, "instance_drop": DROP}.get(action)
        self.cluster: Cluster | None = None
        self._build_cluster([])
        self.observation_space = self.obs_builder.bind(self)
        self._mask = np.zeros(n_act, dtype=np.bool_)

    # ------------------------------------------------------------------ episode lifecycle
    def _build_cluster(self, reqs: list[Request]) -> None:
        tick_mode = self.decision == "tick"
        wait_retry = self.tick if (self.special_action == WAIT and not tick_mode) else None
        self.cluster = Cluster(self.instance_configs, _AgentRouter(self),
                               metrics_interval=self.metrics_interval, central_queue_tick=wait_retry,
                               on_unservable=self.on_unservable, on_finish=self._on_finish,
                               colocation_interference=self.colocation_interference)
        self._preds: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.routed_quality: dict[int, float] = {}
        self._requests = reqs

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
        self.steps = 0
        self.num_decisions = 0
        self.completed = 0
        self.agent_dropped = 0
        self.terminated = self.truncated = False
        self._tick_due = False
        self._episode_reward = 0.0
        self._episode_components: dict[str, float] = dict.fromkeys(self.reward_fn.components, 0.0)
        self.reward_fn.reset(self)
        self.obs_builder.reset(self)
        c = self.cluster
        c.start(reqs)
        if self.decision == "tick":
            self._tick_k = 1  # ticks at k * tick exactly (no accumulated rounding)
            c.env.call_at(self.tick, ROUTE, self._on_tick)
        self.pending: Request | None = None
        self._advance()
        obs = self.obs_builder.build(self, self.pending)
        return obs, self._info({}, final=self.terminated or self.truncated)

    def _on_arrival(self, req: Request) -> None:
        self._preds[req.id] = self.predictor.predict(req, self.models)
        self.obs_builder.on_arrival(self, req)

    def _on_finish(self, req: Request, inst: Any) -> None:
        self.completed += 1
        self.reward_fn.on_finish(req, inst)
        self._preds.pop(req.id, None)
        self.routed_quality.pop(req.id, None)

    def _on_tick(self) -> None:
        c = self.cluster
        self.reward_fn.on_tick(self)
        if c.central or self.tick_when_empty:
            self._tick_due = True
        if not (c._arrivals_done and not c.central and all(not i._busy for i in c.instances)):
            self._tick_k += 1
            c.env.call_at(self._tick_k * self.tick, ROUTE, self._on_tick)

    def predictions(self, req: Request) -> tuple[np.ndarray, np.ndarray]:
        """Predicted (output tokens, quality) of ``req`` on each of ``self.models``."""
        p = self._preds.get(req.id)
        if p is None:
            p = self._preds[req.id] = self.predictor.predict(req, self.models)
        return p

    # ------------------------------------------------------------------ stepping
    def _advance(self) -> None:
        """Run the simulation to the next decision point, the end of the episode, or the time limit."""
        c = self.cluster
        env = c.env
        queue = env._queue
        step = env.step
        deferred = c.deferred
        limit = self.time_limit
        tick_mode = self.decision == "tick"
        while True:
            if tick_mode:
                if self._tick_due:
                    self._tick_due = False
                    central = c.central  # the cluster replaces this deque on retries: read it fresh
                    self.pending = central[0] if central else None
                    if self.pending is not None or self.tick_when_empty:
                        return
            elif deferred:
                self.pending = deferred[0]
                return
            if not queue:
                self.pending = None
                self.terminated = True
                return
            if queue[0][0] > limit:
                self.pending = None
                self.truncated = True
                return
            step()

    def decode(self, action: int) -> int:
        """Instance index, WAIT or DROP for an action (``model``: least-loaded replica)."""
        a = int(action)
        if self.action_kind == "model":
            req = self.pending
            best, best_v = -1, None
            for k in self.replicas[a]:
                inst = self.cluster.instances[k]
                if req is not None and inst.can_ever_serve(req):
                    continue
                v = len(inst.running) + len(inst.waiting) + len(inst.swapped)
                if best_v is None or v < best_v:
                    best, best_v = k, v
            return best if best >= 0 else self.replicas[a][0]
        if a == self.num_instances and self.special_action is not None:
            return self.special_action
        return a

    def step(self, action: int):
        if self.terminated or self.truncated:
            raise RuntimeError("step() called after the episode ended; call reset()")
        action = check_action(action, int(self.action_space.n))
        c = self.cluster
        req = self.pending
        d = self.decode(action)
        if req is not None:
            self.num_decisions += 1
            self.reward_fn.before_action(self, req, d if d >= 0 else None)
            phase = c.env.phase
            if self.decision == "tick":
                if d != WAIT:
                    c.central.popleft()
                    self._apply(req, d, ROUTE)
            else:
                c.deferred.popleft()
                self._apply(req, d, phase)
                if d == WAIT and phase != ARRIVAL:
                    c.central.append(req)  # the cluster only parks arrivals; re-queue a retried request
        self.steps += 1
        self.pending = None
        self._advance()
        if self.terminated or self.truncated:
            c.finish()
            if self.truncated:
                # report what the time limit cut off (in flight or not yet arrived), so nothing is lost
                now = c.env.now
                for r in self._requests:
                    if r.finish < 0 and not r.dropped:
                        c.recorder.drop(r, "episode_truncated", now)
        reward, comps = self.reward_fn.end_step(self)
        self._episode_reward += reward
        ec = self._episode_components
        for k, v in comps.items():
            ec[k] += v
        obs = self.obs_builder.build(self, self.pending)
        done = self.terminated or self.truncated
        return obs, float(reward), self.terminated, self.truncated, self._info(comps, done)

    def _apply(self, req: Request, d: int, phase: int) -> None:
        c = self.cluster
        if d >= 0:
            lens, quals = self._preds.get(req.id) or self.predictions(req)
            j = self.inst_model_idx[d]
            req.predicted_output = float(lens[j])
            self.routed_quality[req.id] = float(quals[j])
        elif d == DROP:
            self.agent_dropped += 1
            self.reward_fn.on_drop(req)
            self._preds.pop(req.id, None)
        c.apply_decision(req, d, phase)

    # ------------------------------------------------------------------ masks and info
    def action_masks(self) -> np.ndarray:
        """Valid actions (MaskablePPO convention): instances that can serve the request and are not full
        (``max_waiting``); wait / drop always. With nothing to decide only wait (or everything) is valid."""
        m = self._mask
        req = self.pending
        n = self.num_instances
        if req is None:
            if self.special_action == WAIT:
                m.fill(False)
                m[n] = True
            else:
                m.fill(True)
            return m.copy()
        insts = self.cluster.instances
        ok = [not insts[k].can_ever_serve(req) for k in range(n)]
        free = ok
        if self.max_waiting is not None:
            mw = self.max_waiting
            free = [ok[k] and len(insts[k].waiting) < mw for k in range(n)]
        if self.action_kind == "model":
            for a, reps in enumerate(self.replicas):
                m[a] = any(free[k] for k in reps)
            if not m.any():
                for a, reps in enumerate(self.replicas):
                    m[a] = any(ok[k] for k in reps)
        else:
            m[:n] = free
            if self.special_action is not None:
                m[n] = True
            elif not m.any():
                m[:n] = ok
        if not m.any():
            m.fill(True)
        return m.copy()

    def _info(self, comps: dict[str, float], final: bool) -> dict[str, Any]:
        c = self.cluster
        info: dict[str, Any] = {
            "reward_components": dict(comps),
            "time": c.env.now,
            "decisions": self.num_decisions,
            "arrived": c._num_arrived,
            "completed": self.completed,
            "dropped": len(c.recorder.dropped),
            "agent_dropped": self.agent_dropped,
            "central_queue": len(c.central),
            "action_mask": self.action_masks(),
        }
        if final:
            from llmsim.sim import collect

            info["episode_reward"] = self._episode_reward
            info["episode_components"] = dict(self._episode_components)
            info["summary"] = collect(c, self.slo).summary
        return info

    def summary(self) -> dict[str, Any]:
        from llmsim.sim import collect

        return collect(self.cluster, self.slo).summary
