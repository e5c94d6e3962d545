"""The QLM paper's EDF and SHEPHERD baselines (llmsim/routing/slo.py, docs/slo_baselines.md): nothing lost
or stuck, EDF against FCFS on the latency-sensitive class, SHEPHERD's batches never join, the MILP batch choice
against the enumeration, bad options, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from llmsim import InstanceConfig, simulate
from llmsim.engine.config import EngineConfig
from llmsim.errors import ConfigError
from llmsim.request import Request
from llmsim.routing import ROUTERS, WAIT, make_router
from llmsim.routing.slo import EDFRouter, ShepherdRouter, choose_batch
from llmsim.schema import SLO
from llmsim.state.cluster_state import ClusterState, InstanceState
from llmsim.testing import LinearProfile
from tests.routing.helpers import SLO_CLASSES, SLO_S, bursty  # the same bursty two-class workload as QLM's

pytestmark = pytest.mark.timeout(90)


def a100s(n: int = 2, max_num_seqs: int = 16) -> list[InstanceConfig]:
    return [InstanceConfig(model="llama-2-7b", gpu="a100-80gb", engine=EngineConfig(max_num_seqs=max_num_seqs))
            for _ in range(n)]


def small_run(policy: str, seed: int = 1, **kw):
    """A small two-class bursty run on LinearProfile instances of unequal KV capacity."""
    rng = np.random.default_rng(seed)
    n = 150
    t = np.repeat(np.arange(n // 10) * 1.5, 10) + rng.uniform(0, 0.05, n)  # bursts of 10
    t.sort()
    reqs = [Request(i, float(a), int(p), int(o), slo_class="latency_sensitive" if i % 3 else "batch")
            for i, (a, p, o) in enumerate(zip(t, rng.integers(10, 600, n), rng.integers(5, 300, n)))]
    slo = SLO.parse({"classes": {"latency_sensitive": {"e2el_ms": 2000.0}, "batch": {"e2el_ms": 60_000.0}}})
    insts = [InstanceConfig(profile=LinearProfile(kv_tokens=k), engine=EngineConfig(max_num_seqs=4))
             for k in (4000, 8000)]
    r = make_router(policy, seed=seed, slo_s={"latency_sensitive": 2.0, "batch": 60.0}, **kw)
    return simulate(insts, reqs, r, slo=slo), n, r


def test_registered_and_built_from_policy_kwargs() -> None:
    assert {"edf", "shepherd"} <= set(ROUTERS.names())
    e = make_router("edf", slo_s=SLO_S, max_waiting=1, deadline="absolute")
    assert isinstance(e, EDFRouter) and e.max_waiting == 1 and e.deadline == "absolute"
    s = make_router("shepherd", slo_s=SLO_S, max_batch=8, class_output={"batch": 400}, solver="enumerate")
    assert isinstance(s, ShepherdRouter) and s.max_batch == 8 and s.class_output == {"batch": 400.0}


@pytest.mark.parametrize(("policy", "kw"), [
    ("edf", {}), ("edf", {"deadline": "absolute", "max_waiting": 1}),
    ("shepherd", {}), ("shepherd", {"solver": "enumerate", "max_batch": 3}),
])
def test_every_request_completes_two_classes(policy: str, kw: dict) -> None:
    res, n, r = small_run(policy, **kw)
    assert res.summary["dropped"] == 0 and len(res.requests) == n
    assert res.requests["finish"].notna().all()
    assert not r._held  # the router ends empty


@pytest.mark.parametrize("policy", ["edf", "shepherd"])
def test_heterogeneous_candidates_and_a_tick_leave_nothing_behind(policy: str) -> None:
    """Instances that cannot hold every prompt, simultaneous arrivals, a central-queue tick."""
    rng = np.random.default_rng(2)
    reqs = [Request(i, float(i // 20), int(rng.integers(10, 900)), int(rng.integers(5, 200)),
                    slo_class=("latency_sensitive", "batch", None)[i % 3]) for i in range(120)]
    insts = [InstanceConfig(profile=LinearProfile(kv_tokens=k), engine=EngineConfig(max_num_seqs=3))
             for k in (500, 6000, 3000)]
    r = make_router(policy, slo_s={"latency_sensitive": 1.0, "batch": 30.0}, default_slo_s=5.0)
    res = simulate(insts, reqs, r, slo=SLO_CLASSES, central_queue_tick=0.05)
    assert len(res.requests) + len(res.dropped) == 120 and len(res.requests) >= 110
    assert set(res.dropped.reason) <= {"exceeds_kv_capacity"}  # none never_routed
    assert (res.requests[res.requests.prompt_tokens > 480].instance != 0).all()
    assert not r._held


def test_edf_beats_fcfs_on_the_latency_sensitive_class() -> None:
    reqs = bursty(0)
    fcfs = simulate(a100s(), reqs, "round_robin", slo=SLO_CLASSES)
    edf = simulate(a100s(), bursty(0), "edf", slo=SLO_CLASSES, policy_kwargs={"slo_s": SLO_S})
    a_fcfs = fcfs.summary["slo_attainment_latency_sensitive"]
    a_edf = edf.summary["slo_attainment_latency_sensitive"]
    assert len(edf.requests) == len(reqs) and edf.summary["dropped"] == 0
    assert a_edf >= a_fcfs + 0.4, (a_edf, a_fcfs)
    assert edf.summary["slo_attainment_batch"] >= 0.99


def test_edf_routes_the_head_only_and_never_waits_on_an_idle_cluster() -> None:
    """Unit level: a batch request waits behind a latency-sensitive one; an idle cluster takes anything."""
    r = make_router("edf", slo_s=SLO_S, max_waiting=1)
    b, ls = Request(0, 0.0, 100, 10, slo_class="batch"), Request(1, 0.1, 100, 10, slo_class="latency_sensitive")
    assert r.route(b, _View(_state([1, 1]))) == WAIT  # no room anywhere
    assert r.route(ls, _View(_state([1, 0]))) == 1  # the EDF head, to the instance with room
    assert r.route(b, _View(_state([1, 1], running=0))) == WAIT  # engines hold work: wait
    assert r.route(b, _View(_state([0, 0], running=0))) == 0 and not r._held  # idle cluster: route at once


def test_shepherd_batches_never_join() -> None:
    """Per instance, the requests routed together (one routed_time) form a batch; the next batch is routed, and
    starts, only once every request of the previous one has finished."""
    reqs = bursty(0, n_bursts=3)
    r = make_router("shepherd", slo_s=SLO_S, class_output={"latency_sensitive": 50, "batch": 600})
    res = simulate(a100s(), reqs, r, slo=SLO_CLASSES)
    df = res.requests
    assert len(df) == len(reqs) and res.summary["dropped"] == 0
    n_batches = 0
    for _, per in df.groupby("instance"):
        batches = per.groupby("routed_time").agg(start=("first_scheduled", "min"), end=("finish", "max"),
                                                 n=("id", "size")).sort_index()
        n_batches += len(batches)
        prev_end = -np.inf
        for routed, row in batches.iterrows():
            assert routed >= prev_end and row.start >= prev_end, (routed, row.start, prev_end)
            prev_end = row.end
    assert n_batches == r.stats["batches"] + r.stats["out_of_order"]
    assert max(len(m) for _, _, m in r.batch_log) == 16  # capped by max_num_seqs
    assert r.stats["milp"] > 0


@pytest.mark.parametrize("seed", range(50))
def test_milp_batch_choice_equals_enumeration(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, bmax = int(rng.integers(1, 13)), int(rng.integers(1, 9))
    ids = [int(x) for x in rng.permutation(100)[:n]]
    deadlines = [float(x) for x in rng.integers(0, 5, n)]  # ties, broken by id
    if seed % 2:  # monotone: a bigger batch runs longer, so fewer requests meet
        slack = rng.integers(0, bmax + 2, n)
        met = np.arange(1, bmax + 1)[None, :] <= slack[:, None]
    else:
        met = rng.random((n, bmax)) < rng.uniform(0.0, 1.0)
    a = choose_batch(ids, deadlines, met, bmax, solver="milp")
    b = choose_batch(ids, deadlines, met, bmax, solver="enumerate")
    assert (a.size, a.members, a.n_met) == (b.size, b.members, b.n_met)
    assert b.solver in ("enumerate", "none_met") and (a.solver == "milp" or not met.any())
    assert len(set(a.members)) == a.size <= min(n, bmax)
    best = max(min(k, int(met[:, k - 1].sum())) for k in range(1, min(n, bmax) + 1))
    assert a.n_met == best


def test_batch_choice_when_nobody_can_meet_and_with_fillers() -> None:
    none = choose_batch([5, 3, 9], [2.0, 1.0, 1.0], np.zeros((3, 4), bool), 4)
    assert none == choose_batch([5, 3, 9], [2.0, 1.0, 1.0], np.zeros((3, 4), bool), 4, solver="enumerate")
    assert none.size == 3 and none.members == (3, 9, 5) and none.n_met == 0
    met = np.array([[True, True], [False, False], [False, False]])  # only id 7 makes it; the others fill
    c = choose_batch([7, 8, 6], [9.0, 1.0, 2.0], met, 2)
    assert c.size == 2 and c.n_met == 1 and c.members == (8, 7)


@pytest.mark.parametrize(("policy", "kwargs", "key"), [
    ("edf", {"max_waiting": 0}, "max_waiting"), ("edf", {"deadline": "soon"}, "deadline"),
    ("edf", {"slo_s": {"ls": -1}}, "slo_s.ls"), ("edf", {"slo_s": [1]}, "slo_s"),
    ("edf", {"default_slo_s": float("nan")}, "default_slo_s"), ("edf", {"bogus": 1}, "bogus"),
    ("shepherd", {"max_batch": 2.5}, "max_batch"), ("shepherd", {"output_tokens": 0}, "output_tokens"),
    ("shepherd", {"class_output": {"batch": "x"}}, "class_output.batch"), ("shepherd", {"solver": "cplex"}, "solver"),
    ("shepherd", {"milp_time_limit_s": -1}, "milp_time_limit_s"), ("shepherd", {"slo_s": {"a": True}}, "slo_s.a"),
    ("shepherd", {"typical_prompt": 1.5}, "typical_prompt"), ("shepherd", {"bogus": 1}, "bogus"),
])
def test_bad_kwargs_name_the_key(policy: str, kwargs: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=r"policy\.kwargs\b") as e:
        make_router(policy, **kwargs)
    assert key in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("policy", ["edf", "shepherd"])
def test_same_seed_same_summary(policy: str) -> None:
    runs = [small_run(policy, seed=4)[0] for _ in range(2)]
    assert runs[0].summary == runs[1].summary
    assert runs[0].requests["finish"].tolist() == runs[1].requests["finish"].tolist()


# ---------------------------------------------------------------------- a fake view for unit tests
class _View:
    def __init__(self, state: ClusterState) -> None:
        self._s, self.now, self.num_instances = state, 0.0, len(state.instances)

    def state(self) -> ClusterState:
        return self._s

    def candidates(self, req: Request) -> list[int]:
        return list(range(self.num_instances))


def _state(waiting: list[int], running: int = 4) -> ClusterState:
    insts = tuple(InstanceState(k, f"i{k}", "llama-2-7b", "a100-80gb", True, running, w, 0, 10, 1000, 16, 4, 4096,
                                4096, 0.02, 100.0) for k, w in enumerate(waiting))
    return ClusterState(0.0, 0.0, 0, False, 0, 100.0, insts)
