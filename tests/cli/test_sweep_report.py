"""A sweep's report (``python -m llmsim.cli.report MULTIRUN_DIR``, the command ``llmsim -m`` prints):
``sweep.csv`` with one typed column per override key, ``sweep.png`` with one curve per policy, ``--x``, override
parsing with Hydra's grammar, and one-line errors. One real 2 policies x 2 rates sweep; the rest on fake jobs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from llmsim.cli.sweep import ReportError, choose_x, collect_sweep, default_x, parse_overrides
from llmsim.cli.sweep_plot import sweep_figure
from tests.helpers import REPO


def _report(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmsim.cli.report", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120)


# ---------------------------------------------------------------------- a real 2 policies x 2 rates sweep
@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    p = subprocess.run([sys.executable, "-m", "llmsim", "-m", "policy=jsq,round_robin", "workload.rate=2,16",
                        "workload.num_requests=80", "output.plots=false", f"hydra.sweep.dir={tmp}/sweep"],
                       cwd=tmp, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return tmp / "sweep", p


def test_multirun_prints_its_directory_and_the_exact_report_command(sweep_run):
    sweep_dir, p = sweep_run
    lines = p.stdout.splitlines()
    assert f"sweep: 4 runs in {sweep_dir}" in lines
    cmd = [line.removeprefix("report: ") for line in lines if line.startswith("report: ")]
    assert cmd == [f"python -m llmsim.cli.report {sweep_dir}"]
    r = _report(*cmd[0].split()[3:])  # the printed command, run as printed
    assert r.returncode == 0, r.stderr


def test_sweep_csv_has_one_typed_column_per_override_key(sweep_run):
    sweep_dir, _ = sweep_run
    r = _report(str(sweep_dir))
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(sweep_dir / "sweep.csv")
    overrides = ["policy", "workload.rate", "workload.num_requests", "output.plots"]
    assert list(df.columns[:4]) == overrides  # the override keys first, in command-line order
    assert "median_ttft_ms" in df.columns and "job_dir" in df.columns
    assert not any("=" in c for c in df.columns)  # no unparsed "key=value" column
    assert sorted(df["policy"].unique()) == ["jsq", "round_robin"]
    assert df["workload.rate"].dtype.kind in "if" and sorted(df["workload.rate"].unique()) == [2, 16]
    assert (df["completed"] == 80).all() and len(df) == 4
    # sorted by curve, then x
    assert list(zip(df["policy"], df["workload.rate"])) == [("jsq", 2), ("jsq", 16), ("round_robin", 2),
                                                            ("round_robin", 16)]
    assert (sweep_dir / "sweep.png").stat().st_size > 10_000
    assert "x axis: workload.rate; curves: policy" in r.stdout


def _data_lines(ax):
    return [ln for ln in ax.get_lines() if len(ln.get_xdata())]


def test_sweep_plot_has_one_curve_per_policy(sweep_run):
    sweep_dir, _ = sweep_run
    sweep = collect_sweep(sweep_dir)
    assert sweep.swept == ["policy", "workload.rate"]
    fig = sweep_figure(sweep)  # what `python -m llmsim.cli.report` saves as sweep.png
    ttft = fig.axes[0]
    assert "TTFT" in ttft.get_ylabel() and "ms" in ttft.get_ylabel() and "req/s" in ttft.get_xlabel()
    medians = [ln for ln in _data_lines(ttft) if ln.get_linestyle() == "-"]
    assert len(medians) == 2  # one median curve per policy (a merged zig-zag line would be one)
    for ln in _data_lines(ttft):
        xs = np.asarray(ln.get_xdata(), dtype=float)
        assert list(xs) == [2.0, 16.0]  # each curve runs once along x
    assert len({ln.get_color() for ln in medians}) == 2
    legend_texts = sorted(t.get_text() for t in fig.legends[0].get_texts())
    assert legend_texts == ["jsq", "round_robin"]
    for ax in fig.axes:
        if ax.get_visible():
            assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()


def test_report_x_option(sweep_run):
    sweep_dir, _ = sweep_run
    r = _report(str(sweep_dir), "--x", "policy")
    assert r.returncode == 0, r.stderr
    assert "x axis: policy; curves: workload.rate" in r.stdout
    bad = _report(str(sweep_dir), "--x", "workload.rat")
    assert bad.returncode == 2
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in bad.stderr
    assert "'workload.rat'" in lines[0] and "swept keys: policy, workload.rate" in lines[0]
    fixed = _report(str(sweep_dir), "--x", "workload.num_requests")  # an override, but not swept
    assert fixed.returncode == 2 and "one value" in fixed.stderr and "swept keys: policy, workload.rate" in fixed.stderr


# ---------------------------------------------------------------------- sweep parsing, no simulation
def _fake_job(root: Path, name: str, overrides: list[str], summary: dict) -> None:
    job = root / name
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (job / "summary.json").write_text(json.dumps(summary))


def test_overrides_are_parsed_with_hydra_grammar():
    got = parse_overrides(["workload.rate=2", "policy=jsq", "+sim.x=1.5", "++a.b=[0,600]", "seed=7", "s='a b'",
                           "flag=true"])
    assert got == {"workload.rate": 2, "policy": "jsq", "sim.x": 1.5, "a.b": "[0,600]", "seed": 7, "s": "a b",
                   "flag": True}


def test_jobs_sort_by_number_and_x_defaults_to_the_numeric_key(tmp_path):
    for i in range(12):
        _fake_job(tmp_path, f"{i}_job", [f"engine={'chunked' if i % 2 else 'vllm_v0'}", f"sim.view_staleness={i}"],
                  {"completed": 1, "median_ttft_ms": float(i + 1), "dropped_by_reason": {}})
    sweep = collect_sweep(tmp_path)
    assert list(sweep.frame["sim.view_staleness"]) == list(range(12))  # 10 and 11 after 9, not after 1
    assert "dropped_by_reason" not in sweep.frame  # nested values stay in summary.json
    assert default_x(sweep.frame, sweep.swept) == "sim.view_staleness"
    assert choose_x(sweep, None) == "sim.view_staleness"
    with pytest.raises(ReportError, match=r"swept keys: engine, sim.view_staleness"):
        choose_x(sweep, "nope")


@pytest.mark.parametrize("setup,message", [
    ("missing", "no such directory"),
    ("empty", "no */summary.json"),
])
def test_report_errors_are_one_line(tmp_path, setup, message):
    target = tmp_path / "x"
    if setup == "empty":
        target.mkdir()
    r = _report(str(target))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmsim.cli.report: error: ") and message in lines[0], r.stderr


def test_the_old_report_command_says_where_it_went():
    r = subprocess.run([sys.executable, "-m", "llmsim.metrics.report", "multirun/x"], capture_output=True, text=True,
                       cwd=REPO, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "python -m llmsim.cli.report MULTIRUN_DIR" in r.stderr
