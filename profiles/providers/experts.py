"""Mixture-of-experts providers: the expert computation of every MoE layer (the ``moe`` part).

LLMServingSim's profiler times one MoE layer's experts (router gate, expert GEMMs, combine: vLLM's fused MoE
block as one unit) for a batch of ``tokens`` tokens that activates ``activated_experts`` distinct experts
(``moe.csv``, TP 1). The profile keeps that grid as one curve per number of distinct experts (medians, whole
model: times the MoE layers); the step-time model times a batch at the expected distinct experts of its tokens
(llmsim.perf.profile_table.MoeTable). A dense model has no ``moe`` part.
"""

from __future__ import annotations

import pandas as pd

from .base import Context, PartResult, provider
from .fits import TOKEN_GRID, monotone, roofline_basis
from .raw import lss_measured, lss_run_dir, lss_source


def moe_curves(moe: pd.DataFrame, n_moe_layers: int, scale: float = 1.0) -> dict:
    """``{experts, curves}``: per number of distinct experts, tokens and whole-model seconds (monotone)."""
    med = moe.groupby(["activated_experts", "tokens"], as_index=False)["time_us"].median()
    experts, curves = [], []
    for e, g in med.groupby("activated_experts"):
        g = g.sort_values("tokens")
        secs = [v * 1e-6 * n_moe_layers * scale for v in g.time_us]
        experts.append(int(e))
        curves.append({"tokens": [int(t) for t in g.tokens], "seconds": monotone(secs)})
    return {"experts": experts, "curves": curves}


@provider("llmservingsim")
def lss_moe(ctx: Context) -> PartResult | None:
    """moe.csv of this (GPU, model); at TP > 1 without its own table, the TP 1 table over the TP degree."""
    m = ctx.model
    if not m.is_moe or not lss_measured(ctx.gpu, m.name, ctx.tp):
        return None
    own = lss_run_dir(ctx.raw.root, ctx.gpu, m.name, ctx.tp) / "moe.csv"
    head = {"n_experts": m.n_experts, "experts_per_token": m.experts_per_token, "layers": m.n_moe_layers}
    src = f"{lss_source(ctx.gpu, m.name, ctx.tp)} moe.csv (tokens x distinct experts, medians) x {m.n_moe_layers} "
    src += "MoE layers; timed at the expected distinct experts of the batch (uniform routing)"
    if own.is_file():
        return PartResult({**head, **moe_curves(pd.read_csv(own), m.n_moe_layers)}, "measured", src,
                          frozenset({"llmservingsim"}))
    tp1 = lss_run_dir(ctx.raw.root, ctx.gpu, m.name, 1) / "moe.csv"
    if not tp1.is_file():
        return None
    src = (f"{lss_source(ctx.gpu, m.name, 1)} moe.csv / {ctx.tp}: no tp{ctx.tp} moe.csv; vLLM shards every "
           f"expert's MLP over the TP group, so each GPU does 1/{ctx.tp} of the expert work (estimated) x "
           f"{m.n_moe_layers} MoE layers, at the expected distinct experts of the batch")
    curves = moe_curves(pd.read_csv(tp1), m.n_moe_layers, 1.0 / ctx.tp)
    return PartResult({**head, **curves}, "estimated", src, frozenset({"llmservingsim"}))


@provider("dense-model")
def no_experts(ctx: Context) -> PartResult | None:
    """A dense model: no ``moe`` part (its MLP is in the dense table)."""
    if ctx.model.is_moe:
        return None
    return PartResult(None, "measured", "dense model: no MoE layers")


ROOFLINE_EXPERTS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@provider("roofline")
def roofline_moe(ctx: Context) -> PartResult:
    """Grouped expert GEMMs on the calibrated GEMM roofline: the routed tokens' FLOPs, the distinct experts'
    weight bytes, per TP shard, at each number of distinct experts."""
    m, tp = ctx.model, ctx.tp
    rl, txt = roofline_basis(ctx)
    experts = [e for e in ROOFLINE_EXPERTS if m.experts_per_token <= e <= m.n_experts]
    rate, bw = rl.eff_c * rl.gpu.peak_flops, rl.eff_m * rl.gpu.bandwidth

    def seconds(tokens: int, e: int) -> float:
        flops = 2.0 * tokens * m.experts_per_token * m.expert_params / tp
        byts = (e * m.expert_params / tp + 2 * tokens * m.experts_per_token * m.hidden) * m.dtype_bytes
        return m.n_moe_layers * (max(flops / rate, byts / bw) + rl.t0)

    curves = [{"tokens": list(TOKEN_GRID), "seconds": monotone([seconds(t, e) for t in TOKEN_GRID])} for e in experts]
    value = {"n_experts": m.n_experts, "experts_per_token": m.experts_per_token, "layers": m.n_moe_layers,
             "experts": experts, "curves": curves}
    return PartResult(value, "roofline", txt + "; grouped expert GEMMs at each number of distinct experts")


CHAIN = (lss_moe, no_experts, roofline_moe)
