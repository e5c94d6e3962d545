"""What a search shows while it runs (from its first second) and what a failed run leaves on disk (nothing)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from llmsim.cli.hydra_app import discard_run_dir
from llmsim.planning.capacity import base_config, search_all
from llmsim.planning.capacity_report import goodput_note
from llmsim.planning.progress import SearchProgress
from llmsim.planning.search import CapacityConfig
from tests.planning.helpers import compose


def test_plain_lines_show_the_phase_at_once_then_at_most_every_few_seconds() -> None:
    out = io.StringIO()
    p = SearchProgress("llmsim-capacity", stream=out, tty=False, line_every_s=3600)
    p.phase("preflight (20 requests on a100x4 / jsq)")
    p.queue(6)
    p.advance(2)  # within line_every_s of the phase's line: no new line
    p.phase("searching 1 cluster x policy pair on 2 worker(s)")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and p.lines == 2 and "\r" not in out.getvalue()
    assert lines[0].startswith("llmsim-capacity: preflight (20 requests on a100x4 / jsq), ")
    assert lines[1].startswith("llmsim-capacity: searching 1 cluster x policy pair on 2 worker(s), "
                               "2/6 simulations done, ")


def test_a_line_every_interval_with_the_round() -> None:
    out = io.StringIO()
    p = SearchProgress("llmsim-deploy", stream=out, tty=False, line_every_s=0)
    p.phase("one-replica capacity of 3 candidates")
    p.queue(3)
    p.note("h100 tp1 chunked: rate 8 req/s")
    p.advance()
    assert out.getvalue().splitlines()[-1].startswith(
        "llmsim-deploy: one-replica capacity of 3 candidates, 1/3 simulations done, h100 tp1 chunked: rate 8 req/s, ")


def test_a_terminal_gets_one_bar_removed_at_the_end() -> None:
    out = io.StringIO()
    with SearchProgress("llmsim-capacity", stream=out, tty=True) as p:
        p.phase("searching")
        p.queue(4)
        p.advance(3)
        assert "3/4 simulations done" in out.getvalue() and "searching" in out.getvalue()
    assert p.lines == 0  # a bar, not lines


def test_disabled_progress_writes_nothing() -> None:
    out = io.StringIO()
    p = SearchProgress("llmsim-capacity", enabled=False, stream=out, tty=False)
    p.phase("x")
    p.queue(2)
    p.advance()
    p.close()
    assert out.getvalue() == ""


def _stub(cfg: dict) -> dict:
    r = cfg["workload"]["rate"]
    return {"slo_attainment": 1.0 if r < 5 else 0.0, "request_goodput": r, "request_throughput": r}


def test_the_runner_reports_every_simulation_and_each_round() -> None:
    out = io.StringIO()
    progress = SearchProgress("llmsim-capacity", stream=out, tty=False, line_every_s=0)
    cap = CapacityConfig(seeds=2, workers=1, tolerance=0.2)
    _, runner = search_all(base_config(compose()), cap, "one", fn=_stub, progress=progress)
    text = out.getvalue()
    assert progress.done == progress.queued == runner.runs > 0
    assert "llmsim-capacity: searching 1 cluster x policy pair on 1 worker(s)" in text
    assert "one / round_robin: rate " in text and "(met at " in text and "missed at " in text


def test_the_goodput_note_explains_the_run_length() -> None:
    row = {"capacity_rps": 20.0, "goodput_at_capacity": 12.5, "run_s_at_capacity": 72.0, "requests_per_run": 1000,
           "num_requests": 1000, "target": 0.9, "curve": [{"rate": 20.0, "attainment": 0.9}]}
    note = goodput_note(row)
    assert "arrive over ~50 s but the run lasts 72 s" in note and "about 0.90 x 1,000 / 72 s (12.5 req/s" in note
    assert goodput_note({**row, "goodput_at_capacity": None}) == ""


def _hydra_made(run: Path) -> None:
    (run / ".hydra").mkdir(parents=True)
    for f in ("config.yaml", "hydra.yaml", "overrides.yaml"):
        (run / ".hydra" / f).write_text("x: 1\n")
    (run / "llmsim-capacity.log").write_text("")


def test_a_failed_run_removes_hydras_files_and_the_empty_folders(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "outputs" / "capacity" / "2025-01-01" / "10-00-00"
    _hydra_made(run)
    (tmp_path / "outputs" / "keep.txt").write_text("mine")
    discard_run_dir(run)
    assert not (tmp_path / "outputs" / "capacity").exists() and (tmp_path / "outputs" / "keep.txt").exists()


@pytest.mark.parametrize("other", ["capacity.json", "notes.txt"])
def test_a_failed_run_never_deletes_anything_else(tmp_path: Path, monkeypatch, other: str) -> None:
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    _hydra_made(run)
    (run / other).write_text("kept")
    (run / "other.log").write_text("a log with lines")
    discard_run_dir(run)
    assert sorted(p.name for p in run.iterdir()) == sorted([other, "other.log"])
