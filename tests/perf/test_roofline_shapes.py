"""The roofline follows a config's shapes: multi-head latent attention's prefill multiplies queries by keys of
``qk_nope_head_dim + qk_rope_head_dim`` and weights values of ``v_head_dim``; fp8 weights move 16-bit activations."""

from __future__ import annotations

import json

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


def test_fp8_weights_all_reduce_sixteen_bit_activations(tmp_path):
    """fp8 weights halve the weights read, not the activations the tensor-parallel all-reduces move (vLLM's
    hidden states stay 16-bit): compute-bound, an fp8 step over TP costs what the 16-bit one does."""
    base = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
            "intermediate_size": 128, "vocab_size": 1000}
    plain, fp8 = tmp_path / "plain.json", tmp_path / "fp8.json"
    plain.write_text(json.dumps(base))
    fp8.write_text(json.dumps({**base, "quantization_config": {"quant_method": "fp8"}}))
    g = get_gpu("h100")
    one, other = (RooflineProfile(from_hf_config(str(p)), g, tp=2) for p in (plain, fp8))
    assert other.model.dtype_bytes == 1
    step = (1 << 20, 4096, 0, 0, 0, 0)  # a million tokens, 4,096 logits: every GEMM compute-bound
    assert other.step_time(*step) == pytest.approx(one.step_time(*step), rel=1e-12)
