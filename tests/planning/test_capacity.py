"""llmsim-capacity: the search agrees with a dense sweep, handles non-monotone curves, is deterministic on any
number of workers, and its Hydra app writes its outputs or fails in one line with exit status 2."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from llmsim.engine.iteration import decode_skew_of
from llmsim.errors import ConfigError, LLMSimError
from llmsim.perf.profile import load_profile
from llmsim.planning.candidates import Candidate, DeployConfig, Plan
from llmsim.planning.capacity import (
    base_config,
    parse_policies,
    rate_mode,
    rate_modes,
    result_rows,
    run_capacity,
    run_config,
    search_all,
)
from llmsim.planning.runner import evaluate
from llmsim.planning.search import CapacityConfig, Point, RateSearch
from llmsim.workload import build_workload
from tests.planning.helpers import compose


# ------------------------------------------------------------------------------------------ the search itself
def _drive(search: RateSearch, curve) -> RateSearch:
    """Run a RateSearch against an attainment function of the rate (no simulation)."""
    while rates := search.next_rates():
        for r in rates:
            search.record(Point(r, curve(r), [curve(r)], 0.0, 0.0, 0.0, 0.0))
    return search


def test_bisection_finds_a_step_within_tolerance() -> None:
    cap = CapacityConfig(tolerance=0.02)
    s = _drive(RateSearch(cap), lambda r: 1.0 if r <= 13.7 else 0.5)
    lo, hi = s.bracket()
    assert lo <= 13.7 < hi and hi / lo - 1 <= 0.02
    assert s.capacity == lo and s.note == "" and not s.violations()
    assert len(s.points) <= 12


@pytest.mark.parametrize("curve,capacity,note", [
    (lambda r: 1.0, 256.0, "capacity is at least that"),
    (lambda r: 0.0, 0.0, "missed already at rate_min"),
])
def test_search_edges(curve, capacity, note) -> None:
    s = _drive(RateSearch(CapacityConfig()), curve)
    assert s.capacity == capacity and note in s.note


def test_k_section_converges_in_fewer_rounds() -> None:
    def curve(r):
        return 1.0 if r <= 5.3 else 0.0

    one = _drive(RateSearch(CapacityConfig()), curve)
    rounds = 0
    four = RateSearch(CapacityConfig(points_per_round=4))
    while rates := four.next_rates():
        rounds += 1
        for r in rates:
            four.record(Point(r, curve(r), [curve(r)], 0, 0, 0, 0))
    assert abs(four.capacity - 5.3) / 5.3 <= 0.05 and abs(one.capacity - 5.3) / 5.3 <= 0.05
    assert rounds < len(one.points)


def test_non_monotone_curve_reports_and_keeps_the_first_crossing() -> None:
    """Met at 4, missed at 8 (a dip), met again at 16: capacity stays below 8 and the curve is flagged."""
    def curve(r):
        return 0.5 if 6 <= r < 9 or r >= 20 else 1.0

    s = _drive(RateSearch(CapacityConfig(rate_start=8, points_per_round=3)), curve)
    assert 6 / 1.05 <= s.capacity < 6
    assert [p.rate for p in s.violations()] == [16.0]
    assert s.summary_note().startswith("non-monotone: target met again at 16")


def _stub(cfg: dict) -> dict:
    """A simulation stand-in with a dip between 6 and 9 req/s (module level: worker processes pickle it)."""
    r = cfg["workload"]["rate"]
    a = 0.5 if 6 <= r < 9 or r >= 20 else 1.0
    return {"slo_attainment": a, "request_goodput": a * r, "request_throughput": r}


def test_non_monotone_flagged_in_rows_and_table(capsys) -> None:
    base = base_config(compose())
    cap = CapacityConfig(rate_start=8, points_per_round=3, seeds=2, workers=2)
    jobs, runner = search_all(base, cap, "stub", fn=_stub)
    (row,) = result_rows(jobs, cap)
    assert row["monotone"] is False and "non-monotone" in row["note"] and 5.7 <= row["capacity_rps"] < 6
    assert runner.runs == row["evaluations"] * 2


# ------------------------------------------------------------------------------------------ real simulations
@pytest.mark.timeout(120)
def test_capacity_matches_dense_sweep() -> None:
    """(a) One Llama-2-7B / A100 replica, 300 requests, 2 seeds: bisection within 10 % of a dense sweep."""
    base = base_config(compose())
    cap = CapacityConfig(seeds=2, num_requests=300, workers=2)
    jobs, _ = search_all(base, cap, "single")
    found = jobs[0].search.capacity
    assert found > 0 and jobs[0].search.note == ""

    def attainment(rate: float) -> float:
        cfgs = [run_config(base, base["cluster"], base["policy"], rate, k, 300, ("rate", 1.0)) for k in range(2)]
        return sum(evaluate(c)["slo_attainment"] for c in cfgs) / 2

    # dense sweep: 3 % steps from 0.7 x found up to the first rate that misses the target
    rate, dense = 0.7 * found, None
    assert attainment(rate) >= 0.9
    while rate < 2 * found:
        nxt = rate * 1.03
        if attainment(nxt) < 0.9:
            dense = rate
            break
        rate = nxt
    assert dense is not None
    assert abs(found - dense) / dense <= 0.10, (found, dense)


def test_same_result_on_one_and_two_workers(tmp_path) -> None:
    cfg = compose(capacity={"seeds": 2, "num_requests": 150, "tolerance": 0.1, "workers": 1,
                            "policies": ["round_robin", "jsq"]})
    one = run_capacity(cfg, tmp_path / "one", quiet=True)
    cfg["capacity"]["workers"] = 2
    two = run_capacity(cfg, tmp_path / "two", quiet=True)
    for rows in (one, two):
        for r in rows:
            r.pop("wall_s")
    assert one == two
    assert (tmp_path / "one" / "capacity.csv").read_text() == (tmp_path / "two" / "capacity.csv").read_text()


def test_cluster_group_name_labels_only_the_preset_itself(tmp_path) -> None:
    """cluster.instances=[...] on the command line replaces the group's cluster: its rows name what ran."""
    run = ["capacity.num_requests=40", "capacity.seeds=1", "capacity.tolerance=0.5", "capacity.workers=1",
           "capacity.rate_max=4", "slo.ttft_ms=5000"]
    p = _app(["cluster=single_a100", *run, f"hydra.run.dir={tmp_path}/a"], tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads((tmp_path / "a" / "capacity.json").read_text())[0]["cluster"] == "single_a100"
    p = _app(["cluster=single_a100", "cluster.instances=[{model:mistral-7b,gpu:rtx4090}]", *run,
              f"hydra.run.dir={tmp_path}/b"], tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads((tmp_path / "b" / "capacity.json").read_text())[0]["cluster"] == "1x mistral-7b@rtx4090"


PHASED = {"kind": "synthetic", "arrival": {"process": "phases", "phases": [[20, 2.0], [20, 6.0]], "repeat": True},
          "prompt": 100, "output": 20}


def test_trace_like_workloads_search_rate_scale() -> None:
    """A phased arrival process has no single rate: it is scaled, and rates stay in req/s."""
    key, base_rate = rate_mode(PHASED, 400, 0)
    assert key == "rate_scale" and 3.0 < base_rate < 5.0
    cfg = run_config(compose(workload=PHASED), {"instances": []}, {"name": "jsq", "kwargs": {}}, 2 * base_rate, 0, 400,
                     (key, base_rate))
    assert math.isclose(cfg["workload"]["rate_scale"], 2.0) and cfg["workload"]["num_requests"] == 400
    assert rate_mode(compose()["workload"], 400, 0) == ("rate", 1.0)


def _realized_rate(cfg: dict) -> float:
    t = [r.arrival for r in build_workload(cfg["workload"], cfg["seed"])]
    return (len(t) - 1) / (t[-1] - t[0])


def test_rate_scaled_runs_of_any_size_arrive_at_the_rate_searched() -> None:
    """A phased stream's rate over its first 100 arrivals is not its rate over 400: a run of 4 instances x 100
    requests (requests_per_instance) and a deploy cluster of 4 replicas take the base rate of their own size, so
    the rate searched (4 req/s) is the rate their requests arrive at."""
    cluster = {"instances": [{"model": "llama-2-7b", "gpu": "a100-80gb", "count": 4}]}
    base = base_config(compose(workload=PHASED, cluster=cluster))
    cap = CapacityConfig(num_requests=100, requests_per_instance=True, seeds=1, max_evaluations=1, workers=1)
    jobs, _ = search_all(base, cap, "x", fn=lambda c: {"slo_attainment": 1.0})
    assert jobs[0].info["requests_per_run"] == 400
    assert _realized_rate(jobs[0].configs(4.0)[0]) == pytest.approx(4.0)
    assert jobs[0].info["base_rate"] == pytest.approx(rate_mode(base["workload"], 400, 0)[1])
    plan = Plan(base, cap, DeployConfig(), rate_modes(base["workload"], 0), runner=None)
    cand = Candidate("a100-80gb", 1, "default", {}, 1.0)
    for n in (1, 4):
        (cfg,) = plan.configs(cand, n, 4.0)
        assert cfg["workload"]["num_requests"] == 100 * n and _realized_rate(cfg) == pytest.approx(4.0)


def test_policy_kwargs_stay_with_their_router() -> None:
    base = base_config(compose(policy={"name": "power_of_two", "kwargs": {"d": 3}}))
    pols = parse_policies(CapacityConfig(policies=["power_of_two", "jsq", {"name": "random"}]), base)
    assert pols == [{"name": "power_of_two", "kwargs": {"d": 3}}, {"name": "jsq", "kwargs": {}},
                    {"name": "random", "kwargs": {}}]


@pytest.mark.parametrize("model,gpu,skewed", [("mistral-7b", "rtx4090", True), ("llama-2-7b", "a100-80gb", False)])
def test_decode_skew_switch_moves_only_a_profile_with_a_skew_table(model, gpu, skewed, tmp_path) -> None:
    """``capacity.decode_skew: false`` searches on profiles without their skewed-decode term (as replay's
    --no-decode-skew): the capacity of Mistral-7B / RTX 4090 (a profile fitted from measured skew tables) moves, that
    of Llama-2-7B / A100 (no skew table) does not, to the last bit."""
    assert (decode_skew_of(load_profile(model, gpu)) is not None) == skewed
    rows = {}
    for skew in (True, False):
        cfg = compose(cluster={"instances": [{"model": model, "gpu": gpu}]},
                      slo={"ttft_ms": 2000, "tpot_ms": 40, "e2el_ms": None},
                      capacity={"seeds": 1, "num_requests": 200, "tolerance": 0.02, "workers": 1, "decode_skew": skew})
        (rows[skew],) = run_capacity(cfg, tmp_path / f"skew_{skew}", quiet=True)
        assert rows[skew]["decode_skew"] is skew
    with_term, without = rows[True], rows[False]
    assert (with_term["capacity_rps"] != without["capacity_rps"]) == skewed
    assert (with_term["curve"] != without["curve"]) == skewed


# ------------------------------------------------------------------------------------------ bad configs
@pytest.mark.parametrize("capacity,needle", [
    ({"target": 1.5}, "capacity.target: expected a value <= 1, got 1.5"),
    ({"seeds": 0}, "capacity.seeds: expected a value >= 1"),
    ({"tolerance": "tight"}, "capacity.tolerance: expected a number"),
    ({"rate_min": 300}, "capacity.rate_min: expected a value below capacity.rate_max (256)"),
    ({"rate_start": 1000}, "capacity.rate_start: expected a value in [rate_min, rate_max]"),
    ({"bogus": 1}, "capacity: unknown key 'bogus'"),
    ({"metric": "goodput"}, "capacity.metric: expected one of slo_attainment"),
    ({"metric": "slo_e2el_attainment"}, "capacity.metric: slo_e2el_attainment needs slo.e2el_ms"),
    ({"policies": ["round_robin", "jsqq"]}, "capacity.policies[1]: unknown value 'jsqq' (did you mean 'jsq'?)"),
    ({"policies": []}, "capacity.policies: expected a list of at least 1 item, got []"),
    ({"clusters": ["a100x4", "v100x5"]}, "capacity.clusters[1]: unknown value 'v100x5' (did you mean 'v100x4'?)"),
    ({"clusters": [{"instances": [{"gpus": "a100"}]}]}, "capacity.clusters[0].instances[0]: unknown key 'gpus'"),
    ({"clusters": ["single_a100", {"instances": [{"gpu": "b300"}]}]},
     "capacity.clusters[1].instances[0] (llama-2-7b on b300): cannot load a profile: unknown GPU 'b300'"),
    ({"policies": ["jsq", {"name": "jsq", "kwargs": {"dd": 2}}]},
     "capacity.policies[1].kwargs: routing policy 'jsq' got unknown option(s) ['dd']"),
    ({"decode_skew": "no"}, "capacity.decode_skew: expected true or false, got 'no'"),
    ({"requests_per_instance": 1}, "capacity.requests_per_instance: expected true or false, got 1"),
])
def test_bad_capacity_config_is_one_line(capacity, needle, tmp_path) -> None:
    with pytest.raises(LLMSimError) as e:
        run_capacity(compose(capacity={"num_requests": 50, **capacity}), tmp_path, quiet=True)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg, msg
    assert not (tmp_path / "capacity.json").exists()


def test_no_slo_is_an_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match="slo: set at least one target"):
        run_capacity(compose(slo={"ttft_ms": None, "tpot_ms": None}), tmp_path, quiet=True)


# ------------------------------------------------------------------------------------------ the Hydra app
def _app(args: list[str], cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmsim.cli.planning", "capacity", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(90)
def test_app_end_to_end(tmp_path) -> None:
    """(b) Two clusters x two policies with a tiny budget: capacity.json / csv / png with the required keys."""
    p = _app(["capacity.clusters=[single_a100,v100x4]", "capacity.policies=[round_robin,jsq]",
              "capacity.num_requests=120", "capacity.seeds=1", "capacity.tolerance=0.25", "capacity.workers=2",
              f"hydra.run.dir={tmp_path}/run"], tmp_path, timeout=80)
    assert p.returncode == 0, p.stderr[-3000:]
    run = tmp_path / "run"
    rows = json.loads((run / "capacity.json").read_text())
    assert [(r["cluster"], r["policy"]) for r in rows] == [
        ("single_a100", "round_robin"), ("single_a100", "jsq"), ("v100x4", "round_robin"), ("v100x4", "jsq")]
    for r in rows:
        assert {"policy", "cluster", "capacity_rps", "curve", "bracket", "monotone", "target"} <= set(r)
        assert r["capacity_rps"] > 0 and r["curve"] and {"rate", "attainment", "per_seed"} <= set(r["curve"][0])
    v100 = next(r for r in rows if r["cluster"] == "v100x4")
    assert v100["instances"] == 4 and "v100-32gb" in v100["cluster_desc"]
    assert (run / "capacity.csv").stat().st_size > 0 and (run / "capacity.png").stat().st_size > 0
    assert "runs/min" in p.stdout and "Capacity at 90%" in p.stdout
    # the goodput column's explanation is printed beside it, with the numbers of the first row
    assert "goodput @cap is requests meeting every SLO per second of the whole run" in p.stdout
    assert rows[0]["goodput_note"] and rows[0]["run_s_at_capacity"] > 0
    # progress from the start (stderr is not a terminal here: plain lines, the phase first)
    assert p.stderr.startswith("llmsim-capacity: preflight (20 requests on single_a100 / round_robin")
    assert "llmsim-capacity: searching 4 cluster x policy pairs on 2 worker(s)" in p.stderr


@pytest.mark.parametrize("args,needle", [
    (["capacity.seeds=0"], "capacity.seeds: expected a value >= 1, got 0"),
    (["+capacity.bogus=1"], "capacity: unknown key 'bogus'"),
    (["capacity.clusters=[nope]"], "capacity.clusters[0]: unknown value 'nope'"),
])
def test_app_bad_config_exits_2_with_one_line(args, needle, tmp_path) -> None:
    """(c) One line on stderr naming the key, exit status 2, no traceback, no outputs."""
    p = _app([*args, f"hydra.run.dir={tmp_path}/run"], tmp_path)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2, p.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("llmsim-capacity: error: ") and needle in lines[0], p.stderr
    assert not (tmp_path / "run").exists()  # a failed run leaves no folder (not even Hydra's .hydra/ and log)


def test_app_failing_after_it_started_leaves_no_folder(tmp_path) -> None:
    """A cluster that cannot load fails in the preflight run, after Hydra made the run directory: it is removed,
    with its empty parents below the working directory; the error is the last line, after the progress."""
    p = _app(["capacity.num_requests=50", "cluster.instances=[{model:llama-2-70b,gpu:v100-16gb}]",
              f"hydra.run.dir={tmp_path}/outputs/day/run"], tmp_path)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and lines[-1].startswith("llmsim-capacity: error: ") and "does not fit" in lines[-1]
    assert lines[0].startswith("llmsim-capacity: preflight") and "Traceback" not in p.stderr
    assert not (tmp_path / "outputs").exists()
