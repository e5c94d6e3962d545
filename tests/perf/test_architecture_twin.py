"""A config.json whose architecture equals a registered model's (an instruct variant, a fine-tune) is priced by
that model's measured profile, said so in the profile's name; any other dimension, dtype or window is not a match,
and a config reusing a registered name with another architecture keeps its own numbers."""

from __future__ import annotations

import json

import pytest

from llmsim.perf.models import get_model
from llmsim.perf.profile import load_profile

# Llama-3.1-8B-Instruct's config.json (the keys llmsim reads)
LLAMA_31_8B_INSTRUCT = {
    "_name_or_path": "meta-llama/Llama-3.1-8B-Instruct", "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 131072, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "vocab_size": 128256, "rope_scaling": {"factor": 8.0, "original_max_position_embeddings": 8192,
                                           "rope_type": "llama3"},
}
STEP = (600, 40, 250_000, 0, 30, 30_000)  # a mixed batch: one 250-token-ish prefill chunk, 30 decodes


def write(tmp_path, name: str, **changes) -> str:
    cfg = {**LLAMA_31_8B_INSTRUCT, **changes}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    return str(path)


@pytest.mark.parametrize("gpu", ["rtx4090", "rtx-pro-6000"])
def test_an_instruct_config_takes_the_measured_profile_of_its_architecture(tmp_path, gpu):
    path = write(tmp_path, "cfg", _name_or_path=f"acme/llama-3.1-8b-chat-{gpu}")
    prof, base = load_profile(path, gpu), load_profile("llama-3.1-8b", gpu)
    assert prof.name == f"llama-3.1-8b-chat-{gpu}@{gpu} (measured as llama-3.1-8b: same architecture)"
    assert prof.describe()["kind"] == "measured" and prof.describe()["measured_as"] == "llama-3.1-8b"
    assert prof.model.name == f"llama-3.1-8b-chat-{gpu}"
    assert prof.step_time(*STEP) == base.step_time(*STEP)
    assert prof.kv_capacity_tokens(0.9) == base.kv_capacity_tokens(0.9)
    assert "measured_as" not in base.describe() and base.name == f"llama-3.1-8b@{gpu} (measured)"


@pytest.mark.parametrize("change", [{"intermediate_size": 14337}, {"sliding_window": 4096},
                                    {"vocab_size": 128000}, {"tie_word_embeddings": True},
                                    {"quantization_config": {"quant_method": "fp8"}}])
def test_any_other_dimension_dtype_or_window_is_not_a_match(tmp_path, change):
    key = next(iter(change))
    path = write(tmp_path, "cfg", _name_or_path=f"acme/not-llama-{key}", **change)
    assert load_profile(path, "rtx4090").describe()["kind"] == "roofline"


def test_a_registered_name_with_another_window_keeps_its_own_numbers(tmp_path):
    path = write(tmp_path, "cfg", _name_or_path="mistralai/Mistral-7B-v0.1", model_type="mistral",
                 vocab_size=32000, max_position_embeddings=32768, sliding_window=None, rope_scaling=None)
    with pytest.warns(UserWarning, match=r"'mistral-7b' but its sliding_window=0 \(not 4096\)"):
        m = get_model(path)
    assert (m.name, m.sliding_window) == (path, 0)
    assert load_profile(path, "rtx4090").describe()["kind"] == "roofline"  # never mistral-7b's measured profile
    same = write(tmp_path, "same", _name_or_path="mistralai/Mistral-7B-v0.1", model_type="mistral",
                 vocab_size=32000, max_position_embeddings=32768, sliding_window=4096, rope_scaling=None)
    assert get_model(same) is get_model("mistral-7b")  # a name match of the same architecture works as before


def test_registered_models_keep_their_own_profiles():
    """Vicuna-7B is Llama-2-7B's architecture, but a registered model's results never move: where only Llama-2-7B
    was measured (the A10), Vicuna-7B stays on the roofline."""
    assert load_profile("llama-2-7b", "a10").describe()["kind"] == "measured"
    assert load_profile("vicuna-7b", "a10").describe()["kind"] == "roofline"


def test_a_registered_config_keeps_its_own_context_length(tmp_path):
    """A Llama-3.1-8B config extended with YaRN is Llama-3.1-8B (its measured profile) with its own context."""
    path = write(tmp_path, "cfg", _name_or_path="meta-llama/Llama-3.1-8B",
                 rope_scaling={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 131072})
    m = get_model(path)
    assert (m.name, m.max_position) == ("llama-3.1-8b", 262144)
    prof = load_profile(path, "rtx4090")
    assert prof.name == "llama-3.1-8b@rtx4090 (measured)" and prof.model.max_position == 262144
    assert load_profile("llama-3.1-8b", "rtx4090").model.max_position == 131072  # the registry's is untouched
