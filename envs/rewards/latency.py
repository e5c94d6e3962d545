"""Generic latency / SLO-attainment reward (any cluster, any workload)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.envs.options import positive
from llmsim.envs.rewards.base import Reward

if TYPE_CHECKING:
    from llmsim.request import Request


class LatencyReward(Reward):
    """Per completion: ``slo_met`` +1 when every given target (ms) holds, ``latency`` -e2e / latency_scale
    (s), ``ttft`` -TTFT / latency_scale (s); plus the generic outcome terms (``dropped`` -1 per drop of any
    cause). Default total: SLO attainment when a target is set, else negative end-to-end latency in units of
    ``latency_scale`` (default 10 s, so a typical completion is of order -1)."""

    name = "latency"
    own_components = ("slo_met", "latency", "ttft")

    def __init__(self, ttft_ms: float | None = None, tpot_ms: float | None = None,
                 e2el_ms: float | None = None, latency_scale: float = 10.0,
                 weights: dict[str, float] | None = None, scale: float | None = None, wait_cost: float = 0.1) -> None:
        for key, target in (("ttft_ms", ttft_ms), ("tpot_ms", tpot_ms), ("e2el_ms", e2el_ms)):
            if target is not None:
                positive(f"reward.{key}", target)
        self.ttft_ms, self.tpot_ms, self.e2el_ms = ttft_ms, tpot_ms, e2el_ms
        has_slo = any(v is not None for v in (ttft_ms, tpot_ms, e2el_ms))
        main = "slo_met" if has_slo else "latency"
        self.default_weights = {main: 1.0}
        super().__init__(weights, scale, wait_cost)
        self.latency_scale = float(positive("reward.latency_scale", latency_scale))

    def on_finish(self, req: Request, k: int) -> None:
        super().on_finish(req, k)
        e2e = req.finish - req.arrival
        ttft = req.first_token - req.arrival
        ok = True
        if self.ttft_ms is not None and ttft * 1e3 > self.ttft_ms:
            ok = False
        if self.tpot_ms is not None and req.generated > 1:
            tpot = (req.finish - req.first_token) / (req.generated - 1)
            if tpot * 1e3 > self.tpot_ms:
                ok = False
        if self.e2el_ms is not None and e2e * 1e3 > self.e2el_ms:
            ok = False
        if ok:  # credited: each term is the request's own (info["request_rewards"], agents' request credit)
            self.credit(req, "slo_met", 1.0)
        self.credit(req, "latency", -e2e / self.latency_scale)
        self.credit(req, "ttft", -ttft / self.latency_scale)
