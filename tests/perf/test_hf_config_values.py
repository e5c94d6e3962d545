"""A config.json whose values have the wrong type or range is refused in one line naming the file and the key (never
a raw traceback, never a silent truncation or a negative size); a window that no layer uses is no window."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from llmsim.errors import ConfigError
from llmsim.perf.models import from_hf_config

BASE = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
        "intermediate_size": 128, "vocab_size": 1000}
DEEPSEEK = {**BASE, "model_type": "deepseek", "n_routed_experts": 8, "num_experts_per_tok": 2,
            "moe_intermediate_size": 32, "n_shared_experts": 2, "first_k_dense_replace": 1}
QWEN3_MOE = {**BASE, "model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2,
             "moe_intermediate_size": 32}


def write(tmp_path: Path, cfg: dict, name: str = "config.json") -> str:
    p = tmp_path / name
    p.write_text(json.dumps(cfg))  # NaN / Infinity are written as JSON's extension, which Python's reader takes
    return str(p)


BAD_VALUES = [
    ({**BASE, "head_dim": "abc"}, "head_dim"),
    ({**BASE, "head_dim": -16}, "head_dim"),
    ({**BASE, "model_type": "mistral", "sliding_window": "big"}, "sliding_window"),
    ({**BASE, "model_type": "mistral", "sliding_window": -5}, "sliding_window"),
    ({**BASE, "model_type": "mpt", "expansion_ratio": "four"}, "expansion_ratio"),
    ({**BASE, "hidden_size": math.nan}, "hidden_size"),
    ({**BASE, "intermediate_size": math.inf}, "intermediate_size"),
    ({**BASE, "num_hidden_layers": 2.5}, "num_hidden_layers"),
    ({**DEEPSEEK, "n_shared_experts": "two"}, "n_shared_experts"),
    ({**DEEPSEEK, "first_k_dense_replace": [1]}, "first_k_dense_replace"),
    ({**QWEN3_MOE, "num_experts_per_tok": 2.5}, "num_experts_per_tok"),
    ({**QWEN3_MOE, "decoder_sparse_step": -1}, "decoder_sparse_step"),
    ({**BASE, "model_type": "deepseek_v2", "n_routed_experts": 8, "num_experts_per_tok": 2,
      "moe_intermediate_size": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
      "v_head_dim": 8, "q_lora_rank": "x"}, "q_lora_rank"),
    ({**BASE, "quantization_config": "gptq"}, "quantization_config"),
    ({**BASE, "num_key_value_heads": 8}, "num_key_value_heads"),  # more KV heads than attention heads
    ({**BASE, "num_key_value_heads": 3}, "num_key_value_heads"),  # 4 heads do not group over 3
    ({**DEEPSEEK, "first_k_dense_replace": 2}, "first_k_dense_replace"),  # every layer dense: no MoE layer left
    # sizes no model has: their products overflowed a float into a traceback (a 400-digit integer, already here)
    ({**BASE, "hidden_size": 1e308}, "hidden_size must be a positive number (whole) below 2**53"),
    ({**BASE, "hidden_size": 10 ** 400}, "hidden_size must be a positive number (whole) below 2**53"),
    ({**BASE, "model_type": "opt", "word_embed_proj_dim": 2 ** 60}, "word_embed_proj_dim"),
]


@pytest.mark.parametrize(("cfg", "key"), BAD_VALUES)
def test_a_bad_value_is_refused_naming_the_file_and_the_key(tmp_path, cfg, key):
    path = write(tmp_path, cfg)
    with pytest.raises(ConfigError) as e:
        from_hf_config(path)
    msg = str(e.value)
    assert key in msg and path in msg and "\n" not in msg


def test_integral_floats_are_sizes(tmp_path):
    m = from_hf_config(write(tmp_path, {**BASE, "hidden_size": 64.0, "head_dim": 16.0}))
    assert (m.hidden, m.head_dim) == (64, 16)


@pytest.mark.parametrize("extra", [
    {"use_sliding_window": True, "max_window_layers": 2},  # Qwen2: only layers from 2 on, and there are 2
    {"layer_types": ["full_attention", "full_attention"]},
])
def test_a_window_no_layer_uses_is_no_window(tmp_path, extra):
    m = from_hf_config(write(tmp_path, {**BASE, "model_type": "qwen2", "sliding_window": 256, **extra}))
    assert (m.sliding_window, m.window_every_layer) == (0, True)


def test_a_file_that_is_not_utf8_is_named_once(tmp_path):
    p = tmp_path / "config.json"
    p.write_bytes(b"\xff\xfe{}")
    with pytest.raises(ConfigError) as e:
        from_hf_config(str(p))
    msg = str(e.value)
    assert "not UTF-8" in msg and msg.count(str(p)) == 1 and "not JSON" not in msg


@pytest.mark.parametrize(("extra", "positions"), [
    ({}, 32768),
    ({"rope_scaling": None}, 32768),
    # Qwen2.5's long-context recipe: YaRN x4 over the original 32,768 positions (vLLM derives 131,072)
    ({"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}, 131072),
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, 65536),
    ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, 65536),
    # Llama-3.1 and Phi-3-128k already state their extended length
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}}, 32768),
    ({"rope_scaling": {"type": "longrope", "long_factor": [1.0], "short_factor": [1.0]}}, 32768),
])
def test_the_context_length_follows_rope_scaling_as_vllm_derives_it(tmp_path, extra, positions):
    m = from_hf_config(write(tmp_path, {**BASE, "model_type": "qwen2", "max_position_embeddings": 32768, **extra}))
    assert m.max_position == positions


@pytest.mark.parametrize("rope", ["yarn", {"type": "yarn", "factor": "four"}, {"rope_type": "yarn", "factor": 4}])
def test_a_bad_rope_scaling_is_one_line(tmp_path, rope):
    path = write(tmp_path, {**BASE, "max_position_embeddings": 4096, "rope_scaling": rope})
    with pytest.raises(ConfigError) as e:
        from_hf_config(path)
    msg = str(e.value)
    assert "rope_scaling" in msg and path in msg and "\n" not in msg


def test_a_folder_named_config_json_is_named_as_a_folder(tmp_path):
    (tmp_path / "config.json").mkdir()
    with pytest.raises(ConfigError, match="is a folder without a config.json file"):
        from_hf_config(str(tmp_path / "config.json"))


def test_moe_layer_frequency_follows_each_family(tmp_path):
    """DeepSeek puts experts on layers i >= first_k_dense_replace with i % moe_layer_freq == 0; Qwen's MoE on
    layers with (i + 1) % decoder_sparse_step == 0: over 5 layers at 2, three MoE layers (0, 2, 4) vs two (1, 3)."""
    deepseek = from_hf_config(write(tmp_path, {**DEEPSEEK, "num_hidden_layers": 5, "first_k_dense_replace": 0,
                                               "moe_layer_freq": 2}, "deepseek.json"))
    qwen = from_hf_config(write(tmp_path, {**QWEN3_MOE, "num_hidden_layers": 5, "decoder_sparse_step": 2},
                                "qwen.json"))
    assert (deepseek.n_moe_layers, qwen.n_moe_layers) == (3, 2)


@pytest.mark.parametrize("key", ["tie_word_embeddings", "use_sliding_window", "multi_query_attention",
                                 "is_encoder_decoder", "attention_bias"])
def test_a_switch_that_is_not_true_or_false_is_refused(tmp_path, key):
    """``"false"`` is not false: read as truthy it would tie the embeddings (or turn on a window) silently."""
    path = write(tmp_path, {**BASE, "model_type": "mistral", "sliding_window": 256, key: "false"})
    with pytest.raises(ConfigError) as e:
        from_hf_config(path)
    msg = str(e.value)
    assert f"{key} must be true or false" in msg and path in msg and "\n" not in msg


@pytest.mark.parametrize("saved_as", ["./", ".", "/", "", "..", 7])
def test_a_name_or_path_without_a_name_falls_back_to_the_file(tmp_path, saved_as):
    (tmp_path / "my-model").mkdir()
    m = from_hf_config(write(tmp_path / "my-model", {**BASE, "_name_or_path": saved_as}))
    assert m.name == "my-model"


def test_a_config_json_in_the_working_folder_is_named_after_the_folder(tmp_path, monkeypatch):
    (tmp_path / "my-model").mkdir()
    write(tmp_path / "my-model", BASE)
    monkeypatch.chdir(tmp_path / "my-model")
    assert from_hf_config("config.json").name == "my-model"


OPT_350M = {"_name_or_path": "facebook/opt-350m", "model_type": "opt", "hidden_size": 1024, "ffn_dim": 4096,
            "num_attention_heads": 16, "num_hidden_layers": 24, "vocab_size": 50272, "max_position_embeddings": 2048,
            "torch_dtype": "float16", "word_embed_proj_dim": 512, "do_layer_norm_before": False}


def test_opt_350m_narrow_embeddings_and_their_projections_are_modelled(tmp_path):
    """OPT-350m's embeddings are 512 wide (word_embed_proj_dim) with project_in / project_out to its hidden 1024:
    331M parameters published (328.8M here, without positions, norms and biases), not 353M of 1024-wide
    embeddings; its LM head reads project_out and a 512-wide vocabulary projection."""
    m = from_hf_config(write(tmp_path, OPT_350M))
    assert m.embed_dim == 512 and m.n_params == 24 * 12 * 1024 ** 2 + 50272 * 512 + 2 * 512 * 1024
    assert abs(m.n_params / 331.2e6 - 1) < 0.01
    assert m.lm_head_params == 50272 * 512 + 1024 * 512
    wide = from_hf_config(write(tmp_path, {**OPT_350M, "word_embed_proj_dim": 1024}, "wide.json"))
    assert wide.embed_dim == 0 and wide.lm_head_params == 50272 * 1024  # equal to hidden: no projection


@pytest.mark.parametrize(("lengths", "positions"), [
    ({"max_position_embeddings": 8192, "model_max_length": 131072}, 8192),  # Command-R's two keys: the smaller
    ({"max_position_embeddings": 131072, "seq_length": 32768}, 32768),
    ({"n_positions": 1024}, 1024),  # GPT-2's key
    ({"max_sequence_length": 4096, "max_seq_len": 2048}, 2048),
])
def test_the_context_length_is_the_smallest_length_key_as_vllm_takes_it(tmp_path, lengths, positions):
    base = {k: v for k, v in BASE.items() if k != "max_position_embeddings"}
    m = from_hf_config(write(tmp_path, {**base, "model_type": "llama", **lengths}))
    assert m.max_position == positions


def test_a_config_without_a_length_key_assumes_vllms_2048_and_says_so(tmp_path):
    base = {k: v for k, v in BASE.items() if k != "max_position_embeddings"}
    path = write(tmp_path, {**base, "model_type": "llama"})
    with pytest.warns(UserWarning, match=r"no context length key .*assumed 2048 positions, as vLLM does"):
        m = from_hf_config(path)
    assert m.max_position == 2048
