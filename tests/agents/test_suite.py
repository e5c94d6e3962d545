"""The unseen-traffic suite: honest per-episode accounting, the seed splits, the paired statistics and bars, the
suite files (every registered router classified per testbed, every scenario buildable), the scenario knobs of the
testbeds, and a tiny suite end to end (2 scenarios, 2 seeds, 2 heuristics and a checkpoint)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from llmsim.agents.accounting import best_effort_utility, latency_stats, request_latencies
from llmsim.agents.checkpoint import save_checkpoint
from llmsim.agents.checkpoint_meta import action_layout, observation_layout
from llmsim.agents.episodes import evaluate
from llmsim.agents.nets import QNetwork
from llmsim.agents.seeds import TEST_SEED0, VALIDATION_SEED0, resolve_seeds, split_note, split_of
from llmsim.agents.suite import build_scenarios, run_suite
from llmsim.agents.suite_config import SuiteChoice, load_suite_file
from llmsim.agents.suite_stats import bar_gains, bar_verdict, best_of, gain_pct, paired_gain
from llmsim.envs.rewards.base import CUT_OFF_REASON
from llmsim.envs.testbeds import make_from_config
from llmsim.envs.workloads import LENGTH_MIXES, trace_arrivals
from llmsim.errors import ConfigError
from llmsim.routing import ROUTERS
from tests.helpers import need_shared

TESTBEDS = ("workload_router", "qos_edge", "best_effort")
NOT_SET = -1.0


def _req(i: int, arrival: float, *, finish: float = NOT_SET, first: float = NOT_SET, routed: float = NOT_SET,
         dropped: str = "", **kw: Any) -> SimpleNamespace:
    return SimpleNamespace(id=i, arrival=arrival, finish=finish, first_token=first, routed_time=routed,
                           dropped=dropped, **kw)


# ---------------------------------------------------------------------------------------- every request counts
def test_dropped_and_cut_off_requests_count_at_the_time_they_were_given_up():
    reqs = [_req(0, 0.0, finish=4.0, first=1.0, routed=0.0),               # completed: e2e 4, ttft 1
            _req(1, 1.0, routed=11.0, dropped="wait_timeout"),             # dropped at 11 without a token: e2e 10
            _req(2, 2.0, first=3.0, routed=2.0, dropped=CUT_OFF_REASON),   # cut off at 50 with a token: ttft 1
            _req(3, 3.0, dropped=CUT_OFF_REASON)]                          # never routed, cut off at 50
    drops = [(1, 1.0, 10, 10, "wait_timeout", 11.0, -1), (2, 2.0, 10, 10, CUT_OFF_REASON, 50.0, 0),
             (3, 3.0, 10, 10, CUT_OFF_REASON, 50.0, -1)]
    lat = request_latencies(reqs, drops, end=50.0)
    assert lat["e2e"].tolist() == [4.0, 10.0, 48.0, 47.0]
    assert lat["ttft"].tolist() == [1.0, 10.0, 1.0, 47.0]
    assert lat["wait"].tolist() == [0.0, 10.0, 0.0, 47.0]
    s = latency_stats(reqs, drops, end=50.0)
    assert s["mean_e2el_ms"] == pytest.approx(np.mean([4, 10, 48, 47]) * 1e3)
    assert s["p99_e2el_ms"] == pytest.approx(np.percentile([4, 10, 48, 47], 99) * 1e3)
    assert s["median_ttft_ms"] == pytest.approx(np.median([1, 10, 1, 47]) * 1e3)
    assert s["completed_mean_e2el_ms"] == pytest.approx(4000.0)  # the flattering figure, named as such
    assert s["cut_off"] == 2
    assert s["makespan_s"] == pytest.approx(50.0)  # the last request ended (was given up) at 50
    assert s["router_wait_s"] == pytest.approx(np.mean([0, 10, 0, 47]))


def test_evaluation_rows_count_requests_the_time_limit_cut_off():
    """drain_time=0 cuts the episode at the last arrival + max wait: the all-requests mean includes the cut-offs."""
    row = evaluate({"id": "workload_router", "num_requests": 150, "rate": 40.0, "drain_time": 0.0},
                   ["round_robin"], [TEST_SEED0])[0]
    assert row["truncated"] and row["cut_off"] > 0 and row["cut_off"] == row["num_requests"] - row["completed"]
    assert row["dropped"] >= row["cut_off"]
    assert row["mean_e2el_ms"] > row["completed_mean_e2el_ms"]
    assert row["p99_e2el_ms"] >= row["completed_p99_e2el_ms"]
    assert row["mean_ttft_ms"] > row["completed_mean_ttft_ms"]


def test_best_effort_utility_counts_every_request():
    q = {"opt-125m": 0.5, "opt-6.7b": 1.0}
    reqs = [_req(0, 0.0, finish=0.4, instance=1, generated=20, quality_by_model=q, task="copa"),   # 20 ms/token: 1.0
            _req(1, 0.0, finish=2.0, instance=0, generated=20, quality_by_model=q, task="copa"),   # 100 ms/token: 0
            _req(2, 0.0, instance=-1, generated=0, quality_by_model=q, task="copa", dropped="x")]  # dropped: 0
    out = best_effort_utility(reqs, ["opt-125m", "opt-6.7b"], deadline=0.04)
    assert out["utility"] == pytest.approx(1.0 / 3) and out["deadline_met"] == pytest.approx(1.0 / 3)
    row = evaluate({"id": "best_effort", "num_requests": 40, "schedule": "stable", "rate": 8.0},
                   [{"name": "static_model", "kwargs": {"model": "opt-125m"}, "label": "small"}], [TEST_SEED0])[0]
    assert 0.0 < row["utility"] <= 1.0 and 0.0 <= row["deadline_met"] <= 1.0


# ---------------------------------------------------------------------------------------- seeds
def test_seed_splits():
    assert (split_of(999), split_of(VALIDATION_SEED0), split_of(1999), split_of(TEST_SEED0)) == (
        "training", "validation", "validation", "test")
    assert resolve_seeds(3) == [2000, 2001, 2002]
    assert "WARNING" in split_note([5, 2000]) and "WARNING" not in split_note([2000, 2001])
    assert "validation" in split_note([1000, 1001])
    with pytest.raises(ConfigError, match="distinct"):
        resolve_seeds([2000, 2000])


@pytest.mark.parametrize("seeds", [0, -1, [-5], [], "abc"])
def test_bad_seeds_name_the_value_given(seeds):
    """A count of 0 or below used to be reported as 'got None'."""
    with pytest.raises(ConfigError, match=r"^seeds: expected a non-empty list of non-negative integers \(or a "
                                          r"count >= 1\), got " + re.escape(repr(seeds)) + "$"):
        resolve_seeds(seeds)


# ---------------------------------------------------------------------------------------- paired statistics
def test_gains_are_positive_when_better_for_both_directions():
    assert gain_pct(90.0, 100.0, "mean_e2el_ms") == pytest.approx(10.0)
    assert gain_pct(110.0, 100.0, "p99_e2el_ms") == pytest.approx(-10.0)
    assert gain_pct(0.55, 0.5, "avg_qos") == pytest.approx(10.0)
    assert gain_pct(0.45, 0.5, "utility") == pytest.approx(-10.0)
    assert gain_pct(1.0, 0.0, "mean_e2el_ms") is None


def test_paired_gain_interval_is_seeded_and_brackets_the_estimate():
    ref = {2000: 100.0, 2001: 120.0, 2002: 80.0, 2003: 110.0}
    x = {s: v * 0.9 + (3.0 if s % 2 else -3.0) for s, v in ref.items()}
    a = paired_gain(x, ref, "mean_e2el_ms", 500, seed=7)
    assert a == paired_gain(x, ref, "mean_e2el_ms", 500, seed=7)
    assert a["gain_pct"] == pytest.approx(10.0) and a["seeds"] == 4 and a["wins"] == 4
    assert a["ci_low"] <= a["gain_pct"] <= a["ci_high"] and a["ci_high"] - a["ci_low"] < 10
    one = paired_gain({2000: 1.0}, {2000: 2.0}, "mean_e2el_ms", 500, seed=7)
    assert one["gain_pct"] == pytest.approx(50.0) and one["ci_low"] is None and one["ci_high"] is None
    assert paired_gain({2001: 1.0}, {2000: 2.0}, "mean_e2el_ms", 500, seed=7)["gain_pct"] is None  # unpaired


def test_best_heuristic_and_bars():
    rows = [{"policy": p, "seed": s, "mean_e2el_ms": v + s - 2000, "utility": u}
            for p, v, u in (("a", 10.0, 0.5), ("b", 8.0, 0.4), ("c", 8.0, 0.9), ("learned", 7.0, 0.49))
            for s in (2000, 2001)]
    assert best_of(rows, ["a", "b", "c"], "mean_e2el_ms") == "b"  # tie with c: the first listed
    assert best_of(rows, ["a", "b", "c"], "utility") == "c"
    every = {"name": "e", "metric": "mean_e2el_ms", "at_least_pct": -2.0, "scope": "every"}
    half = {"name": "h", "metric": "mean_e2el_ms", "at_least_pct": 5.0, "scope": "half"}
    assert bar_verdict(every, {"s1": 1.0, "s2": -1.9})["holds"]
    assert not bar_verdict(every, {"s1": 1.0, "s2": None})["holds"]  # could not run: a miss
    assert bar_verdict(half, {"s1": 6.0, "s2": 0.0})["holds"] and not bar_verdict(half, {"s1": 6.0, "s2": 0.0,
                                                                                         "s3": 1.0})["holds"]
    static = {"name": "s", "metric": "utility", "at_least_pct": -5.0, "reference": ["a", "b"]}
    g = bar_gains({"s1": rows}, "learned", static, ["a", "b", "c"], {"s1": "c"})
    assert g["s1"] == pytest.approx((0.49 - 0.5) / 0.5 * 100)  # vs the best of a, b (not c, the best heuristic)


# ---------------------------------------------------------------------------------------- the suite files
@pytest.mark.parametrize("testbed", TESTBEDS)
def test_every_registered_router_is_classified(testbed):
    suite = load_suite_file(testbed)
    listed = {h if isinstance(h, str) else h["name"] for h in suite.heuristics}
    # routers the tests themselves register (in this worker) are not the project's
    registered = {n for n in ROUTERS.names() if not getattr(ROUTERS.get(n), "__module__", "").startswith("tests.")}
    registered |= set(ROUTERS.plugin_names())
    assert listed.isdisjoint(suite.not_applicable)
    unclassified = registered - listed - set(suite.not_applicable) - ({"static_model"} & listed)
    assert not unclassified, f"{testbed}: register each router in heuristics or not_applicable: {unclassified}"
    assert suite.primary and "quick" in suite.sizes and "full" in suite.sizes and suite.bars


@pytest.mark.parametrize("testbed", TESTBEDS)
def test_every_scenario_builds_its_env(testbed):
    """Every scenario (traces included: building reads no trace) is a valid env, and the unseen axes are there."""
    suite = load_suite_file(testbed)
    names = set(suite.scenarios)
    if testbed == "best_effort":
        assert {"rate_4", "rate_64", "bursty", "bursty2"} <= names
    else:
        assert {"rate_0.25x", "rate_0.5x", "rate_0.75x", "rate_1.25x", "rate_1.5x", "rate_2x", "short", "long",
                "bimodal", "burstgpt", "azure_conv_0-20", "azure_code_40-60", "mooncake_0-20"} <= names
    runs, _ = build_scenarios({"id": testbed}, suite, SuiteChoice(size="quick"))
    for run in runs:
        env = make_from_config(run.env)
        assert env.num_requests == run.env["num_requests"] and run.seeds[0] >= TEST_SEED0
    if testbed == "workload_router":
        sizes = {r.name: make_from_config(r.env).num_instances for r in runs}
        assert (sizes["instances_2"], sizes["instances_16"], sizes["hetero"]) == (2, 16, 4)


def test_missing_trace_files_skip_their_scenarios_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setenv("LLMSIM_TRACES", str(tmp_path))
    suite = load_suite_file("workload_router")
    runs, skipped = build_scenarios({"id": "workload_router"}, suite,
                                    SuiteChoice(size="quick", only=["rate_2x", "azure_conv_0-20", "mooncake_0-20"]))
    assert [r.name for r in runs] == ["rate_2x"]
    assert set(skipped) == {"azure_conv_0-20", "mooncake_0-20"} and "not found" in skipped["azure_conv_0-20"]
    with pytest.raises(ConfigError, match="no scenario left"):
        build_scenarios({"id": "workload_router"}, suite, SuiteChoice(size="quick", only=["azure_code_0-20"]))
    with pytest.raises(ConfigError, match="unknown scenario"):
        build_scenarios({"id": "workload_router"}, suite, SuiteChoice(only=["nope"]))
    with pytest.raises(ConfigError, match="suite.size"):
        build_scenarios({"id": "workload_router"}, suite, SuiteChoice(size="huge"))


# ---------------------------------------------------------------------------------------- the scenario knobs
def test_workload_router_knobs_heterogeneous_gpus_and_arrivals():
    env = make_from_config({"id": "workload_router", "gpu": ["v100-16gb", "a100-40gb"], "num_instances": 2})
    assert [c.gpu for c in env.instance_configs] == ["v100-16gb", "a100-40gb"]
    with pytest.raises(ConfigError, match="one GPU per instance"):
        make_from_config({"id": "workload_router", "gpu": ["v100-16gb"]})
    poisson = make_from_config({"id": "workload_router", "num_requests": 300})
    bursty = make_from_config({"id": "workload_router", "num_requests": 300,
                               "arrival": {"kind": "burstgpt_like", "rate": 20.0}})
    gaps = [np.diff([r.arrival for r in e.workload.requests(TEST_SEED0, 300)]) for e in (poisson, bursty)]
    assert gaps[1].std() / gaps[1].mean() > 1.5 * gaps[0].std() / gaps[0].mean()  # burstier than Poisson
    assert (300 - 1) / gaps[1].sum() == pytest.approx(20.0)  # averaging the rate asked for


def test_qos_edge_length_mixes():
    def mean_output(lengths: str | None) -> float:
        env = make_from_config({"id": "qos_edge", "lengths": lengths})
        reqs = env.workload.requests(TEST_SEED0, 3000)
        return float(np.mean([np.mean(list(r.outputs_by_model.values())) for r in reqs]))

    base, short, long_, bimodal = (mean_output(m) for m in (None, "short", "long", "bimodal"))
    assert short < 0.65 * base and long_ > 1.3 * base
    assert bimodal == pytest.approx(base, rel=0.15)  # the same mean (up to the 300-token cap), another shape
    assert set(LENGTH_MIXES) == {"short", "long", "bimodal"}
    with pytest.raises(ConfigError, match="lengths"):
        make_from_config({"id": "qos_edge", "lengths": "huge"})


def test_trace_arrivals_replay_a_window_s_timing():
    shared = need_shared()
    path = shared / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"
    trace = {"kind": "azure", "path": str(path), "window": [1200, 2400]}
    t = trace_arrivals(trace, 50)
    assert len(t) == 50 and t[0] == 0.0 and np.all(np.diff(t) >= 0)
    env = make_from_config({"id": "qos_edge", "num_requests": 50, "arrival": {"kind": "trace", "trace": trace}})
    reqs = env.workload.requests(TEST_SEED0, 50)
    assert [r.arrival for r in reqs] == pytest.approx(t.tolist())
    other = make_from_config({"id": "qos_edge", "num_requests": 50,
                              "arrival": {"kind": "trace", "trace": trace}}).workload.requests(TEST_SEED0 + 1, 50)
    assert [r.arrival for r in other] == [r.arrival for r in reqs]  # the timing is the trace's; contents vary
    assert [r.prompt_tokens for r in other] != [r.prompt_tokens for r in reqs]
    with pytest.raises(ConfigError, match="arrival.trace"):
        make_from_config({"id": "qos_edge", "arrival": {"kind": "trace"}})


# ---------------------------------------------------------------------------------------- a tiny suite
def _checkpoint(path: Path, env_cfg: dict[str, Any]) -> Path:
    """An untrained checkpoint for ``env_cfg``'s layout (plumbing only)."""
    env = make_from_config(env_cfg)
    torch.manual_seed(0)
    net = QNetwork(int(env.observation_space.shape[0]), int(env.action_space.n))
    return save_checkpoint(path, net, {"agent": "ddqn", "observation": observation_layout(env),
                                       "actions": action_layout(env)})


def test_tiny_suite_end_to_end(tmp_path):
    ckpt = _checkpoint(tmp_path / "ckpt", {"id": "workload_router", "num_requests": 20})
    choice = SuiteChoice(size="quick", only=["rate_0.5x", "instances_2"], seeds=2, num_requests=60)
    rows = run_suite({"id": "workload_router"}, choice, [{"kind": "checkpoint", "path": str(ckpt), "label": "net"}],
                     [{"kind": "router", "name": n, "kwargs": {}, "label": n} for n in ("round_robin", "jsq")],
                     1, tmp_path / "out", progress=False, quiet=True)
    body = json.loads((tmp_path / "out" / "suite.json").read_text())
    # the checkpoint runs on 4 instances only: 2 seeds x (3 policies on rate_0.5x + 2 on instances_2)
    assert len(rows) == 10 and {r["scenario"] for r in rows} == {"rate_0.5x", "instances_2"}
    assert "net" in body["incompatible"]["instances_2"] and body["seeds"] == [2000, 2001]
    for scen in ("rate_0.5x", "instances_2"):
        res = body["results"][scen]
        means = {p: res["stats"][p]["mean_e2el_ms"] for p in ("round_robin", "jsq")}
        assert res["reference"] == min(means, key=means.get)
        gain = res["gains"]["round_robin"]["mean_e2el_ms"]
        assert gain["seeds"] == 2 and gain["ci_low"] is not None
        assert math.isclose(gain["gain_pct"], (means[res["reference"]] - means["round_robin"])
                            / means[res["reference"]] * 100, abs_tol=1e-9)
    bars = body["bars"]["net"]
    assert len(bars) == 3 and all("instances_2" in b["missed"] for b in bars)  # could not run there: a miss
    assert not any(b["holds"] for b in bars if b["scope"] == "every")
    md = (tmp_path / "out" / "suite.md").read_text()
    assert "| scenario | best heuristic | mean E2E | net | round_robin | jsq |" in md
    assert "cannot run" in md and "**best**" in md and "FAILS" in md
    assert (tmp_path / "out" / "suite.png").stat().st_size > 1000


def test_suite_md_notes_the_trace_rows_a_scenario_skipped(tmp_path):
    """A trace window's rows over max_prompt (an episode row's ``workload_skipped``) are said in suite.md."""
    from llmsim.agents.suite_report import markdown

    choice = SuiteChoice(size="quick", only=["rate_0.5x"], seeds=1, num_requests=20)
    run_suite({"id": "workload_router"}, choice, [],
              [{"kind": "router", "name": n, "kwargs": {}, "label": n} for n in ("round_robin", "jsq")],
              1, tmp_path / "out", progress=False, quiet=True, plots=False)
    body = json.loads((tmp_path / "out" / "suite.json").read_text())
    assert "Trace rows skipped" not in markdown(body)  # a drawn workload skips nothing
    for r in body["rows"]:
        r["workload_skipped"] = {"prompt_over_max_prompt": 3}
    assert ("Trace rows skipped in rate_0.5x (counted, not simulated), by reason, summed over one policy's "
            "episodes: {'prompt_over_max_prompt': 3}.") in markdown(body)
