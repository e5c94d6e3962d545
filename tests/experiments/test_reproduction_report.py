"""The reproduction report (experiments/harness/reproduction_report.py) and ``llmsim-reproduce all`` / ``report``: on
fixture claims.json directories (some from earlier runs that named the papers by spec id) and monkeypatched fast
experiment runners (no real reproduction runs here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from experiments import reproduce
from experiments.harness import reproduction_report as rr
from experiments.harness.claims import claim_row
from experiments.harness.registry import MODULES, ORDER
from tests.helpers import REPO


def _row(claim: str, verdict: str, paper: str = "spec001", **extra: Any) -> dict[str, Any]:
    return {"paper": paper, "claim": claim, "paper_value": 4.35, "measured": 2.68, "verdict": verdict,
            "unit": "%", "seeds": [1000, 1001, 1002], "setting": "runs", "setting_note": "existing runs", **extra}


def _dir(root: Path, name: str, rows: list[dict[str, Any]], command: str, wall: float = 60.0,
         file: str = "claims.json") -> Path:
    d = root / name
    d.mkdir(parents=True)
    body = {"command": command, "date": "2026-01-01T00:00:00", "commit": "abc1234", "wall_s": wall, "claims": rows}
    if file == "claims_partial.json":
        body = {"rows": rows, "overhead": {"median_ms": 2.5}}
    (d / file).write_text(json.dumps(body))
    return d


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    """intelligent_router (3 claims, one of each verdict), qlm (full), a failed routebalance, a partial qos_edge (the
    first, second and fourth written by runs that named them spec001, spec003 and spec000); the others have none."""
    s1 = _dir(tmp_path, "s1", [_row("a gain", "reproduced"), _row("b gain", "partly", note="x | y"),
                               _row("c gain", "not")], "llmsim-reproduce spec001 --from-runs A,B,C --out s1", 120.0)
    # a verdict the numbers would not give under the usual rule: the report must copy it, not recompute it
    s3 = _dir(tmp_path, "s3", [_row("q1", "reproduced", paper="spec003", measured=-50.0, setting="full size (3 seeds)"),
                               _row("q2", "reproduced", paper="spec003", setting="full size (3 seeds)")],
              "llmsim-reproduce spec003 --jobs 2 --out s3", 600.0)
    s4 = tmp_path / "s4"
    s4.mkdir()
    (s4 / "failed.json").write_text(json.dumps({"spec": "spec004", "error": "RuntimeError: boom\nsecond line",
                                                "command": "llmsim-reproduce spec004 --out s4", "wall_s": 3.0}))
    s0 = _dir(tmp_path, "s0", [_row("p1", "reproduced", paper="spec000"), _row("p2", "partly", paper="spec000")],
              "", file="claims_partial.json")
    return {"intelligent_router": s1, "qlm": s3, "routebalance": s4, "qos_edge": s0}


def _summary_row(text: str, spec: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| [{spec}]"))


@pytest.mark.timeout(30)
def test_report_lists_every_spec_with_counts_and_a_row_per_claim(dirs: dict[str, Path], tmp_path: Path) -> None:
    entries = [(None, dirs["intelligent_router"]), (None, dirs["qlm"]), ("routebalance", dirs["routebalance"]),
               (None, dirs["qos_edge"])]
    out = tmp_path / "docs" / "REPRODUCTION.md"
    reports = rr.write_report(entries, out, "llmsim-reproduce report --from ...")
    text = out.read_text()
    assert text.startswith("# Reproduction report")
    assert "llmsim-reproduce report --from ..." in text and "**NOT** run end to end" in text
    assert set(reports) == set(ORDER)
    r1 = _summary_row(text, "intelligent_router").split(" | ")
    assert r1[2:7] == ["3", "1", "1", "1", "**partly**"] and r1[7] == "2.0 min"
    assert _summary_row(text, "qlm").split(" | ")[2:7] == ["2", "2", "0", "0", "**reproduced**"]
    assert "q1 | 4.35 % | -50 % | **reproduced**" in text  # copied from claims.json, not recomputed
    for spec in ("best_effort", "prefix", "disagg"):  # not given: listed, not dropped
        assert "no claims.json" in _summary_row(text, spec)
    failed = _summary_row(text, "routebalance")
    assert "**failed**: RuntimeError: boom second line" in failed and "**failed**" in failed
    assert "**PARTIAL** (claims_partial.json)" in _summary_row(text, "qos_edge")
    for claim in ("a gain", "b gain", "c gain", "q1", "q2", "p1", "p2"):
        assert sum(line.startswith(f"| {claim} |") for line in text.splitlines()) == 1
    assert "x / y" in text  # a "|" in a note does not break the table
    assert "Held-out seeds: 1000-1002." in text
    assert "llmsim-reproduce spec001 --from-runs A,B,C --out s1" in text
    assert all(f"docs/results/{page}" in text for page in rr.PAGES.values())
    assert text.index("## Papers") < text.index('<a id="routebalance">') < text.index("## llmsim studies")
    assert text.index("## llmsim studies") < text.index('<a id="prefix">')


@pytest.mark.timeout(30)
def test_the_same_claim_from_two_directories_counts_once(tmp_path: Path) -> None:
    cmd = "llmsim-reproduce spec001 --from-runs A,B,C"
    a = _dir(tmp_path, "a", [_row("a gain", "reproduced"), _row("eight", "not")], cmd + " --from-runs-8 X,Y,Z", 200.0)
    b = _dir(tmp_path, "b", [_row("a gain", "partly")], cmd, 80.0)
    reports = rr.collect([(None, a), (None, b)])
    rep = reports["intelligent_router"]
    assert [r["claim"] for r in rep.claims] == ["a gain", "eight"] and rep.counts["reproduced"] == 1
    assert rep.sources[1].duplicates == 1 and rep.wall_s == 200.0  # b added nothing: not in the wall time
    assert any("partly" in n for n in rep.notes)  # the other verdict is noted, never silently chosen


def _fake_specs(monkeypatch: pytest.MonkeyPatch, calls: list[tuple[str, bool, int]]) -> None:
    """Every experiment's module replaced by a runner that returns at once; best_effort's raises."""
    def runner(spec: str) -> Any:
        def run(quick: bool, out_dir: Path, jobs: int, progress: bool) -> list[dict[str, Any]]:
            calls.append((spec, quick, jobs))
            if spec == "best_effort":
                raise RuntimeError("training diverged\n(traceback elided)")
            setting = "quick" if quick else "full"
            return [claim_row(spec, f"{spec} claim", 1.0, 1.0, "reproduced", setting=setting)]
        return run

    for spec, module in MODULES.items():
        monkeypatch.setitem(sys.modules, module, types.SimpleNamespace(run=runner(spec)))
    monkeypatch.setattr(reproduce, "source_commit", lambda: "abc1234")


@pytest.mark.timeout(60)
def test_all_runs_every_spec_in_order_and_goes_on_past_a_failure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[tuple[str, bool, int]] = []
    _fake_specs(monkeypatch, calls)
    monkeypatch.setattr(reproduce, "cpu_count", lambda: 2)  # --jobs 2 runs 2 on a 1-CPU machine too
    out, report = tmp_path / "out", tmp_path / "REPRODUCTION.md"
    reproduce.main(["all", "--quick", "--jobs", "2", "--out", str(out), "--report", str(report), "--no-progress"])
    assert calls == [(s, True, 2) for s in ORDER]
    for spec in ORDER:
        assert (out / spec / ("failed.json" if spec == "best_effort" else "claims.json")).is_file()
    body = json.loads((out / "qlm" / "claims.json").read_text())
    assert body["command"] == f"llmsim-reproduce qlm --quick --jobs 2 --out {out / 'qlm'}"
    text = report.read_text()
    assert "**failed**: RuntimeError: training diverged (traceback elided)" in _summary_row(text, "best_effort")
    assert "Every experiment below was run by this one command" in text
    assert _summary_row(text, "disagg").split(" | ")[2:7] == ["1", "1", "0", "0", "**reproduced**"]
    captured = capsys.readouterr()
    assert "best_effort failed: RuntimeError: training diverged" in captured.err
    assert f"report: {report}" in captured.out


@pytest.mark.timeout(60)
def test_all_writes_its_report_under_out_by_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_specs(monkeypatch, [])
    reproduce.main(["all", "--out", str(tmp_path / "o"), "--no-progress"])
    assert "quick" not in _summary_row((tmp_path / "o" / "REPRODUCTION.md").read_text(), "intelligent_router")


@pytest.mark.timeout(60)
def test_all_resume_keeps_finished_specs_and_runs_the_failed_one_again(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[tuple[str, bool, int]] = []
    _fake_specs(monkeypatch, calls)
    out = tmp_path / "out"
    reproduce.main(["all", "--quick", "--out", str(out), "--no-progress"])
    first = {s: (out / s / "claims.json").read_text() for s in ORDER if s != "best_effort"}
    calls.clear()
    ok = claim_row("best_effort", "best_effort claim", 1.0, 1.0, "reproduced", setting="quick")
    monkeypatch.setitem(sys.modules, MODULES["best_effort"], types.SimpleNamespace(run=lambda *a: [ok]))
    capsys.readouterr()
    reproduce.main(["all", "--quick", "--out", str(out), "--resume", "--no-progress"])
    assert calls == []  # (best_effort's runner is the new one, which does not record) every other one was kept
    assert {s: (out / s / "claims.json").read_text() for s in first} == first
    assert (out / "best_effort" / "claims.json").is_file() and not (out / "best_effort" / "failed.json").exists()
    aside = [d.name for d in out.iterdir() if d.name.startswith("best_effort.unfinished-")]
    assert len(aside) == 1 and (out / aside[0] / "failed.json").is_file()  # the failure is kept, not overwritten
    err = capsys.readouterr().err
    assert "qlm (4/" in err and "kept (--resume)" in err and "moved to" in err
    text = (out / "REPRODUCTION.md").read_text()
    assert "over more than one invocation (`--resume`)" in text and "qos_edge, intelligent_router, qlm" in text
    assert "**failed**" not in _summary_row(text, "best_effort")


@pytest.mark.timeout(60)
def test_all_resume_refuses_another_setting_and_needs_out(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[tuple[str, bool, int]] = []
    _fake_specs(monkeypatch, calls)
    out = tmp_path / "out"
    reproduce.main(["all", "--quick", "--out", str(out), "--no-progress"])
    calls.clear()
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        reproduce.main(["all", "--out", str(out), "--resume", "--no-progress"])
    assert e.value.code == 2 and calls == []
    err = capsys.readouterr().err.strip()
    assert err.startswith("llmsim-reproduce: error: ") and "claims.json: a quick run" in err
    assert "this is the full setting" in err and len(err.splitlines()) == 1
    for argv in (["all", "--resume"], ["spec001", "--resume"]):
        with pytest.raises(SystemExit):
            reproduce.main(argv)
        assert "--resume is for all or one experiment, with the --out directory" in capsys.readouterr().err


@pytest.mark.timeout(30)
def test_report_from_the_command_line(dirs: dict[str, Path], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "r" / "R.md"
    reproduce.main(["report", "--from", f"{dirs['intelligent_router']},spec003={dirs['qlm']}", "--report",
                    str(report)])  # an old spec id names an experiment in --from too
    out = capsys.readouterr().out
    assert "intelligent_router: partly (1 reproduced, 1 partly, 1 not; runs)" in out
    assert "best_effort: no claims" in out and "qlm: reproduced" in out
    assert f"--report {report}" in report.read_text()


@pytest.mark.timeout(60)
def test_report_from_the_installed_entry_point_module(dirs: dict[str, Path], tmp_path: Path) -> None:
    report = tmp_path / "R.md"
    p = subprocess.run([sys.executable, "-m", "experiments.reproduce", "report", "--from", str(dirs["qlm"]),
                        "--report", str(report)], cwd=REPO, capture_output=True, text=True, timeout=50,
                       env={**os.environ, "MPLBACKEND": "Agg"})
    assert p.returncode == 0, p.stderr
    assert "qlm: reproduced" in p.stdout and report.is_file()


def _one_line_error(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as e:
        reproduce.main(args)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("llmsim-reproduce: error: ")
    return err


@pytest.mark.timeout(30)
def test_bad_input_is_one_line_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    report = str(tmp_path / "R.md")
    assert str(empty / "claims.json") in _one_line_error(["report", "--from", str(empty), "--report", report], capsys)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "claims.json").write_text('{"claims": [')
    err = _one_line_error(["report", "--from", str(bad), "--report", report], capsys)
    assert str(bad / "claims.json") in err and "malformed JSON" in err
    (bad / "claims.json").write_text('{"claims": "x')
    err = _one_line_error(["report", "--from", str(bad), "--report", report], capsys)
    assert "(Unterminated string starting at line 1, column 12)" in err  # not "starting at at line"
    (bad / "claims.json").write_text(json.dumps({"claims": [{"paper": "spec001", "claim": "x"}]}))
    assert "claim row 0" in _one_line_error(["report", "--from", str(bad), "--report", report], capsys)
    (bad / "claims.json").write_text(json.dumps({"command": "something", "claims": [_row("x", "reproduced", "P")]}))
    assert "NAME=DIR" in _one_line_error(["report", "--from", str(bad), "--report", report], capsys)
    assert not (tmp_path / "R.md").exists()


@pytest.mark.timeout(30)
def test_options_of_the_wrong_mode_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "report needs --from" in _one_line_error(["report", "--report", str(tmp_path / "R.md")], capsys)
    assert "unknown experiment 'nope'" in _one_line_error(["report", "--from", f"nope={tmp_path}", "--report",
                                                     str(tmp_path / "R.md")], capsys)
    assert "--from is for report" in _one_line_error(["spec001", "--from", str(tmp_path)], capsys)
    assert "--report is for all" in _one_line_error(["spec001", "--report", "x.md"], capsys)
    assert "all does not take --from-runs" in _one_line_error(["all", "--from-runs", "a,b,c"], capsys)
    assert "only --from and --report" in _one_line_error(["report", "--quick", "--from", "d", "--report", "r"],
                                                         capsys)
    assert not any(tmp_path.iterdir())
