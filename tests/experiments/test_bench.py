"""``python -m experiments.bench``: the one entry of the benchmarks, and ``sim --prefix-cost``, the paired measurement
of prefix caching's cost with no reuse, on a tiny case; its figures are the benchmark's business, not asserted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import REPO


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "experiments.bench", "sim", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=100)


@pytest.mark.timeout(120)
def test_prefix_cost_pairs_caching_on_and_off_and_reports_the_median_ratio():
    p = _bench("--prefix-cost", "--pairs", "2", "--case", "single", "--requests", "150", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    row = json.loads(p.stdout.strip().splitlines()[-1])
    assert row["case"] == "single" and row["requests"] == 150 and row["pairs"] == 2 and row["target"] == 1.10
    assert 0 < row["min_ratio"] <= row["median_ratio"] <= row["max_ratio"]
    assert row["median_at_or_under_target"] == (row["median_ratio"] <= 1.10) and len(row["ratios"]) == 2
    assert row["met"] == (row["verdict"] == "met")  # (an undecided median under the line is not "met")
    assert row["ci95_low"] <= row["median_ratio"] <= row["ci95_high"]
    assert row["verdict"] in {"met", "NOT met", "undecided"} and row["hash_block"] == 16
    text = _bench("--prefix-cost", "--pairs", "1", "--case", "single", "--requests", "150").stdout
    assert "prefix caching with no reuse costs" in text and "median of 1 pair(s)" in text and "target <= 1.10" in text
    assert "95 % interval" in text


def test_cost_verdict_says_undecided_when_the_interval_spans_the_target():
    from experiments.bench.sim import cost_verdict, median_interval

    assert cost_verdict([1.05, 1.06, 1.07, 1.04, 1.08] * 4) == "met"
    assert cost_verdict([1.12, 1.15, 1.13, 1.18, 1.14] * 4) == "NOT met"
    assert cost_verdict([1.06, 1.14, 1.09, 1.12, 1.08, 1.11] * 3) == "undecided"
    assert median_interval([1.0, 1.1, 1.2]) == median_interval([1.0, 1.1, 1.2])  # a fixed seed
    lo, hi = median_interval([1.02, 1.2] * 10)
    assert 1.02 <= lo <= hi <= 1.2


@pytest.mark.timeout(60)
@pytest.mark.parametrize("args, message", [(["--pairs", "0"], "--pairs must be at least 1, got 0"),
                                           (["--pin", "4096"], "--pin 4096: expected one of this process's CPUs"),
                                           (["--hash-block", "0"],
                                            "--hash-block must be a positive number of tokens, got 0")])
def test_prefix_cost_refuses_bad_options_in_one_line(args, message):
    p = _bench("--prefix-cost", "--case", "single", *args)
    assert p.returncode == 2 and message in p.stderr.strip().splitlines()[-1]
    assert p.stdout == ""


def test_prefix_cost_alternates_the_order_within_pairs(monkeypatch):
    """Caching on runs first in even pairs and second in odd ones: a run's place in the sequence weighs on both."""
    import experiments.bench.sim as bench

    calls = []

    def fake_row(case, requests, prefix, pin=None, hash_block=16):
        calls.append(prefix)
        return {"wall_s": 1.1 if prefix == "unique" else 1.0, "requests": 10, "instances": 1}

    monkeypatch.setattr(bench, "_case_row", fake_row)
    row = bench.prefix_cost("single", 10, 3, None)
    assert calls == ["unique", "off", "off", "unique", "unique", "off"]
    assert row["ratios"] == [1.1, 1.1, 1.1] and row["median_ratio"] == 1.1


@pytest.mark.timeout(120)
def test_one_entry_dispatches_to_each_benchmark():
    one = _bench("--case", "single", "--requests", "150", "--json")
    assert one.returncode == 0, one.stderr[-2000:]
    row = json.loads(one.stdout.strip().splitlines()[-1])
    assert row["case"] == "single" and row["requests"] == 150 and row["completed"] == 150
    for key in ("wall_s", "sim_requests_per_s", "iterations_per_s", "peak_rss_mb", "simulated_s", "mean_tpot_ms"):
        assert row[key] > 0, key
    env = subprocess.run([sys.executable, "-m", "experiments.bench", "env", "--steps", "50", "--ids",
                          "llmsim/WorkloadRouter-v0", "--json"], cwd=REPO, capture_output=True, text=True, timeout=100)
    assert env.returncode == 0, env.stderr[-2000:]
    assert set(json.loads(env.stdout)) == {"env_id", "engine", "steps", "wall_s", "steps_per_s", "cpu_s",
                                           "cpu_steps_per_s"}
    bad = subprocess.run([sys.executable, "-m", "experiments.bench", "nope"], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "unknown benchmark 'nope'" in bad.stderr and "decisions" in bad.stderr


@pytest.mark.timeout(120)
def test_decisions_benchmark_times_a_heuristic():
    p = subprocess.run([sys.executable, "-m", "experiments.bench", "decisions", "--heuristic", "jsq", "--iters", "60",
                        "--json"], cwd=REPO, capture_output=True, text=True, timeout=100)
    assert p.returncode == 0, p.stderr[-2000:]
    (row,) = json.loads(p.stdout)
    assert row["policy"] and row["backends"] == 4 and row["iters"] == 60 and sum(row["decisions"]) == 60
    assert 0 < row["median_ms"] <= row["p99_ms"]


def _run(bench: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "experiments.bench", bench, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=100)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("bench, args, message", [
    ("sim", ["--requests", "0"], "argument --requests: expected a positive integer, got '0'"),
    ("sim", ["--requests", "-5"], "argument --requests: expected a positive integer, got '-5'"),
    ("env", ["--steps", "0"], "argument --steps: expected a positive integer, got '0'"),
    ("env", ["--ids", "nosuch"], "--ids: unknown env id 'nosuch'; expected one of"),
    ("train", ["--steps", "-1"], "argument --steps: expected a positive integer, got '-1'"),
    ("train", ["--env", "nosuch"], "--env: no conf/env preset 'nosuch'; expected one of")])
def test_benches_refuse_bad_counts_and_names_in_one_line(bench, args, message):
    """A zero or negative count, or an unknown env, is one line naming the option (silence or a traceback before)."""
    p = _run(bench, *args)
    assert p.returncode == 2 and message in p.stderr.strip().splitlines()[-1], p.stderr[-500:]
    assert "Traceback" not in p.stderr and p.stdout == ""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("bench, args, message", [
    ("decisions", ["--iters", "0"], "argument --iters: expected a positive integer, got '0'"),
    ("decisions", ["--backends", "0"], "argument --backends: expected a positive integer, got '0'"),
    ("decisions", ["--heuristic", "nosuch"], "policy.heuristic: unknown routing policy 'nosuch'"),
    ("decisions", ["--export", "/nonexistent"], "policy.onnx: /nonexistent: not a policy export"),
    ("skew", ["--requests", "0"], "argument --requests: expected a positive integer, got '0'"),
    ("skew", ["--requests", "5", "--out", "/dev/null"], "--out /dev/null: not a directory we can write")])
def test_decisions_and_skew_refuse_bad_options_in_one_line(bench, args, message):
    """Counts below one and unknown routers or exports are one line naming them (tracebacks before)."""
    p = _run(bench, *args)
    assert p.returncode == 2 and message in p.stderr.strip().splitlines()[-1], p.stderr[-500:]
    assert "Traceback" not in p.stderr and p.stdout == ""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("study, option", [("guide_choice", "--requests"), ("load_gate", "--jobs"),
                                           ("rollout_headroom", "--jobs"), ("load_gate_guide", "--requests"),
                                           ("spill_load", "--jobs")])
def test_studies_refuse_counts_below_one_in_one_line(study, option):
    """A study run with zero requests printed a verdict table; a negative --jobs was a traceback."""
    p = subprocess.run([sys.executable, "-m", f"experiments.studies.{study}", option, "0"], cwd=REPO,
                       capture_output=True, text=True, timeout=100)
    assert p.returncode == 2, p.stderr[-500:]
    assert f"argument {option}: expected a positive integer, got '0'" in p.stderr.strip().splitlines()[-1]
