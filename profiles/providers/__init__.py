"""Providers of profile parts, one module per concept, and the chains the builder walks.

=================  =====================================================================================
part               chain (first provider with data wins)
=================  =====================================================================================
overhead           llmservingsim (vLLM V1 assumed), rtx4090-transfer, vidur (CPU-overhead table)
dense              llmservingsim, rtx4090-transfer, vidur, aiconfigurator, a100-40gb-transfer,
                   apex_plus, roofline
lm_head            llmservingsim, rtx4090-transfer, aiconfigurator, a100-40gb-transfer, apex_plus, roofline
prefill_attention  llmservingsim, rtx4090-transfer, aiconfigurator, a100-40gb-transfer, v100-calibrated,
                   roofline
decode_attention   same as prefill_attention (one fit gives both)
memory             config (model config + calibrated reserve)
moe                llmservingsim (moe.csv; TP > 1 without its table: TP 1 / tp, estimated); none for dense models
allreduce          llmservingsim (TP > 1 tables time one shard: ring all-reduces from the hardware table);
                   none otherwise
decode_skew        llmservingsim (skew.csv: alpha of skewed decode batches, fitted); none without a skew table
=================  =====================================================================================

Parts are resolved in the order of :data:`CHAINS`; a provider may look at parts resolved before it in
``ctx.done`` (only the lm_head roofline does: it reuses the dense roofline's efficiencies).
"""

from __future__ import annotations

from . import allreduce, attention, dense, experts, lm_head, memory, overhead, skew
from .base import Context, FnProvider, PartResult, Provider, provider, resolve

CHAINS: dict[str, tuple[Provider, ...]] = {
    "overhead": overhead.CHAIN,
    "dense": dense.CHAIN,
    "lm_head": lm_head.CHAIN,
    "prefill_attention": attention.PREFILL_CHAIN,
    "decode_attention": attention.DECODE_CHAIN,
    "memory": memory.CHAIN,
    "moe": experts.CHAIN,
    "allreduce": allreduce.CHAIN,
    "decode_skew": skew.CHAIN,
}

__all__ = ["CHAINS", "Context", "FnProvider", "PartResult", "Provider", "provider", "resolve"]
