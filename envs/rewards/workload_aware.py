"""Workload-aware reward of spec 001 (Sec. 3.4, reconstructed Eq. 1 / Eq. 2), one component each.

* ``unfinished``: -sum over requests in the system (central queue and instances) of (1 - f), with
  f = min(1, generated / predicted output); a queued request costs 1. Charged once per decision tick
  (tick mode) or once per step (arrival mode), so it integrates the backlog over time.
* ``completion``: r_c (60) per completed request.
* ``mixing``: r_mix = alpha * r_p + (1 - alpha) * r_d of the chosen instance (0 for wait / drop), where
  T_p = grad_p (p_i + sum_j (p_j + d_j)), r_p = 1 if T_p < eps else 1 - T_p / eps and
  r_d = -grad_d (sum_j (p_j + d_j) + p_i + d_i); j runs over the instance's requests, d_j = tokens generated
  so far, d_i = the newcomer's predicted output.
* ``heuristic``: h = r_mix(chosen) - max_m r_mix(m) <= 0 (0 for wait / drop): the HuRL guidance term.

Default weights give the "Workload-Aware RL" reward r + h; set ``guidance`` to 0 for "Baseline RL" or
follow the "Workload-Guided" schedule gamma * exp(-0.5 k) with :meth:`set_guidance`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envs.rewards.base import Reward

if TYPE_CHECKING:
    from envs.core import RoutingEnv
    from llmsim.instance import Instance
    from llmsim.request import Request


def mixing_penalty(p_i: int, d_i: float, resident: float, grad_p: float = 3.2e-4, grad_d: float = 3.3e-5,
                   eps: float = 5.0, alpha: float = 0.5) -> tuple[float, float, float]:
    """(r_mix, r_p, r_d) of a newcomer (p_i, d_i) joining an instance with ``resident`` = sum(p_j + d_j)."""
    t_p = grad_p * (p_i + resident)
    r_p = 1.0 if t_p < eps else 1.0 - t_p / eps
    r_d = -grad_d * (resident + p_i + d_i)
    return alpha * r_p + (1.0 - alpha) * r_d, r_p, r_d


def resident_tokens(inst: Instance) -> int:
    s = 0
    for q in (inst.running, inst.waiting, inst.swapped):
        for r in q:
            s += r.prompt_tokens + r.generated
    return s


class WorkloadAwareReward(Reward):
    name = "workload_aware"
    components = ("unfinished", "completion", "mixing", "heuristic", "mixing_prefill", "mixing_decode")
    default_weights = {"unfinished": 1.0, "completion": 1.0, "heuristic": 1.0}

    def __init__(self, completion_reward: float = 60.0, grad_p: float = 3.2e-4, grad_d: float = 3.3e-5,
                 eps: float = 5.0, alpha: float = 0.5, guidance: float = 1.0,
                 weights: dict[str, float] | None = None) -> None:
        super().__init__(weights)
        self.r_c = float(completion_reward)
        self.grad_p, self.grad_d, self.eps, self.alpha = grad_p, grad_d, eps, alpha
        if weights is None or "heuristic" not in weights:
            self.weights["heuristic"] = float(guidance)

    def set_guidance(self, weight: float) -> None:
        """Weight of h in the total (HuRL: gamma - gamma_k), e.g. per episode from a training callback."""
        self.weights["heuristic"] = float(weight)

    def before_action(self, env: RoutingEnv, req: Request | None, target: int | None) -> None:
        if req is None or target is None:
            return
        lens, _ = env.predictions(req)
        best = None
        chosen = None
        for k, inst in enumerate(env.cluster.instances):
            if k != target and inst.can_ever_serve(req):
                continue  # never a candidate (can_ever_serve returns the reason it cannot)
            v = mixing_penalty(req.prompt_tokens, float(lens[env.inst_model_idx[k]]), resident_tokens(inst),
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

    def on_finish(self, req: Request, inst: Instance) -> None:
        self._acc["completion"] += self.r_c

    def _backlog(self, env: RoutingEnv) -> float:
        """sum over requests in the system of (1 - f); a request with nothing generated counts 1."""
        c = env.cluster
        pen = len(c.central) + len(c.deferred)
        for inst in c.instances:
            pen += len(inst.running) + len(inst.waiting) + len(inst.swapped)
            for q in (inst.running, inst.swapped, inst.waiting):
                for r in q:
                    g = r.generated
                    if g:
                        d = r.predicted_output or r.target_tokens
                        pen -= g / d if g < d else 1.0
        return float(pen)

    def on_tick(self, env: RoutingEnv) -> None:
        env.cluster.sync_all()
        self._acc["unfinished"] -= self._backlog(env)

    def on_step_end(self, env: RoutingEnv) -> None:
        if env.decision != "tick":
            self._acc["unfinished"] -= self._backlog(env)
