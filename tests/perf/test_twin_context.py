"""A config.json of a registered architecture with another context length (a Llama-3.1-8B config cut to 32768
positions) is the registered model for its cost and measured profile, with its own context length on every path
that starts from the config: the model, a cluster instance, the emulator's prompt limit. The registered name keeps
the registry's model, so nothing may re-resolve the config's model by its name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmsim.cluster import InstanceConfig
from llmsim.emulator.engine import EmulatorOptions, build_instance
from llmsim.emulator.model_names import registered
from llmsim.event_loop import SimEnv
from llmsim.metrics.recorder import Recorder
from llmsim.perf import models
from llmsim.perf.models import get_model, registered_model
from tests.perf.test_architecture_twin import LLAMA_31_8B_INSTRUCT

SHORT = 32768  # the registered llama-3.1-8b has 131072


@pytest.fixture(autouse=True)
def own_registry(monkeypatch):
    """Every model a test resolves registers its name in a copy of the registry, not in the suite's."""
    monkeypatch.setattr(models, "MODELS", dict(models.MODELS))


@pytest.fixture
def short_config(tmp_path: Path) -> str:
    folder = tmp_path / "llama-3.1-8b-32k"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        **LLAMA_31_8B_INSTRUCT, "_name_or_path": "meta-llama/Llama-3.1-8B", "max_position_embeddings": SHORT,
        "rope_scaling": None}))
    return str(folder)


def test_the_config_is_the_registered_model_with_its_own_context(short_config: str) -> None:
    spec = get_model(short_config)
    assert (spec.name, spec.max_position) == ("llama-3.1-8b", SHORT)
    assert get_model("llama-3.1-8b").max_position == 131072  # the registered name stays the registry's model
    assert registered_model("llama-3.1-8b") is get_model("llama-3.1-8b")


def test_an_instance_of_the_config_keeps_its_context_and_measured_profile(short_config: str) -> None:
    prof = InstanceConfig(model=short_config, gpu="rtx4090").build_profile()
    assert prof.model.max_position == SHORT
    assert prof.name == "llama-3.1-8b@rtx4090 (measured)"  # the twin still finds the registered model's file


def test_the_emulator_limits_prompts_to_the_configs_context(short_config: str) -> None:
    inst = build_instance(EmulatorOptions(model=short_config, gpu="rtx4090"), SimEnv(), Recorder())
    assert inst.max_model_len == SHORT


def test_the_emulators_registry_check_is_the_registrys_lookup() -> None:
    for name in ("llama-3.1-8b", "LLAMA-3.1-8B", "meta-llama/Llama-3.1-8B", "koala-7B-HF", "Qwen/Qwen3-30B-A3B"):
        assert registered(name), name
    assert not registered("my-finetune") and not registered("acme/unknown")
