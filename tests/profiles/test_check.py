"""Check mode of ``python -m llmsim.profiles build`` / ``validate`` (never rewrites committed files without --write),
the numeric comparison they share, and cross-machine reproducibility of the build."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import llmsim.profiles.build as B
import llmsim.profiles.validate as V
from llmsim.errors import ProfileError
from llmsim.profiles.build import build_all, build_texts
from llmsim.profiles.cli import main
from llmsim.profiles.compare import REL_TOL, compare_docs, compare_profile_texts, compare_report_texts
from llmsim.profiles.document import dump
from llmsim.profiles.targets import DEFAULT_OUT
from tests.profiles.helpers import DATA, RAW, REPORT, needs_raw, tiny_raw


def _snapshot(d: Path) -> dict[Path, tuple[bytes, int]]:
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(d.glob("*/*.yaml"))}


# ------------------------------------------------------------------------------------------- comparison
def test_compare_docs_tolerance() -> None:
    doc = yaml.safe_load((DATA / "a100-80gb" / "llama-2-7b.yaml").read_text())
    assert compare_docs(doc, doc) == []
    other = yaml.safe_load((DATA / "a100-80gb" / "llama-2-7b.yaml").read_text())
    x = other["dense"]["seconds"][17]
    other["dense"]["seconds"][17] = float(f"{x * (1 + 1e-3):.4g}")  # a last-digit flip: 0.1345 vs 0.1346
    assert compare_docs(doc, other) == []
    other["dense"]["seconds"][17] = x * 1.01
    (d,) = compare_docs(doc, other)
    assert d.where == "dense.seconds[17]" and d.rel == pytest.approx(0.01 / 1.01, rel=1e-6)
    assert "rel diff 9.9e-03" in str(d)
    assert REL_TOL == 2e-3


@pytest.mark.parametrize(
    "mutate,where",
    [
        (lambda d: d["parts"]["dense"].__setitem__("source", "other"), "parts.dense.source"),
        (lambda d: d["parts"]["dense"].__setitem__("status", "estimated"), "parts.dense.status"),
        (lambda d: d.pop("memory"), "<top> keys"),
        (lambda d: d["lm_head"]["seconds"].pop(), "lm_head.seconds length"),
        (lambda d: d.__setitem__("tp", True), "tp"),
        (lambda d: d["provenance"]["notes"].append("x"), "provenance.notes length"),
        (lambda d: d["decode_attention"].__setitem__("per_seq", float("nan")), "decode_attention.per_seq"),
    ],
)
def test_compare_docs_structure_and_strings(mutate, where) -> None:
    doc = yaml.safe_load((DATA / "a100-80gb" / "llama-2-7b.yaml").read_text())
    other = yaml.safe_load((DATA / "a100-80gb" / "llama-2-7b.yaml").read_text())
    mutate(other)
    assert [d.where for d in compare_docs(doc, other)] == [where]


def test_compare_profile_texts_bad_yaml() -> None:
    (d,) = compare_profile_texts("a: 1\n", "a: [1\n")
    assert "not valid YAML" in str(d)


def test_compare_report_texts() -> None:
    a = "| A100 dense, 2048 tokens | 134.57 | 109.59 | -18.6 |\n| x | 1.80e-04 | 41408 |\n"
    ok = "| A100 dense, 2048 tokens | 134.49 | 109.59 | -18.5 |\n| x | 1.81e-04 | 41409 |\n"
    assert compare_report_texts(a, a) == [] and compare_report_texts(a, ok) == []
    bad = a.replace("-18.6", "-18.9")
    assert [d.where for d in compare_report_texts(a, bad)] == ["line 1"]
    assert [d.where for d in compare_report_texts(a, a.replace("dense", "DENSE"))] == ["line 1"]
    assert [d.where for d in compare_report_texts(a, a + "more\n")] == ["line count"]


# ------------------------------------------------------------------------------------------ build check
@needs_raw
def test_build_check_mode_committed_agrees_and_writes_nothing(capsys) -> None:
    before = _snapshot(DATA)
    assert main(["build", "-q"]) == 0, capsys.readouterr().out
    assert "nothing written" in capsys.readouterr().out
    assert _snapshot(DATA) == before


@needs_raw
def test_build_check_reports_difference_and_write_fixes_it(tmp_path, monkeypatch, capsys) -> None:
    committed = tmp_path / "data"
    shutil.copytree(DATA, committed)
    monkeypatch.setattr(B, "DEFAULT_OUT", committed)
    f = committed / "a100-80gb" / "llama-2-7b.yaml"
    doc = yaml.safe_load(f.read_text())
    doc["decode_attention"]["per_seq"] = float(f"{doc['decode_attention']['per_seq'] * 1.01:.4g}")
    f.write_text(dump(doc))
    before = _snapshot(committed)
    assert main(["build", "--only", "a100-80gb", "-q"]) == 1
    out = capsys.readouterr().out
    assert "DIFFERS a100-80gb/llama-2-7b.yaml: decode_attention.per_seq: committed" in out and "rel diff 9." in out
    assert "1 of " in out and "--write" in out
    assert _snapshot(committed) == before  # check mode wrote nothing
    assert main(["build", "--only", "a100-80gb", "--write", "-q"]) == 0
    assert [p for p in before if p.read_bytes() != before[p][0]] == [f]  # only the stale file rewritten
    assert main(["build", "--only", "a100-80gb", "-q"]) == 0
    assert (committed / "a100-80gb" / "llama-2-7b.yaml").read_bytes() == (
        DATA / "a100-80gb/llama-2-7b.yaml"
    ).read_bytes()


@needs_raw
def test_build_out_elsewhere_writes_without_flag(tmp_path) -> None:
    assert main(["build", "--only", "rtx-pro-6000", "--out", str(tmp_path), "-q"]) == 0
    assert (tmp_path / "rtx-pro-6000" / "llama-3.1-8b.yaml").is_file()


def test_build_all_refuses_committed_dir() -> None:
    with pytest.raises(ProfileError, match="refusing to write"):
        build_all(RAW, DEFAULT_OUT)


def test_from_raw_into_committed_dir_needs_write(tmp_path, monkeypatch, capsys) -> None:
    tiny_raw(tmp_path / "raw")
    committed = tmp_path / "committed"
    committed.mkdir()
    monkeypatch.setattr(B, "DEFAULT_OUT", committed)
    assert main(["build", "--from-raw", str(tmp_path / "raw")]) == 1
    assert "not written" in capsys.readouterr().out and not list(committed.rglob("*.yaml"))
    assert main(["build", "--from-raw", str(tmp_path / "raw"), "--write"]) == 0
    assert (committed / "a10" / "llama-2-7b.yaml").is_file()
    assert main(["build", "--from-raw", str(tmp_path / "raw")]) == 0
    assert "agrees" in capsys.readouterr().out


@needs_raw
def test_build_independent_of_row_order(monkeypatch) -> None:
    """Another machine's numpy sort kernels (or a re-exported CSV) reorder rows: the profiles must not change.
    (vidur profiled some token counts twice; interpolating at a duplicated x after an unstable sort picked a
    machine-dependent repeat: 0.1428 vs 0.1466 s.)"""
    only = ("a100-80gb/llama-3.1-8b", "h100/llama-2-70b", "l40s/llama-2-7b")
    ref = {k: v for o in only for k, v in build_texts(RAW, o, verbose=False).items()}
    read, rng = pd.read_csv, np.random.default_rng(0)
    monkeypatch.setattr(pd, "read_csv", lambda *a, **k: read(*a, **k).pipe(lambda d: d.iloc[rng.permutation(len(d))]))
    new = {k: v for o in only for k, v in build_texts(RAW, o, verbose=False).items()}
    assert list(new) == list(ref) and len(ref) == 5
    for rel, (text, _) in ref.items():
        assert not compare_profile_texts(text, new[rel][0]), rel


# --------------------------------------------------------------------------------------- validate check
@pytest.mark.slow  # ~30 s: regenerates the whole report
@needs_raw
def test_validate_check_mode(tmp_path, monkeypatch, capsys) -> None:
    before = (REPORT.read_bytes(), REPORT.stat().st_mtime_ns)
    assert main(["validate"]) == 0, capsys.readouterr().out
    assert "up to date" in capsys.readouterr().out
    assert (REPORT.read_bytes(), REPORT.stat().st_mtime_ns) == before
    stale = tmp_path / "VALIDATION.md"
    text = REPORT.read_text()
    stale.write_text(text.replace("135 configurations", "134 configurations"))
    monkeypatch.setattr(V, "DEFAULT_REPORT", stale)
    assert main(["validate"]) == 1
    assert "134 configurations" in capsys.readouterr().out and "134 configurations" in stale.read_text()
    assert main(["validate", "--write"]) == 0
    assert not compare_report_texts(text, stale.read_text())
