"""get_model by a config.json path: a path gives the model of the file at that path now (whatever folder the
process is in, however the path is spelled, after an edit), and two files whose models share a name each keep
their own model, the name staying the first one's, with one warning line naming both files."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from llmsim.errors import ConfigError
from llmsim.perf import models
from llmsim.perf.models import get_model
from tests.perf.helpers import tiny

TINY = json.loads(Path(tiny("tiny-llama")).read_text())


@pytest.fixture(autouse=True)
def own_registry(monkeypatch):
    """Every model a test resolves registers its name in a copy of the registry, not in the suite's."""
    monkeypatch.setattr(models, "MODELS", dict(models.MODELS))


def write(folder: Path, hf_id: str, layers: int, mtime: float = 1e9) -> Path:
    """A tiny Llama config.json of ``layers`` layers named ``hf_id``, in ``folder`` (its time set, not the clock's)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps({**TINY, "_name_or_path": hf_id, "num_hidden_layers": layers}))
    os.utime(path, (mtime, mtime))
    return path


def test_a_relative_path_is_read_in_the_working_directory_of_each_call(tmp_path, monkeypatch):
    """./m was cached by the string: asked again in another folder, it gave the first folder's model."""
    write(tmp_path / "a" / "m", f"acme/{tmp_path.name}-a", 2)
    write(tmp_path / "b" / "m", f"acme/{tmp_path.name}-b", 3)
    monkeypatch.chdir(tmp_path / "a")
    assert get_model("./m").n_layers == 2
    monkeypatch.chdir(tmp_path / "b")
    assert get_model("./m").n_layers == 3
    monkeypatch.chdir(tmp_path / "a")
    assert get_model("./m").n_layers == 2


def test_one_file_by_any_spelling_is_read_once(tmp_path, monkeypatch):
    write(tmp_path / "m", f"acme/{tmp_path.name}-once", 2)
    reads: list[str] = []

    def counting(path: str, *args, **kwargs):
        reads.append(path)
        return models.from_hf_config.__wrapped__(path, *args, **kwargs)

    counting.__wrapped__ = models.from_hf_config  # type: ignore[attr-defined]
    monkeypatch.setattr(models, "from_hf_config", counting)
    monkeypatch.chdir(tmp_path)
    spellings = ["./m", str(tmp_path / "m"), str(tmp_path / "m" / "config.json"), f"../{tmp_path.name}/m/",
                 "m/config.json"]
    specs = [get_model(s) for s in spellings]
    assert len(reads) == 1 and all(s is specs[0] for s in specs)


def test_an_edited_config_is_read_again(tmp_path):
    """A long-lived process (the live router, a notebook) sees the file as it is now: a file of another
    modification time, size or inode is read again, and its name follows it."""
    name = f"{tmp_path.name}-edited"
    path = write(tmp_path / "m", f"acme/{name}", 2, mtime=1e9)
    assert get_model(str(path.parent)).n_layers == 2 and get_model(name).n_layers == 2
    write(tmp_path / "m", f"acme/{name}", 3, mtime=1e9 + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (its own earlier version is not another model of its name)
        assert get_model(str(path.parent)).n_layers == 3
    assert get_model(name).n_layers == 3
    write(tmp_path / "m", f"acme/{name}-renamed", 3, mtime=1e9 + 2)
    assert get_model(str(path)).name == f"{name}-renamed"
    with pytest.raises(ConfigError, match="unknown model"):  # (the file no longer calls its model so)
        get_model(name)


def test_two_files_whose_models_share_a_name_each_keep_their_own(tmp_path, monkeypatch):
    """The first file to give a name keeps it; a different model of that name from another file is named after
    its file's absolute path, with one line naming both files: neither is ever the other's model."""
    name = f"{tmp_path.name}-twice"
    first = write(tmp_path / "a" / "m", f"acme/{name}", 2)
    second = write(tmp_path / "b" / "m", f"acme/{name}", 3)
    assert get_model(str(first)).name == name
    monkeypatch.chdir(tmp_path / "a")
    with pytest.warns(UserWarning) as caught:
        b = get_model("../b/m")
    msg = str(caught[0].message)
    assert str(first) in msg and str(second.parent) in msg and "\n" not in msg and "n_layers=3 (not 2)" in msg
    assert (b.n_layers, b.name) == (3, str(tmp_path / "b" / "m"))
    assert get_model(name).n_layers == 2 and get_model(str(first)).n_layers == 2
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (warned once, not at every look-up)
        assert get_model(b.name) is b and get_model(str(second)) is b  # (planning passes the name on)


def test_a_path_is_never_answered_by_a_registered_model_of_that_hf_id(tmp_path):
    """A config saved from a local folder names that folder as its _name_or_path: asking for the folder itself
    gave the model registered under it, not the config in the folder."""
    real = write(tmp_path / "real", f"acme/{tmp_path.name}-real", 3)
    write(tmp_path / "copy", str(real.parent), 2)  # its _name_or_path is the other folder
    assert get_model(str(tmp_path / "copy")).n_layers == 2
    assert get_model(str(real.parent)).n_layers == 3


@pytest.mark.parametrize("saved_as", ["", "acme/moving"])
def test_an_hf_id_follows_the_snapshot_refs_main_names_now(tmp_path, monkeypatch, saved_as):
    """The hub id was cached by the string, or found as the registered model's HF id (a config saved with its id
    as _name_or_path): a new revision downloaded (refs/main moved) was never read."""
    repo = tmp_path / "models--acme--moving"
    for rev, positions in (("rev1", 512), ("rev2", 1024)):
        path = write(repo / "snapshots" / rev, saved_as, 2)
        path.write_text(json.dumps({**json.loads(path.read_text()), "max_position_embeddings": positions}))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("rev1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert get_model("acme/moving").max_position == 512
    (repo / "refs" / "main").write_text("rev2")
    assert get_model("acme/moving").max_position == 1024
