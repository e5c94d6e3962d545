"""Hugging Face config.json -> ModelSpec: parameters, KV bytes and MoE shapes, checked by hand and against the
published sizes; what cannot be modelled is refused in one line naming the file and what is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmsim.errors import ConfigError
from llmsim.perf.models import from_hf_config, get_model
from tests.perf.helpers import REAL_CONFIGS, needs_real_configs, tiny

# (file under configs/model, published total parameters in billions, published active, registered name)
PUBLISHED = [
    ("meta-llama/Llama-3.1-8B.json", 8.0, 8.0, "llama-3.1-8b"),
    ("meta-llama/Llama-3.1-70B.json", 70.6, 70.6, "llama-3.1-70b"),
    ("Qwen/Qwen3-32B.json", 32.8, 32.8, "qwen3-32b"),
    ("Qwen/Qwen3-30B-A3B-Instruct-2507.json", 30.5, 3.3, "qwen3-30b-a3b"),
    ("mistralai/Mixtral-8x7B-v0.1.json", 46.7, 12.9, "mixtral-8x7b"),
    ("microsoft/Phi-mini-MoE-instruct.json", 7.6, 2.4, "phi-mini-moe"),
]


@needs_real_configs
@pytest.mark.parametrize(("path", "total", "active", "registered"), PUBLISHED)
def test_real_configs_have_the_published_sizes(path, total, active, registered):
    m = from_hf_config(str(REAL_CONFIGS / path))
    assert m.n_params / 1e9 == pytest.approx(total, abs=0.06)
    assert m.active_params / 1e9 == pytest.approx(active, abs=0.06)
    assert m.is_moe == (total != active)
    reg = get_model(registered)  # the registry's literal entry describes the same model
    assert (reg.n_params, reg.active_params, reg.kv_bytes_per_token) == (m.n_params, m.active_params,
                                                                         m.kv_bytes_per_token)
    assert get_model(str(REAL_CONFIGS / path)) is reg  # a config of a registered model resolves to it


@needs_real_configs
def test_qwen3_moe_is_not_a_dense_model():
    m = from_hf_config(str(REAL_CONFIGS / "Qwen/Qwen3-30B-A3B-Instruct-2507.json"))
    assert (m.n_experts, m.experts_per_token, m.moe_intermediate, m.n_moe_layers) == (128, 8, 768, 48)
    assert m.kv_bytes_per_token == 2 * 48 * 4 * 128 * 2  # GQA: 4 KV heads of 128


def test_dense_llama_gqa_head_dim_and_tied_embeddings():
    m = from_hf_config(tiny("tiny-llama"))
    assert (m.name, m.q_dim, m.kv_dim, m.tied_embeddings) == ("tiny-llama", 128, 64, True)
    attention = 64 * (128 + 2 * 64) + 128 * 64
    mlp = 3 * 64 * 128
    assert m.n_params == 2 * (attention + mlp) + 1000 * 64 == 162304
    assert m.active_params == m.n_params
    assert m.kv_bytes_per_token == 2 * 2 * 64 * 2


def test_sliding_window_is_read_and_switched_off_by_use_sliding_window(tmp_path):
    assert from_hf_config(tiny("tiny-mistral-window")).sliding_window == 256
    assert from_hf_config(tiny("tiny-qwen3-moe")).sliding_window == 0  # use_sliding_window: false


@pytest.mark.parametrize(("extra", "every_layer"), [
    ({}, True),  # Mistral-7B v0.1: the window on every layer
    ({"layer_types": ["sliding_attention"] * 2}, True),
    ({"layer_types": ["sliding_attention", "full_attention"]}, False),
    ({"model_type": "gemma2"}, False),  # alternates whatever else the config says
    ({"sliding_window_pattern": 6}, False),  # Gemma-3: five windowed layers to one full
    ({"use_sliding_window": True, "max_window_layers": 1}, False),  # Qwen2: layers from 1 on use the window
    ({"use_sliding_window": True, "max_window_layers": 0}, True),
])
def test_a_window_on_only_some_layers_is_marked(tmp_path, extra, every_layer):
    cfg = {**json.loads(Path(tiny("tiny-mistral-window")).read_text()), **extra}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = from_hf_config(str(path))
    assert (m.sliding_window, m.window_every_layer) == (256, every_layer)


def test_qwen3_moe_counts_every_expert_in_total_and_top_k_in_active():
    m = from_hf_config(tiny("tiny-qwen3-moe"))
    attention, expert, router = 64 * (64 + 64) + 64 * 64, 3 * 64 * 32, 64 * 16
    assert m.n_params == 4 * (attention + 16 * expert + router) + 2 * 1000 * 64 == 574464
    assert m.active_params == 4 * (attention + 4 * expert + router) + 2 * 1000 * 64 == 279552
    assert m.layer_linear_params * 4 == pytest.approx(m.active_params - 128000, abs=4)


def test_deepseek_style_shared_experts_and_first_dense_layers():
    m = from_hf_config(tiny("tiny-deepseek-moe"))
    assert (m.n_moe_layers, m.n_dense_layers, m.n_shared_experts) == (3, 1, 2)
    attention, dense_mlp, expert, shared, router = 16384, 3 * 64 * 256, 3 * 64 * 32, 3 * 64 * 64, 64 * 8
    assert m.n_params == 4 * attention + dense_mlp + 3 * (8 * expert + shared + router) + 128000 == 428544
    assert m.active_params == 4 * attention + dense_mlp + 3 * (2 * expert + shared + router) + 128000 == 317952


def test_latent_attention_caches_one_latent_per_layer():
    m = from_hf_config(tiny("tiny-deepseek-v2-mla"))
    q, kv_down, kv_up, o = 64 * 4 * (8 + 4), 64 * (16 + 4), 16 * 4 * (8 + 8), 4 * 8 * 64
    assert m.attention_params == q + kv_down + kv_up + o == 7424
    assert m.kv_bytes_per_token == 2 * (16 + 4) * 2  # layers x (latent + rope key) x bf16, no separate V
    assert m.n_params == 2 * 7424 + 3 * 64 * 128 + (4 + 1) * 3 * 64 * 16 + 64 * 4 + 2 * 100 * 64 == 67840
    assert m.active_params == 2 * 7424 + 3 * 64 * 128 + (2 + 1) * 3 * 64 * 16 + 64 * 4 + 2 * 100 * 64 == 61696


def test_qwen2_moe_shared_expert_width():
    m = from_hf_config(tiny("tiny-qwen2-moe"))
    assert m.shared_expert_params == 3 * 64 * 128
    assert m.active_params == 2 * (16384 + 2 * 6144 + 24576 + 512) + 128000 == 235520


def test_registered_dense_models_are_unchanged_by_the_moe_fields():
    for name in ("llama-2-7b", "opt-125m", "qwen2.5-3b", "mpt-7b"):
        m = get_model(name)
        assert not m.is_moe and m.active_params == m.n_params and m.n_moe_layers == 0
    layer = 4096 * 3 * 4096 + 4096 * 4096 + 3 * 4096 * 11008  # MHA QKV, O, gated MLP
    assert get_model("llama-2-7b").n_params == 32 * layer + 2 * 32000 * 4096


def write(tmp_path, cfg: dict, name: str = "config.json") -> str:
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return str(p)


BASE = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
        "intermediate_size": 128, "vocab_size": 1000}
REFUSED = [
    ({**BASE, "model_type": "mamba"}, "unknown model_type 'mamba'"),
    ({**BASE, "model_type": "t5", "is_encoder_decoder": True}, "encoder-decoder"),
    ({**BASE, "model_type": "deepseek_v3", "kv_lora_rank": 512}, "multi-head latent attention without "
     "qk_nope_head_dim, qk_rope_head_dim, v_head_dim"),
    ({k: v for k, v in BASE.items() if k != "num_hidden_layers"}, "missing key num_hidden_layers"),
    ({k: v for k, v in BASE.items() if k != "model_type"}, "missing key model_type"),
    ({**BASE, "num_local_experts": 8}, "dense but the config has experts"),
    ({**BASE, "model_type": "llava", "text_config": {}}, "multimodal"),
    ({**BASE, "quantization_config": {"quant_method": "gptq"}}, "quantised weights (gptq)"),
    ({**BASE, "model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2}, "missing key "
     "moe_intermediate_size"),
    ({**BASE, "model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
      "mlp_only_layers": [0]}, "mlp_only_layers"),
    ({**BASE, "hidden_size": -4}, "hidden_size must be a positive number"),
]


@pytest.mark.parametrize(("cfg", "what"), REFUSED)
def test_what_cannot_be_modelled_is_refused_in_one_line(tmp_path, cfg, what):
    path = write(tmp_path, cfg)
    with pytest.raises(ConfigError) as e:
        from_hf_config(path)
    msg = str(e.value)
    assert what in msg and path in msg and "\n" not in msg


def test_unreadable_files_name_the_file(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    for path in (str(bad), str(tmp_path / "missing.json")):
        with pytest.raises(ConfigError, match="HF config .*(not JSON|no such file)"):
            from_hf_config(path)


def test_fp8_weights_are_one_byte_and_their_kv_cache_sixteen_bits(tmp_path):
    m = from_hf_config(write(tmp_path, {**BASE, "quantization_config": {"quant_method": "fp8"}}))
    plain = from_hf_config(write(tmp_path, BASE, "plain.json"))
    # the linear layers in one byte; the embeddings and the LM head stay 16-bit (vLLM's fp8 covers linear layers)
    assert m.weight_bytes == plain.n_params - plain.vocab_params + 2 * plain.vocab_params < plain.weight_bytes
    assert m.kv_bytes_per_token == plain.kv_bytes_per_token


def test_a_file_far_larger_than_a_config_is_refused_unread(tmp_path):
    """A model served from one file (``vllm serve /models/llama.gguf``) is named by its path: a router pricing
    the backend by that name read gigabytes at every decision (24 s and 6 GB of memory for 3 GB) to say
    'not JSON'."""
    big = tmp_path / "llama.gguf"
    with big.open("wb") as f:
        f.truncate(3 * 2**30)  # sparse: no disk used
    with pytest.raises(ConfigError, match=r"llama.gguf: 3072 MiB, not a config.json \(expected a JSON file of "
                                          r"at most 16 MiB\)"):
        get_model(str(big))
