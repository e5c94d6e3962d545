"""Prefix caching in the engine: hand-made reuse cases, the block-key mapping, and invariants under stress."""

import random

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.cluster import Cluster
from llmsim.engine.instance import Instance
from llmsim.engine.prefix_cache import BlockKeys, block_keys, new_state
from llmsim.errors import LLMSimError
from llmsim.request import Request
from llmsim.routing import make_router
from llmsim.testing import LinearProfile

# step time = 0.01 + 0.001 * tokens in the iteration
PROF = LinearProfile(base=0.01, per_token=0.001)


def run(reqs, fast=True, policy="vllm_v0", router="round_robin", n=1, **engine):
    insts = [InstanceConfig(profile=PROF, engine=EngineConfig(fast_path=fast, policy=policy, **engine))] * n
    return simulate(insts, reqs, router)


def req(i, t, prompt, out, ids, block=16):
    return Request(i, t, prompt, out, hash_ids=tuple(ids), hash_block=block)


def test_block_keys_map_any_hash_block_onto_engine_blocks():
    r = req(0, 0.0, 1024, 1, [7, 9], block=512)
    keys = block_keys(r, 16)
    assert len(keys) == 64  # 1024 tokens covered, 16-token blocks
    # block j ends at token 16 j + 15: id 7 for the first 32 blocks, then id 9, offset within the 512-token block
    assert keys[0] == (7, 15) and keys[31] == (7, 511) and keys[32] == (9, 15)
    # engine blocks larger than the hash blocks: named by the id holding their last token
    r = req(0, 0.0, 64, 1, [1, 2, 3, 4], block=16)
    assert block_keys(r, 32) == [(2, 15), (4, 15)]
    assert block_keys(r, 16) == [1, 2, 3, 4]  # equal sizes: the ids themselves
    # only full engine blocks inside what the ids cover; ids name output tokens only past the prompt's last id
    assert len(block_keys(req(0, 0.0, 40, 50, [1, 2, 3], block=16), 16)) == 2
    assert len(block_keys(req(0, 0.0, 40, 50, [1, 2, 3, 4], block=16), 16)) == 4
    assert block_keys(Request(0, 0.0, 100, 5), 16) == []


@pytest.mark.parametrize("hash_block, bs, prompt, out, n_ids", [(512, 16, 1150, 100, 3), (512, 16, 1024, 600, 4),
                                                                 (64, 16, 100, 5, 2), (512, 32, 700, 10, 2)])
def test_keys_made_when_asked_are_block_keys(hash_block, bs, prompt, out, n_ids):
    """Where each id names several blocks the engine's keys are made when asked (BlockKeys): the same keys, slices
    and lengths as block_keys' list."""
    r = req(0, 0.0, prompt, out, range(70, 70 + n_ids), block=hash_block)
    st = new_state(r, bs)
    ref, keys = block_keys(r, bs), st.src
    assert isinstance(keys, BlockKeys) and len(keys) == st.full == len(ref) > 0
    assert st.key0 == st.first == ref[0]  # (kept: asked at every lookup)
    # the definition, independently: block j is named by the id holding its last token and that token's offset
    assert ref == [(r.hash_ids[(j * bs + bs - 1) // hash_block], (j * bs + bs - 1) % hash_block)
                   for j in range(len(ref))]
    assert [keys[j] for j in range(len(keys))] == ref and keys[-1] == ref[-1]
    for lo in range(0, len(ref) + 2, 3):
        for hi in range(lo, len(ref) + 3, 5):
            assert keys[lo:hi] == ref[lo:hi]
    assert keys[-len(ref)] == ref[0] and keys[np.int64(1)] == ref[1]
    for bad in (len(ref), -len(ref) - 1):
        with pytest.raises(IndexError):
            keys[bad]
    one = req(0, 0.0, 64, 1, (1, 2, 3, 4, 5), block=16)  # one block per id: the keys are the ids themselves
    st = new_state(one, 16)
    assert st.src is one.hash_ids and st.full == 4 and st.key0 == 1
    st = new_state(req(0, 0.0, 64, 1, [1, 2, 3, 4], block=32), 16)  # ids of two blocks: BlockKeys
    assert st.src[:] == [(1, 15), (1, 31), (2, 15), (2, 31)] and st.key0 == (1, 15)
    st = new_state(req(0, 0.0, 64, 1, [1, 2, 3, 4, 5, 6, 7, 8], block=8), 16)  # blocks of two ids: block_keys' list
    assert st.src == [(2, 7), (4, 7), (6, 7), (8, 7)] and st.key0 == (2, 7)


def test_keys_made_when_asked_cache_and_evict_as_lists_do(monkeypatch):
    """The same run with the engine's keys as block_keys' lists gives the same requests, hits and evictions: 64-token
    ids over 16-token blocks, sessions that share prefixes, a cache small enough to evict and preempt."""
    rng = random.Random(5)
    reqs, t = [], 0.0
    for i in range(300):
        t += rng.expovariate(4.0)
        base = rng.randrange(6)  # six shared system prompts of 3 ids, then the request's own ids
        prompt = rng.randrange(200, 600)
        ids = [base * 1000 + k for k in range(3)] + [10**6 + 100 * i + k for k in range(-(-prompt // 64) - 3)]
        reqs.append(req(i, t, prompt, rng.randrange(1, 80), ids, block=64))

    def frames():
        res = run([Request(r.id, r.arrival, r.prompt_tokens, r.output_tokens, hash_ids=r.hash_ids, hash_block=64)
                   for r in reqs], num_gpu_blocks=220)
        return res.requests, res.instances

    lazy = frames()
    monkeypatch.setattr("llmsim.engine.prefix_cache.BlockKeys", lambda *a: BlockKeys(*a)[:])  # lists of the same pairs
    lists = frames()
    pd.testing.assert_frame_equal(lazy[0], lists[0])
    pd.testing.assert_frame_equal(lazy[1], lists[1])
    assert lazy[0]["cached_tokens"].sum() > 0 and lazy[1]["prefix_cache_evictions"].sum() > 0
    assert lazy[1]["preemptions"].sum() > 0


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("policy", ["vllm_v0", "chunked"])
def test_second_request_reuses_exactly_the_shared_blocks(fast, policy):
    # A: 64 prompt tokens = 4 blocks; prefill 0.01 + 0.064 = 74 ms. B shares A's first 3 blocks: it prefills only
    # the last 16 tokens (26 ms). C equals A: all 4 blocks are cached, but the last prompt token must be computed
    # to sample from it, so C too reuses 3 blocks and prefills 16 tokens (as vLLM does).
    reqs = [req(0, 0.0, 64, 2, [1, 2, 3, 4]), req(1, 1.0, 64, 2, [1, 2, 3, 5]), req(2, 2.0, 64, 2, [1, 2, 3, 4]),
            req(3, 3.0, 64, 2, [8, 2, 3, 4])]  # D differs in its first block: chained ids, no reuse at all
    res = run(reqs, fast, policy)
    df = res.requests
    assert df["ttft_ms"].tolist() == pytest.approx([74.0, 26.0, 26.0, 74.0])
    assert df["cached_tokens"].tolist() == [0, 48, 48, 0]
    s = res.summary
    assert (s["prefix_cache_queries"], s["prefix_cache_hits"]) == (256, 96)
    assert s["prefix_cache_hit_rate"] == pytest.approx(96 / 256)
    assert res.instances["prefix_cache_hits"].tolist() == [96]
    assert res.timeline["prefix_cache_hits"].iloc[-1] == 96


def test_a_running_request_shares_its_prompt_blocks():
    # B arrives while A decodes (A's prompt blocks are cached once its prefill ends): both hold the 3 shared
    # blocks, counted once in the cache's use
    reqs = [req(0, 0.0, 64, 50, [1, 2, 3, 4]), req(1, 0.2, 64, 50, [1, 2, 3, 5])]
    res = run(reqs)
    assert res.requests["cached_tokens"].tolist() == [0, 48]


def test_disabled_caching_and_requests_without_ids_change_nothing():
    rows = [(0.01 * i, 40 + 7 * i, 5 + i % 4) for i in range(40)]
    plain = [Request(i, t, p, o) for i, (t, p, o) in enumerate(rows)]
    with_ids = [req(i, t, p, o, [1000 * i + k for k in range(p // 16 + 1)]) for i, (t, p, o) in enumerate(rows)]
    base = run(plain, enable_prefix_caching=False).requests.drop(columns="cached_tokens")
    pd.testing.assert_frame_equal(run(plain).requests.drop(columns="cached_tokens"), base)
    # unique ids: nothing to reuse, the same schedule
    pd.testing.assert_frame_equal(run(with_ids).requests.drop(columns="cached_tokens"), base)
    off = run(with_ids, enable_prefix_caching=False).summary
    assert off["prefix_cache_queries"] == 0 and off["prefix_cache_hit_rate"] == 0.0


def test_cached_blocks_are_evicted_least_recently_used():
    # a cache of 8 blocks: A (4 blocks) then B (4 other blocks) fill it with cached blocks; C (4 new blocks)
    # evicts the older A; D = A misses and its 4 blocks evict B (older than C); so E = C hits
    a, b, c = [1, 2, 3, 4], [11, 12, 13, 14], [21, 22, 23, 24]
    reqs = [req(0, 0.0, 64, 1, a), req(1, 1.0, 64, 1, b), req(2, 2.0, 64, 1, c), req(3, 3.0, 64, 1, a),
            req(4, 4.0, 64, 1, c)]
    res = run(reqs, num_gpu_blocks=8)
    assert res.requests["cached_tokens"].tolist() == [0, 0, 0, 0, 48]
    # evicted: A's 4 (by C), B's 4 (by D), and one of A's again for E's one new block
    assert int(res.instances["prefix_cache_evictions"].iloc[0]) == 9


def _checked_start_next(orig):
    """Instance._start_next that first checks the KV cache at every boundary (an exact state on both paths)."""

    def start_next(self, now):
        kv = self.kv
        self.settle_running()  # (a decode cohort writes the running requests' counts lazily)
        kv.check(self.running, self.swapped)
        pc = kv.prefix
        if pc is not None:
            held_by: dict[int, list] = {}
            runs = {}
            for r in self.running:
                if r.prefix_state is not None and r.prefix_state.bs == kv.block_size:
                    st = r.prefix_state  # one with none registered holds nothing, its home run's key its first
                    assert st.done or (not st.holders and st.held is None and st.first == st.key0), "fresh state"
                    for run in st.runs():
                        held_by.setdefault(id(run), []).append(st)
                        runs[id(run)] = run
            free = pc.free_runs()
            for run in runs.values():
                assert run not in free, "a block in use is on the eviction list"
            runs.update((id(run), run) for run in free)
            for rid, run in runs.items():
                assert sorted(map(id, run.holders)) == sorted(map(id, held_by.get(rid, [])))
                assert run.keys and pc.heads[run.keys[0]] is run and run.first == run.keys[0]
                assert (run in free) == (not run.holders)
            assert pc.free_blocks == sum(len(r.keys) for r in free) and 0 <= kv.cached <= kv.free
            assert kv.cached <= pc.free_blocks and pc.owed == pc.free_blocks - kv.cached
            assert kv.shared == sum((len(r.holders) - 1) * len(r.keys) for r in runs.values() if r.holders)
        return orig(self, now)

    return start_next


def _stress_workload(seed, n=60):
    rnd = random.Random(seed)
    prefixes = [[rnd.randrange(10**6) for _ in range(rnd.randint(1, 6))] for _ in range(4)]
    out, t = [], 0.0
    for i in range(n):
        t += rnd.expovariate(20.0)
        ids = list(rnd.choice(prefixes)) + [rnd.randrange(10**6, 2 * 10**6) for _ in range(rnd.randint(0, 4))]
        prompt = rnd.randint(max(1, 16 * (len(ids) - 1) + 1), 16 * len(ids))
        out.append(req(i, t, prompt, rnd.randint(1, 40), ids))
    return out


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), policy=st.sampled_from(["vllm_v0", "chunked"]),
       preemption=st.sampled_from(["recompute", "swap"]), blocks=st.integers(12, 40))
def test_invariants_hold_under_eviction_and_preemption(monkeypatch_module, seed, policy, preemption, blocks):
    reqs = _stress_workload(seed)
    results = []
    for fast in (True, False):
        inst = InstanceConfig(profile=PROF, engine=EngineConfig(
            fast_path=fast, policy=policy, num_gpu_blocks=blocks, preemption=preemption, swap_space_gb=0.01,
            max_num_batched_tokens=256 if policy == "chunked" else None))
        res = simulate([inst], [Request(r.id, r.arrival, r.prompt_tokens, r.output_tokens, hash_ids=r.hash_ids,
                                        hash_block=16) for r in reqs], "round_robin")
        assert res.summary["completed"] + res.summary["dropped"] == len(reqs)
        results.append(res.requests)
    pd.testing.assert_frame_equal(results[0], results[1])  # the fast path is exact with caching too


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    mp.setattr(Instance, "_start_next", _checked_start_next(Instance._start_next))
    yield mp
    mp.undo()


def test_end_of_run_everything_is_free_or_cached():
    reqs = _stress_workload(3, n=80)
    cl = Cluster([InstanceConfig(profile=PROF, engine=EngineConfig(num_gpu_blocks=30))], make_router("round_robin"))
    cl.run(reqs)
    kv = cl.instances[0].kv
    pc = kv.prefix
    assert kv.free == kv.total and kv.shared == 0 and all(not r.holders for r in pc.heads.values())
    assert pc.free_blocks == sum(len(r.keys) for r in pc.free_runs()) <= kv.total


def test_equal_prompts_prefilled_in_one_iteration_cache_their_blocks_once():
    # A and B (equal, 4 blocks) are admitted in one batch: both miss, A's blocks become cached and B's stay private
    # to it (vLLM does not merge them), so B's blocks are plain free blocks when it is done; C (equal, later) reuses
    # 3 of A's, its last token recomputed
    reqs = [req(0, 0.0, 64, 2, [1, 2, 3, 4]), req(1, 0.0, 64, 2, [1, 2, 3, 4]), req(2, 5.0, 64, 2, [1, 2, 3, 4])]
    cl = Cluster([InstanceConfig(profile=PROF, engine=EngineConfig(num_gpu_blocks=16))], make_router("round_robin"))
    cl.run(reqs)
    assert [r.cached_tokens for r in reqs] == [0, 0, 48]
    assert reqs[0].first_token == reqs[1].first_token == pytest.approx(0.138)  # one prefill of 128 tokens
    pc = cl.instances[0].kv.prefix
    # A's run, split by C's hit on its first 3 blocks, which C freed last (C's own 4th block stayed private too)
    assert [run.keys for run in pc.free_runs()] == [[4], [1, 2, 3]] and sorted(pc.heads) == [1, 4]
    assert pc.free_blocks == 4 and cl.instances[0].kv.free == 16


def test_blocks_computed_beside_an_equal_cached_copy_stay_private_after_it_is_evicted():
    """B computes its first 4 blocks in the iteration that caches A's equal ones: B's stay private (registered as
    done, held by nobody). Once A's copies are evicted, B's next chunk caches from B's 5th block on, never B's private
    blocks before it - a registration that looked only at what is cached, not at how many blocks B counts as done,
    would cache them too."""
    from llmsim.engine.kv import KVCache
    from llmsim.engine.prefix_cache import PrefixCache

    kv = KVCache(9, 16, prefix=PrefixCache(16))
    pc = kv.prefix
    a, b = req(0, 0.0, 64, 2, [1, 2, 3, 4]), req(1, 0.0, 144, 2, range(1, 10))
    for r in (a, b):
        assert pc.lookup(r) == (0, 0)
        kv.allocate(r, kv.needed(r, 64))
        r.computed = 64  # one iteration: A's prompt and B's first chunk
    pc.computed([a, b])
    st = b.prefix_state
    assert pc.heads[1] is a.prefix_state and st.done == 4 and not st.holders and st.held is None
    kv.release(a)  # A's 4 blocks cached and free; B's 5 more blocks take the room they keep
    kv.allocate(b, kv.needed(b, 80))
    pc.pay()
    assert not pc.heads and kv.free == 0
    b.computed = 144
    pc.computed([b])
    assert [run.keys for run in st.runs()] == [[5, 6, 7, 8, 9]] and list(pc.heads) == [5]
    assert pc.lookup(req(2, 1.0, 80, 2, range(1, 6))) == (0, 0)  # B's private first blocks are not cached


def test_prefix_aware_view_reports_hit_tokens():
    cl = Cluster([InstanceConfig(profile=PROF, engine=EngineConfig())] * 2, make_router("round_robin"))
    cl.run([req(0, 0.0, 64, 2, [1, 2, 3, 4])])
    view = cl.view
    probe = req(9, 5.0, 80, 2, [1, 2, 3, 4, 5])
    assert view.prefix_hit_tokens(0, probe) == 64 and view.prefix_hit_tokens(1, probe) == 0
    assert view.block_size(0) == 16 and view.prefix_caching(0)


def test_asking_about_a_running_request_leaves_its_state_alone():
    """A router may ask any instance what a request would find cached (ClusterView.prefix_hit_tokens), also while it
    runs elsewhere: the answer is a fresh request's, and the running engine's state of it (here for 16-token blocks,
    asked of a 32-token instance) is not replaced - its blocks are released as usual at the end."""
    from llmsim.routing.base import Router

    class Peek(Router):
        name = "peek"

        def __init__(self) -> None:
            self.first, self.seen = None, []

        def route(self, r, view):
            if self.first is None:
                self.first = r
            else:
                st = self.first.prefix_state
                self.seen.append([view.prefix_hit_tokens(i, self.first) for i in range(2)])
                assert self.first.prefix_state is st
            return 0

    router = Peek()
    cl = Cluster([InstanceConfig(profile=PROF, engine=EngineConfig()),
                  InstanceConfig(profile=PROF, engine=EngineConfig(block_size=32))], router)
    cl.run([req(0, 0.0, 64, 50, [1, 2, 3, 4]), req(1, 0.5, 20, 2, [9, 10])])
    assert router.seen == [[64, 0]]  # running on instance 0 with its 4 blocks cached; nothing on instance 1
    kv = cl.instances[0].kv
    assert kv.free == kv.total and kv.shared == 0 and [run.keys for run in kv.prefix.free_runs()] == [[9], [1, 2, 3, 4]]


def test_same_seed_same_bytes():
    a = run(_stress_workload(5), num_gpu_blocks=24).requests
    b = run(_stress_workload(5), num_gpu_blocks=24).requests
    pd.testing.assert_frame_equal(a, b)


def test_lru_queue_keeps_its_order_through_hits_and_compaction():
    """A free run taken again leaves a stale entry in the LRU queue; once stale entries pile up the queue is compacted,
    and eviction still takes the least recently freed runs first (an OrderedDict as the reference)."""
    from collections import OrderedDict

    from llmsim.engine.kv import KVCache
    from llmsim.engine.prefix_cache import PrefixCache

    kv = KVCache(10_000, 16, prefix=PrefixCache(16))
    pc = kv.prefix
    ref: OrderedDict[int, None] = OrderedDict()  # prefix k, least recently freed first
    rng = random.Random(0)
    longest = 0
    for i in range(600):
        k = rng.randrange(8)
        r = Request(i, 0.0, 40, 4, hash_ids=(100 * k, 100 * k + 1), hash_block=16)  # two full blocks
        hit, _ = pc.lookup(r)
        assert hit == (2 if k in ref else 0)
        if hit:
            kv.acquire_prefix(r, hit)
        kv.allocate(r, kv.needed(r, r.prompt_tokens - r.computed))
        r.computed = r.prompt_tokens
        pc.computed([r])
        kv.release(r)
        ref.pop(k, None)
        ref[k] = None
        longest = max(longest, len(pc.lru))
        assert [run.src[run.lo] // 100 for run in pc.free_runs()] == list(ref)
    assert pc.stale <= 64 < longest <= 2 * 64 + 8  # stale entries were dropped, more than once
    kv.take(kv.free - (pc.free_blocks - 6))  # room for all but three runs: the three least recently freed go
    pc.pay()
    assert sorted(key // 100 for key in pc.heads) == sorted(list(ref)[3:])
    assert [run.src[run.lo] // 100 for run in pc.free_runs()] == list(ref)[3:]


def test_ids_that_do_not_cover_the_prompt_are_one_clear_error() -> None:
    """A request whose ids name fewer tokens than its prompt would index past its keys: named, not a traceback."""
    reqs = [Request(0, 0.0, 100, 4, hash_ids=(1, 2, 3, 4, 5, 6, 7), hash_block=16),  # 112 tokens: fine
            Request(1, 0.1, 100, 4, hash_ids=(1,), hash_block=16)]
    with pytest.raises(LLMSimError, match=r"request 1: its 1 hash_ids of 16 tokens name 16 tokens, fewer than the 96 "
                                          r"of its 100-token prompt's full 16-token blocks; expected ids covering"):
        simulate([InstanceConfig("llama-2-7b", "a100-80gb")], reqs, "round_robin")


def test_a_request_state_is_its_first_run_and_stays_behind_as_it():
    """The engine's state of a request (``prefix_state``) is the first run it registers: a hit on part of it splits
    it into the holders' run lists, and when the request leaves, the object stays cached and the request keeps none
    (a swap gets a new, empty state); a request that registered nothing keeps its state, emptied."""
    from types import SimpleNamespace

    from llmsim.engine.prefix_cache import PrefixCache, State

    pc = PrefixCache(16)
    pc.kv = kv = SimpleNamespace(cached=0, shared=0)
    a, b = req(0, 0.0, 64, 4, [1, 2, 3, 4]), req(1, 0.0, 64, 4, [1, 2, 9, 10])
    assert pc.lookup(a) == (0, 0)
    sa = a.prefix_state
    assert isinstance(sa, State) and sa.runs() == [] and sa.full == 4
    a.computed = 64
    pc.computed([a])
    assert pc.heads[1] is sa and sa.runs() == [sa] and sa.keys == [1, 2, 3, 4] and sa.holders == (sa,)
    assert pc.lookup(b) == (2, 0)  # A's first 2 blocks, held by A (not free)
    assert pc.take(b, 2) == 0 and kv.shared == 2
    sb = b.prefix_state
    head = pc.heads[1]
    assert [r.keys for r in sa.runs()] == [[1, 2], [3, 4]] and sa.runs() == [head, sa]
    assert sb.runs() == [head] and head.holders == (sa, sb) and sa.holders == (sa,)
    assert pc.leave(a) == 2 and a.prefix_state is None  # B still holds 2 blocks; A's state is a cached run now
    assert pc.free_runs() == [sa] and sa.keys == [3, 4] and pc.free_blocks == 2 and kv.shared == 0
    assert pc.leave(b) == 0  # it registered no run of its own: it keeps its state, emptied
    assert b.prefix_state is sb and sb.runs() == [] and sb.done == 0
    assert pc.free_runs() == [sa, head] and pc.free_blocks == 4 and kv.cached == 4
    c = req(2, 0.0, 40, 4, [5, 6, 7])
    pc.lookup(c)
    sc = c.prefix_state
    c.computed = 40
    pc.computed([c])
    assert sc.keys == [5, 6] and pc.leave(c, back=True) == 0  # swapped out: it comes back with a new state
    assert c.prefix_state is not sc and c.prefix_state.runs() == [] and c.prefix_state.full == 2
    assert pc.free_runs() == [sa, head, sc] and pc.free_blocks == 6
