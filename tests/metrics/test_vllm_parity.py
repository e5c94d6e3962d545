"""Every summary key that bears a ``vllm bench serve`` name holds vLLM's number: the same per-request records go
through a transcription of vLLM's ``calculate_metrics`` / ``process_one_metric`` (vllm/benchmarks/serve.py) and
through llmsim's ``summarise``, and the shared keys are compared one by one."""

import math

import numpy as np
import pandas as pd
import pytest

from llmsim import InstanceConfig, simulate
from llmsim.metrics.recorder import Recorder, summarise
from llmsim.metrics.table import with_latencies
from llmsim.schema import SLO
from llmsim.testing import LinearProfile, requests

PERCENTILES = (90, 99)

# per request: (arrival s, prompt tokens, token times s); a request with no token times failed (llmsim: dropped)
REQUESTS = [
    (0.0, 12, [0.30, 0.35, 0.41, 0.50, 0.52]),
    (0.2, 40, [0.45]),  # one output token: no TPOT, no ITL; TPOT 0 for goodput
    (0.5, 7, [0.80, 1.30]),
    (0.9, 25, [1.10, 1.12, 1.15, 1.60, 1.61, 1.70, 2.40]),
    (1.4, 3, [1.70, 1.75, 1.81]),
    (1.7, 9, []),  # failed: counted by neither the latencies nor the throughputs
]
GOODPUT = {"ttft": 350.0, "tpot": 120.0, "e2el": 1200.0}  # vllm bench serve --goodput ttft:350 tpot:120 e2el:1200


def vllm_metrics(outputs: list[dict], dur_s: float, goodput: dict[str, float]) -> dict[str, float]:
    """vLLM's result dict for these outputs (its formulas, transcribed; times in seconds, results in ms)."""
    lens, total_input, completed, good = [], 0, 0, 0
    itls, tpots, all_tpots, ttfts, e2els = [], [], [], [], []
    for o in outputs:
        if not o["success"]:
            lens.append(0)
            continue
        n = o["output_tokens"]
        lens.append(n)
        total_input += o["prompt_len"]
        tpot = 0.0
        if n > 1:
            tpot = (o["latency"] - o["ttft"]) / (n - 1)
            tpots.append(tpot)
        all_tpots.append(tpot)
        itls += o["itl"]
        ttfts.append(o["ttft"])
        e2els.append(o["latency"])
        completed += 1
    valid, slos = [], []
    for key, vals in (("ttft", ttfts), ("tpot", all_tpots), ("e2el", e2els)):
        if key in goodput:
            valid.append(vals)
            slos.append(goodput[key] / 1000)
    for req in zip(*valid):
        if all(s >= r for s, r in zip(slos, req)):
            good += 1
    out = {"duration": dur_s, "completed": completed, "failed": sum(not o["success"] for o in outputs),
           "total_input_tokens": total_input, "total_output_tokens": sum(lens),
           "request_throughput": completed / dur_s, "request_goodput": good / dur_s,
           "output_throughput": sum(lens) / dur_s, "total_token_throughput": (total_input + sum(lens)) / dur_s}
    for name, vals in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        out[f"mean_{name}_ms"] = np.mean(vals or 0) * 1000
        out[f"median_{name}_ms"] = np.median(vals or 0) * 1000
        out[f"std_{name}_ms"] = np.std(vals or 0) * 1000
        for p in PERCENTILES:
            out[f"p{p}_{name}_ms"] = np.percentile(vals or 0, p) * 1000
    return out


def _outputs() -> list[dict]:
    outs = []
    for arrival, prompt, times in REQUESTS:
        if not times:
            outs.append({"success": False})
            continue
        outs.append({"success": True, "prompt_len": prompt, "output_tokens": len(times), "ttft": times[0] - arrival,
                     "latency": times[-1] - arrival, "itl": list(np.diff(times))})
    return outs


def _llmsim(drop_at: float) -> tuple[dict, Recorder]:
    rec = Recorder()
    rows = []
    for rid, (arrival, prompt, times) in enumerate(REQUESTS):
        if not times:
            rec.dropped.append((rid, arrival, prompt, 5, "timeout", drop_at, -1))
            continue
        for gap in np.diff(times):
            rec.itl(float(gap), 1)
        rows.append((arrival, times[0], times[-1], len(times), prompt))
    a = np.array(rows, dtype=float)
    n = len(rows)
    df = with_latencies(pd.DataFrame({
        "arrival": a[:, 0], "first_token": a[:, 1], "finish": a[:, 2], "first_scheduled": a[:, 0],
        "output_tokens": a[:, 3].astype(int), "prompt_tokens": a[:, 4].astype(int),
        "preemptions": np.zeros(n, int), "truncated": np.zeros(n, int)}))
    slo = SLO(ttft_ms=GOODPUT["ttft"], tpot_ms=GOODPUT["tpot"], e2el_ms=GOODPUT["e2el"])
    return summarise(df, rec, len(REQUESTS), slo), rec


def test_every_vllm_named_key_holds_vllms_number():
    s, _ = _llmsim(drop_at=1.9)
    ref = vllm_metrics(_outputs(), s["duration"], GOODPUT)
    assert s["duration"] == pytest.approx(2.4)  # first arrival 0.0 to the last completion 2.4 (the drop is before)
    assert ref["failed"] == s["dropped"] == 1  # vLLM's "failed" is llmsim's "dropped"
    missing = sorted(k for k in ref if k != "failed" and k not in s)
    assert missing == []
    for key, want in ref.items():
        if key == "failed":
            continue
        # ITL percentiles and std come from a histogram with 0.01 % bins: equal to within a bin
        tol = 2e-4 if key.endswith("_itl_ms") and not key.startswith("mean") else 1e-12
        assert s[key] == pytest.approx(want, rel=tol), key


def test_goodput_matches_vllm_and_attainment_is_over_all_requests():
    s, _ = _llmsim(drop_at=1.9)
    ref = vllm_metrics(_outputs(), s["duration"], GOODPUT)
    # ttft <= 350, tpot <= 120 (0 for the one-token request), e2el <= 1200: requests 0, 1 and 4
    assert ref["request_goodput"] * s["duration"] == pytest.approx(3)
    assert s["request_goodput"] == pytest.approx(ref["request_goodput"])
    assert s["slo_attainment"] == pytest.approx(3 / 6)  # llmsim's own: of all six requests, the failed one a miss


def test_itl_std_is_numpys_population_std_of_every_gap():
    gaps = np.random.default_rng(1).lognormal(math.log(0.02), 0.7, 997)
    rec = Recorder()
    for g in gaps:
        rec.itl(float(g), 1)
    assert rec.itl_std() == pytest.approx(np.std(gaps), rel=2e-4)
    assert math.isnan(Recorder().itl_std())


def test_a_request_dropped_after_many_tokens_leaves_the_itl_percentiles_as_vllms_do():
    # one KV cache of 500 tokens: the first request (300 + 400 tokens) grows past it after ~200 tokens of 11 ms
    # gaps and is dropped; the second, the only one completed, has 12 ms gaps (two requests a batch, then alone)
    inst = InstanceConfig(profile=LinearProfile(base=0.01, per_token=0.001, kv_tokens=500))
    res = simulate([inst], requests([(0.0, 300, 400), (0.5, 10, 20)]), "round_robin")
    s = res.summary
    assert s["completed"] == 1 and list(res.dropped.reason) == ["exceeds_kv_capacity"]
    assert s["mean_itl_ms"] == pytest.approx(12.0)  # the completed request's 19 gaps
    assert s["median_itl_ms"] == pytest.approx(12.0, rel=2e-4)  # the dropped request's gaps taken back, as vLLM's
    assert "itl_gaps_of_dropped" not in s and not [n for n in res.notes if "ITL" in n]


def test_the_summary_counts_the_itl_gaps_of_dropped_requests_it_holds():
    # the second request (most recently admitted) is preempted for recompute when the two outgrow the KV cache of
    # 500 tokens, re-prefills after the first completes, and is dropped when it alone outgrows the cache: a token of
    # a re-prefill is no decode, so its gaps cannot be told from the engine's log and stay in the ITL histogram; the
    # summary itself (summary.json, an env's episode summary, which has no notes) says how many
    inst = InstanceConfig(profile=LinearProfile(base=0.01, per_token=0.001, kv_tokens=500))
    reqs = requests([(0.0, 100, 300), (0.05, 200, 400)])
    res = simulate([inst], reqs, "round_robin")
    assert list(res.dropped.reason) == ["exceeds_kv_capacity"] and reqs[1].preemptions == 2
    gaps = reqs[1].generated - 1  # the dropped request's tokens, less its first
    assert gaps > 100
    assert res.summary["itl_gaps_of_dropped"] == gaps
    assert [n for n in res.notes if "ITL" in n][0].startswith(f"median/std/p90/p99 ITL include {gaps:,} ")
    clean = simulate([inst], requests([(0.5, 10, 20)]), "round_robin")
    assert "itl_gaps_of_dropped" not in clean.summary  # (a run with no such gap keeps its keys)


def test_a_run_whose_only_gaps_are_a_dropped_requests_has_no_itl_statistics():
    # nothing completed: vLLM's ITL list is empty, and llmsim's ITL statistics have no sample (NaN, as the TTFT's),
    # whether the dropped request's gaps were taken back (the first run) or not (the second)
    inst = InstanceConfig(profile=LinearProfile(base=0.01, per_token=0.001, kv_tokens=500))
    reqs = requests([(0.0, 300, 400)])
    s = simulate([inst], reqs, "round_robin").summary
    assert s["completed"] == 0 and s["dropped"] == 1 and reqs[0].generated > 2
    assert "itl_gaps_of_dropped" not in s
    for stat in ("mean", "median", "std", "p90", "p99"):
        assert math.isnan(s[f"{stat}_itl_ms"]), stat
        assert math.isnan(s[f"{stat}_ttft_ms"]), stat
    reqs = requests([(0.0, 100, 600), (0.05, 200, 600)])  # both outgrow the cache, the second after a recompute
    s = simulate([inst], reqs, "round_robin").summary
    assert s["completed"] == 0 and s["dropped"] == 2 and s["itl_gaps_of_dropped"] == reqs[1].generated - 1
    for stat in ("mean", "median", "std", "p90", "p99"):
        assert math.isnan(s[f"{stat}_itl_ms"]), stat
