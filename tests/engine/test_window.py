"""Sliding-window KV blocks (llmsim.engine.window, ``WindowedKVCache``): a windowed model's request holds only the
blocks vLLM V1's SlidingWindowManager keeps, blocks leaving the window return to the free pool, more requests fit a
tight cache, and a window on only some layers keeps full-context accounting."""

from __future__ import annotations

import dataclasses

import pytest

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.cluster import Cluster
from llmsim.engine.kv import KVCache, WindowedKVCache
from llmsim.perf.models import get_model
from llmsim.request import Request
from llmsim.routing import make_router
from llmsim.testing import LinearProfile

MISTRAL = get_model("mistral-7b")  # a window of 4,096 tokens on every layer
FULL = dataclasses.replace(MISTRAL, sliding_window=0)


def by_hand(computed: int, allocated_tokens: int, window: int, bs: int) -> int:
    """vLLM: ceil(allocated / bs) table entries, of which the blocks wholly inside the first max(0, computed - window
    + 1) tokens are freed (null blocks)."""
    skipped = max(0, computed - window + 1)
    return -(-allocated_tokens // bs) - skipped // bs


def test_block_counts_follow_vllms_rule_through_prefill_and_decode():
    kv = WindowedKVCache(1000, 16, 64)
    r = Request(0, 0.0, 100, 50)
    kv.allocate(r, kv.needed(r, 100))  # the whole prompt: 7 blocks, nothing skipped yet (computed 0)
    assert r.blocks == 7 == by_hand(0, 100, 64, 16)
    r.computed = 100
    kv.computed([r])  # tokens [0, 37) are out of every later window: blocks 0 and 1 are free again
    assert r.blocks == 5 == by_hand(100, 100, 64, 16) and kv.free == 995
    for c in range(100, 400):  # decode: one token a step, the table grows at block boundaries
        kv.allocate(r, kv.needed(r, 1))
        assert r.blocks == by_hand(c, c + 1, 64, 16)
        r.computed = c + 1
        kv.computed([r])
        assert r.blocks == by_hand(c + 1, c + 1, 64, 16) <= 5  # at most ceil((64 - 1) / 16) + 1
        assert kv.free + r.blocks == kv.total
    kv.release(r)
    assert kv.free == kv.total and not kv.skipped


def test_a_long_request_holds_a_bounded_number_of_blocks():
    """Mistral-7B (window 4,096, blocks of 16), a 6,000-token prompt and 3,000 outputs: its prefill takes the whole
    prompt's 375 blocks either way (vLLM skips nothing before a token is computed); decoding, it holds at most
    ceil(4,095 / 16) + 1 = 257 blocks on a windowed cache, against ceil(8,999 / 16) = 563 with full-context
    accounting."""
    peaks = {}
    for model in (MISTRAL, FULL):
        prof = LinearProfile(model=model, kv_tokens=16 * 1000)
        eng = EngineConfig(max_model_len=10000, max_num_batched_tokens=10000, fast_path=False)  # (exact counts)
        cluster = Cluster([InstanceConfig(profile=prof, engine=eng)], make_router("round_robin", seed=0))
        inst = cluster.instances[0]
        cluster.start([Request(0, 0.0, 6000, 3000)])
        peak = [0, 0]  # prefill, decode
        while cluster.env.active > 0:
            cluster.env.step()
            for r in inst.running:  # (an iteration is in progress: its tokens have their slots)
                allocated = 6000 if r.computed == 0 else r.computed + 1
                assert r.blocks == by_hand(r.computed, allocated, model.sliding_window or 10**9, 16)
                peak[r.computed > 0] = max(peak[r.computed > 0], r.blocks)
            assert inst.kv.free + sum(r.blocks for r in inst.running) == inst.kv.total
        assert inst.finished == 1
        peaks[model.sliding_window] = peak
    assert peaks == {4096: [375, 257], 0: [375, 563]}


def test_more_requests_fit_a_tight_cache():
    """1,200 blocks of 16 tokens, 8 requests of 5,000 + 2,000 tokens: with full-context accounting three run at
    once and grow into preemptions; the window keeps each at <= 313 blocks (its prompt), so four run, none preempted."""
    out = {}
    for model in (MISTRAL, FULL):
        prof = LinearProfile(model=model, base=0.01, per_token=1e-5)
        eng = EngineConfig(num_gpu_blocks=1200, max_num_seqs=8, max_model_len=8192, max_num_batched_tokens=8192)
        res = simulate([InstanceConfig(profile=prof, engine=eng)], [Request(i, 0.1 * i, 5000, 2000) for i in range(8)],
                       "round_robin", seed=0)
        assert res.summary["completed"] == 8
        out[model.sliding_window] = res.summary
    assert out[4096]["preemptions"] == 0 < out[0]["preemptions"]
    assert out[4096]["mean_e2el_ms"] < out[0]["mean_e2el_ms"]


@pytest.mark.parametrize("model", [dataclasses.replace(MISTRAL, window_every_layer=False), FULL])
def test_a_window_on_some_layers_or_none_keeps_full_accounting(model):
    cluster = Cluster([InstanceConfig(profile=LinearProfile(model=model))], make_router("round_robin", seed=0))
    inst = cluster.instances[0]
    assert type(inst.kv) is KVCache and not inst.kv.windowed and inst.fast


def test_requests_with_prefix_ids_keep_their_table():
    """(Stepping, so the blocks are exact after every event; llmsim.engine.window_run has the fast path's own.)"""
    cluster = Cluster([InstanceConfig(profile=LinearProfile(model=MISTRAL, kv_tokens=16 * 4000),
                                     engine=EngineConfig(max_model_len=8192, fast_path=False))],
                      make_router("round_robin", seed=0))
    inst = cluster.instances[0]
    assert inst.kv.windowed and not inst.fast and inst.cohort is None
    with_ids = Request(0, 0.0, 5000, 100, hash_ids=tuple(range(10)))
    cluster.start([with_ids, Request(1, 0.0, 5000, 100)])
    while cluster.env.active > 0:
        cluster.env.step()
        for r in inst.running:  # (an iteration is in progress: its tokens have their slots)
            allocated = 5000 if r.computed == 0 else r.computed + 1
            assert r.blocks == by_hand(r.computed, allocated, 10**9 if r is with_ids else 4096, 16)
    assert inst.finished == 2 and with_ids.cached_tokens == 0
