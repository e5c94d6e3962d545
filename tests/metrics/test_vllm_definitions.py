"""The summary's metrics match ``vllm bench serve``'s definitions (calculate_metrics) on hand-built cases
where a different definition would give a different number."""

import numpy as np
import pandas as pd
import pytest

from llmsim import InstanceConfig, simulate
from llmsim.engine.config import EngineConfig
from llmsim.metrics.recorder import Recorder, summarise
from llmsim.metrics.report import summary_rows
from llmsim.metrics.table import with_latencies
from llmsim.profiles.replay import compare, stats
from llmsim.schema import SLO
from llmsim.testing import LinearProfile, requests


def _requests(rows: list[tuple[float, float, float, int]]) -> pd.DataFrame:
    """(arrival, first_token, finish, output_tokens) per request, in seconds."""
    a = np.array(rows, dtype=float)
    n = len(rows)
    df = pd.DataFrame({"arrival": a[:, 0], "first_token": a[:, 1], "finish": a[:, 2],
                       "first_scheduled": a[:, 0], "output_tokens": a[:, 3].astype(int),
                       "prompt_tokens": np.full(n, 10), "preemptions": np.zeros(n, int),
                       "truncated": np.zeros(n, int)})
    return with_latencies(df)


def test_itl_percentiles_interpolate_like_numpy():
    rec = Recorder()
    rec.itl(0.010, 1)
    rec.itl(0.020, 1)
    # numpy's default (linear) method, as vLLM uses: median 15 ms, p90 19 ms; nearest rank gave 10 and 20
    assert rec.itl_percentile(50) * 1e3 == pytest.approx(15.0, rel=2e-4)
    assert rec.itl_percentile(90) * 1e3 == pytest.approx(19.0, rel=2e-4)
    assert rec.itl_percentile(99) * 1e3 == pytest.approx(19.9, rel=2e-4)


def test_itl_percentiles_match_numpy_on_many_gaps():
    gaps = np.random.default_rng(0).lognormal(np.log(0.03), 0.5, 501)
    rec = Recorder()
    for g in gaps:
        rec.itl(float(g), 1)
    for p in (50, 90, 99):
        assert rec.itl_percentile(p) == pytest.approx(np.percentile(gaps, p), rel=2e-4)


def test_tpot_excludes_one_token_outputs_and_goodput_counts_them_as_meeting_tpot():
    # TPOT = (e2el - ttft) / (output - 1): 1.0 s / 4 = 250 ms and 0.2 s / 1 = 200 ms; the 1-token request has none
    df = _requests([(0.0, 0.5, 1.5, 5), (1.0, 1.1, 1.3, 2), (2.0, 2.4, 2.4, 1)])
    s = summarise(df, Recorder(), 3, SLO(tpot_ms=220))
    assert s["mean_tpot_ms"] == pytest.approx(225.0)
    assert s["median_tpot_ms"] == pytest.approx(225.0)
    assert s["p90_tpot_ms"] == pytest.approx(245.0)
    # vLLM: a one-token request's TPOT is 0 for goodput, so it meets the target; duration = 0 .. 2.4 s
    assert s["duration"] == pytest.approx(2.4)
    assert s["request_goodput"] == pytest.approx(2 / 2.4)
    assert s["request_throughput"] == pytest.approx(3 / 2.4)
    assert s["output_throughput"] == pytest.approx(8 / 2.4)
    assert s["mean_ttft_ms"] == pytest.approx((500 + 100 + 400) / 3)
    assert s["std_e2el_ms"] == pytest.approx(np.std([1500.0, 300.0, 400.0]))


def test_replay_stats_with_only_one_token_outputs_have_no_tpot_instead_of_crashing():
    # vLLM's TPOT skips one-token outputs; with none left the replay reports no TPOT (it raised IndexError)
    s = stats(np.array([0.1, 0.3]), np.array([0.2, 0.4]), np.array([1, 1]))
    assert np.isnan(s["mean_tpot_ms"]) and np.isnan(s["p90_tpot_ms"])
    assert s["median_ttft_ms"] == pytest.approx(200.0)
    assert s["p90_e2el_ms"] == pytest.approx(380.0)
    row = {r["metric"]: r for r in compare(s, s)}["p90_tpot_ms"]
    assert row["simulated"] is None and row["measured"] is None and row["error_pct"] is None


def test_the_summary_table_labels_llmsim_attainment_apart_from_vllm_goodput():
    # goodput is vLLM's (completed requests meeting every SLO per second); attainment is llmsim's, over all requests
    df = _requests([(0.0, 0.5, 1.5, 5), (1.0, 1.1, 1.3, 2)])
    rec = Recorder()
    s = summarise(df, rec, 4, SLO(e2el_ms=2000))
    assert s["slo_attainment"] == pytest.approx(0.5)  # 2 of 4 requests (2 never completed)
    assert s["request_goodput"] == pytest.approx(2 / 1.5)
    labels = dict(summary_rows(s))
    assert labels["SLO attainment (all requests; drops miss)"] == "0.500"
    assert labels["Request goodput (req/s)"] == "1.33"


def _drop(rec: Recorder, rid: int, arrival: float, at: float) -> None:
    rec.dropped.append((rid, arrival, 10, 5, "timeout", at, -1))


def test_the_duration_ends_at_the_last_answer_drops_included_as_vllm_bench_serve():
    # vLLM times the benchmark until every request has answered, failed ones included (asyncio.gather): a request
    # given up at 5.0 s, after the last completion at 2.4 s, ends the run; the rates divide by 5.0 s, not 2.4 s
    df = _requests([(0.0, 0.5, 1.5, 5), (1.0, 1.1, 1.3, 2), (2.0, 2.4, 2.4, 1)])
    rec = Recorder()
    _drop(rec, 3, 2.5, 5.0)
    s = summarise(df, rec, 4, SLO(tpot_ms=220))
    assert s["duration"] == pytest.approx(5.0)
    assert s["request_throughput"] == pytest.approx(3 / 5.0)
    assert s["output_throughput"] == pytest.approx(8 / 5.0)
    assert s["request_goodput"] == pytest.approx(2 / 5.0)
    # a drop before the last completion changes nothing; one before the first arrival moves the start
    early = Recorder()
    _drop(early, 3, 1.0, 1.2)
    assert summarise(df, early, 4, SLO())["duration"] == pytest.approx(2.4)


def test_a_run_with_no_completion_has_zero_throughput_not_nan():
    rec = Recorder()
    _drop(rec, 0, 1.0, 1.0)
    _drop(rec, 1, 2.0, 4.0)
    s = summarise(_requests([(0.0, 0.5, 1.5, 5)]).iloc[:0], rec, 2, SLO(ttft_ms=100))
    assert s["duration"] == pytest.approx(3.0)
    for key in ("request_throughput", "output_throughput", "total_token_throughput", "request_goodput"):
        assert s[key] == 0.0, key
    empty = summarise(_requests([(0.0, 0.5, 1.5, 5)]).iloc[:0], Recorder(), 0, SLO(ttft_ms=100))
    assert empty["duration"] == 0.0 and empty["num_requests"] == 0
    assert [empty[k] for k in ("request_throughput", "output_throughput", "request_goodput")] == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("scale_s", [0.02, 3.0])
def test_itl_percentiles_are_within_half_a_bin_below_and_above_one_second(scale_s: float):
    # a gap is read as its bin's centre (bins 0.01 % wide): within 0.005 % of numpy's number. Sub-second gaps go to
    # bins by int(), which truncates toward zero, so their bins lie below the index's edge (they read one bin high)
    gaps = np.random.default_rng(5).lognormal(np.log(scale_s), 1.0, 20001)
    rec = Recorder()
    for g in gaps:
        rec.itl(float(g), 1)
    for p in (50, 90, 99):
        assert rec.itl_percentile(p) == pytest.approx(np.percentile(gaps, p), rel=5e-5), p
    assert rec.itl_std() == pytest.approx(np.std(gaps), rel=1e-5)


def test_an_inter_token_gap_longer_than_a_day_is_recorded_not_an_index_error():
    # an overloaded decode instance of a disaggregated cluster: the last of twelve prefilled requests waits 30.5 h
    # (eleven decodes of 1000 steps of 10 s before it) between its first and second token; the histogram ended at
    # 1e5 s (27.8 h), and the engine's bin lookup raised IndexError
    pre = InstanceConfig(profile=LinearProfile(base=0.01, per_token=0.0001), role="prefill")
    dec = InstanceConfig(profile=LinearProfile(base=10.0, per_token=0.0), role="decode",
                         engine=EngineConfig(max_num_seqs=1))
    res = simulate([pre, dec], requests([(i * 0.01, 100, 1000) for i in range(12)]), "round_robin")
    s = res.summary
    assert s["completed"] == 12 and s["dropped"] == 0
    waits = res.requests["tpot_ms"] * 999 / 1e3 - 999 * 10.0  # each request's wait for the decode slot, s
    assert waits.max() > 1.09e5
    rec = Recorder()
    for gap in (3e5, 9e11):  # read back as their bins' centres, up to the longest run a simulation can have
        rec.itl(gap, 1)
    assert rec.itl_percentile(0) == pytest.approx(3e5, rel=5e-5)
    assert rec.itl_percentile(100) == pytest.approx(9e11, rel=5e-5)
