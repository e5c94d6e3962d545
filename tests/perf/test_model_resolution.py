"""get_model: a registered name, an HF id (registry or the local hub cache) or a config.json path, in every
entry point that takes a model (profiles, instances, the cluster config)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from llmsim.cluster.config import instances_from_specs
from llmsim.emulator.cli import build_parser
from llmsim.emulator.engine import EmulatorOptions, StreamingRecorder, build_instance
from llmsim.errors import ConfigError, ProfileError
from llmsim.event_loop import SimEnv
from llmsim.perf import models
from llmsim.perf.models import get_model
from llmsim.perf.profile import load_profile
from tests.perf.helpers import tiny


def test_a_config_path_a_folder_and_a_registered_hf_id_resolve(tmp_path):
    assert get_model(tiny("tiny-qwen3-moe")).n_experts == 16
    folder = tmp_path / "my-model"
    folder.mkdir()
    shutil.copy(tiny("tiny-llama"), folder / "config.json")
    assert get_model(str(folder)).q_dim == 128
    assert get_model("Qwen/Qwen3-32B").name == "qwen3-32b"
    assert get_model("Qwen/Qwen3-30B-A3B-Instruct-2507").name == "qwen3-30b-a3b"


def test_an_hf_id_is_found_in_the_local_hub_cache(tmp_path, monkeypatch):
    snap = tmp_path / "models--acme--tiny-moe" / "snapshots" / "0123abc"
    snap.mkdir(parents=True)
    shutil.copy(tiny("tiny-qwen3-moe"), snap / "config.json")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    m = get_model("acme/tiny-moe")
    assert (m.name, m.n_experts) == ("tiny-moe", 16)


def test_the_hub_cache_snapshot_is_the_one_refs_main_names(tmp_path, monkeypatch):
    """Two cached revisions: the id resolves to the one refs/main names (as huggingface_hub and vLLM load it), not
    the one downloaded last."""
    repo = tmp_path / "models--acme--two-revs"
    for rev, layers in (("main111", 2), ("old222", 3)):  # old222 written last: the newest file
        (repo / "snapshots" / rev).mkdir(parents=True)
        cfg = json.loads(Path(tiny("tiny-llama")).read_text())
        (repo / "snapshots" / rev / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": layers}))
    os.utime(repo / "snapshots" / "old222" / "config.json", (2e9, 2e9))  # the newest, whatever the clock
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("main111")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert get_model("acme/two-revs").n_layers == 2


def test_an_unknown_model_names_the_three_forms(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ConfigError) as e:
        get_model("acme/nothing-here")
    msg = str(e.value)
    assert "registered name" in msg and "Hugging Face id" in msg and "config.json" in msg and "from_hf_config" in msg


def test_a_config_reusing_a_registered_name_with_other_shapes_is_renamed(tmp_path):
    cfg = json.loads(Path(tiny("tiny-llama")).read_text())
    cfg["_name_or_path"] = "meta-llama/Llama-3.1-8B"  # claims to be Llama-3.1-8B, but it is tiny
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.warns(UserWarning, match="named like the registered model 'llama-3.1-8b' but its n_layers=2"):
        m = get_model(str(path))
    assert m.name == str(path) and m.hidden == 64  # never the measured llama-3.1-8b profile


def test_profiles_and_instances_take_a_config_path():
    prof = load_profile(tiny("tiny-qwen3-moe"), "h100", kind="roofline")
    assert prof.model.is_moe
    insts = instances_from_specs([{"model": tiny("tiny-llama"), "gpu": "l4", "count": 2}])
    assert [i.build_profile().model.name for i in insts] == ["tiny-llama", "tiny-llama"]


def test_a_profile_of_an_unmodellable_config_is_one_line(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "t5", "is_encoder_decoder": True}))
    with pytest.raises(ProfileError, match="encoder-decoder"):
        load_profile(str(bad), "h100")


def test_the_emulator_takes_an_hf_id_and_expert_parallelism():
    args = build_parser().parse_args(["--model", "Qwen/Qwen3-30B-A3B", "--gpu", "h100", "--tp", "2",
                                      "--enable-expert-parallel"])
    assert args.enable_expert_parallel
    opts = EmulatorOptions(model=args.model, gpu=args.gpu, tp=args.tp, expert_parallel=True)
    inst = build_instance(opts, SimEnv(), StreamingRecorder())
    assert inst.profile.name == "qwen3-30b-a3b@h100-tp2-ep2"


def test_a_resolved_config_is_known_by_its_name_afterwards():
    spec = get_model(tiny("tiny-deepseek-moe"))
    assert get_model("tiny-deepseek-moe") is spec  # planning and the profiles pass the name on
    assert load_profile("tiny-deepseek-moe", "a10", kind="roofline").model is spec


@pytest.mark.parametrize("name", ["m" * 300, "acme/" + "m" * 300, "~no-such-user-here/model"])
def test_a_name_the_file_system_cannot_look_up_is_an_unknown_model(name):
    """A name is tried as a path: one over the file name limit (or of an unknown ~user) was an OSError (a
    RuntimeError) out of every caller, the live router's pricing of a backend by its served name included."""
    with pytest.raises(ConfigError, match="unknown model"):
        get_model(name)


@pytest.mark.parametrize("name", ["wd-finetune", "acme/wd-finetune"])
def test_a_plain_name_is_never_read_from_the_working_directory(tmp_path, monkeypatch, name):
    """A config (or its folder) in the working directory named like the model was read as the model: what a name
    means depended on where the simulator ran. Only an explicit path is read from disk; the same file by ./name
    is."""
    monkeypatch.setattr(models, "MODELS", dict(models.MODELS))  # (a resolved config registers its name)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    (tmp_path / name).mkdir(parents=True)
    shutil.copy(tiny("tiny-llama"), tmp_path / name / "config.json")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        get_model(name)
    msg = str(e.value)
    assert msg.startswith(f"unknown model {name!r}") and "starts with /, ./, ../ or ~" in msg and "\n" not in msg
    assert get_model(f"./{name}").q_dim == 128


def test_a_path_a_registered_name_and_a_config_file_name_resolve_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(models, "MODELS", dict(models.MODELS))
    folder = tmp_path / "cfgs"
    folder.mkdir()
    shutil.copy(tiny("tiny-llama"), folder / "wd-tiny.json")
    monkeypatch.chdir(folder)
    assert get_model("wd-tiny.json").q_dim == 128  # (a .json name is a path)
    assert get_model("llama-3.1-8b").name == "llama-3.1-8b"
    assert get_model(str(folder / "wd-tiny.json")).q_dim == 128
