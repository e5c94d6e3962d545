"""``python -m experiments.testbeds.calibrate``: the command's output and its target checks (the calibration itself
is a command, not a test: docs/testbeds.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from experiments.testbeds.calibrate import aggregate, check_targets, main, run_all
from experiments.testbeds.cases import Job, jobs_for, run_job
from tests.helpers import REPO

REQUIRED = ("testbed", "policy", "mean_e2el_ms", "p99_e2el_ms", "makespan_s", "preempted_frac", "kv_mean")


def test_quick_json_run_prints_the_required_keys():
    out = subprocess.run([sys.executable, "-m", "experiments.testbeds.calibrate", "--testbed", "qos_edge", "--quick",
                          "--json", "--jobs", "2"], cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert [r["policy"] for r in rows] == ["round_robin", "jsq", "quality_first", "qos_lookahead"]
    for r in rows:
        assert set(REQUIRED + ("qos_mean", "violates_L_frac", "qos_upper_bound")) <= set(r)
        assert r["testbed"] == "qos_edge" and 0 <= r["kv_mean"] <= 1 and r["p99_e2el_ms"] >= r["mean_e2el_ms"] > 0
    assert "targets:" in out.stderr and "upper bound" in out.stderr


def test_best_effort_rows_carry_rate_and_deadline_share():
    row = run_job(Job("best_effort", "static_opt-125m", 0, 60, "bursty", 4))
    assert row["rate"] == "bursty" and 0 <= row["deadline_met_frac"] <= 1 and set(REQUIRED) <= set(row)
    assert {j.rate for j in jobs_for("best_effort", quick=False)} >= {0.25, 48.0, "bursty", "bursty2"}
    assert {j.num_requests for j in jobs_for("best_effort", quick=False)} == {10_000}
    eight = run_job(Job("best_effort", "static_opt-6.7b_x8", 0, 40, 1.0, 8))
    assert eight["gpus"] == 8 and eight["policy"] == "static_opt-6.7b_x8"
    rows = aggregate([{**eight, "seed": 0}, {**eight, "policy": "static_opt-6.7b", "gpus": 4, "seed": 0}])
    assert len(rows) == 2  # the 4- and 8-GPU baselines stay apart


def test_full_jobs_are_the_issue_workloads():
    wr = jobs_for("workload_router", quick=False)
    assert {j.num_requests for j in wr} == {2000} and {j.seed for j in wr} == {0, 1, 2}
    assert {j.num_requests for j in jobs_for("workload_router_8", quick=False)} == {4000}
    assert {j.num_requests for j in jobs_for("qos_edge", quick=False)} == {5000}
    with pytest.raises(ValueError, match="unknown testbed"):
        jobs_for("nope", quick=True)


def _wr(policy: str, mean: float, seed: int = 0, kv: float = 0.7, pre: float = 0.1) -> dict:
    return {"testbed": "workload_router", "policy": policy, "seed": seed, "mean_e2el_ms": mean, "kv_mean": kv,
            "preempted_frac": pre, "num_requests": 2000, "wall_s": 1.0}


def test_aggregate_averages_seeds_and_targets_read_the_averages():
    rows = aggregate([_wr("round_robin", 100.0, 0), _wr("round_robin", 120.0, 1, kv=0.5),
                      _wr("earliest_available", 107.0, 0), _wr("earliest_available", 108.6, 1)])
    rr = next(r for r in rows if r["policy"] == "round_robin")
    assert rr["mean_e2el_ms"] == 110.0 and rr["seeds"] == [0, 1] and rr["wall_s"] == 2.0
    assert rr["kv_mean"] == pytest.approx(0.6)
    ea = next(r for r in rows if r["policy"] == "earliest_available")
    assert ea["gain_vs_rr"] == pytest.approx(0.02)
    verdict = {name: ok for name, ok, _ in check_targets(rows)}
    assert verdict["workload_router: RR KV use while arriving >= 60 %"]
    assert verdict["workload_router: best heuristic >= 2 % better than RR in mean E2E"]


def _be(policy: str, rate: float, met: float, perf: float) -> dict:
    return {"testbed": "best_effort", "policy": policy, "rate": rate, "gpus": 4, "deadline_met_frac": met,
            "performance": perf}


def test_best_effort_targets():
    rates = (1.0, 2.0, 3.0, 8.0, 16.0, 48.0)
    big = {1.0: 1.0, 2.0: 0.96, 3.0: 0.9, 8.0: 0.2, 16.0: 0.1, 48.0: 0.0}
    mid = {1.0: 1.0, 2.0: 1.0, 3.0: 1.0, 8.0: 1.0, 16.0: 0.9, 48.0: 0.2}
    rows = [_be("static_opt-6.7b", r, big[r], big[r]) for r in rates]
    rows += [_be("static_opt-1.3b", r, mid[r], 0.9 * mid[r]) for r in rates]
    rows += [_be("static_opt-125m", r, 1.0, 0.69) for r in rates]
    verdict = {name.split(": ")[1]: ok for name, ok, _ in check_targets(rows)}
    assert verdict["OPT-6.7B keeps >= 95 % of deadlines up to 1.5-3 req/s"]
    assert verdict["OPT-1.3B falls below 95 % inside 8-48 req/s"]
    assert verdict["OPT-125M is the best static choice only at the top rates"]  # only at 48 (0.69 > 0.18)
    rows[-1] = _be("static_opt-125m", 48.0, 0.1, 0.05)  # 125M no longer best anywhere
    assert not {name.split(": ")[1]: ok for name, ok, _ in check_targets(rows)}[
        "OPT-125M is the best static choice only at the top rates"]


def test_run_all_keeps_job_order_whatever_the_submission_order():
    jobs = [Job("best_effort", "static_opt-125m", 0, n, 1.0, 4) for n in (20, 40)]
    rows = run_all(jobs, 1)
    assert [r["num_requests"] for r in rows] == [20, 40]  # the longest job runs first, the rows stay in job order


@pytest.mark.parametrize("jobs", ["0", "-2"])
def test_a_jobs_below_one_is_refused(jobs, capsys):
    """--jobs 0 ran on one process and reported "with 0 processes"."""
    with pytest.raises(SystemExit) as e:
        main(["--quick", "--jobs", jobs])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 2 and err.endswith(f"argument --jobs: expected a positive integer, got '{jobs}'")


def test_workload_router_baselines_read_the_oracle_lengths_as_in_the_env():
    """The paper's JSQ (least_work_left) counts each resident request's decode tokens still to come; the env's
    oracle predictor gives it the true lengths, and so must the calibration (it read the mean finished length)."""
    import copy

    from llmsim.envs import testbeds as TB
    from llmsim.envs.tasks import workload_router_mixture
    from llmsim.envs.workloads import MixtureWorkload
    from llmsim.simulation.run import simulate

    reqs = MixtureWorkload(workload_router_mixture(), {"kind": "poisson", "rate": 20.0}).requests(0, 400)
    oracle = [copy.copy(r) for r in reqs]
    for r in oracle:
        r.predicted_output = float(r.output_tokens)
    runs = {name: simulate(TB.workload_router_instances(4), rs, "least_work_left", seed=0,
                           central_queue_tick=0.02).requests.e2el_ms.mean()
            for name, rs in (("oracle", oracle), ("none", [copy.copy(r) for r in reqs]))}
    assert runs["oracle"] != pytest.approx(runs["none"], rel=1e-3)  # the lengths matter to this router
    row = run_job(Job("workload_router", "least_work_left", 0, 400))
    assert row["mean_e2el_ms"] == pytest.approx(runs["oracle"], rel=1e-12)
