"""Output people read: sweep reports (one curve per policy, typed sweep.csv columns, --x), the run plots,
the terminal summary (outcome counts, empty results) and the progress reporter."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.metrics.recorder import SLO
from llmsim.metrics.report import (
    SimProgress,
    collect_sweep,
    empty_result_reason,
    latency_cdf_figure,
    outcome_rows,
    save_plots,
    sweep_figure,
    timeline_figure,
)
from llmsim.metrics.sweep import ReportError, choose_x, default_x, parse_overrides
from llmsim.testing import LinearProfile, requests
from tests.helpers import REPO


def _report(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmsim.metrics.report", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120)


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
    assert cmd == [f"python -m llmsim.metrics.report {sweep_dir}"]
    r = _report(*cmd[0].split()[3:])  # the printed command, run as printed
    assert r.returncode == 0, r.stderr


def test_sweep_csv_has_one_typed_column_per_override_key(sweep_run):
    import pandas as pd

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
    fig = sweep_figure(sweep)  # what `python -m llmsim.metrics.report` saves as sweep.png
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
    assert len(lines) == 1 and lines[0].startswith("llmsim.metrics.report: error: ") and message in lines[0], r.stderr


# ---------------------------------------------------------------------- run plots
@pytest.fixture(scope="module")
def small_result():
    reqs = requests([(0.02 * i, 50 + 7 * (i % 5), 3 + (i % 7)) for i in range(120)])
    insts = [InstanceConfig(profile=LinearProfile(kv_tokens=1600), engine=EngineConfig(max_num_seqs=8))
             for _ in range(2)]
    return simulate(insts, reqs, "jsq", slo=SLO(ttft_ms=100, tpot_ms=20), metrics_interval=0.2)


def test_latency_cdfs_have_units_titles_and_slo_lines(small_result):
    fig = latency_cdf_figure(small_result, SLO(ttft_ms=100, tpot_ms=20), label="jsq on 2 instances")
    assert "jsq on 2 instances" in fig._suptitle.get_text()
    titles = [ax.get_title() for ax in fig.axes]
    assert [t.split(" (")[0] for t in titles] == ["Time to first token", "Time per output token", "End-to-end latency"]
    for ax in fig.axes:
        assert "ms" in ax.get_xlabel() and ax.get_ylabel() and ax.get_legend() is not None
    slo_lines = {i: [ln for ln in ax.get_lines() if ln.get_label().startswith("SLO")] for i, ax in enumerate(fig.axes)}
    assert [len(v) for v in slo_lines.values()] == [1, 1, 0]  # ttft and tpot targets set, e2el not
    assert slo_lines[0][0].get_xdata()[0] == 100 and "met by" in slo_lines[0][0].get_label()
    assert slo_lines[1][0].get_xdata()[0] == 20


def test_timeline_shows_kv_percent_and_central_queue(small_result):
    fig = timeline_figure(small_result)
    assert len(fig.axes) == 3
    engine, kv, central = fig.axes
    assert "% of blocks" in kv.get_ylabel()
    kv_values = np.concatenate([np.asarray(ln.get_ydata(), dtype=float) for ln in kv.get_lines()])
    tl = small_result.timeline
    expected = 100.0 * (tl["kv_used_blocks"] / tl["kv_total_blocks"]).max()
    assert expected > 5.0 and kv_values.max() == pytest.approx(expected)  # percent of blocks, not a fraction
    assert "Central queue" in central.get_title() and central.get_ylabel() == "requests"
    assert central.get_xlabel() == "simulated time (s)"
    for ax in fig.axes:
        assert ax.get_title() and ax.get_ylabel() and ax.get_legend() is not None


def test_save_plots_writes_both_files(small_result, tmp_path):
    paths = save_plots(small_result, tmp_path, slo=SLO(ttft_ms=100))
    assert sorted(p.name for p in paths) == ["latency_cdf.png", "timeline.png"]
    assert all(p.stat().st_size > 10_000 for p in paths)


# ---------------------------------------------------------------------- terminal summary
def test_outcome_rows_show_truncated_preempted_dropped():
    rows = dict(outcome_rows({"num_requests": 200, "completed": 150, "truncated": 3, "preempted_requests": 12,
                              "preemptions": 17, "dropped": 50, "dropped_by_reason": {"router": 40, "x": 10},
                              "mean_busy_fraction": 0.9, "mean_token_throughput_vs_peak": 0.2}))
    assert rows["Truncated at max_model_len"] == "3 (1.5 %)"
    assert rows["Preempted (requests)"] == "12 (6.0 %)" and rows["Preemptions (total)"] == "17"
    assert rows["Dropped"] == "50 (25.0 %)" and rows["  dropped: router"] == "40"
    assert rows["Busy fraction"] == "0.900" and rows["Token throughput vs peak"] == "0.200"


def test_empty_result_reason():
    assert empty_result_reason({"completed": 3, "num_requests": 3}) is None
    why = empty_result_reason({"completed": 0, "num_requests": 20, "dropped": 20,
                               "dropped_by_reason": {"prompt_exceeds_max_model_len": 20}})
    assert why == "no request completed: all 20 were dropped (prompt_exceeds_max_model_len: 20); see dropped.csv"
    assert "yielded none (rows skipped: model_filter: 9)" in empty_result_reason(
        {"completed": 0, "num_requests": 0, "workload_skipped": {"model_filter": 9}})


def _llmsim(args, cwd):
    return subprocess.run([sys.executable, "-m", "llmsim", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_cli_empty_result_is_a_one_line_error(tmp_path):
    p = _llmsim(["workload.num_requests=20", "engine.max_model_len=64", "sim.on_unservable=drop",
                 f"hydra.run.dir={tmp_path}/run"], tmp_path)
    assert p.returncode == 1
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("llmsim: error: no request completed: all 20 were dropped ("), \
        p.stderr
    assert "prompt_exceeds_max_model_len: 20" in lines[0]
    assert "nan" not in p.stdout.lower() and "Mean TTFT" not in p.stdout
    assert (tmp_path / "run" / "dropped.csv").exists()  # what happened is still on disk


def test_cli_summary_shows_outcome_counts(tmp_path):
    p = _llmsim(["workload.num_requests=150", "workload.rate=40", "engine.num_gpu_blocks=300",
                 "engine.max_model_len=1024", "sim.on_unservable=drop", "output.plots=false",
                 f"hydra.run.dir={tmp_path}/run"], tmp_path)
    assert p.returncode == 0, p.stderr
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["dropped"] > 0 and s["preempted_requests"] > 0  # the case exercises what it shows
    out = p.stdout
    for label in ("Mean TTFT (ms)", "Truncated at max_model_len", "Preempted (requests)", "Preemptions (total)",
                  "Dropped", "dropped: prompt_exceeds_max_model_len", "Busy fraction", "Token throughput vs peak"):
        assert label in out, label
    assert re.search(rf"Preempted \(requests\)\s*│\s*{s['preempted_requests']} \(", out)
    assert "utilisation" not in out.lower() and "(measured)" not in out


# ---------------------------------------------------------------------- progress
def _busy_run(progress):
    # one slow instance, arrivals much faster than service: a long drain after the last arrival
    reqs = requests([(0.01 * i, 40, 20) for i in range(300)])
    inst = [InstanceConfig(profile=LinearProfile(base=0.02, per_token=0.0005), engine=EngineConfig(max_num_seqs=4))]
    return simulate(inst, reqs, "round_robin", progress=progress, total=300)


_LINE = re.compile(r"^llmsim: ([\d,]+)/([\d,]+) requests done \(\d+ %\), (draining, )?([\d,]+) in flight, "
                   r"sim [\d,]+ s, [\d,]+ req/s$")


def test_progress_lines_count_completions_and_show_the_drain():
    buf = io.StringIO()
    prog = SimProgress(stream=buf, line_every_s=0.0, check_every=1)
    res = _busy_run(prog)
    assert res.summary["completed"] == 300
    lines = buf.getvalue().splitlines()
    assert len(lines) == 300 == prog.lines  # check_every=1, no minimum interval: one line per completion
    parsed = []
    for line in lines:
        m = _LINE.match(line)
        assert m, line
        parsed.append((int(m[1].replace(",", "")), int(m[2]), bool(m[3]), int(m[4].replace(",", ""))))
    assert [d for d, *_ in parsed] == list(range(1, 301))  # completions, one by one, not arrivals
    assert all(total == 300 for _, total, _, _ in parsed)
    drain = [p for p in parsed if p[2]]
    assert drain and drain[-1][3] == 0 and drain[0][3] > 50  # a long drain, shown as such
    assert all(d + f == 300 for d, _, _, f in drain)  # after the last arrival: done + in flight = all
    assert any(not p[2] and p[3] > 0 for p in parsed)  # in flight before the drain too
    assert "\r" not in buf.getvalue()


def test_progress_lines_are_throttled():
    buf = io.StringIO()
    _busy_run(SimProgress(stream=buf, line_every_s=3600.0))
    assert buf.getvalue() == ""  # a short run on a non-terminal prints nothing between its 5 s marks


def test_progress_bar_on_a_terminal():
    buf = io.StringIO()
    prog = SimProgress(stream=buf, tty=True, refresh_s=0.0, check_every=1)
    _busy_run(prog)
    text = buf.getvalue()
    assert "requests done" in text and "300/300" in text and "draining, " in text and "in flight" in text
    assert prog.lines == 0  # bar mode prints no log lines


def test_progress_hooks_are_removed_and_absent_when_off():
    from llmsim.cluster import Cluster
    from llmsim.routing import make_router

    cluster = Cluster([InstanceConfig(profile=LinearProfile())], make_router("round_robin"))
    prog = SimProgress(stream=io.StringIO(), tty=False)
    rec = cluster.recorder
    before = (list(rec.finish_observers), list(rec.drop_observers))
    prog.attach(cluster, 5)
    assert prog.on_finish in rec.finish_observers and prog.on_drop in rec.drop_observers and prog.total == 5
    prog.close()
    assert (rec.finish_observers, rec.drop_observers) == before
    assert SimProgress().line_every_s == 5.0 and SimProgress().refresh_s == 0.1


@pytest.mark.skipif(sys.platform == "win32", reason="pty")
def test_progress_draws_a_bar_only_on_a_terminal_with_a_width():
    import fcntl
    import os
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    try:
        with os.fdopen(os.dup(slave), "w") as tty:
            assert not SimProgress(stream=tty).tty  # 0 columns: tqdm would draw nothing; lines instead
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
            assert SimProgress(stream=tty).tty
        assert not SimProgress(stream=io.StringIO()).tty
    finally:
        os.close(master)
        os.close(slave)
