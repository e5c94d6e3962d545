"""Tensor-parallel all-reduce providers (the ``allreduce`` part, on the dense part's token grid).

LLMServingSim's TP 2 tables time one GPU's shard of every operator and no collective: its model catalogs say the
simulator attaches the all-reduces after ``o_proj`` and ``down_proj`` itself, and the tables agree (at TP 2,
``o_proj`` and ``down_proj`` take half their TP 1 time at every size: an all-reduce of 2,048 x 5,120 bf16 over
PCIe alone would take longer than the whole TP 2 ``o_proj``). So a profile from those tables adds two ring
all-reduces of ``tokens x hidden`` activations per layer from the hardware table
(:func:`llmsim.perf.parallel.allreduce_s`), marked estimated. Tables that include the collective (vidur's TP
tables add their measured all-reduce to the dense part) or TP 1 profiles have no ``allreduce`` part.
"""

from __future__ import annotations

from llmsim.perf.parallel import ALLREDUCES_PER_LAYER, allreduce_s

from .base import Context, PartResult, provider
from .fits import TOKEN_GRID
from .raw import lss_measured


def allreduce_curve(ctx: Context) -> list[float]:
    """Seconds of every layer's all-reduces for each token count of TOKEN_GRID."""
    m, g = ctx.model, ctx.spec
    per = ALLREDUCES_PER_LAYER * m.n_layers
    return [per * allreduce_s(t * m.hidden * m.dtype_bytes, ctx.tp, g) for t in TOKEN_GRID]


@provider("llmservingsim")
def lss_allreduce(ctx: Context) -> PartResult | None:
    """The all-reduces the LLMServingSim TP > 1 tables leave out."""
    if ctx.tp == 1 or not lss_measured(ctx.gpu, ctx.model.name, ctx.tp):
        return None
    g = ctx.spec
    src = (f"not in the LLMServingSim tp{ctx.tp} tables (one GPU's shard, no collective): {ALLREDUCES_PER_LAYER} ring "
           f"all-reduces of tokens x hidden bf16 per layer over {g.interconnect or 'the link'} "
           f"({g.interconnect_bw / 1e9:g} GB/s per direction, {g.interconnect_latency_s * 1e6:g} us each; "
           "llmsim.perf.parallel.allreduce_s, hardware table)")
    return PartResult(allreduce_curve(ctx), "estimated", src)


@provider("in-dense-or-tp1")
def no_allreduce(ctx: Context) -> PartResult:
    """TP 1, or tables that already hold the collective: no separate part."""
    return PartResult(None, "measured", "no separate all-reduce")


CHAIN = (lss_allreduce, no_allreduce)
