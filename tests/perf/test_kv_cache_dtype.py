"""fp8 KV cache (llmsim.perf.kv_cache_dtype): twice the tokens in the KV budget, half the bytes decode attention
reads, prefill untouched; a measured profile says its decode attention and memory are then estimated."""

from __future__ import annotations

import json
import warnings

import pytest

from llmsim.cluster.config import instances_from_config
from llmsim.errors import ConfigError, ProfileError
from llmsim.perf.kv_cache_dtype import kv_value_bytes, model_with_kv_cache_dtype
from llmsim.perf.models import get_model
from llmsim.perf.profile import load_profile

DECODE = (64, 64, 0, 0, 64, 64 * 8192)  # 64 decodes at 8,192 tokens of context: KV reads dominate
PREFILL = (2048, 1, 2048 * 2048, 0, 0, 0)


def test_fp8_halves_the_kv_bytes_per_token() -> None:
    m = get_model("llama-3.1-8b")
    assert model_with_kv_cache_dtype(m, "fp8").kv_bytes_per_token * 2 == m.kv_bytes_per_token
    assert model_with_kv_cache_dtype(m, "auto") is m
    assert kv_value_bytes("fp8_e4m3") == 1 and kv_value_bytes("auto") is None
    with pytest.raises(ConfigError, match="kv_cache_dtype must be one of"):
        kv_value_bytes("int3")
    with pytest.raises(ProfileError, match="kv_cache_dtype"):
        load_profile("llama-3.1-8b", "a100-80gb", kv_cache_dtype="int3")


@pytest.mark.parametrize("kind", ["roofline", "measured"])
def test_fp8_kv_doubles_capacity_and_cheapens_decode(kind: str) -> None:
    bf16 = load_profile("llama-3.1-8b", "rtx-pro-6000", kind=kind)
    fp8 = load_profile("llama-3.1-8b", "rtx-pro-6000", kind=kind, kv_cache_dtype="fp8")
    assert fp8.model.kv_bytes_per_token * 2 == bf16.model.kv_bytes_per_token  # the engine's KV blocks follow
    assert abs(fp8.kv_capacity_tokens(0.9) - 2 * bf16.kv_capacity_tokens(0.9)) <= 2
    assert fp8.step_time(*DECODE) < 0.9 * bf16.step_time(*DECODE)
    assert fp8.step_time(*PREFILL) == pytest.approx(bf16.step_time(*PREFILL))
    assert load_profile("llama-3.1-8b", "rtx-pro-6000", kind=kind, kv_cache_dtype="bfloat16") is not None


def test_measured_profile_names_fp8_parts_as_estimated() -> None:
    bf16 = load_profile("llama-3.1-8b", "rtx-pro-6000", kind="measured")
    fp8 = load_profile("llama-3.1-8b", "rtx-pro-6000", kind="measured", kv_cache_dtype="fp8")
    assert bf16.parts["decode_attention"] == "measured" and not bf16.estimated
    d = fp8.describe()
    assert fp8.parts["decode_attention"] == "estimated" and fp8.parts["memory"] == "estimated"
    assert fp8.parts["prefill_attention"] == "measured" and fp8.estimated
    assert {"decode_attention", "memory"} <= set(d["estimated_parts"])
    assert "fp8" in d["part_sources"]["decode_attention"]
    # the per-context-token cost is halved, the per-sequence and fixed costs are not
    assert fp8.data["decode_attention"]["per_ctx_token"] * 2 == pytest.approx(
        bf16.data["decode_attention"]["per_ctx_token"])
    assert fp8.data["decode_attention"]["per_seq"] == bf16.data["decode_attention"]["per_seq"]
    assert bf16.data["parts"]["decode_attention"]["status"] == "measured"  # the loaded document is not changed


def test_a_cluster_config_takes_kv_cache_dtype() -> None:
    entry = {"model": "llama-3.1-8b", "gpu": "rtx-pro-6000"}
    auto, fp8 = (instances_from_config({"instances": [dict(entry, **kw)]})[0].build_profile()
                 for kw in ({}, {"kv_cache_dtype": "fp8"}))
    assert fp8.model.kv_bytes_per_token * 2 == auto.model.kv_bytes_per_token
    with pytest.raises(ConfigError, match="kv_cache_dtype"):
        instances_from_config({"instances": [dict(entry, kv_cache_dtype="int3")]})


def test_a_checkpoints_fp8_kv_cache_is_priced_like_kv_cache_dtype_fp8(tmp_path) -> None:
    """A Llama-3.1-8B checkpoint whose compressed-tensors config declares an fp8 kv_cache_scheme (16-bit weights)
    is priced by Llama-3.1-8B's measured profile with an fp8 cache, as the registered model with kv_cache_dtype fp8,
    without a warning that no profile applies; an explicit bfloat16 cache is the registered model's."""
    cfg = {"_name_or_path": "meta-llama/Llama-3.1-8B", "model_type": "llama", "hidden_size": 4096,
           "intermediate_size": 14336, "max_position_embeddings": 131072, "num_attention_heads": 32,
           "num_hidden_layers": 32, "num_key_value_heads": 8, "torch_dtype": "bfloat16", "vocab_size": 128256,
           "quantization_config": {"quant_method": "compressed-tensors", "kv_cache_scheme": {
               "type": "float", "num_bits": 8, "strategy": "tensor", "symmetric": True, "dynamic": False}}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ckpt = load_profile(str(path), "a100-80gb", kind="measured")
    fp8 = load_profile("llama-3.1-8b", "a100-80gb", kind="measured", kv_cache_dtype="fp8")
    assert ckpt.describe()["kind"] == "measured" and ckpt.model.kv_bytes_per_token == fp8.model.kv_bytes_per_token
    assert ckpt.step_time(*DECODE) == fp8.step_time(*DECODE)
    assert ckpt.kv_capacity_tokens(0.9) == fp8.kv_capacity_tokens(0.9)
    bf16 = load_profile(str(path), "a100-80gb", kind="measured", kv_cache_dtype="bfloat16")
    assert bf16.kv_capacity_tokens(0.9) == load_profile("llama-3.1-8b", "a100-80gb").kv_capacity_tokens(0.9)
