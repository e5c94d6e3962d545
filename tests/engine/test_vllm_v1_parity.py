"""The chunked policy against vLLM V1's scheduler (``vllm/v1/core/sched/scheduler.py::Scheduler.schedule``,
``vllm/v1/core/kv_cache_manager.py``, ``vllm/v1/core/block_pool.py``), one rule per test, worked out by hand.

Where llmsim deliberately differs, the test says so and pins llmsim's side; docs/simulator.md ("Against vLLM V1's
scheduler") lists every difference with what vLLM does.
"""

import random
from collections import deque

import pytest

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.cluster import Cluster
from llmsim.event_loop import ROUTE
from llmsim.perf.hardware import get_gpu
from llmsim.request import Request
from llmsim.routing import make_router
from llmsim.testing import LinearProfile, requests

# step time = 0.01 + 0.001 * tokens in the iteration
PROF = LinearProfile(base=0.01, per_token=0.001)


def run(reqs, fast=True, **engine):
    inst = InstanceConfig(profile=PROF, engine=EngineConfig(fast_path=fast, policy="chunked", **engine))
    return simulate([inst], reqs if isinstance(reqs[0], Request) else requests(reqs), "round_robin")


def req(i, t, prompt, out, ids, block=16):
    return Request(i, t, prompt, out, hash_ids=tuple(ids), hash_block=block)


@pytest.mark.parametrize("fast", [True, False])
def test_running_decodes_come_first_and_count_in_the_token_budget(fast):
    # budget 64. A (40, 10) at 0: [0, .050] prefill 40 -> A tok1 (the first token ends the step that completes the
    # prompt). B (100, 2) arrives at .005: at .050 A's decode takes 1 token of the budget first, B gets the other 63:
    # [.050, .124]; then A's decode + B's last 37: [.124, .172] -> B tok1 at .172, B's 2nd token at .184.
    # (Were decodes not counted, B would get 64 then 36: its first token at .171.)
    df = run([(0.0, 40, 10), (0.005, 100, 2)], fast, max_num_batched_tokens=64).requests
    a, b = df.iloc[0], df.iloc[1]
    assert a.first_token == pytest.approx(0.050)
    assert b.first_scheduled == pytest.approx(0.050)
    assert b.first_token == pytest.approx(0.172)
    assert b.finish == pytest.approx(0.184)


@pytest.mark.parametrize("fast", [True, False])
def test_max_num_seqs_holds_waiting_requests_back(fast):
    # one seat: B (10, 3) waits while A (10, 3) runs [0, .020] + 2 decodes to .042, then B the same from .042
    df = run([(0.0, 10, 3), (0.0, 10, 3)], fast, max_num_seqs=1).requests
    assert df.first_scheduled.tolist() == pytest.approx([0.0, 0.042])
    assert df.first_token.tolist() == pytest.approx([0.020, 0.062])
    assert df.finish.tolist() == pytest.approx([0.042, 0.084])


@pytest.mark.parametrize("fast", [True, False])
def test_a_long_prompt_is_split_by_the_budget_and_a_partial_prefill_continues_before_new_ones(fast):
    # budget 64, A, B, C (50, 2) at 0 (no long_prefill_token_threshold: vLLM's default 0 caps nothing):
    # [0, .074] A 50 + B's first 14 -> A tok1
    # [.074, .148] A decode 1 + B's last 36 (running before waiting) + C's first 27 -> A tok2 (done), B tok1
    # [.148, .182] B decode 1 + C's last 23 -> B done, C tok1; [.182, .193] C decode -> done
    df = run([(0.0, 50, 2), (0.0, 50, 2), (0.0, 50, 2)], fast, max_num_batched_tokens=64).requests
    assert df.first_scheduled.tolist() == pytest.approx([0.0, 0.0, 0.074])
    assert df.first_token.tolist() == pytest.approx([0.074, 0.148, 0.182])
    assert df.finish.tolist() == pytest.approx([0.148, 0.182, 0.193])


@pytest.mark.parametrize("fast", [True, False])
def test_preemption_takes_the_last_running_request_which_waits_first_and_recomputes_its_outputs(fast):
    # blocks of 4 tokens, 6 blocks. A, B (8, 10) at 0: [0, .026] both prefill (2 blocks each) -> tok1; four decodes
    # (a new block each, 0 free) to .074. C (4, 1) arrives at .030 and finds no free block.
    # At .074 A needs a block: B, the LAST running request, is preempted (recompute, 3 blocks freed) and goes to the
    # FRONT of the waiting queue; nothing is admitted in a step that preempted. A decodes alone 5 times to .129.
    # At .085 C would fit (1 block of 2 free) but B, at the head, needs 4 blocks for its 8 + 5 tokens: admission
    # stops there (FCFS), so C waits too. At .129 (A done) B re-prefills 13 tokens and C its 4: [.129, .156]; C is done
    # (1 token), B decodes its 7th..10th tokens to .200.
    res = run([(0.0, 8, 10), (0.0, 8, 10), (0.03, 4, 1)], fast, block_size=4, num_gpu_blocks=6)
    df = res.requests
    assert df.preemptions.tolist() == [0, 1, 0]
    assert df.first_token.tolist() == pytest.approx([0.026, 0.026, 0.156])
    assert df.first_scheduled.iloc[2] == pytest.approx(0.129)
    assert df.finish.tolist() == pytest.approx([0.129, 0.200, 0.156])
    assert df.output_tokens.tolist() == [10, 10, 1]


@pytest.mark.parametrize("fast", [True, False])
def test_prefix_hits_are_whole_blocks_and_the_last_prompt_token_is_recomputed(fast):
    # 16-token blocks. A (70 tokens: 4 full blocks + 6) computes all; B = A reuses the 4 full blocks (64 tokens), the
    # partial block is never cached; C (65, A's first 4 blocks) may reuse 4 blocks and still computes its last token;
    # D (64 = 4 full blocks of A) reuses only 3: vLLM caps a hit at prompt - 1 tokens
    # (KVCacheManager.get_computed_blocks: max_cache_hit_length = num_tokens - 1), in whole blocks.
    reqs = [req(0, 0.0, 70, 2, [1, 2, 3, 4, 5]), req(1, 1.0, 70, 2, [1, 2, 3, 4, 5]),
            req(2, 2.0, 65, 2, [1, 2, 3, 4, 9]), req(3, 3.0, 64, 2, [1, 2, 3, 4])]
    res = run(reqs, fast)
    df = res.requests
    assert df.cached_tokens.tolist() == [0, 64, 64, 48]
    assert df.ttft_ms.tolist() == pytest.approx([80.0, 16.0, 11.0, 26.0])  # 0.01 + 0.001 x (prompt - cached)
    assert (res.summary["prefix_cache_queries"], res.summary["prefix_cache_hits"]) == (269, 176)


@pytest.mark.parametrize("fast", [True, False])
def test_a_preempted_request_is_queried_again_and_hits_its_own_surviving_prompt_blocks(fast):
    # The preemption case above with ids on the prompts (4-token blocks): at .074 B leaves its 2 prompt blocks cached
    # and free, and its output block free. A's two new blocks take the output block, then evict B's last prompt block
    # (vLLM's free queue holds B's blocks tail first: output, prompt 2, prompt 1). At .129 B is looked up again with
    # its 8 + 5 tokens (vLLM counts the query again: 8 + 8 + 13 = 29 tokens) and reuses 1 block: it re-prefills 9
    # tokens [.129, .148] and decodes to .192.
    res = run([req(0, 0.0, 8, 10, [1, 2], 4), req(1, 0.0, 8, 10, [3, 4], 4)], fast, block_size=4, num_gpu_blocks=6)
    df = res.requests
    assert df.preemptions.tolist() == [0, 1]
    assert df.cached_tokens.tolist() == [0, 4]  # (llmsim: at the last admission; vLLM's num_cached_tokens: the first)
    assert df.finish.tolist() == pytest.approx([0.129, 0.192])
    assert (res.summary["prefix_cache_queries"], res.summary["prefix_cache_hits"]) == (29, 4)


@pytest.mark.parametrize("ids_everywhere", [True, False])
def test_eviction_takes_uncached_free_blocks_before_cached_ones(ids_everywhere):
    """A documented difference. vLLM's block pool pops the head of one free queue (BlockPool.get_new_blocks), cached
    or not, and every vLLM request hashes its full blocks. 8 blocks: A (4 blocks) then X and Y (4 each). With ids on
    X and Y, llmsim is vLLM: Y's blocks evict A's (the least recently freed) and A again misses. Without ids, X's
    blocks are not cached in llmsim and Y takes them first, so A's blocks survive and A again hits 3 blocks - in vLLM
    (where X's blocks are cached by their token hashes) it would miss."""
    a = [1, 2, 3, 4]
    x, y = ([req(1, 1.0, 64, 1, [11, 12, 13, 14]), req(2, 2.0, 64, 1, [21, 22, 23, 24])] if ids_everywhere
            else [Request(1, 1.0, 64, 1), Request(2, 2.0, 64, 1)])
    res = run([req(0, 0.0, 64, 1, a), x, y, req(3, 3.0, 64, 1, a)], num_gpu_blocks=8)
    assert res.requests.cached_tokens.tolist() == [0, 0, 0, 0 if ids_everywhere else 48]


@pytest.mark.parametrize("fast", [True, False])
def test_equal_prompts_admitted_in_one_step_share_the_blocks_the_first_computes(fast):
    """vLLM caches a request's full blocks when they are allocated (KVCacheManager.allocate_slots -> cache_blocks, up
    to its computed + scheduled tokens), and looks each waiting request up after the ones before it were allocated.
    A and B (64 tokens = 4 blocks of 16) arrive at 0: A gets 64 tokens and its 4 blocks are cached at once; B hits 3
    of them (capped at prompt - 1 = 63 tokens: 48) and prefills 16. One step of 80 tokens [0, .090]: both first
    tokens at .090. Blocks in use: A's 4 + B's 1 (B holds A's first 3 too). Queries 64 + 64, hits 48.
    (llmsim used to cache blocks when the step computing them ended: B missed, one step of 128 tokens to .138.)"""
    cfg = EngineConfig(policy="chunked", fast_path=fast)
    c = Cluster([InstanceConfig(profile=PROF, engine=cfg)], make_router("round_robin"))
    reqs, seen = [req(0, 0.0, 64, 2, [1, 2, 3, 4]), req(1, 0.0, 64, 2, [1, 2, 3, 4])], []

    def look() -> None:  # during the first step
        c.sync_all()
        kv = c.instances[0].kv
        seen.append((kv.used, kv.shared, [r.blocks for r in reqs], [r.n_new for r in reqs]))

    c.env.call_at(0.05, ROUTE, look)
    c.run(reqs)
    inst = c.instances[0]
    assert seen == [(5, 3, [4, 4], [64, 16])]
    assert [r.cached_tokens for r in reqs] == [0, 48]
    assert [r.first_token for r in reqs] == pytest.approx([0.090, 0.090])
    assert [r.finish for r in reqs] == pytest.approx([0.102, 0.102])
    assert (inst.prefill_tokens, inst.prefix_queries, inst.prefix_hits) == (80, 128, 48)


@pytest.mark.parametrize("fast", [True, False])
def test_a_request_admitted_behind_a_chunked_prefill_hits_the_blocks_of_its_last_chunk(fast):
    """A running request's chunk is cached when it is allocated too, before waiting requests are looked up. Budget 48,
    blocks of 16: A (80 tokens) prefills [0, 48) in [0, .058] (3 blocks). B (65 tokens: A's first 64 + 1) arrives at
    .01. At .058 A's last 32 tokens are allocated first (its 5 blocks cached now), then B hits 4 blocks (64 tokens)
    and computes 1: one step of 33 tokens [.058, .101]. (Cached at the step's end, B would hit 3 blocks, prefill 16
    then 1 more token: its first token at .127.)"""
    a = req(0, 0.0, 80, 1, [1, 2, 3, 4, 5])
    b = req(1, 0.01, 65, 1, [1, 2, 3, 4, 8])
    df = run([a, b], fast, max_num_batched_tokens=48).requests
    assert df.cached_tokens.tolist() == [0, 64]
    assert df.first_token.tolist() == pytest.approx([0.101, 0.101])


@pytest.mark.parametrize(("gpu", "want"), [
    ("h100", (8192, 1024)), ("h200", (8192, 1024)), ("rtx-pro-6000", (8192, 1024)),
    ("a100-80gb", (2048, 256)), ("a100-80gb-pcie", (2048, 256)), ("l40s", (2048, 256)), (None, (2048, 256))])
def test_the_default_budget_and_seats_are_vllm_serves_for_the_gpu(gpu, want):
    """``vllm serve`` (EngineArgs.get_batch_defaults, OPENAI_API_SERVER): 8192 batched tokens and 1024 seats on a GPU
    of >= 70 GiB other than an A100, else 2048 and 256. vllm_v0 keeps its defaults on every GPU."""
    spec = get_gpu(gpu) if gpu else None
    cfg = EngineConfig(policy="chunked").resolved(4096, gpu=spec)
    assert (cfg.max_num_batched_tokens, cfg.max_num_seqs) == want
    v0 = EngineConfig(policy="vllm_v0").resolved(4096, gpu=spec)
    assert (v0.max_num_batched_tokens, v0.max_num_seqs) == (4096, 256)


def test_values_set_are_kept_and_defaults_are_capped_as_vllm_caps_them():
    """An explicit 256 stays 256 on an H100; default seats are at most the budget, a default budget at most seats x
    max_model_len (_set_default_max_num_seqs_and_batched_tokens_args)."""
    h100 = get_gpu("h100")

    def limits(**kw):
        cfg = EngineConfig(policy="chunked", **kw).resolved(4096, gpu=h100)
        return cfg.max_num_batched_tokens, cfg.max_num_seqs

    assert limits(max_num_seqs=256) == (8192, 256)
    assert limits(max_num_batched_tokens=2048) == (2048, 1024)
    assert limits(max_num_batched_tokens=512) == (512, 512)
    assert limits(max_num_seqs=2, max_model_len=1000) == (2000, 2)
    assert limits(max_num_seqs=1024, max_num_batched_tokens=300) == (300, 1024)


def test_an_h100_instance_runs_with_vllms_batch_defaults():
    inst = Cluster([InstanceConfig("llama-3-8b", "h100", engine=EngineConfig(policy="chunked"))],
                   make_router("round_robin")).instances[0]
    assert (inst.max_batched, inst.max_seqs) == (8192, 1024)
    ic = InstanceConfig("llama-3-8b", "a100-80gb", engine=EngineConfig(policy="chunked"))
    assert (ic.resolved_engine().max_num_batched_tokens, ic.resolved_engine().max_num_seqs) == (2048, 256)


class V1Pool:
    """vLLM V1's ``BlockPool`` and ``KVCacheManager`` for one KV cache group, written from their source independently
    of llmsim's cache: a free queue of block ids (never-used ones first in id order, freed ones appended at its
    tail, a request's last block first), a ref count per block, and with caching a hash -> block map. ``lookup`` is
    ``get_computed_blocks`` (cached blocks of the request's hashes, up to ``num_tokens - 1`` tokens), ``allocate``
    is ``allocate_slots`` (room for the hit's free blocks and the new ones, or nothing; the new ones popped from the
    queue head, evicting their hash; then ``cache_blocks`` caches the full blocks up to computed + scheduled tokens,
    capped at ``num_tokens``), ``free`` is ``free``. A request's block hashes are its prompt ids, then one of its
    own per block holding output tokens (they hash its own sampled tokens)."""

    def __init__(self, blocks: int, bs: int, caching: bool) -> None:
        self.bs, self.caching = bs, caching
        self.queue, self.ref, self.hash = deque(range(blocks)), [0] * blocks, [None] * blocks
        self.cached: dict = {}
        self.queries = self.hits = self.evicted = 0

    def hashes(self, r: dict) -> list:
        full = (r["p"] + r["gen"]) // self.bs
        return [r["ids"][i] if (i + 1) * self.bs <= r["p"] else ("out", id(r), i) for i in range(full)]

    def lookup(self, r: dict) -> list:
        if not self.caching:
            return []
        hit = []
        for h in self.hashes(r)[:(r["p"] + r["gen"] - 1) // self.bs]:
            if h not in self.cached:
                break
            hit.append(self.cached[h])
        return hit

    def allocate(self, r: dict, n: int, hit: list | tuple = ()) -> bool:
        blocks, bs = r["blocks"], self.bs
        computed = r["comp"] + len(hit) * bs
        new = -(-(computed + n) // bs) - len(blocks) - len(hit)
        if new + sum(self.ref[b] == 0 for b in hit) > len(self.queue):
            return False
        for b in hit:  # touch
            if self.ref[b] == 0:
                self.queue.remove(b)
            self.ref[b] += 1
            blocks.append(b)
        for _ in range(new):
            b = self.queue.popleft()
            if self.hash[b] is not None:  # _maybe_evict_cached_block
                if self.cached.get(self.hash[b]) == b:
                    del self.cached[self.hash[b]]
                self.hash[b] = None
                self.evicted += 1
            self.ref[b] = 1
            blocks.append(b)
        if self.caching:  # cache_blocks: only full blocks; an equal block cached before stays the one found
            upto = min(computed + n, r["p"] + r["gen"]) // bs
            hashes = self.hashes(r)
            for i in range(r["ncached"], upto):
                self.hash[blocks[i]] = hashes[i]
                self.cached.setdefault(hashes[i], blocks[i])
            r["ncached"] = max(r["ncached"], upto)
        return True

    def free(self, r: dict) -> None:
        for b in reversed(r["blocks"]):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.queue.append(b)
        r["blocks"], r["ncached"] = [], 0


def v1_schedule(running: list, waiting: list, pool: V1Pool, budget: int, seats: int) -> list:
    """One call of vLLM V1's ``Scheduler.schedule``, written from its source independently of the chunked policy:
    running requests first (preempting ``running.pop()`` to the front of the waiting queue, itself last), then
    waiting ones FCFS when nothing was preempted, each looked up after the ones before it were allocated (and their
    blocks cached). Requests are dicts; returns [(request, tokens)]."""
    sched, preempted, i = [], False, 0
    while i < len(running) and budget > 0:
        r = running[i]
        n = min(r["p"] + r["gen"] - r["comp"], budget)
        victim = None
        while victim is not r and not pool.allocate(r, n):
            victim = running.pop()
            pool.free(victim)
            victim["comp"], victim["pre"] = 0, victim["pre"] + 1
            waiting.insert(0, victim)
            preempted = True
        if victim is r:
            break
        sched.append((r, n))
        budget -= n
        i += 1
    while not preempted and waiting and budget > 0 and len(running) < seats:
        r = waiting[0]
        hit = pool.lookup(r)
        n = min(r["p"] + r["gen"] - len(hit) * pool.bs, budget)
        if not pool.allocate(r, n, hit):
            break
        waiting.pop(0)
        r["comp"] = r["cached"] = len(hit) * pool.bs
        if pool.caching:  # record_prefix_cache_stats, at admission (0.9 - 0.11 counted every lookup, a refused one too)
            pool.queries, pool.hits = pool.queries + r["p"] + r["gen"], pool.hits + r["comp"]
        running.append(r)
        sched.append((r, n))
        budget -= n
    return sched


def v1_reference(rows, budget, seats, bs, blocks, ids=None):
    """(first token, finish, preemptions, cached tokens) per request, and the pool, from stepping :func:`v1_schedule`
    with PROF's step time; with ``ids`` (prompt ids per request) prefix caching is on."""
    reqs = [dict(p=p, out=o, gen=0, comp=0, blocks=[], ncached=0, pre=0, cached=0, ft=None, fin=None, t=a,
                 ids=ids[k] if ids else ()) for k, (a, p, o) in enumerate(rows)]
    pool = V1Pool(blocks, bs, ids is not None)
    pending, waiting, running, now = list(reqs), [], [], 0.0
    while pending or waiting or running:
        while pending and pending[0]["t"] <= now:
            waiting.append(pending.pop(0))
        if not waiting and not running:
            now = pending[0]["t"]
            continue
        sched = v1_schedule(running, waiting, pool, budget, seats)
        now += 0.01 + 0.001 * sum(n for _, n in sched)
        for r, n in sched:
            r["comp"] += n
            if r["comp"] == r["p"] + r["gen"]:
                r["gen"] += 1
                r["ft"] = now if r["ft"] is None else r["ft"]
                if r["gen"] >= r["out"]:
                    r["fin"] = now
                    running.remove(r)
                    pool.free(r)
    return [(round(r["ft"], 9), round(r["fin"], 9), r["pre"], r["cached"]) for r in reqs], pool


@pytest.mark.parametrize("seed", range(40))
def test_chunked_policy_steps_as_an_independent_model_of_the_v1_scheduler(seed):
    """Random small engines (budget below the running count, one seat, blocks of 1 token, preemption of a request
    mid-prefill) and workloads: every request's first token, finish and preemptions equal the reference's, on both
    paths."""
    rng = random.Random(seed)
    bs, blocks = rng.choice([1, 2, 4, 16]), rng.randint(8, 40)
    budget, seats = rng.choice([3, 8, 16, 64, 512]), rng.choice([1, 2, 3, 8, 256])
    rows, t = [], 0.0
    for _ in range(rng.randint(1, 12)):
        t = round(t + rng.choice([0.0, 0.001, 0.01, 0.05]), 6)
        rows.append((t, rng.randint(1, max(1, blocks * bs // 3)), rng.randint(1, max(1, blocks * bs // 3))))
    want = [w[:3] for w in v1_reference(rows, budget, seats, bs, blocks)[0]]
    for fast in (False, True):
        df = run(rows, fast, max_num_batched_tokens=budget, max_num_seqs=seats, block_size=bs, num_gpu_blocks=blocks,
                 enable_prefix_caching=False).requests.sort_values("id")
        got = [(round(a, 9), round(b, 9), int(c)) for a, b, c in zip(df.first_token, df.finish, df.preemptions)]
        assert got == want, (fast, rows)


@pytest.mark.parametrize("seed", range(40))
def test_prefix_hits_step_as_an_independent_model_of_the_v1_scheduler(seed):
    """Random prompts sharing prefixes of a few roots (some equal, some arriving together), small budgets and seats:
    every request's first token, finish and cached tokens, and the query and hit counts, equal the reference's, on
    both paths - hits on blocks another request is allocated in the same step included. The cache holds every block
    the run allocates, so nothing is preempted or evicted (where llmsim's eviction order differs from vLLM's:
    docs/simulator.md)."""
    rng = random.Random(1000 + seed)
    bs = rng.choice([1, 4, 16])
    budget, seats = rng.choice([8, 16, 40, 64, 512]), rng.choice([1, 2, 3, 256])
    roots = [[(k, j) for j in range(rng.randint(1, 8))] for k in range(rng.randint(1, 3))]
    rows, ids, reqs, t = [], [], [], 0.0
    for i in range(rng.randint(2, 10)):
        t = round(t + rng.choice([0.0, 0.0, 0.001, 0.02]), 6)
        root = rng.choice(roots)
        shared = rng.randint(0, len(root))
        prompt = max(1, shared * bs + rng.randint(0, 2 * bs))
        shared = min(shared, prompt // bs)
        own = root[:shared] + [("own", i, j) for j in range(-(-prompt // bs) - shared)]
        rows.append((t, prompt, rng.randint(1, 6)))
        ids.append(own)
        reqs.append((i, t, prompt, rows[-1][2], own))
    blocks = sum(-(-(p + o) // bs) for _, p, o in rows) + 1
    want, pool = v1_reference(rows, budget, seats, bs, blocks, ids)
    assert pool.evicted == 0 and all(w[2] == 0 for w in want)
    for fast in (False, True):
        res = run([req(i, a, p, o, own, bs) for i, a, p, o, own in reqs], fast, max_num_batched_tokens=budget,
                  max_num_seqs=seats, block_size=bs, num_gpu_blocks=blocks)
        df = res.requests.sort_values("id")
        got = [(round(a, 9), round(b, 9), int(c), int(d))
               for a, b, c, d in zip(df.first_token, df.finish, df.preemptions, df.cached_tokens)]
        assert got == want, (fast, rows, ids)
        assert (res.summary["prefix_cache_queries"], res.summary["prefix_cache_hits"]) == (pool.queries, pool.hits)


def _cancel_at(t, rows, cancelled, **engine):
    """Run ``rows`` on one chunked engine, the client of request ``cancelled`` leaving at ``t``; returns (what
    ``Instance.cancel`` answered, the requests, the instance)."""
    cfg = EngineConfig(policy="chunked", **engine)
    c = Cluster([InstanceConfig(profile=PROF, engine=cfg)], make_router("round_robin"))
    reqs, said = requests(rows), []

    def leave() -> None:
        c.sync_all()
        said.append(c.instances[0].cancel(reqs[cancelled], c.env.now))

    c.env.call_at(t, ROUTE, leave)
    c.run(reqs)
    return said, reqs, c.instances[0]


def test_a_client_that_leaves_mid_prefill_frees_the_engine_at_the_next_boundary():
    """vLLM's Scheduler.finish_requests takes an aborted request out of the running list and frees its blocks before
    the next step. A (1,000-token prompt) leaves at .05, during its first 64-token chunk [0, .074]: it leaves at
    .074, and B (10, 5), held back by the budget, prefills [.074, .094] and decodes to .138. (It used to go on
    prefilling A's 936 other tokens, 15 more chunks, to sample one token at 1.17 s: B's first token at 1.17.)"""
    said, (a, b), inst = _cancel_at(0.05, [(0.0, 1000, 50), (0.0, 10, 5)], 0, max_num_batched_tokens=64)
    assert said == [True]
    assert (a.computed, a.generated, a.finish) == (64, 0, -1.0)
    assert b.first_token == pytest.approx(0.094) and b.finish == pytest.approx(0.138)
    assert (inst.iterations, inst.prefill_tokens) == (6, 74)
    assert not inst.running and inst.kv.free == inst.kv.total


def test_a_preempted_request_whose_client_left_is_not_recomputed():
    """The preemption case above: B waits, preempted with 5 tokens, when its client leaves at .08. It leaves the
    waiting queue at once, as in vLLM; it used to be re-prefilled (13 tokens at .129) to sample one more token."""
    said, (a, b), inst = _cancel_at(0.08, [(0.0, 8, 10), (0.0, 8, 10)], 1, block_size=4, num_gpu_blocks=6)
    assert said == [True] and b.preemptions == 1 and b not in inst.waiting
    assert a.finish == pytest.approx(0.129) and b.finish == -1.0 and b.generated == 5
    assert (inst.iterations, inst.prefill_tokens) == (10, 16)


def test_a_decoding_request_whose_client_left_ends_with_its_next_token():
    # A (10, 50) decodes from .020; its client leaves at .025, during the decode [.020, .031]: that token ends it
    said, (a,), inst = _cancel_at(0.025, [(0.0, 10, 50)], 0)
    assert said == [False] and a.generated == 2 and a.finish == pytest.approx(0.031)
    assert inst.kv.free == inst.kv.total
