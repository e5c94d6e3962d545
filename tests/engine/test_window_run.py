"""The decode fast path on a sliding-window KV cache (llmsim.engine.window_run): a run counts the blocks its requests
free as their windows move, and its plan (how far it can go before the cache runs out) and what it writes when it
materialises equal stepping, iteration by iteration; whole simulations of Mistral-7B on small caches are identical
with the fast path on and off."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.cluster import Cluster
from llmsim.engine.decode_times import DecodeTimes
from llmsim.engine.fastpath import DecodeRun
from llmsim.engine.iteration import decode_skew_of
from llmsim.engine.kv import WindowedKVCache
from llmsim.engine.window import skipped_blocks
from llmsim.engine.window_run import WindowFrees
from llmsim.metrics.recorder import Recorder
from llmsim.perf.models import get_model
from llmsim.perf.profile import load_profile
from llmsim.request import Request
from llmsim.routing import make_router
from llmsim.testing import LinearProfile
from tests.helpers import assert_frames_identical, examples, hang_limit

MISTRAL = get_model("mistral-7b")  # a window of 4,096 tokens on every layer
NO_IDS = object()  # a stand-in prefix state: a request with prefix-block ids keeps its whole table


@dataclasses.dataclass
class Owner:
    """What a run updates of its engine (fastpath.RunOwner), without a decode cohort."""

    block_size: int
    kv: WindowedKVCache
    cohort: None = None
    recorder: Recorder = dataclasses.field(default_factory=Recorder)
    busy_time: float = 0.0
    iterations: int = 0
    tokens_out: int = 0

    def __post_init__(self) -> None:
        self.decode_times = DecodeTimes(self)


@st.composite
def decoding_batch(draw):
    """A windowed cache and decoding requests as stepping leaves them (some with a skipped count that lags, as a KV
    copy from a prefill instance leaves it; some with prefix ids), and a few blocks to spare."""
    bs = draw(st.sampled_from([1, 2, 4, 16]))
    window = draw(st.integers(1, 90))
    reqs, held = [], 0
    for i in range(draw(st.integers(1, 8))):
        g = draw(st.integers(1, 40))
        r = Request(i, 0.0, draw(st.integers(1, 150)), g + draw(st.integers(1, 120)))
        r.generated, r.computed, r.last_token_time = g, r.prompt_tokens + g - 1, 0.0
        gone = 0
        if draw(st.integers(0, 4)) == 0:
            r.prefix_state = NO_IDS
        else:
            gone = skipped_blocks(r.computed, window, bs)
            gone -= draw(st.integers(0, gone)) if draw(st.booleans()) else 0  # (a lagging count frees a lump)
        r.blocks = -(-r.computed // bs) - gone
        held += r.blocks
        reqs.append((r, gone))
    kv = WindowedKVCache(held + draw(st.integers(0, 12)) + 1, bs, window)
    kv.free -= held
    for r, gone in reqs:
        if gone:
            kv.skipped[r.id] = gone
    return kv, [r for r, _ in reqs], draw(st.booleans())


def state(kv: WindowedKVCache, reqs: list[Request]) -> tuple:
    return kv.free, dict(kv.skipped), [(r.computed, r.generated, r.blocks) for r in reqs]


def stepped(kv: WindowedKVCache, reqs: list[Request], waits: bool) -> tuple[list, list, int]:
    """Step the batch as the engine does (take the boundary blocks, compute, free what left the window) until a
    request finishes, the blocks run out, or (``waits``) the free count passes its start's: the state while each
    iteration runs and after it, and the iterations done."""
    bs = kv.block_size
    left = min(r.target_tokens - r.generated for r in reqs)
    pre0 = post0 = None
    during, after = [], []
    while len(after) < left:
        need = sum(r.computed % bs == 0 for r in reqs)
        if need > kv.free:
            break
        if pre0 is None:
            pre0, post0 = kv.free, kv.free - need
        elif waits and (kv.free > pre0 or kv.free - need > post0):
            break
        for r in reqs:
            if r.computed % bs == 0:
                kv.allocate(r, 1)
        during.append(state(kv, reqs))
        for r in reqs:
            r.computed += 1
            r.generated += 1
        kv.computed(reqs)
        after.append(state(kv, reqs))
    return during, after, len(after)


@settings(max_examples=examples(300), deadline=None)
@given(decoding_batch(), st.data())
def test_a_runs_free_block_arithmetic_equals_stepping(batch, data):
    """The run ends where stepping runs out of blocks (or, while something waits, where the free count passes its
    start's), and materialising after any iteration, mid-iteration or at the end, writes stepping's counts."""
    kv, reqs, waits = batch
    want_during, want_after, k = stepped(copy.deepcopy(kv), copy.deepcopy(reqs), waits)
    bs = kv.block_size
    res = [0] * bs
    for r in reqs:
        res[r.computed % bs] += 1
    if res[0] > kv.free:
        assert k == 0
        return
    kv.take(res[0])  # iteration 1's blocks (Instance.decode_all)
    ctx1 = sum(r.computed + 1 for r in reqs)
    left = min(r.target_tokens - r.generated for r in reqs)
    run = DecodeRun("w", 0.0, reqs, 1.0, ctx1, kv.free, res, left, 1.0, lambda ctx: 1.0)
    run.window = WindowFrees(reqs, kv, 0, kv.free, res[0], waits)
    while len(run.bounds) < run.k_final:
        before = len(run.bounds)
        run.plan(bs)
        assert len(run.bounds) > before or len(run.bounds) == run.k_final
    assert run.k_final == k
    run.end = k
    owner = Owner(bs, kv)
    for j in sorted(set(data.draw(st.lists(st.integers(1, k), max_size=4)))) + [k]:
        if j <= run.applied:
            continue
        run.materialise(owner, j)
        assert state(kv, reqs) == (want_during[j] if j < k else want_after[j - 1])


def long_requests(n: int, seed: int, ids: bool) -> list[Request]:
    """Prompts and outputs long enough that Mistral-7B's 4,096-token window moves while they decode; with ``ids``
    some share prefix-block ids (they keep their whole table)."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(0.4, n))
    out = []
    for i in range(n):
        p = int(rng.integers(3000, 5200))
        hashes = tuple(range(p // 16)) if ids and rng.random() < 0.3 else None
        out.append(Request(i, float(t[i]), p, int(rng.integers(50, 1800)), hash_ids=hashes))
    return out


def mistral_cluster(fast: bool, policy: str, preemption: str, caching: bool, blocks: int) -> list[InstanceConfig]:
    prof = LinearProfile(model=MISTRAL, base=0.01, per_token=2e-5, per_ctx=1e-7)
    eng = EngineConfig(policy=policy, fast_path=fast, num_gpu_blocks=blocks, max_model_len=8192, max_num_seqs=12,
                       max_num_batched_tokens=8192, preemption=preemption, swap_space_gb=2.0,
                       enable_prefix_caching=caching)
    return [InstanceConfig(profile=prof, engine=eng), InstanceConfig(profile=prof, engine=eng)]


@hang_limit(240)
@settings(max_examples=examples(40), deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from(["vllm_v0", "chunked"]), st.sampled_from(["recompute", "swap"]),
       st.booleans(), st.integers(700, 1400))
def test_mistral_on_a_small_cache_is_the_same_with_the_fast_path_and_stepping(seed, policy, preemption, caching,
                                                                             blocks):
    """Mistral-7B on caches of 700-1,400 blocks: runs hit the cache limit, windows free blocks, requests are
    preempted; every table is identical with the fast path on and off."""
    out = [simulate(mistral_cluster(fast, policy, preemption, caching, blocks), long_requests(24, seed, caching),
                    "jsq", seed=seed, on_unservable="drop") for fast in (True, False)]
    assert_frames_identical(*out)
    assert len(out[0].requests) + len(out[0].dropped) == 24


def test_a_windowed_engine_decodes_in_runs():
    """The fast path is on for a windowed cache: far fewer engine events than iterations, and the same results."""
    events, results = [], []
    for fast in (True, False):
        cluster = Cluster(mistral_cluster(fast, "vllm_v0", "recompute", True, 900)[:1], make_router("round_robin"))
        inst = cluster.instances[0]
        assert inst.kv.windowed and inst.fast == fast and (inst.cohort is not None) == fast  # (a windowed cohort)
        reqs = long_requests(16, 3, False)
        cluster.start(reqs)
        count = 0
        while cluster.env.active > 0:
            cluster.env.step()
            count += 1
        events.append(count)
        results.append([(r.id, r.finish, r.generated, r.preemptions) for r in reqs] + [inst.iterations])
    assert results[0] == results[1] and results[0][-1] > 3000
    assert any(r[3] for r in results[0][:-1])  # the cache ran out: requests were preempted
    assert events[0] * 10 < events[1]


def observed(fast: bool, policy: str) -> list:
    """Look at two Mistral-7B engines on small caches every 37.1 ms: the synced requests, the running requests'
    counts and blocks, and the free blocks (mid-run, the iteration in progress holds its new blocks)."""
    cluster = Cluster(mistral_cluster(fast, policy, "swap", False, 800), make_router("round_robin"))
    env, view = cluster.env, cluster.view
    seen: list = []

    def look() -> None:
        synced = [view.requests(k) for k in range(2)]
        own = []
        for inst in cluster.instances:  # (before a run's first iteration ends, its requests' blocks lag: fastpath)
            run = inst.decode_run
            lag = run is not None and run.applied == 0
            own.append(([(r.id, r.computed, r.generated, None if lag else r.blocks) for r in inst.running],
                        inst.kv.free, dict(inst.kv.skipped)))
        seen.append((env.now, synced, own))
        env.call_bookkeeping_at(env.now + 0.0371, look)

    env.call_bookkeeping_at(0.0, look)
    reqs = long_requests(20, 5, False)
    cluster.run(reqs)
    return seen + [[(r.id, r.finish, r.generated, r.swaps) for r in reqs]]


@pytest.mark.parametrize("policy", ["vllm_v0", "chunked"])
def test_observers_mid_run_see_stepping_blocks_on_a_windowed_cache(policy):
    fast, stepped = observed(True, policy), observed(False, policy)
    assert len(fast) > 1000 and len(fast) == len(stepped) and fast[-1] == stepped[-1]
    lagging = 0
    for (t, synced, own), (t2, synced2, own2) in zip(fast[:-1], stepped[:-1]):
        assert (t, synced) == (t2, synced2)
        for (rows, free, skipped), (rows2, free2, skipped2) in zip(own, own2):
            assert (free, skipped) == (free2, skipped2)
            for row, row2 in zip(rows, rows2, strict=True):
                assert row[:3] == row2[:3] and row[3] in (None, row2[3])
                lagging += row[3] is None
    assert lagging < sum(len(rows) for _, _, own in fast[:-1] for rows, *_ in own) // 10


@pytest.mark.parametrize("policy", ["vllm_v0", "chunked"])
def test_a_windowed_run_keeps_the_skewed_decode_term(policy):
    """A measured profile with a decode_skew part (llmsim.perf.decode_skew) on a model given a 512-token window on
    every layer and a small cache: the run's step closure carries the term, and every table equals stepping's."""
    prof = copy.copy(load_profile("llama-3.1-8b", "rtx4090"))
    assert decode_skew_of(prof) is not None
    prof.model = dataclasses.replace(prof.model, sliding_window=512, window_every_layer=True)
    rng = np.random.default_rng(7)
    t = np.cumsum(rng.exponential(1 / 12.0, 150))
    reqs = [Request(i, float(t[i]), int(rng.integers(1, 1500)), int(rng.integers(1, 1500))) for i in range(150)]
    out = []
    for fast in (True, False):
        eng = EngineConfig(policy=policy, fast_path=fast, num_gpu_blocks=200, max_num_seqs=48)
        assert Cluster([InstanceConfig(profile=prof, engine=eng)], make_router("round_robin")).instances[0].kv.windowed
        out.append(simulate([InstanceConfig(profile=prof, engine=eng)], reqs, "round_robin", seed=1))
    assert_frames_identical(*out)
    assert out[0].summary["preemptions"] > 0  # (the cache ran out)
