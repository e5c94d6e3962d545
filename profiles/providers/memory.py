"""Memory provider: weight and KV bytes from the model config, and the KV-pool reserve.

KV-capacity reserve: vLLM's profile run keeps peak activations + non-torch memory out of the KV pool.
reserved = RESERVE_BASE + activations(max_num_batched_tokens=2048 tokens) + logits(256 seqs).
RESERVE_BASE is calibrated so that the RTX 4090 Llama-3.1-8B anchor (41,408 tokens at 0.9) is exact.
"""

from __future__ import annotations

from functools import lru_cache

from llmsim.perf.hardware import get_gpu
from llmsim.perf.models import ModelSpec, get_model

from .base import Context, PartResult, provider

RTX4090_ANCHOR_TOKENS = 41_408
ACT_TOKENS = 2048
LOGIT_SEQS = 256


def activation_bytes(m: ModelSpec, tp: int) -> float:
    inter = (2 if m.gated_mlp else 1) * m.intermediate / tp
    per_tok = (inter + m.intermediate / tp + 4 * m.hidden + (m.q_dim + 2 * m.kv_dim) / tp) * m.dtype_bytes
    return ACT_TOKENS * per_tok + LOGIT_SEQS * m.vocab / tp * 4 * 2


@lru_cache(maxsize=1)
def reserve_base() -> float:
    m, g = get_model("llama-3.1-8b"), get_gpu("rtx4090")
    free = RTX4090_ANCHOR_TOKENS * m.kv_bytes_per_token
    return 0.9 * g.memory_bytes - m.weight_bytes - free - activation_bytes(m, 1)


def reserved_bytes(m: ModelSpec, tp: int) -> float:
    return reserve_base() + activation_bytes(m, tp) + (3.5e8 if tp > 1 else 0.0)


def memory_values(m: ModelSpec, tp: int) -> dict[str, int]:
    """The ``memory`` section of a profile."""
    return {
        "weight_bytes": int(m.weight_bytes),
        "kv_bytes_per_token": int(m.kv_bytes_per_token),
        "reserved_bytes": int(round(reserved_bytes(m, tp), -5)),
    }


@provider("config")
def config_memory(ctx: Context) -> PartResult:
    return PartResult(
        memory_values(ctx.model, ctx.tp),
        "estimated",
        "weights and KV bytes from the model config; reserve = "
        f"{reserve_base() / 1e9:.3f} GB base (calibrated on the RTX 4090 Llama-3.1-8B anchor) + "
        "activations of 2048 tokens + fp32 logits of 256 sequences",
    )


CHAIN = (config_memory,)
