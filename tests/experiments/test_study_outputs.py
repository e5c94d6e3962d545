"""Where the studies and benchmarks write: their default output paths and the paths the docs give them lie under a
gitignored folder, so following docs/agents.md from the checkout leaves ``git status`` clean."""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

import pytest

from experiments.harness.pages import study_out, write_text

ROOT = Path(__file__).resolve().parents[2]
IGNORED = ("outputs/", "runs/", "exports/", "multirun/", "/tmp/", "/scratch/")
MODULES = sorted(f"experiments.{p.parent.name}.{p.stem}" for d in ("studies", "bench", "testbeds")
                 for p in (ROOT / "experiments" / d).glob("*.py")
                 if "def main(" in p.read_text() and p.stem != "__main__")
WRITES = ("--out", "--heuristics-cache")  # the options whose path a study writes


class _Parsed(Exception):
    """Raised in place of parsing, carrying the parser a module's main built."""


def _parser_of(module: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    def grab(self: argparse.ArgumentParser, *_: object, **__: object) -> None:
        raise _Parsed(self)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", grab)
    with pytest.raises(_Parsed) as e:
        importlib.import_module(module).main([])
    return e.value.args[0]


def _written(path: str) -> bool:
    """Under a gitignored folder, a committed results page, or a placeholder (OUT, DIR, $VAR, FILE.ext)."""
    return path.startswith(IGNORED + ("docs/results/",)) or re.match(r"^[A-Z$][A-Z_]*\b", path) is not None


@pytest.mark.parametrize("module", MODULES)
def test_every_default_path_of_a_study_is_under_outputs(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    parser = _parser_of(module, monkeypatch)
    for dest in ("out", "labels", "heuristics_cache"):
        default = parser.get_default(dest)
        assert default is None or Path(default).as_posix().startswith("outputs/"), (module, dest, default)


def test_the_rollout_chain_writes_under_outputs_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    labels = _parser_of("experiments.studies.rollout_labels", monkeypatch).get_default("out")
    distill = _parser_of("experiments.studies.rollout_distill", monkeypatch)
    assert labels == study_out("rollout_labels") == Path("outputs/rollout_labels")
    assert distill.get_default("labels") == labels  # the next step reads what the first wrote
    assert distill.get_default("out") == Path("outputs/rollout_distill")


def _commands(text: str) -> list[str]:
    """Every ``python -m experiments...`` / telemetry command of a page, continuation lines joined."""
    text = text.replace("\\\n", " ")
    pat = r"python -m (?:experiments\.[\w.]+|llmsim\.simulation\.telemetry)\b.*?(?=`|\n\n|\n```|python -m|$)"
    return [c.replace("\n", " ") for c in re.findall(pat, text, flags=re.S)]


def test_the_docs_commands_write_under_gitignored_folders() -> None:
    bad = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for cmd in _commands(page.read_text()):
            for opt, path in re.findall(r"(--[\w-]+)[ =](\S+)", cmd):
                if opt in WRITES and not _written(path):
                    bad.append(f"{page.name}: {opt} {path} in {cmd[:80]}")
    assert _commands("x `python -m experiments.studies.spill_load --jobs 1\n--out a.md` y") == [
        "python -m experiments.studies.spill_load --jobs 1 --out a.md"]
    assert not bad, "\n".join(bad)


def test_a_study_output_folder_is_created(tmp_path: Path) -> None:
    write_text(tmp_path / "outputs" / "spill_load" / "spill_load.md", "x\n")
    assert (tmp_path / "outputs" / "spill_load" / "spill_load.md").read_text() == "x\n"
