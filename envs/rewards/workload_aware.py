"""Workload-aware reward of "Intelligent Router for LLM Workloads" (Sec. 3.4, Eq. 1 / Eq. 2 reconstructed).

* ``unfinished``: -sum over requests in the system (central queue and instances) of (1 - f), with
  f = min(1, generated / predicted output) (``InstanceState.progress``); a queued request costs 1. Charged
  once per decision tick (tick mode), or in arrival mode once per ``tick`` seconds of the step (backlog at
  the step's end x dt / tick), so it integrates the backlog over simulated time either way.
  ``backlog: requests`` counts every request in the system as 1: the backlog's integral over time is then the
  sum of the requests' times in the system (Little's law), what the mean E2E counts.
* ``completion``: r_c (60) per completed request.
* ``mixing``: r_mix = alpha * r_p + (1 - alpha) * r_d of the chosen instance (0 for wait / drop), where
  T_p = grad_p (p_i + sum_j (p_j + d_j)), r_p = 1 if T_p < eps else 1 - T_p / eps and
  r_d = -grad_d (sum_j (p_j + d_j) + p_i + d_i); j runs over the instance's requests, d_j = tokens generated
  so far (``InstanceState.context_tokens``), d_i = the newcomer's predicted output.
* ``heuristic``: h = r_mix(chosen) - max_m r_mix(m) <= 0 (0 for wait / drop): the HuRL guidance term.

All terms read the true ClusterState (``unfinished`` its numbers through ``env.true_progress()``, without
building it: the term is charged tens of thousands of times per episode). Default weights give the
"Workload-Aware RL" reward r + h; set
``guidance`` to 0 for "Baseline RL" or follow the "Workload-Guided" schedule gamma * exp(-0.5 k) with
:meth:`set_guidance`. The generic ``waiting`` term has weight 0 here (``unfinished`` already charges every
queued request), the other outcome terms weight r_c (a lost request costs what a served one earns); ``scale``
defaults to 1 / r_c, so a completion is worth 1 and a backlog of 60 requests costs 1 per tick.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from llmsim.envs.options import positive
from llmsim.envs.rewards.base import Reward
from llmsim.errors import ConfigError

if TYPE_CHECKING:
    from llmsim.envs.context import RewardContext
    from llmsim.request import Request


def mixing_penalty(p_i: int, d_i: float, resident: float, grad_p: float = 3.2e-4, grad_d: float = 3.3e-5,
                   eps: float = 5.0, alpha: float = 0.5) -> tuple[float, float, float]:
    """(r_mix, r_p, r_d) of a newcomer (p_i, d_i) joining an instance with ``resident`` = sum(p_j + d_j)."""
    t_p = grad_p * (p_i + resident)
    r_p = 1.0 if t_p < eps else 1.0 - t_p / eps
    r_d = -grad_d * (resident + p_i + d_i)
    return alpha * r_p + (1.0 - alpha) * r_d, r_p, r_d


class WorkloadAwareReward(Reward):
    name = "workload_aware"
    own_components = ("unfinished", "completion", "mixing", "heuristic", "mixing_prefill", "mixing_decode")
    default_weights = {"unfinished": 1.0, "completion": 1.0, "heuristic": 1.0, "waiting": 0.0}
    tick_reads_state = True  # on_tick: the backlog of true_progress()

    def __init__(self, completion_reward: float = 60.0, grad_p: float = 3.2e-4, grad_d: float = 3.3e-5,
                 eps: float = 5.0, alpha: float = 0.5, guidance: float = 1.0,
                 weights: dict[str, float] | None = None, scale: float | None = None, wait_cost: float = 0.1,
                 backlog: str = "progress") -> None:
        positive("reward.completion_reward", completion_reward)
        super().__init__(weights, 1.0 / float(completion_reward) if scale is None else scale, wait_cost)
        if backlog not in ("progress", "requests"):
            raise ConfigError(f"reward.backlog: expected progress or requests, got {backlog!r}")
        self.count_requests = backlog == "requests"
        self.r_c = float(completion_reward)
        for k in ("dropped", "cut_off", "truncated", "timeouts"):  # losing a request costs what serving it earns
            if not weights or k not in weights:
                self.weights[k] = self.r_c
        self.grad_p, self.grad_d, self.eps, self.alpha = grad_p, grad_d, positive("reward.eps", eps), alpha
        if weights is None or "heuristic" not in weights:
            self.weights["heuristic"] = float(guidance)

    def set_guidance(self, weight: float) -> None:
        """Weight of h in the total (HuRL: gamma - gamma_k), e.g. per episode from a training callback."""
        self.weights["heuristic"] = float(weight)

    def before_action(self, env: RewardContext, req: Request, target: int | None) -> None:
        if target is None:
            return
        lens, _ = env.predictions(req)
        p = req.prompt_tokens
        best = None
        chosen = None
        for k, inst in enumerate(env.true_state().instances):
            if k != target and not inst.can_serve(p):
                continue  # never a candidate
            v = mixing_penalty(p, float(lens[env.inst_model_idx[k]]), inst.context_tokens,
                               self.grad_p, self.grad_d, self.eps, self.alpha)
            if k == target:
                chosen = v
            if best is None or v[0] > best:
                best = v[0]
        if chosen is None:
            return
        acc = self._acc
        acc["mixing"] += chosen[0]
        acc["mixing_prefill"] += chosen[1]
        acc["mixing_decode"] += chosen[2]
        acc["heuristic"] += chosen[0] - best

    def on_finish(self, req: Request, k: int) -> None:
        super().on_finish(req, k)
        self.credit(req, "completion", self.r_c)

    def _backlog(self, env: RewardContext) -> float:
        """sum over requests in the system of (1 - f): the held ones count 1 each, an instance's count minus its
        ``progress`` (sum of min(1, generated / predicted output)); from the true state's numbers
        (``true_progress``: the state's ``central_queue`` and each instance's ``num_requests`` and ``progress``)."""
        central, per_instance = env.true_progress()
        pen = float(central)
        if self.count_requests:  # backlog: requests: each request in the system counts 1 (Little's law: the mean E2E)
            for n, _ in per_instance:
                pen += n
            return pen
        for n, progress in per_instance:
            pen += n - progress
        return pen

    def on_tick(self, env: RewardContext) -> None:
        self._acc["unfinished"] -= self._backlog(env)

    def on_step_end(self, env: RewardContext, dt: float) -> None:
        if env.decision != "tick" and dt > 0:
            self._acc["unfinished"] -= self._backlog(env) * dt / env.tick


class TailAwareReward(WorkloadAwareReward):
    """The workload-aware reward plus a price on the tail: ``workload_aware_tail`` (not the paper's; an option for
    policies that must not buy a better mean with a worse p99).

    * ``tail``: per completion, -(e2e - target) / target seconds beyond ``e2e_target_s`` (0 within it), capped at
      ``tail_cap``: a request twice as slow as the target costs as much as a completion earns (weight r_c).
    * ``held``: per request routed after waiting w seconds in the central queue, -(w / ``max_wait_s``)^2: holding a
      request near the wait limit costs more than several short holds.

    With ``tail_weight`` 0 and ``held_weight`` 0 it is the workload-aware reward exactly."""

    name = "workload_aware_tail"
    own_components = (*WorkloadAwareReward.own_components, "tail", "held")

    def __init__(self, e2e_target_s: float = 30.0, tail_cap: float = 5.0, max_wait_s: float = 10.0,
                 tail_weight: float = 1.0, held_weight: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for key, v in (("e2e_target_s", e2e_target_s), ("tail_cap", tail_cap), ("max_wait_s", max_wait_s)):
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < math.inf:
                raise ConfigError(f"reward.{key}: expected a positive number, got {v!r}")
        self.target, self.cap, self.max_wait = float(e2e_target_s), float(tail_cap), float(max_wait_s)
        weights = kwargs.get("weights") or {}
        self.weights["tail"] = float(weights.get("tail", tail_weight * self.r_c))
        self.weights["held"] = float(weights.get("held", held_weight * self.r_c))

    def before_action(self, env: RewardContext, req: Request, target: int | None) -> None:
        super().before_action(env, req, target)
        if target is not None:
            w = max(0.0, env.state().now - req.arrival) / self.max_wait
            self._acc["held"] -= min(1.0, w) ** 2

    def on_finish(self, req: Request, k: int) -> None:
        super().on_finish(req, k)
        late = (req.finish - req.arrival - self.target) / self.target
        if late > 0:
            self.credit(req, "tail", -min(self.cap, late))
