"""Quantised checkpoints: fp8 weights, as ``quant_method: fp8`` or as compressed-tensors' 8-bit float groups (how
llm-compressor saves them; vLLM serves both as fp8), are one byte per weight; any other compressed-tensors scheme
is refused in one line naming the key."""

from __future__ import annotations

import json

import pytest

from llmsim.errors import ConfigError
from llmsim.perf.models import from_hf_config

BASE = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
        "intermediate_size": 128, "vocab_size": 1000, "torch_dtype": "bfloat16"}


def compressed(weights: dict | None, **extra) -> dict:
    """A compressed-tensors quantization_config as llm-compressor writes it (FP8-dynamic: channel-wise fp8 weights,
    token-wise dynamic fp8 activations)."""
    group = {"targets": ["Linear"], "weights": weights, "output_activations": None,
             "input_activations": {"dynamic": True, "num_bits": 8, "strategy": "token", "symmetric": True,
                                   "type": "float"}}
    return {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
            "quantization_status": "compressed", "config_groups": {"group_0": group}, **extra}


FP8_WEIGHTS = {"num_bits": 8, "strategy": "channel", "symmetric": True, "type": "float", "dynamic": False}


def write(tmp_path, quant: dict | None, name: str = "config.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps({**BASE, **({"quantization_config": quant} if quant else {})}))
    return str(path)


def test_compressed_tensors_fp8_weights_are_one_byte(tmp_path):
    m = from_hf_config(write(tmp_path, compressed(FP8_WEIGHTS)))
    fp8 = from_hf_config(write(tmp_path, {"quant_method": "fp8"}, "fp8.json"))
    plain = from_hf_config(write(tmp_path, None, "plain.json"))
    # one byte per linear weight; the embeddings and the LM head stay 16-bit, as vLLM loads them
    linear = plain.n_params - plain.vocab_params
    assert m.dtype_bytes == 1 and m.weight_bytes == fp8.weight_bytes == linear + 2 * plain.vocab_params
    assert m.weight_bytes < plain.weight_bytes == 2 * plain.n_params
    assert m.kv_bytes_per_token == plain.kv_bytes_per_token  # vLLM caches K / V in 16 bits


@pytest.mark.parametrize(("quant", "what"), [
    (compressed({**FP8_WEIGHTS, "type": "int"}), "config_groups.group_0.weights: compressed-tensors weights of "
     "type 'int' with num_bits 8 are not modelled"),
    (compressed({**FP8_WEIGHTS, "type": "int", "num_bits": 4}), "type 'int' with num_bits 4"),
    (compressed({**FP8_WEIGHTS, "num_bits": 4}), "type 'float' with num_bits 4"),
    (compressed(None), "config_groups.group_0.weights: compressed-tensors weights of type None"),
    ({"quant_method": "compressed-tensors"}, "quantization_config.config_groups must be a non-empty object"),
    ({"quant_method": "compressed-tensors", "config_groups": {}}, "config_groups must be a non-empty object"),
])
def test_other_compressed_tensors_schemes_are_refused_in_one_line(tmp_path, quant, what):
    path = write(tmp_path, quant)
    with pytest.raises(ConfigError) as e:
        from_hf_config(path)
    msg = str(e.value)
    assert what in msg and path in msg and "\n" not in msg


FP8_KV = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}


def test_a_compressed_tensors_kv_cache_scheme_caches_in_fp8(tmp_path):
    """vLLM's kv_cache_dtype auto caches K / V in fp8 when a compressed-tensors checkpoint declares a
    kv_cache_scheme (with fp8 weights, or alone: a KV-only checkpoint keeps 16-bit weights); null is none."""
    plain = from_hf_config(write(tmp_path, None, "plain.json"))
    both = from_hf_config(write(tmp_path, compressed(FP8_WEIGHTS, kv_cache_scheme=FP8_KV), "both.json"))
    assert both.dtype_bytes == 1 and both.kv_bytes_per_token == plain.kv_bytes_per_token // 2
    kv_only = {"quant_method": "compressed-tensors", "quantization_status": "frozen", "kv_cache_scheme": FP8_KV}
    alone = from_hf_config(write(tmp_path, kv_only, "kv.json"))
    assert alone.weight_bytes == plain.weight_bytes and alone.kv_bytes_per_token == plain.kv_bytes_per_token // 2
    null = from_hf_config(write(tmp_path, compressed(FP8_WEIGHTS, kv_cache_scheme=None), "null.json"))
    assert null.dtype_bytes == 1 and null.kv_bytes_per_token == plain.kv_bytes_per_token


@pytest.mark.parametrize(("scheme", "what"), [
    ({**FP8_KV, "type": "int"}, "kv_cache_scheme: a KV cache of type 'int' with num_bits 8 is not modelled"),
    ({**FP8_KV, "num_bits": 4}, "kv_cache_scheme: a KV cache of type 'float' with num_bits 4 is not modelled"),
    ("fp8", "kv_cache_scheme: a KV cache of 'fp8' is not modelled"),
])
def test_other_kv_cache_schemes_are_refused_in_one_line(tmp_path, scheme, what):
    path = write(tmp_path, compressed(FP8_WEIGHTS, kv_cache_scheme=scheme))
    with pytest.raises(ConfigError) as e:
        from_hf_config(path)
    msg = str(e.value)
    assert what in msg and path in msg and "\n" not in msg


def test_an_fp8_llama_3_1_8b_keeps_16_bit_embeddings(tmp_path):
    """Llama-3.1-8B-Instruct-FP8 (compressed-tensors, lm_head ignored): 6.98B linear weights in one byte and 1.05B
    embedding / LM-head weights in two, 9.08 GB (vLLM reports ~8.5 GiB loaded), not 8.03 GB; the roofline's LM head
    reads its 16-bit vocabulary projection."""
    cfg = {**BASE, "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
           "intermediate_size": 14336, "vocab_size": 128256, "quantization_config": compressed(FP8_WEIGHTS)}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = from_hf_config(str(path))
    assert m.vocab_params == 2 * 128256 * 4096
    assert m.weight_bytes == m.n_params - m.vocab_params + 2 * m.vocab_params
    assert round(m.weight_bytes / 1e9, 2) == 9.08
    assert m.lm_head_bytes == 128256 * 4096 * 2
