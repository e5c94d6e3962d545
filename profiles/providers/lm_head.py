"""lm_head providers: the lm_head GEMM plus the sampler versus sequences with logits (on SEQ_GRID).

Chain, best first: LLMServingSim per_sequence.csv (RTX 4090, RTX PRO 6000), the RTX 4090 transfer,
AIConfigurator GEMMs, the A100-80GB -> 40GB transfer, APEX+ GEMMs (V100), a calibrated roofline. The GEMM-based
tables add the sampler measured by vidur (A40 host).
"""

from __future__ import annotations

from llmsim.perf.models import get_model

from .base import Context, PartResult, provider
from .fits import (
    SEQ_GRID,
    Roofline,
    a100_40_transfer,
    efficiencies,
    lss_data,
    lss_lm_head,
    lss_own,
    mean_efficiency,
    roofline_basis,
)
from .overhead import vidur_cpu
from .raw import AIC_SYSTEMS, LSS_MODEL, lss_measured, lss_source, lss_table_model


def lm_gemm(ctx: Context, gemm_fn) -> list[float]:
    """lm_head GEMM (m=seqs, n=vocab/tp, k=hidden) + vidur's sampler, on SEQ_GRID."""
    m, tp = ctx.model, ctx.tp
    _, sampler = vidur_cpu(ctx)
    return [gemm_fn(s, m.vocab / tp, m.hidden) + sampler[i] for i, s in enumerate(SEQ_GRID)]


@provider("llmservingsim")
def lss_lm_head_part(ctx: Context) -> PartResult | None:
    if not lss_measured(ctx.gpu, ctx.model.name, ctx.tp):
        return None
    _, _, ps = lss_own(ctx)
    lm_head = lss_lm_head(ps)
    r = ctx.model.vocab / get_model(lss_table_model(ctx.model.name)).vocab
    if r != 1:
        lm_head = [v * r for v in lm_head]
    status = "measured" if r == 1 else "transferred"
    src = lss_source(ctx.gpu, ctx.model.name, ctx.tp) + " per_sequence.csv lm_head + sampler"
    return PartResult(lm_head, status, src, frozenset({"llmservingsim"}))


@provider("rtx4090-transfer")
def rtx4090_lm_head(ctx: Context) -> PartResult | None:
    if ctx.gpu != "rtx4090":
        return None
    m, ref = ctx.model, get_model(LSS_MODEL)
    _, _, ps = lss_data(ctx, "RTX4090")
    lm_head = [v * m.vocab / ref.vocab * m.hidden / ref.hidden for v in lss_lm_head(ps)]
    src = "LLMServingSim RTX4090 lm_head+sampler scaled by vocab x hidden"
    return PartResult(lm_head, "transferred", src, frozenset({"llmservingsim"}))


@provider("aiconfigurator")
def aic_lm_head(ctx: Context) -> PartResult | None:
    if ctx.gpu not in AIC_SYSTEMS:
        return None
    src = "aiconfigurator GEMM m=seqs, n=vocab, k=hidden; sampler from vidur cpu_overheads (A40 host)"
    return PartResult(lm_gemm(ctx, ctx.raw.aic_gemm(ctx.gpu)), "measured", src, frozenset({"aiconfigurator"}))


@provider("a100-40gb-transfer")
def a100_40_lm_head(ctx: Context) -> PartResult | None:
    tr = a100_40_transfer(ctx)
    if tr is None:
        return None
    src80, _, src = tr
    return PartResult(src80.lm_head, "transferred", src, frozenset(src80.sources))


@provider("apex_plus")
def v100_lm_head(ctx: Context) -> PartResult | None:
    if ctx.gpu not in ("v100-16gb", "v100-32gb"):
        return None
    src = "apex_plus GEMM m=vocab, k=hidden, n=seqs; sampler from vidur"
    return PartResult(lm_gemm(ctx, ctx.raw.apex_gemm()), "measured", src, frozenset({"apex_plus"}))


@provider("roofline")
def roofline_lm_head(ctx: Context) -> PartResult:
    """Roofline GEMM: with the dense part's roofline when that is estimated too, else A100/L40S efficiencies."""
    dense = ctx.done.get("dense")
    if dense is not None and dense.provider == "roofline":
        rl, txt = roofline_basis(ctx)
        return PartResult(lm_gemm(ctx, rl.gemm), "estimated", txt + "; sampler from vidur")
    e = mean_efficiency(efficiencies(ctx))
    src = f"roofline GEMM (eff {e['eff_c']:.2f}/{e['eff_m']:.2f} from A100, L40S); sampler from vidur"
    return PartResult(lm_gemm(ctx, Roofline(ctx.spec, e["eff_c"], e["eff_m"]).gemm), "estimated", src)


CHAIN = (lss_lm_head_part, rtx4090_lm_head, aic_lm_head, a100_40_lm_head, v100_lm_head, roofline_lm_head)
