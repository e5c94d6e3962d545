"""Multi-head latent attention in the roofline: a prefill (vLLM's decompressed form) multiplies queries by keys of
``qk_nope_head_dim + qk_rope_head_dim`` and weights values of ``v_head_dim``, not ``head_dim`` twice."""

from __future__ import annotations

import pytest

from llmsim.perf.hardware import get_gpu
from llmsim.perf.models import from_hf_config, get_model
from llmsim.perf.profile import RooflineProfile
from tests.perf.helpers import tiny


def prefill_attention_s(prof: RooflineProfile, chunk: int) -> float:
    """The causal attention of one prefill chunk alone (the same step without it costs the rest)."""
    return prof.step_time(chunk, 1, chunk ** 2, 0, 0, 0) - prof.step_time(chunk, 1, 0, 0, 0, 0)


def test_latent_attention_prefill_counts_the_rope_and_value_dims():
    m = from_hf_config(tiny("tiny-deepseek-v2-mla"))
    assert (m.head_dim, m.qk_rope_head_dim, m.v_head_dim) == (8, 4, 8)
    prof = RooflineProfile(m, get_gpu("h100"))
    per_pair = 2 * m.n_heads * ((8 + 4) + 8)  # QK^T over 12 dims, PV over 8, 2 FLOPs per MAC
    expected = m.n_layers * per_pair * 0.5 * 512 ** 2 / (prof.eff_prefill_attn * prof.gpu.peak_flops)
    assert prefill_attention_s(prof, 512) == pytest.approx(expected, rel=1e-9)


def test_grouped_query_attention_prefill_is_unchanged():
    m = get_model("llama-3.1-8b")
    prof = RooflineProfile(m, get_gpu("h100"), tp=2)
    expected = 4 * m.n_layers * (m.n_heads / 2) * m.head_dim * 0.5 * 512 ** 2 / (
        prof.eff_prefill_attn * prof.gpu.peak_flops)
    assert prefill_attention_s(prof, 512) == pytest.approx(expected, rel=1e-9)
