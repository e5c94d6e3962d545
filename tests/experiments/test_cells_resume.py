"""Per-cell checkpoints (experiments/harness/cellfile.py, run_cells): a stopped run resumed from its cells.jsonl
gives byte-identical outputs and runs only the missing cells; another setting, a cut-off line and a bad line are
handled in one line."""

from __future__ import annotations

import functools
import json
import math
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from experiments import reproduce
from experiments.harness import cellfile
from experiments.harness.cellfile import CELLS_FILE, decode, encode, recording, run_setting
from experiments.harness.claims import claim_row
from experiments.harness.pool import run_cells
from experiments.harness.registry import MODULES, ORDER
from experiments.papers import qlm
from experiments.papers.qlm import experiment as qlm_experiment
from experiments.papers.qlm import setup as qlm_setup
from llmsim.errors import ConfigError

pytestmark = pytest.mark.timeout(120)
SETTING = run_setting("qlm", "tiny", {})


class Stop(Exception):
    """The fake interruption."""


def same(a: Any, b: Any) -> bool:
    """Equal in value and in type, all the way down (NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(k, k2) and same(a[k], b[k2]) for k, k2 in zip(a, b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    if isinstance(a, float | np.floating) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b) and (not isinstance(a, float) or math.copysign(1, a) == math.copysign(1, b))


def test_rows_round_trip_exactly_through_the_file_format() -> None:
    row = {"x": 0.1, "nan": math.nan, "inf": -math.inf, "neg0": -0.0, "big": 2**70, "t": (1, (2.5, "a"), []),
           "keys": {1.0: "a", (1, 2): None, "s": True}, "$t": "a user key", "np": [np.float32(0.1), np.int64(7),
           np.bool_(True), np.float64(np.nan)], "arr": np.arange(6, dtype=np.int32).reshape(2, 3),
           "empty": np.zeros((0, 2)), "nested": [{"$t": {"tuple": (1,)}}]}
    back = decode(json.loads(json.dumps(encode(row))))
    assert same(back, row)
    with pytest.raises(cellfile.Unstorable, match="a builtins.object"):
        encode({"x": object()})


def counting(calls: list[int], stop_after: int | None = None) -> Any:
    """qlm's cell function, counted (and raising after ``stop_after`` cells); the same name, so the same keys."""
    @functools.wraps(qlm_setup.run_cell)
    def run_cell(c: qlm_setup.Cell) -> dict[str, Any]:
        if stop_after is not None and len(calls) == stop_after:
            raise Stop
        calls.append(1)
        return qlm_setup.run_cell(c)
    return run_cell


def qlm_run(monkeypatch: pytest.MonkeyPatch, out: Path, resume: bool, calls: list[int],
            stop_after: int | None = None) -> tuple[bytes, str]:
    """qlm's tiny size into ``out`` with recorded cells; (results.json, the claim rows as JSON)."""
    monkeypatch.setattr(qlm_experiment, "run_cell", counting(calls, stop_after))
    with recording(out / CELLS_FILE, SETTING, resume, "qlm"):
        rows = qlm.run(False, out, 1, False, size="tiny")
    return (out / "results.json").read_bytes(), json.dumps(rows)


@pytest.fixture
def still_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wall times are the only thing two runs may differ in: a clock that stands still makes them equal."""
    clock = types.SimpleNamespace(perf_counter=lambda: 0.0)
    monkeypatch.setattr(qlm_setup, "time", clock)
    monkeypatch.setattr(qlm_experiment, "time", clock)


@pytest.mark.usefixtures("still_clock")
def test_a_stopped_qlm_run_resumes_byte_identical_without_rerunning_kept_cells(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    whole: list[int] = []
    expected = qlm_run(monkeypatch, tmp_path / "whole", False, whole)
    stopped: list[int] = []
    with pytest.raises(Stop):
        qlm_run(monkeypatch, tmp_path / "cut", False, stopped, stop_after=5)
    assert len(stopped) == 5 and len((tmp_path / "cut" / CELLS_FILE).read_text().splitlines()) == 1 + 5
    capsys.readouterr()
    rest: list[int] = []
    assert qlm_run(monkeypatch, tmp_path / "cut", True, rest) == expected
    assert len(rest) == len(whole) - 5   # the kept cells did not run again
    note = f"[qlm] resuming: 5 of {len(whole)} cells kept from {tmp_path / 'cut' / CELLS_FILE}"
    assert note in capsys.readouterr().err

    cells = tmp_path / "whole" / CELLS_FILE     # killed while writing its last line
    text = cells.read_text()
    cells.write_text(text[:-40])
    again: list[int] = []
    assert qlm_run(monkeypatch, tmp_path / "whole", True, again) == expected
    assert len(again) == 1 and "skipped a cut-off last line" in capsys.readouterr().err
    assert cells.read_text() == text


def test_another_setting_a_bad_line_and_a_forgotten_resume_are_refused_in_one_line(tmp_path: Path) -> None:
    cells = tmp_path / CELLS_FILE
    with recording(cells, SETTING, False, "t") as store:
        store.add("k1", {"a": 1})
    with pytest.raises(ConfigError) as e, recording(cells, run_setting("qlm", "quick", {}), True, "t"):
        pass
    assert str(e.value) == (f"{cells}: its cells are of another setting (size: 'tiny' there, 'quick' here); resume "
                            "with the same setting and code, or use another --out")
    with pytest.raises(ConfigError, match="holds the cells of an earlier run; add --resume to keep them"), \
            recording(cells, SETTING, False, "t"):
        pass
    cells.write_text(cells.read_text() + "{oops\n" + '{"key": "k2", "row": 2}\n')
    with pytest.raises(ConfigError, match=rf"^{cells}: line 3: not a cell row \(JSONDecodeError"), \
            recording(cells, SETTING, True, "t"):
        pass


def square(x: int) -> int:
    """A cell function for the pool (module-level: pickled)."""
    return x * x


def test_run_cells_in_a_pool_records_every_cell_and_keeps_them_in_cell_order(tmp_path: Path) -> None:
    cells = tmp_path / CELLS_FILE
    with recording(cells, SETTING, False, "t"):
        assert run_cells(square, list(range(6)), 2, False, "t") == [0, 1, 4, 9, 16, 25]
    assert len(cells.read_text().splitlines()) == 7
    with recording(cells, SETTING, True, "t") as store:
        store.rows = {k: -1 for k in store.rows}   # what the cells hold is what a resumed run returns
        assert run_cells(square, list(range(7)), 2, False, "t") == [-1] * 6 + [36]
    assert run_cells(square, [3], 1, False, "t") == [9]   # outside a recording: no file, nothing kept


def test_the_command_line_resumes_one_experiment_and_refuses_another_size(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MPLBACKEND", "Agg")
    out = tmp_path / "q"
    reproduce.main(["qlm", "--size", "tiny", "--out", str(out), "--json", "--no-progress"])
    captured = capsys.readouterr()
    first = [json.loads(line) for line in captured.out.splitlines()]
    assert first and "resuming" not in captured.err
    calls: list[int] = []
    monkeypatch.setattr(qlm_experiment, "run_cell", counting(calls))
    reproduce.main(["qlm", "--size", "tiny", "--out", str(out), "--json", "--no-progress", "--resume"])
    captured = capsys.readouterr()
    again = [json.loads(line) for line in captured.out.splitlines()]
    assert calls == [] and "cells kept from" in captured.err
    assert [json.dumps({k: v for k, v in r.items() if k != "command"}) for r in again] == \
        [json.dumps({k: v for k, v in r.items() if k != "command"}) for r in first]
    with pytest.raises(SystemExit) as e:
        reproduce.main(["qlm", "--quick", "--out", str(out), "--resume", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and calls == []
    assert f"{out / CELLS_FILE}: its cells are of another setting (size: 'tiny' there, 'quick' here)" in err


ran: list[int] = []


def counted_square(x: int) -> int:
    """A cell function that stops the run at its third cell while ``stopping`` holds."""
    if stopping and x == 3:
        raise Stop("killed")
    ran.append(x)
    return x * x


stopping: list[bool] = []


def test_all_resume_runs_a_stopped_experiment_again_from_its_cells(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def run(quick: bool, out_dir: Path, jobs: int, progress: bool, size: str | None = None) -> list[dict[str, Any]]:
        got = run_cells(counted_square, [1, 2, 3, 4], jobs, progress, "fake")
        return [claim_row("qlm", "fake claim", 30.0, float(sum(got)), "reproduced", setting=str(size))]

    for module in MODULES.values():
        monkeypatch.setitem(sys.modules, module, types.SimpleNamespace(run=run))
    out = tmp_path / "out"
    stopping.append(True)
    ran.clear()
    reproduce.main(["all", "--size", "tiny", "--out", str(out), "--no-progress"])
    assert (out / ORDER[0] / "failed.json").is_file() and len(ran) == 2 * len(ORDER)
    stopping.clear()
    ran.clear()
    capsys.readouterr()
    reproduce.main(["all", "--size", "tiny", "--out", str(out), "--no-progress", "--resume"])
    assert ran == [3, 4] * len(ORDER)   # every experiment kept its two recorded cells
    err = capsys.readouterr().err
    assert "running it again from the cells it recorded" in err and "[fake] resuming: 2 of 4 cells kept" in err
    assert all((out / n / "claims.json").is_file() and not (out / n / "failed.json").exists() for n in ORDER)
    assert all('"measured": 30.0' in (out / n / "claims.json").read_text() for n in ORDER)  # 1 + 4 + 9 + 16
    with pytest.raises(SystemExit) as e:   # without --resume: refused before anything runs, in one line
        reproduce.main(["all", "--size", "tiny", "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err == (f"llmsim-reproduce: error: {out / ORDER[0] / CELLS_FILE}: holds the cells of "
                                         "an earlier run; add --resume to keep them, or remove it (or use another "
                                         "--out) to start again")


def test_ctrl_c_says_how_to_resume_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    def run(quick: bool, out_dir: Path, jobs: int, progress: bool) -> list[dict[str, Any]]:
        run_cells(square, [1, 2], 1, False, "fake")
        raise KeyboardInterrupt

    monkeypatch.setitem(sys.modules, MODULES["qlm"], types.SimpleNamespace(run=run))
    with pytest.raises(SystemExit) as e:
        reproduce.main(["qlm", "--out", str(tmp_path), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 130 and err == (f"llmsim-reproduce: stopped; 2 finished cell(s) are recorded in "
                                           f"{tmp_path / CELLS_FILE}: run the same command with --resume --out "
                                           f"{tmp_path} to go on from them")
