"""The QLM router (llmsim/routing/qlm/router.py, docs/qlm.md "The QLM router"): construction, no request lost or stuck,
the latency-sensitive class's SLO attainment against FCFS routing, the pulling ablation, and bad options."""

from __future__ import annotations

import numpy as np
import pytest

from llmsim import InstanceConfig, simulate
from llmsim.engine.config import EngineConfig
from llmsim.errors import ConfigError
from llmsim.request import Request
from llmsim.routing import ROUTERS, WAIT, make_router
from llmsim.routing.qlm.router import QLMRouter
from llmsim.schema import SLO
from llmsim.testing import LinearProfile
from tests.routing.helpers import SLO_CLASSES, SLO_S, StubView, bursty, inst

pytestmark = pytest.mark.timeout(90)


def cluster(max_num_seqs: int = 16) -> list[InstanceConfig]:
    return [InstanceConfig(model="llama-2-7b", gpu="a100-80gb", engine=EngineConfig(max_num_seqs=max_num_seqs))
            for _ in range(2)]


def run(policy: str, seed: int = 0, **kw):
    reqs = bursty(seed)
    res = simulate(cluster(), reqs, policy, slo=SLO_CLASSES, policy_kwargs=kw, seed=seed)
    return res, len(reqs)


def test_registered_and_built_from_policy_kwargs() -> None:
    assert "qlm" in ROUTERS.names()
    r = make_router("qlm", seed=3, slo_s=SLO_S, max_waiting=1, planner="edf", delta=2,
                    ops={"pulling": True, "load_balancing": False, "eviction": False})
    assert isinstance(r, QLMRouter) and r.max_waiting == 1 and r.planner == "edf"
    assert r.ops == {"pulling": True, "load_balancing": False, "eviction": False, "state_swapping": True,
                     "warm_start": True}  # unnamed operations stay on (QLM has all five)


@pytest.mark.parametrize("kwargs", [
    {}, {"max_waiting": 1, "planner": "edf"}, {"ops": {"load_balancing": False}}, {"delta": 0.1},
    {"violation_weight": None, "trigger_prob": 0.0, "replan_interval_s": 0.0},
])
def test_every_request_completes_two_classes(kwargs: dict) -> None:
    """Small 2-instance cluster, two classes, no central-queue tick: every held request is routed, none lost."""
    rng = np.random.default_rng(1)
    n = 150
    t = np.cumsum(rng.exponential(0.03, n))
    reqs = [Request(i, float(a), int(p), int(o), slo_class="latency_sensitive" if i % 3 else "batch")
            for i, (a, p, o) in enumerate(zip(t, rng.integers(10, 600, n), rng.integers(5, 300, n)))]
    slo = SLO.parse({"classes": {"latency_sensitive": {"e2el_ms": 2000.0}, "batch": {"e2el_ms": 60_000.0}}})
    insts = [InstanceConfig(profile=LinearProfile(kv_tokens=k), engine=EngineConfig(max_num_seqs=4))
             for k in (4000, 8000)]
    res = simulate(insts, reqs, "qlm", slo=slo, policy_kwargs={"slo_s": {"latency_sensitive": 2.0,
                                                                         "batch": 60.0}, **kwargs})
    assert res.summary["dropped"] == 0 and len(res.requests) == n
    assert res.requests["finish"].notna().all()


@pytest.mark.parametrize("tick", [None, 0.05])
def test_heterogeneous_instances_and_simultaneous_arrivals_leave_nothing_behind(tick: float | None) -> None:
    """Instances that cannot hold every prompt (groups keyed by their candidates), bursts of simultaneous
    arrivals, with and without a central-queue tick: everything is routed and the router ends empty. The small
    instance's KV cache can drop a request whose output outgrows it: the cluster's own limit, not a stuck one."""
    rng = np.random.default_rng(2)
    reqs = [Request(i, float(i // 20), int(rng.integers(10, 900)), int(rng.integers(5, 200)),
                    slo_class=("latency_sensitive", "batch", None)[i % 3]) for i in range(120)]
    insts = [InstanceConfig(profile=LinearProfile(kv_tokens=k), engine=EngineConfig(max_num_seqs=3))
             for k in (500, 6000, 3000)]
    r = make_router("qlm", slo_s={"latency_sensitive": 1.0, "batch": 30.0}, default_slo_s=5.0, max_waiting=1)
    res = simulate(insts, reqs, r, slo=SLO_CLASSES, central_queue_tick=tick)
    assert len(res.requests) + len(res.dropped) == 120 and len(res.requests) >= 110
    assert set(res.dropped.reason) <= {"exceeds_kv_capacity"}  # none never_routed
    assert (res.requests[res.requests.prompt_tokens > 480].instance != 0).all()
    assert not r._held and not r._groups and r.stats["groups"] > 3


def test_qlm_beats_fcfs_on_the_latency_sensitive_class() -> None:
    """Bursts of batch requests ahead of latency-sensitive ones near saturation (docs/qlm.md, seed 0)."""
    fcfs, n = run("round_robin")
    qlm, _ = run("qlm", slo_s=SLO_S, planner="milp")
    a_fcfs = fcfs.summary["slo_attainment_latency_sensitive"]
    a_qlm = qlm.summary["slo_attainment_latency_sensitive"]
    assert len(qlm.requests) == len(fcfs.requests) == n and qlm.summary["dropped"] == 0
    assert a_qlm >= a_fcfs + 0.4, (a_qlm, a_fcfs)
    assert qlm.summary["slo_attainment_batch"] >= 0.99  # the loose class does not pay for it
    # deterministic (the default EDF planner): the same seed gives the same schedule (the MILP's wall-clock budget
    # can make a loaded machine fall back where an idle one proves optimality, docs/qlm.md)
    edf = [run("qlm", slo_s=SLO_S)[0] for _ in range(2)]
    assert edf[0].requests["finish"].tolist() == edf[1].requests["finish"].tolist()
    assert edf[0].summary["slo_attainment_latency_sensitive"] >= a_fcfs + 0.4


def test_pulling_off_routes_at_once_and_loses_the_gain() -> None:
    on, _ = run("qlm", slo_s=SLO_S)
    off, n = run("qlm", slo_s=SLO_S, ops={"pulling": False})
    a_on, a_off = (r.summary["slo_attainment_latency_sensitive"] for r in (on, off))
    assert len(off.requests) == n and a_on >= a_off + 0.4, (a_on, a_off)
    assert (off.requests["routed_time"] == off.requests["arrival"]).all()  # immediate routing


def test_wait_answered_for_a_request_behind_the_head() -> None:
    """Unit level: with the instance busy, the second request of a group waits for the first."""

    class _View:
        num_instances = 1

        def __init__(self, state):
            self._s, self.now = state, 0.0

        def state(self):
            return self._s

        def candidates(self, req):
            return [0]

    from llmsim.state.cluster_state import ClusterState, InstanceState

    def st(waiting: int, running: int = 4) -> ClusterState:
        inst = InstanceState(0, "i0", "llama-2-7b", "a100-80gb", True, running, waiting, 0, 10, 1000, 16, 4, 4096,
                             4096, 0.02, 100.0)
        return ClusterState(0.0, 0.0, 0, False, 0, 100.0, (inst,))

    r = make_router("qlm", slo_s=SLO_S, max_waiting=1)
    a, b = (Request(i, 0.0, 100, 10, slo_class="batch") for i in range(2))
    assert r.route(a, _View(st(1))) == WAIT and r.route(b, _View(st(1))) == WAIT  # no room
    assert r.route(b, _View(st(0))) == WAIT  # room, but b is behind a
    assert r.route(a, _View(st(0))) == 0 and r.route(b, _View(st(0))) == 0
    # an idle engine and a request behind the head: no completion would offer it again, so it goes now
    c, d = (Request(i, 0.0, 100, 10, slo_class="batch") for i in range(2, 4))
    assert r.route(c, _View(st(1))) == WAIT
    assert r.route(d, _View(st(0, running=0))) == 0 and r.stats["out_of_order"] == 1
    assert r.route(c, _View(st(0))) == 0 and not r._held and not r._groups


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"delta": 0}, "delta"), ({"max_waiting": 0}, "max_waiting"), ({"planner": "gurobi"}, "planner"),
    ({"plan_budget_s": -1}, "plan_budget_s"), ({"alpha": 0.7}, "alpha"), ({"slo_s": {"ls": -1}}, "slo_s.ls"),
    ({"trigger_prob": 1.5}, "trigger_prob"), ({"class_output": {"ls": [1]}}, "class_output.ls"),
    ({"ops": {"pulling": "yes"}}, "ops.pulling"), ({"ops": {"teleport": True}}, "ops.teleport"),
    ({"ops": {"eviction": 1}}, "ops.eviction"), ({"bogus": 1}, "bogus"),
    ({"class_output": "x"}, "class_output"), ({"class_output": [[100, 10]]}, "class_output"),
])
def test_bad_kwargs_name_the_key(kwargs: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        make_router("qlm", **kwargs)


MODELS = ("mistral-7b", "vicuna-13b", "llama-2-7b", "llama-2-13b")  # two popular, two tail models
MM_SLO_S = {"latency_sensitive": 30.0, "batch": 300.0}


def multi_model_run(policy: str, n: int = 300, cache_gb: float = 100.0, **kw):
    """W_A in small (docs/qlm.md): 2 A100s that can each load 4 models, 20 % latency-sensitive requests."""
    from llmsim.workload.config import build_workload

    reqs = list(build_workload({
        "kind": "synthetic", "arrival": {"process": "poisson", "rate": 2.0}, "lengths": "azure_conv_like",
        "num_requests": n, "slo_class_mix": {"latency_sensitive": 0.2, "batch": 0.8},
        "model_mix": {"mistral-7b": 0.6, "vicuna-13b": 0.3, "llama-2-7b": 0.06, "llama-2-13b": 0.04}}, seed=0))
    insts = [InstanceConfig(model=MODELS[i], gpu="a100-80gb", models=MODELS, host_cache_gb=cache_gb,
                            engine=EngineConfig(preemption="swap", swap_space_gb=16)) for i in range(2)]
    slo = SLO.parse({"ttft_ms": None, "tpot_ms": None, "classes": {
        "latency_sensitive": {"e2el_ms": 30_000.0}, "batch": {"e2el_ms": 300_000.0}}})
    router = make_router(policy, slo_s=MM_SLO_S, **kw) if policy == "qlm" else make_router(policy)
    return simulate(insts, reqs, router, slo=slo, on_unservable="drop"), router


def test_qlm_beats_fcfs_on_a_small_multi_model_workload() -> None:
    """Groups keep each model's requests together, so instances swap models a few times instead of thrashing."""
    fcfs, _ = multi_model_run("round_robin")
    qlm, router = multi_model_run("qlm")
    assert len(qlm.requests) == len(fcfs.requests) and len(qlm.requests) + len(qlm.dropped) == 300
    assert set(qlm.dropped["reason"]) <= {"prompt_exceeds_max_model_len"}  # a long prompt of the trace-like lengths
    assert qlm.summary["slo_attainment"] >= fcfs.summary["slo_attainment"] + 0.2
    assert qlm.summary["slo_attainment_latency_sensitive"] >= fcfs.summary["slo_attainment_latency_sensitive"] + 0.4
    assert qlm.summary["model_swaps"] < fcfs.summary["model_swaps"] / 2
    assert router.stats["prefetched"] > 0  # warm start: upcoming models copied into host memory ahead of use


def test_warm_start_off_prefetches_nothing_and_swaps_more_from_storage() -> None:
    on, r_on = multi_model_run("qlm")
    off, r_off = multi_model_run("qlm", ops={"warm_start": False})
    assert r_off.stats["prefetched"] == 0 < r_on.stats["prefetched"]
    cold = {k: r.summary["model_swaps"] - r.summary["warm_swaps"] for k, r in (("on", on), ("off", off))}
    assert cold["on"] <= cold["off"]


def test_eviction_and_state_swapping_make_room_for_the_head_group() -> None:
    """On the bursty two-class workload: looser-SLO running requests are parked in CPU memory (swap space) or, with
    state swapping off, evicted; every request still completes with its whole output."""
    reqs = bursty(0)
    insts = [InstanceConfig(model="llama-2-7b", gpu="a100-80gb",
                            engine=EngineConfig(max_num_seqs=8, preemption="swap", swap_space_gb=8)) for _ in range(2)]
    for ops, key in (({}, "parked"), ({"state_swapping": False}, "evicted")):
        r = make_router("qlm", slo_s=SLO_S, ops=ops)
        res = simulate(insts, reqs, r, slo=SLO_CLASSES)
        assert r.stats[key] > 0, (ops, r.stats)
        assert len(res.requests) == len(reqs) and res.summary["dropped"] == 0
        assert (res.requests["output_tokens"] == res.requests["requested_output_tokens"]).all()


def test_the_estimator_finds_a_tensor_parallel_instances_profile() -> None:
    """The state does not report tp: Vicuna-13B on two A10s (it fits no single A10) is still estimated."""
    insts = [InstanceConfig(model="vicuna-13b", gpu="a10", tp=2), InstanceConfig(model="mistral-7b", gpu="a10")]
    reqs = [Request(i, 0.2 * i, 200, 50, slo_class="batch", model=("vicuna-13b", "mistral-7b")[i % 2])
            for i in range(40)]
    r = make_router("qlm", slo_s=SLO_S)
    res = simulate(insts, reqs, r, slo=SLO_CLASSES)
    assert len(res.requests) == 40
    assert {k[0] for k in r._rates} == {"vicuna-13b", "mistral-7b"}


def test_an_evicted_request_goes_back_only_where_its_tokens_fit() -> None:
    """An evicted request returns with its generated tokens and recomputes prompt + generated in one prefill: an
    instance whose cache cannot hold that (max_prompt_tokens 500 < 450 + 100) must not get it, though its prompt
    alone would fit there (it was dropped there as cannot_be_scheduled)."""
    small = inst(0, "llama-2-7b")._replace(max_prompt_tokens=500)
    view = StubView([small, inst(1, "llama-2-7b", running=3)])  # instance 0 idle: the least work
    r = QLMRouter(slo_s={"batch": 600})
    back = Request(7, 0.0, 450, 300, slo_class="batch")
    back.generated = 100
    assert r.route(back, view) == 1
    assert r.route(Request(8, 0.0, 450, 300, slo_class="batch"), view) == 0  # a fresh one still fits there
