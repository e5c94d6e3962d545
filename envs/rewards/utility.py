"""Weighted quality / cost / latency utility of RouteBalance (Eq. 1), on realised outcomes.

Per completed request served by model m:
  quality term  = Q_{r,m} (ground-truth quality in [0, 1]),
  cost term     = 1 - C_r / max_{m'} C_{r,m'}, with C = prompt * c_in + output * c_out at public
                  per-token prices and the max over the cluster's models (each with its own true output
                  length): the same max-divide normalisation as the paper's scoring rule,
  latency term  = 1 - min(1, e2e / latency_ref) (the paper divides by the candidates' predicted maximum,
                  which a realised outcome does not have; ``latency_ref`` seconds stands in for it).
total = w_qual * quality + w_cost * cost + w_lat * latency (weights on the simplex, preset "balance"), plus the
generic outcome terms (a dropped request costs ``dropped`` -1; ``drop_penalty`` is kept as an extra).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.envs.options import positive
from llmsim.envs.rewards.base import Reward
from llmsim.schema import check_choice

if TYPE_CHECKING:
    from llmsim.envs.context import RewardContext
    from llmsim.request import Request

# USD per 1M tokens (input, output). RouteBalance's aggregator bills 0.06 (3B), 0.07 (7/8B), 0.15 (14B) and
# 0.40 (72B); other models fall back to 0.01 USD per billion parameters.
PRICES_PER_M = {"qwen2.5-3b": 0.06, "qwen2.5-7b": 0.07, "llama-3.1-8b": 0.07, "qwen2.5-14b": 0.15,
                "qwen2.5-72b": 0.40}
PRESETS = {"balance": (1 / 3, 1 / 3, 1 / 3), "quality": (0.8, 0.1, 0.1), "latency": (0.1, 0.1, 0.8),
           "cost": (0.1, 0.8, 0.1)}  # (w_qual, w_cost, w_lat)


class UtilityReward(Reward):
    name = "utility"
    own_components = ("utility", "quality", "cost", "latency")
    default_weights = {"utility": 1.0}

    def __init__(self, preset: str = "balance", w_qual: float | None = None, w_cost: float | None = None,
                 w_lat: float | None = None, latency_ref: float = 10.0,
                 prices: dict[str, float] | None = None, drop_penalty: float = 0.0,
                 weights: dict[str, float] | None = None, scale: float | None = None, wait_cost: float = 0.1) -> None:
        super().__init__(weights, scale, wait_cost)
        wq, wc, wl = PRESETS[check_choice(preset, PRESETS, "reward.preset")]
        self.w = (wq if w_qual is None else w_qual, wc if w_cost is None else w_cost,
                  wl if w_lat is None else w_lat)
        self.latency_ref = float(positive("reward.latency_ref", latency_ref))
        self.prices = dict(prices or {})
        self.drop_penalty = float(drop_penalty)

    def reset(self, env: RewardContext) -> None:
        super().reset(env)
        self._models = list(dict.fromkeys(env.instance_models))
        self._price = {}
        for name in self._models:
            p = self.prices.get(name)
            if p is None:
                p = PRICES_PER_M.get(name)
            if p is None:
                p = 0.01 * env.model_specs[name].n_params / 1e9
            self._price[name] = p / 1e6

    def cost(self, req: Request, model: str, out_tokens: int) -> float:
        return (req.prompt_tokens + out_tokens) * self._price[model]

    def on_finish(self, req: Request, k: int) -> None:
        super().on_finish(req, k)
        m = self.env.instance_models[k]
        q = req.quality_by_model
        qual = q.get(m, 0.0) if q else 0.0
        c = self.cost(req, m, req.generated)
        cmax = max(self.cost(req, x, req.output_for(x)) for x in self._models)
        cost_term = 1.0 - c / (cmax + 1e-12)
        lat_term = 1.0 - min(1.0, (req.finish - req.arrival) / self.latency_ref)
        wq, wc, wl = self.w
        for key, value in (("quality", qual), ("cost", cost_term), ("latency", lat_term),
                           ("utility", wq * qual + wc * cost_term + wl * lat_term)):
            self.credit(req, key, value)  # the request's own terms (info["request_rewards"])

    def on_drop(self, req: Request, reason: str) -> None:
        super().on_drop(req, reason)
        self.credit(req, "utility", -self.drop_penalty)
