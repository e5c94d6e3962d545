"""What a person reads after one run: the latency CDFs and the timeline (units, titles, SLO lines, KV in percent),
the two terminal tables (outcome counts beside the ``vllm bench serve`` numbers), and the one-line reason when
nothing completed."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.errors import ConfigError
from llmsim.metrics.plots import latency_cdf_figure, save_plots, timeline_figure
from llmsim.metrics.report import empty_result_reason, outcome_rows
from llmsim.schema import SLO
from llmsim.testing import LinearProfile, requests


@pytest.fixture(scope="module")
def small_result():
    reqs = requests([(0.02 * i, 50 + 7 * (i % 5), 3 + (i % 7)) for i in range(120)])
    insts = [InstanceConfig(profile=LinearProfile(kv_tokens=1600), engine=EngineConfig(max_num_seqs=8))
             for _ in range(2)]
    return simulate(insts, reqs, "jsq", slo=SLO(ttft_ms=100, tpot_ms=20), metrics_interval=0.2)


def test_latency_cdfs_have_units_titles_and_slo_lines(small_result):
    fig = latency_cdf_figure(small_result, SLO(ttft_ms=100, tpot_ms=20), label="jsq on 2 instances")
    assert "jsq on 2 instances" in fig.get_suptitle()
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


def test_a_save_in_an_unknown_format_is_refused_and_leaves_no_directory(small_result, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ConfigError) as e:
        small_result.save(out, "xlsx")
    assert str(e.value) == "output.format: expected 'csv' or 'parquet', got 'xlsx'" and not out.exists()
