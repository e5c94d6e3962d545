"""ITL statistics are of completed requests only, as ``vllm bench serve`` computes them: a request dropped after its
second token (grown past the KV cache, cut off by a driver's time limit) takes its gaps back out of the histogram
(``llmsim.engine.decode_times``). Checked against numpy over the completed requests' own token times, traced on
the stepping engine, and the fast path (decode runs, cohorts) must give the same numbers."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

import llmsim.engine.instance as instance_module
from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.cluster import Cluster
from llmsim.cluster.driver import ClusterDriver
from llmsim.compiled import engine_name
from llmsim.engine.decode_times import DecodeTimes
from llmsim.engine.iteration import sample_tokens
from llmsim.metrics.recorder import Recorder
from llmsim.request import Request
from llmsim.routing import make_router
from llmsim.testing import LinearProfile, requests

# a KV cache of 500 tokens: the first request (300 + 400 tokens) preempts the later ones as it grows, then grows
# past the whole cache after ~200 tokens and is dropped; the others complete, some after a recompute
WORKLOAD = [(0.0, 300, 400), (0.1, 20, 30), (0.3, 10, 40), (0.5, 10, 20), (1.0, 15, 25), (3.5, 30, 60)]
PROFILE = LinearProfile(base=0.01, per_token=0.001, kv_tokens=500)

needs_python_engine = pytest.mark.skipif(engine_name() != "python", reason="traces the Python engine's iterations")


def _trace(monkeypatch) -> dict[int, list[float]]:
    """Every request's token times, from the stepped iterations of the Python engine."""
    times: dict[int, list[float]] = {}

    def traced(batch, now, rec, log):
        before = [r.generated for r in batch]
        out = sample_tokens(batch, now, rec, log)
        for r, g in zip(batch, before, strict=True):
            if r.generated > g:
                times.setdefault(r.id, []).append(now)
        return out

    monkeypatch.setattr(instance_module, "sample_tokens", traced)
    return times


def _completed_gaps(times: dict[int, list[float]], done: set[int]) -> np.ndarray:
    return np.concatenate([np.diff(times[i]) for i in sorted(done) if len(times[i]) > 1])


def _check_itl(rec: Recorder, gaps: np.ndarray) -> None:
    assert rec.itl_count == len(gaps)
    for p in (50, 90, 99):
        assert rec.itl_percentile(p) == pytest.approx(np.percentile(gaps, p), rel=2e-4), p
    assert rec.itl_std() == pytest.approx(np.std(gaps), rel=2e-4)


@needs_python_engine
def test_itl_statistics_leave_out_a_request_dropped_after_many_tokens(monkeypatch):
    times = _trace(monkeypatch)
    stepped = simulate([InstanceConfig(profile=PROFILE, engine=EngineConfig(fast_path=False))], requests(WORKLOAD),
                       "round_robin")
    s = stepped.summary
    assert list(stepped.dropped.reason) == ["exceeds_kv_capacity"] and len(times[0]) > 100  # dropped at ~200 tokens
    done = set(stepped.requests["id"])
    assert done == {1, 2, 3, 4, 5}
    gaps = _completed_gaps(times, done)
    for key, p in (("median", 50), ("p90", 90), ("p99", 99)):
        assert s[f"{key}_itl_ms"] == pytest.approx(np.percentile(gaps, p) * 1e3, rel=2e-4), key
    assert s["std_itl_ms"] == pytest.approx(np.std(gaps) * 1e3, rel=2e-4)
    assert s["mean_itl_ms"] == pytest.approx(np.mean(gaps) * 1e3, rel=1e-9)
    assert "itl_gaps_of_dropped" not in s and not [n for n in stepped.notes if "ITL" in n]
    # the fast path (decode runs and their cohort) says exactly the same
    fast = simulate([InstanceConfig(profile=PROFILE)], requests(WORKLOAD), "round_robin").summary
    assert fast == s


@needs_python_engine
def test_requests_a_time_limit_cuts_off_mid_decode_leave_the_itl_statistics(monkeypatch):
    times = _trace(monkeypatch)  # (the stepping engine's: the fast path samples decode tokens in runs)
    recorders, gaps = [], np.array([])
    for fast in (False, True):
        drv = ClusterDriver(Cluster([InstanceConfig(profile=PROFILE, engine=EngineConfig(fast_path=fast))],
                                    make_router("round_robin")))
        reqs = requests(WORKLOAD)
        drv.start(reqs)
        drv.advance_to(2.0)
        drv.cut_off(reqs, "cut_off")  # (an env's time limit: request 0 decoding, on the fast path in a cohort)
        rec = drv.cluster.recorder
        assert [d[0] for d in rec.dropped] == [0, 5] and reqs[0].generated > 50  # (fast: as of its last applied run)
        done = {r.id for r in reqs if r.finish >= 0}
        assert done == {1, 2, 3, 4}
        if not fast:
            gaps = _completed_gaps(times, done)
        _check_itl(rec, gaps)
        recorders.append(rec)
    assert recorders[0].itl_hist == recorders[1].itl_hist


def stand_in_engine(running: list) -> SimpleNamespace:
    """What the decode-times log reads of its engine: its index, recorder and held requests."""
    return SimpleNamespace(idx=0, recorder=Recorder(), running=running, waiting=[], swapped=[])


def test_a_dropped_requests_gaps_stay_when_the_log_cannot_prove_them():
    # a log that misses a decode of the request (as when it was skipped while others decoded): nothing is taken back
    log = DecodeTimes(stand_in_engine([]))
    r = Request(0, 0.0, 10, 20)
    r.instance, r.first_token, r.generated, r.last_token_time = 0, 1.0, 4, 1.3
    for t in (1.1, 1.2, 1.25, 1.3):
        log.add(t)
    assert log.gaps_of(r) is None  # four times for three gaps: which were its own is unknown
    r.generated = 5
    assert log.gaps_of(r) == pytest.approx([0.1, 0.1, 0.05, 0.05])
    r.preemptions = 1  # preempted before (not by its drop): a re-prefill's token is in no log
    assert log.gaps_of(r) is None
    r.preemptions, r.dropped = 1, "exceeds_kv_capacity"
    assert log.gaps_of(r) is not None
    r.evictions = 1  # moved through the central queue: some of its tokens may be another engine's
    assert log.gaps_of(r) is None


def test_the_log_forgets_times_no_held_request_needs():
    held = Request(1, 0.0, 10, 20)
    held.first_token = 5.0
    log = DecodeTimes(stand_in_engine([held]))
    log.limit = 8
    for k in range(10):
        log.add(float(k))
    assert list(log.times) == [6.0, 7.0, 8.0, 9.0] and log.since == 5.0
    old = Request(2, 0.0, 10, 20)
    old.instance, old.first_token, old.generated, old.last_token_time = 0, 4.0, 6, 9.0
    assert log.gaps_of(old) is None  # its first token is before what the log still holds
    assert not math.isinf(log.since)
