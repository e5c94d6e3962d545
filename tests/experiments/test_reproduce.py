"""``llmsim-reproduce``'s command line: names and old spec ids, one size mechanism, the options a run takes, and
bad input as one line with exit 2 (the experiments themselves are replaced by fast fakes here)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from experiments import reproduce
from experiments.harness.claims import claim_row
from experiments.harness.registry import ALIASES, MODULES, ORDER, resolve
from experiments.harness.sizes import SIZE_ENV, size_name
from llmsim.errors import ConfigError
from tests.experiments.helpers import reproduce_cli


def test_unknown_experiment_is_one_line_exit_2() -> None:
    p = reproduce_cli(["spec999", "--quick"], timeout=60)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("llmsim-reproduce: error: unknown experiment 'spec999'")
    assert "intelligent_router" in p.stderr and p.stdout == ""


def test_bad_option_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        reproduce.main(["intelligent_router", "--jobs", "0"])
    assert e.value.code == 2 and capsys.readouterr().err.count("\n") == 1
    with pytest.raises(SystemExit) as e:
        reproduce.main(["qlm", "--quick", "--size", "tiny"])
    assert e.value.code == 2 and "--quick means --size quick" in capsys.readouterr().err


@pytest.mark.parametrize("jobs", ["0", "-3"])
def test_jobs_below_one_names_the_option_and_value(jobs: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        reproduce.main(["qlm", "--size", "tiny", "--jobs", jobs])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert err.startswith(f"llmsim-reproduce: error: argument --jobs: expected a positive integer, got '{jobs}'")


def test_jobs_above_the_cpus_is_capped_with_a_note(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """--jobs 1000 on a small machine started one process per cell (31 for qlm), each with its own memory."""
    monkeypatch.setattr(reproduce, "cpu_count", lambda: 2)
    a = reproduce.parse_args(["qlm", "--size", "tiny", "--jobs", "1000"])
    assert a.jobs == 2
    assert capsys.readouterr().err == ("llmsim-reproduce: note: --jobs 1000 is more than the 2 CPU(s) this process "
                                       "may use; running 2\n")
    assert reproduce.parse_args(["qlm", "--size", "tiny", "--jobs", "2"]).jobs == 2
    assert capsys.readouterr().err == ""


def test_a_report_path_that_cannot_be_written_is_refused_before_any_run(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """all --report DIR wrote the page only after every experiment (hours at the full size), then failed."""
    with pytest.raises(SystemExit) as e:
        reproduce.parse_args(["all", "--size", "tiny", "--report", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert err == f"llmsim-reproduce: error: argument --report: {tmp_path}: is a directory; expected a file name\n"


def test_names_and_old_spec_ids() -> None:
    assert ORDER == ("qos_edge", "intelligent_router", "best_effort", "qlm", "routebalance", "prefix", "disagg")
    assert {a: resolve(a) for a in ALIASES} == {"spec000": "qos_edge", "spec001": "intelligent_router",
                                                "spec002": "best_effort", "spec003": "qlm", "spec004": "routebalance"}
    with pytest.raises(ConfigError, match="unknown experiment"):
        resolve("nope")


def test_one_size_mechanism(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SIZE_ENV, raising=False)
    assert (size_name(False), size_name(True), size_name(True, "tiny")) == ("full", "quick", "tiny")
    monkeypatch.setenv(SIZE_ENV, "tiny")  # what the test suite sets: it beats --quick, not --size
    assert (size_name(True), size_name(False, "quick")) == ("tiny", "quick")
    monkeypatch.setenv(SIZE_ENV, "huge")
    with pytest.raises(ConfigError, match=SIZE_ENV):
        size_name(False)
    with pytest.raises(ConfigError, match="--size"):
        size_name(False, "huge")


def test_best_effort_is_dispatched_with_its_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    calls = []

    def run(quick: bool, out_dir: Path, jobs: int, progress: bool, size: str | None = None) -> list[dict[str, Any]]:
        calls.append((quick, out_dir, jobs, progress, size))
        return [claim_row("best_effort", "a claim", 1.0, 1.1, "reproduced", unit="%")]

    monkeypatch.setitem(sys.modules, MODULES["best_effort"], types.SimpleNamespace(run=run))
    reproduce.main(["spec002", "--quick", "--json", "--jobs", "2", "--out", str(tmp_path)])
    assert calls == [(True, tmp_path, 2, True, None)]
    row = json.loads(capsys.readouterr().out)
    assert row["paper"] == "best_effort" and row["verdict"] == "reproduced"
    assert (tmp_path / "claims.md").is_file()
    reproduce.main(["best_effort", "--size", "tiny", "--json", "--no-progress", "--out", str(tmp_path / "t")])
    assert calls[-1] == (False, tmp_path / "t", 1, False, "tiny")
    with pytest.raises(SystemExit) as e:  # an option best_effort's run does not take
        reproduce.main(["best_effort", "--sections", "main", "--out", str(tmp_path)])
    assert e.value.code == 2 and "best_effort does not take --sections" in capsys.readouterr().err


def test_missing_module_is_one_line_exit_2(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, MODULES["best_effort"], None)  # import raises ModuleNotFoundError
    with pytest.raises(SystemExit) as e:
        reproduce.main(["spec002", "--quick"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "best_effort" in err


def test_resume_of_a_missing_out_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--resume with an --out that does not exist (a typo) would start every experiment afresh: refused instead."""
    with pytest.raises(SystemExit) as e:
        reproduce.main(["all", "--size", "tiny", "--out", str(tmp_path / "typo"), "--resume", "--no-progress"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert f"--resume: {tmp_path / 'typo'}: no such directory, nothing to resume" in err
    assert not (tmp_path / "typo").exists()
