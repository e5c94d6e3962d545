"""Engine operations a policy triggers (llmsim.engine.ops): request eviction and GPU -> CPU KV swap-out.

They conserve tokens (a finished request generated exactly its target; generated never decreases) and memory
(no KV block, GPU or CPU, is held at the end); an evicted request is routed again and completes; a swap-out
costs blocks * block_bytes / host_link_bw; an operation mid decode run gives bit-identical results to the
same operation on a stepped engine; bad calls are clear errors.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsim import EngineConfig, InstanceConfig
from llmsim.cluster import Cluster
from llmsim.errors import LLMSimError
from llmsim.event_loop import ROUTE
from llmsim.request import Request
from llmsim.routing import make_router
from llmsim.schema import SLO
from llmsim.simulation.run import collect
from llmsim.testing import LinearProfile, requests
from tests.helpers import assert_frames_identical, examples

BASE, PER_TOKEN = 0.01, 0.001  # LinearProfile: a step takes BASE + PER_TOKEN * tokens


def _cluster(n: int = 1, fast: bool = True, **engine) -> Cluster:
    cfg = dict(fast_path=fast, **engine)
    insts = [InstanceConfig(profile=LinearProfile(base=BASE, per_token=PER_TOKEN), engine=EngineConfig(**cfg))
             for _ in range(n)]
    return Cluster(insts, make_router("round_robin"))


def _at(c: Cluster, t: float, fn, *args) -> None:
    c.env.call_at(t, ROUTE, fn, *args)


def _assert_memory_returned(c: Cluster) -> None:
    for inst in c.instances:
        assert inst.kv.free == inst.kv.total and inst.kv.cpu_free == inst.kv.cpu_total, inst.name
        assert not (inst.running or inst.waiting or inst.swapped or inst.ops.pending), inst.name
    assert not c.central


def test_evicted_request_is_rerouted_and_completes_with_one_recompute_prefill():
    c = _cluster(2)
    seen = []

    def evict() -> None:
        c.sync_all()
        inst = c.instances[0]
        assert inst.decode_run is not None, "the eviction lands mid decode run"
        seen.append(inst.running[0].generated)
        c.view.evict(0, 0)

    _at(c, 0.05, evict)
    reqs = requests([(0.0, 10, 20)])
    c.run(reqs)
    r = reqs[0]
    res = collect(c, SLO())
    assert seen == [3] and c.evictions == 1 and c.instances[0].ops.evictions == 1
    assert r.evictions == 1 and res.summary["evictions"] == 1  # counted on the request and in the summary
    assert res.requests["output_tokens"].tolist() == [20] and r.instance == 1, "re-routed (round robin) and done"
    # boundaries 0.02 (prefill, token 1), 0.031, 0.042, 0.053 (token 4, the first boundary after the call);
    # on instance 1 from 0.053: one prefill of 10 + 4 tokens (token 5), then 15 decodes
    t = 0.02 + 3 * 0.011
    assert r.finish == pytest.approx(t + (BASE + 14 * PER_TOKEN) + 15 * 0.011)
    assert [i.prefill_tokens for i in c.instances] == [10, 14]
    assert [i.tokens_out for i in c.instances] == [4, 16]
    _assert_memory_returned(c)


def test_swap_out_costs_the_host_link_transfer_and_the_request_comes_back():
    prompt, out = 100, 20

    def finish(swap: bool) -> tuple[float, Cluster]:
        c = _cluster(1, preemption="swap")
        if swap:
            _at(c, 0.15, c.swap_out, 0, 0)
        reqs = requests([(0.0, prompt, out)])
        c.run(reqs)
        return reqs[0].finish, c

    plain, _ = finish(False)
    swapped, c = finish(True)
    inst = c.instances[0]
    prof = inst.profile
    block_bytes = inst.block_size * prof.model.kv_bytes_per_token // prof.tp
    assert inst.block_bytes == block_bytes
    # at the boundary after t=0.15 the request holds ceil(computed / 16) = 7 blocks; they go out and, the engine
    # having room, come straight back in: both transfers are charged to the next iteration
    blocks = 7
    assert swapped - plain == pytest.approx(2 * blocks * block_bytes / prof.gpu.host_link_bw, rel=1e-9)
    assert inst.ops.swap_outs == 1 and inst.swap_outs == 0, "an operation, not a preemption"
    res = collect(c, SLO())
    assert res.requests["swaps"].tolist() == [1] and res.requests["output_tokens"].tolist() == [out]
    assert inst.prefill_tokens == prompt, "a swapped request keeps its KV state: no recompute"
    _assert_memory_returned(c)


def _expect_error(c: Cluster, t: float, fn, match: str, log: list[str]) -> None:
    def call() -> None:
        c.sync_all()
        with pytest.raises(LLMSimError, match=match) as e:
            fn()
        log.append(str(e.value))

    _at(c, t, call)


def test_bad_calls_are_clear_errors():
    log: list[str] = []
    c = _cluster(1, preemption="swap", swap_space_gb=0.05, max_num_seqs=1)  # room for 5 blocks only
    _expect_error(c, 0.05, lambda: c.swap_out(0, 1), r"swap out request 1: it is waiting, not running", log)
    _expect_error(c, 0.05, lambda: c.swap_out(0, 0), r"request 0: the CPU swap space is full", log)
    _expect_error(c, 0.05, lambda: c.evict(0, 99), r"request 99: it is not running, waiting or swapped", log)
    _expect_error(c, 0.05, lambda: c.evict(3, 0), r"no instance 3", log)

    def twice() -> None:
        c.evict(0, 1)
        c.evict(0, 1)

    _expect_error(c, 0.06, twice, r"request 1: an operation on it is already pending", log)
    c.run(requests([(0.0, 500, 20), (0.0, 10, 5)]))
    assert len(log) == 5
    assert c.evictions == 1
    _assert_memory_returned(c)

    log = []
    c = _cluster(1)  # recompute preemption: no swap space
    _expect_error(c, 0.05, lambda: c.swap_out(0, 0), r"request 0: the instance has no CPU swap space", log)
    c.run(requests([(0.0, 10, 20)]))
    assert len(log) == 1


def test_evict_without_a_cluster_is_an_error():
    c = _cluster(1)
    inst = c.instances[0]
    inst.ops.on_evict = None
    log: list[str] = []
    _expect_error(c, 0.05, lambda: inst.evict(0, c.env.now), r"request 0: the instance is not part of a cluster", log)
    c.run(requests([(0.0, 10, 20)]))
    assert len(log) == 1


OPS = st.lists(st.tuples(st.floats(0.0, 3.0, allow_nan=False), st.sampled_from(["evict", "swap_out", "park"]),
                         st.integers(0, 1), st.integers(0, 50)), max_size=25)


def _scripted_run(policy: str, fast: bool, seed: int, ops: list, n: int = 30):
    """A run with operations at given times on the k-th running (else any) request of an instance; returns the
    result, the outcomes of the calls, and checks that no request's ``generated`` ever decreases."""
    import numpy as np

    c = _cluster(2, fast=fast, policy=policy, preemption="swap", swap_space_gb=0.1, num_gpu_blocks=40,
                 max_num_seqs=8)
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(0.05, n))
    reqs = [Request(i, float(arrivals[i]), int(rng.integers(1, 120)), int(rng.integers(1, 60))) for i in range(n)]
    outcomes: list[tuple] = []
    last = {r.id: 0 for r in reqs}

    def op(kind: str, idx: int, k: int) -> None:
        c.sync_all()
        for r in reqs:
            assert r.generated >= last[r.id] or r.generated == 0 and r.finish < 0 and last[r.id] == 0
            last[r.id] = r.generated
        inst = c.instances[idx]
        pool = inst.running or list(inst.waiting) or list(inst.swapped) or list(inst.ops.parked)
        rid = pool[k % len(pool)].id if pool else k
        try:
            if kind == "park":
                c.swap_out(idx, rid, park=True)
            else:
                getattr(c, kind)(idx, rid)
            outcomes.append((kind, idx, rid, "ok"))
        except LLMSimError as e:
            outcomes.append((kind, idx, rid, str(e)))

    for t, kind, idx, k in sorted(ops):
        _at(c, t, op, kind, idx, k)
    c.run(reqs)
    return c, collect(c, SLO()), outcomes, reqs


@settings(max_examples=examples(12), deadline=None)
@given(st.sampled_from(["vllm_v0", "chunked"]), st.integers(0, 10_000), OPS)
def test_ops_conserve_tokens_and_memory_and_the_fast_path_stays_exact(policy, seed, ops):
    fc, fast, f_out, reqs = _scripted_run(policy, True, seed, ops)
    sc, slow, s_out, _ = _scripted_run(policy, False, seed, ops)
    assert f_out == s_out, "the same calls succeed or fail the same way mid decode run and when stepping"
    assert_frames_identical(fast, slow)
    assert [i.ops.evictions for i in fc.instances] == [i.ops.evictions for i in sc.instances]
    assert [i.ops.swap_outs for i in fc.instances] == [i.ops.swap_outs for i in sc.instances]
    df, dropped = fast.requests, fast.dropped
    assert sorted([*df["id"], *dropped["id"]]) == [r.id for r in reqs], "each request finished or dropped once"
    assert (df["output_tokens"] == df["requested_output_tokens"]).all(), "output equals the target"
    _assert_memory_returned(fc)
    _assert_memory_returned(sc)
    ok = sum(1 for o in f_out if o[3] == "ok")
    assert ok == sum(i.ops.evictions + i.ops.swap_outs + i.ops.lapsed for i in fc.instances)


def _park_run(park: bool):
    c = _cluster(1, preemption="swap", swap_space_gb=0.1, num_gpu_blocks=20, max_num_seqs=8)
    seen: list[int] = []

    def look() -> None:
        c.sync_all()
        seen.append(len(c.instances[0].ops.parked))

    _at(c, 0.05, lambda: c.swap_out(0, 0, park=park))
    _at(c, 0.2, look)
    c.run(requests([(0.0, 100, 150), (0.01, 60, 60), (0.02, 60, 60)]))  # 0 fills the cache; 1, 2 wait for room
    return c, c.recorder.requests_frame().set_index("id"), seen


def test_a_parked_request_stays_out_while_requests_wait_then_comes_back():
    """park: the room goes to the waiting requests; a plain swap-out comes straight back (vLLM swaps in before
    it admits) and the waiting requests finish later."""
    c, parked, seen = _park_run(True)
    _, plain, _ = _park_run(False)
    assert seen == [1], "still parked while the others run"
    assert parked.loc[2, "finish"] < plain.loc[2, "finish"] - 0.2
    assert (parked["output_tokens"] == parked["requested_output_tokens"]).all()
    assert c.instances[0].ops.swap_outs == 1 and not c.instances[0].ops.parked
    _assert_memory_returned(c)


def test_scripted_ops_do_happen():
    """The property test's generator reaches evictions and swaps of running requests, mid decode run."""
    ops = [(0.1 * i, "evict" if i % 2 else "swap_out", i % 2, i) for i in range(1, 25)]
    for policy in ("vllm_v0", "chunked"):
        c, res, out, _ = _scripted_run(policy, True, 7, ops)
        assert sum(i.ops.evictions for i in c.instances) >= 3
        assert sum(i.ops.swap_outs for i in c.instances) >= 3
        assert (res.requests["output_tokens"] == res.requests["requested_output_tokens"]).all()
        _, slow, s_out, _ = _scripted_run(policy, False, 7, ops)
        assert out == s_out
        assert_frames_identical(res, slow)
