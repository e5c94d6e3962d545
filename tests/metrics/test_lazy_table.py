"""A run's requests table is built when first read, from the rows recorded by the time of ``collect``: the same table
as the recorder builds at that moment, and the summary from the recorded columns is the table's, bit for bit."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import gymnasium as gym
import numpy as np
import pytest

from llmsim import InstanceConfig, envs
from llmsim.cluster import Cluster
from llmsim.metrics.episode_summary import latencies_of_columns
from llmsim.metrics.recorder import Recorder, latencies_of, summarise
from llmsim.routing import make_router
from llmsim.schema import SLO
from llmsim.simulation.run import collect
from llmsim.testing import LinearProfile, requests

pytestmark = pytest.mark.timeout(120)

SLO_CLASSES = SLO.parse({"ttft_ms": 300.0, "classes": {"fast": {"e2el_ms": 2000.0}, "slow": {"tpot_ms": 50.0}}})


def _finished_cluster(tasks: bool) -> Cluster:
    rng = np.random.default_rng(3)
    times = np.cumsum(rng.exponential(0.01, 400))
    reqs = requests([(float(t), int(p), int(o))
                     for t, p, o in zip(times, rng.integers(10, 600, 400), rng.integers(1, 120, 400))])
    reqs[5].prompt_tokens = 10**6  # no instance can hold it: dropped
    for r in reqs[50:]:  # the first requests have no class (nor task)
        r.slo_class = "fast" if r.id % 2 else "slow"
        if tasks:
            r.task = "chat" if r.id % 3 else "code"
    cluster = Cluster([InstanceConfig(profile=LinearProfile()) for _ in range(3)], make_router("jsq"),
                      on_unservable="drop")
    cluster.run(reqs)
    return cluster


def _same_latencies(rec: Recorder) -> None:
    want, got = latencies_of(rec.requests_frame()), latencies_of_columns(rec)
    for f in dataclasses.fields(want):
        a, b = getattr(want, f.name), getattr(got, f.name)
        if isinstance(a, np.ndarray) and a.dtype == object:  # the classes (None or NaN where a request has none)
            assert repr(list(a)) == repr(list(b)), f.name
        elif isinstance(a, np.ndarray):  # bit for bit
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), f.name
        else:
            assert repr(a) == repr(b), f.name


@pytest.mark.parametrize("tasks", [False, True])
def test_the_result_table_is_the_recorders_and_the_summary_the_tables(tasks: bool) -> None:
    cluster = _finished_cluster(tasks)
    rec = cluster.recorder
    assert len(rec.dropped) == 1 and rec.slo_classes is not None
    res = collect(cluster, SLO_CLASSES)
    assert "not built yet" in repr(res)
    table = res.requests
    assert table is res.requests  # built once
    assert table.equals(rec.requests_frame()) and list(table.columns) == list(rec.requests_frame().columns)
    assert ("task" in table.columns) == tasks
    _same_latencies(rec)
    num = len(table) + len(rec.dropped)
    want = summarise(latencies_of(table), rec, num, SLO_CLASSES)
    got = summarise(latencies_of_columns(rec), rec, num, SLO_CLASSES)
    assert repr(got) == repr(want)
    for k, v in want.items():  # (collect adds cluster-level keys after these)
        assert repr(res.summary[k]) == repr(v), k


def test_a_result_collected_mid_run_keeps_the_rows_of_that_moment() -> None:
    env = gym.make(envs.ENV_IDS[0], num_requests=150).unwrapped
    rng = np.random.default_rng(0)
    env.reset(seed=2)
    done, k, res, want = False, 0, None, None
    while not done:
        valid = np.flatnonzero(env.action_masks())
        _, _, term, trunc, _ = env.step(int(valid[rng.integers(len(valid))]))
        done, k = term or trunc, k + 1
        if k == 60:
            res, want = collect(env.cluster, env.slo), env.cluster.recorder.requests_frame()
            _same_latencies(env.cluster.recorder)
    assert res is not None and want is not None and 0 < len(want) < len(env.cluster.recorder.cols["id"])
    assert res.requests.equals(want)  # built after the run went on: the rows recorded since are not in it
    _same_latencies(env.cluster.recorder)


def test_a_copied_recorder_records_into_its_own_columns():
    import copy

    from llmsim.request import Request

    cl = _finished_cluster(False)
    rec = cl.recorder
    n = len(rec.cols["id"])
    for twin in (copy.deepcopy(rec), copy.deepcopy(cl).recorder):  # (a planner copies a whole cluster)
        r = Request(999, 0.0, 8, 4)
        r.instance, r.first_token, r.finish = 0, 0.1, 0.2
        twin.finish(r)
        assert len(twin.cols["id"]) == n + 1 and len(rec.cols["id"]) == n  # (not the original's columns)


def test_a_copied_recorder_has_the_same_itl_histogram_without_copying_its_empty_bins():
    rec = Recorder()  # (a cluster's recorder holds its observers, the cluster's methods: it copies with the cluster)
    for gap, n in ((0.012, 40), (0.013, 25), (0.2, 1)):
        rec.itl(gap, n)
    assert len(pickle.dumps(rec.itl_hist)) > 500_000  # (the histogram's slots, nearly all empty)
    assert len(pickle.dumps(rec)) < 10_000  # the recorder without them
    twin = copy.deepcopy(rec)
    assert twin.itl_hist == rec.itl_hist and twin.itl_hist is not rec.itl_hist
    assert [twin.itl_percentile(p) for p in (50, 99)] == [rec.itl_percentile(p) for p in (50, 99)]
    twin.itl(0.5, 3)  # the copy records into its own histogram
    assert twin.itl_count == rec.itl_count + 3 and twin.itl_hist != rec.itl_hist
