"""``python -m llmsim.profiles <verb>`` is the room's one command line: every verb has its ``--help``, the extra a
verb needs is named, and no other module of the room is runnable on its own."""

from __future__ import annotations

import subprocess
import sys

import pytest

from llmsim.profiles.cli import VERBS, main
from tests.helpers import REPO

# a flag of each verb that its --help must list (the flags moved with the verbs, none was dropped)
FLAGS = {
    "build": ["--raw", "--out", "--write", "--only", "--from-raw", "--quiet"],
    "validate": ["--raw", "--out", "--write"],
    "estimate": ["--raw", "--profile-out"],
    "replay": ["--requests", "--model", "--gpu", "--tp", "--policy", "--max-num-batched-tokens", "--max-num-seqs",
               "--max-model-len", "--gpu-memory-utilization", "--profile-kind", "--json", "--timeline", "--plot",
               "--overhead-per-iteration", "--overhead-per-seq"],
    "calibrate": ["--requests", "--model", "--gpu", "--fit-until", "--write", "--json"],
    "measure": ["--model", "--device", "--gpu-name", "--out", "--quick", "--max-tokens", "--max-ctx", "--max-batch",
                "--iters", "--repeats"],
}


def test_the_entry_lists_every_verb() -> None:
    p = subprocess.run([sys.executable, "-m", "llmsim.profiles", "--help"], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage: python -m llmsim.profiles")
    for verb in VERBS:
        assert f"\n    {verb}" in p.stdout, verb
    assert set(VERBS) == set(FLAGS)


@pytest.mark.parametrize("verb", sorted(FLAGS))
def test_every_verb_has_its_help(verb: str, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main([verb, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m llmsim.profiles {verb}")
    for flag in FLAGS[verb]:
        assert flag in out, (verb, flag)


def test_measure_names_its_extra(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["measure", "--help"])
    assert "pip install 'llmsim[rl]'" in capsys.readouterr().out


def test_no_verb_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2
    assert "VERB" in capsys.readouterr().err


def test_one_entry_only() -> None:
    """Only profiles/__main__.py runs as a program (the verbs used to be six runnable modules); the modules that
    once were commands say where the command went instead of doing nothing."""
    mains = {p.name: p.read_text().split('if __name__ == "__main__":')[1]
             for p in sorted((REPO / "profiles").rglob("*.py")) if 'if __name__ == "__main__":' in p.read_text()}
    assert sorted(mains) == ["build.py", "calibrate.py", "estimate_check.py", "replay.py", "validate.py"]
    assert all("is not a command; run: python -m llmsim.profiles" in body for body in mains.values())
    p = subprocess.run([sys.executable, "-m", "llmsim.profiles.build"], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and "run: python -m llmsim.profiles build --help" in p.stderr
