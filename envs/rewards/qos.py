"""QoS reward of the QoS-aware edge router paper (Eqs. 1, 15, 16) with the action impact estimator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from llmsim.envs.options import positive
from llmsim.envs.rewards.base import Reward

if TYPE_CHECKING:
    from llmsim.envs.context import RewardContext
    from llmsim.request import Request

# The paper's released-code slopes (s/token); chatglm-6b has a faster prefill.
K1_DEFAULT = 7.2e-5
K2_DEFAULT = 2.5e-5
K1_BY_MODEL = {"chatglm-6b": 6.8e-5}


def latency_increase(p_j: int, d_j: int, d_i: int, d_it: int, k1: float, k2: float,
                     code_compat: bool = False) -> float:
    """Eq. 15: l+ of a running request (output d_i, d_it generated) when a newcomer (p_j, d_j) joins.

    ``code_compat`` reproduces the released code's sum upper limit m - 1 instead of m.
    """
    m = min(d_i - d_it, d_j)
    if code_compat:
        m -= 1
    m = max(m, 0)
    s = m * p_j + m * (m + 1) / 2
    return (k1 * p_j + k2 * s) / d_i


def action_impact(p_j: int, d_j: int, running: Sequence[tuple[int, int, float, float]], k1: float, k2: float,
                  limit: float, code_compat: bool = False) -> tuple[float, list[float]]:
    """QoS at risk: sum of phi_i over running requests with l_hat = l + l+ >= L (> L with code_compat).

    ``running`` holds (d_i, d_it, l_it, phi_i) per co-running request. Returns (penalty >= 0, l_hat list).
    """
    pen = 0.0
    hats = []
    for d_i, d_it, l_it, phi in running:
        hat = l_it + latency_increase(p_j, d_j, d_i, d_it, k1, k2, code_compat)
        hats.append(hat)
        if (hat > limit) if code_compat else (hat >= limit):
            pen += phi
    return pen, hats


class QoSReward(Reward):
    """r_j = sum of phi_i of requests completed within L since the last decision - Eq. 15 penalty.

    phi_i = s_i * I[l_i <= L] with l_i = (finish - arrival) / output tokens; s_i is the request's quality on
    the expert that served it. The penalty uses ground-truth lengths and phi_i = s_i (as the code does): it
    reads the running requests from the true ClusterState and their hidden output length and quality from
    ``env.request(id)`` (the reward is the judge; observations never see these). A dropped request earns no
    phi and costs the generic ``dropped`` term (the released code scores a drop 0: ``weights={"dropped": 0}``).
    """

    name = "qos"
    own_components = ("qos_completed", "qos_penalty", "completed_in_limit", "completed_late")
    default_weights = {"qos_completed": 1.0, "qos_penalty": 1.0}

    def __init__(self, latency_limit: float = 0.03, k1: float | dict[str, float] | None = None,
                 k2: float | dict[str, float] | None = None, code_compat: bool = False,
                 weights: dict[str, float] | None = None, scale: float | None = None, wait_cost: float = 0.1) -> None:
        super().__init__(weights, scale, wait_cost)
        self.limit = float(positive("reward.latency_limit", latency_limit))
        self.k1 = k1
        self.k2 = k2
        self.code_compat = code_compat

    def _slope(self, spec, model: str, default: float, table: dict[str, float] | None = None) -> float:
        if isinstance(spec, dict):
            return float(spec.get(model, default))
        if spec is not None:
            return float(spec)
        return (table or {}).get(model, default)

    def reset(self, env: RewardContext) -> None:
        super().reset(env)
        models = env.instance_models
        self._k1 = [self._slope(self.k1, m, K1_DEFAULT, K1_BY_MODEL) for m in models]
        self._k2 = [self._slope(self.k2, m, K2_DEFAULT) for m in models]

    def before_action(self, env: RewardContext, req: Request, target: int | None) -> None:
        if target is None:
            return
        state = env.true_state()
        model = env.instance_models[target]
        now = state.now
        running = []
        for rid, _, g, _, _, _, arrival in state.instances[target].running:
            truth = env.request(rid)
            q = truth.quality_by_model
            phi = q.get(model, 0.0) if q else 0.0
            running.append((truth.target_tokens, g, (now - arrival) / g if g > 0 else 0.0, phi))
        if not running:
            return
        pen, _ = action_impact(req.prompt_tokens, req.output_for(model), running, self._k1[target],
                               self._k2[target], self.limit, self.code_compat)
        self._acc["qos_penalty"] -= pen

    def on_finish(self, req: Request, k: int) -> None:
        super().on_finish(req, k)
        lat = (req.finish - req.arrival) / max(req.generated, 1)
        ok = lat < self.limit if self.code_compat else lat <= self.limit
        if ok:
            q = req.quality_by_model
            self.credit(req, "qos_completed", q.get(self.env.instance_models[k], 0.0) if q else 0.0)
            self.credit(req, "completed_in_limit", 1.0)
        else:
            self.credit(req, "completed_late", 1.0)
