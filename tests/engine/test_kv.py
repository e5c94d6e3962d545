"""The KV cache (llmsim.engine.kv.KVCache): block accounting never goes negative and free + held == total after
every operation, including swaps; a wrong move raises and changes nothing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.engine.kv import KVCache
from llmsim.errors import LLMSimError
from llmsim.request import Request
from llmsim.testing import LinearProfile, requests
from tests.helpers import examples

OPS = st.lists(st.tuples(st.sampled_from(["allocate", "release", "swap_out", "swap_in", "drop_swapped", "take"]),
                         st.integers(0, 5), st.integers(0, 12)), max_size=80)


def _state(kv: KVCache) -> tuple[int, int]:
    return kv.free, kv.cpu_free


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(1, 40), st.integers(0, 30), st.integers(0, 5), OPS)
def test_accounting_holds_after_every_operation(total, cpu_total, watermark, ops):
    kv = KVCache(total, 4, min(watermark, total - 1), cpu_total, owner="t")
    reqs = [Request(i, 0.0, 10, 10) for i in range(6)]
    on_gpu: set[int] = set()
    on_cpu: set[int] = set()
    taken = 0  # blocks taken without an owner (the fast path's decode steps)
    for op, i, n in ops:
        r = reqs[i]
        before = _state(kv), r.blocks
        if op == "allocate" and i not in on_cpu:
            if n <= kv.free:
                kv.allocate(r, n)
                on_gpu.add(i)
            else:
                with pytest.raises(LLMSimError, match="cannot allocate"):
                    kv.allocate(r, n)
                assert (_state(kv), r.blocks) == before, "a refused allocation changes nothing"
        elif op == "take":
            if n <= kv.free:
                kv.take(n)
                taken += n
            else:
                with pytest.raises(LLMSimError, match="cannot take"):
                    kv.take(n)
                assert (_state(kv), r.blocks) == before
        elif op == "release" and i in on_gpu:
            kv.release(r)
            on_gpu.discard(i)
            assert r.blocks == 0
        elif op == "swap_out" and i in on_gpu:
            moved = kv.swap_out(r)
            assert moved == (cpu_total > 0 and before[1] <= before[0][1])
            if moved:
                on_gpu.discard(i)
                on_cpu.add(i)
            else:
                assert (_state(kv), r.blocks) == before, "a refused swap-out changes nothing"
        elif op == "swap_in" and i in on_cpu:
            need = r.blocks + n % 3
            if need <= kv.free:
                assert kv.swap_in(r, need) == before[1]
                on_cpu.discard(i)
                on_gpu.add(i)
                assert r.blocks == need
            else:
                with pytest.raises(LLMSimError, match="cannot swap in"):
                    kv.swap_in(r, need)
                assert (_state(kv), r.blocks) == before
        elif op == "drop_swapped" and i in on_cpu:
            kv.drop_swapped(r)
            on_cpu.discard(i)
        held = sum(reqs[k].blocks for k in on_gpu) + taken
        assert 0 <= kv.free <= kv.total and 0 <= kv.cpu_free <= kv.cpu_total
        assert kv.free + held == kv.total and kv.used == held
        assert kv.cpu_free + sum(reqs[k].blocks for k in on_cpu) == kv.cpu_total
        assert kv.cached == 0 and kv.shared == 0, "without prefix caching nothing is kept cached or held twice"
    if not taken:
        kv.check([reqs[k] for k in on_gpu], [reqs[k] for k in on_cpu])


def test_wrong_moves_raise_naming_the_instance():
    kv = KVCache(10, 16, owner="inst-7")
    r = Request(0, 0.0, 10, 10)
    r.blocks = 3  # blocks the cache never gave out
    with pytest.raises(LLMSimError, match="instance inst-7: KV cache accounting broken: cannot release 3"):
        kv.release(r)
    assert kv.free == 10 and r.blocks == 3
    with pytest.raises(LLMSimError, match="cannot allocate -1"):
        kv.allocate(r, -1)
    with pytest.raises(LLMSimError, match="settle at 11"):
        kv.settle(11)
    with pytest.raises(LLMSimError, match="held"):
        kv.check([r])
    with pytest.raises(LLMSimError, match="impossible sizes"):
        KVCache(0, 16)


def test_blocks_needed_rounds_up_to_whole_blocks():
    kv = KVCache(100, 16)
    r = Request(0, 0.0, 40, 5)
    assert kv.blocks_for(0) == 0 and kv.blocks_for(1) == 1 and kv.blocks_for(16) == 1 and kv.blocks_for(17) == 2
    assert kv.needed(r, 40) == 3
    kv.allocate(r, 3)
    r.computed = 40
    assert kv.needed(r, 1) == 0  # token 41 still fits block 3 (tokens 33..48)
    r.computed = 48
    assert kv.needed(r, 1) == 1
    assert kv.max_allocation == 100


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("preemption", ["recompute", "swap"])
@pytest.mark.parametrize("policy", ["vllm_v0", "chunked"])
def test_a_run_under_pressure_gives_every_block_back(fast, preemption, policy):
    # 12 requests on a 20-block cache of 4-token blocks: preemptions (and swaps) happen; at the end every
    # GPU and CPU block is free again
    rows = [(0.01 * i, 9 + i, 12) for i in range(12)]
    inst = InstanceConfig(profile=LinearProfile(), engine=EngineConfig(
        policy=policy, fast_path=fast, block_size=4, num_gpu_blocks=20, watermark=0.0, preemption=preemption,
        swap_space_gb=0.01, max_model_len=64))
    from llmsim.cluster import Cluster
    from llmsim.routing import make_router

    cluster = Cluster([inst], make_router("round_robin"), on_unservable="drop")
    cluster.run(requests(rows))
    e = cluster.instances[0]
    assert e.preemptions > 0
    assert e.finished == 12
    assert (e.kv.free, e.kv.cpu_free) == (e.kv.total, e.kv.cpu_total)
    if preemption == "swap":
        assert e.swap_outs > 0 and e.kv.cpu_total > 0
    res = simulate([inst], requests(rows), "round_robin")
    assert len(res.requests) == 12
