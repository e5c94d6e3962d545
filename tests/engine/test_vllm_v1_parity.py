"""The chunked policy against vLLM V1's scheduler (``vllm/v1/core/sched/scheduler.py::Scheduler.schedule``,
``vllm/v1/core/kv_cache_manager.py``, ``vllm/v1/core/block_pool.py``), one rule per test, worked out by hand.

Where llmsim deliberately differs, the test says so and pins llmsim's side; docs/simulator.md ("Against vLLM V1's
scheduler") lists every difference with what vLLM does.
"""

import random

import pytest

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.cluster import Cluster
from llmsim.event_loop import ROUTE
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


def test_equal_prompts_admitted_in_one_step_do_not_share_blocks():
    """A documented difference. vLLM caches a request's full blocks when they are allocated
    (KVCacheManager.allocate_slots -> cache_blocks), so B, admitted after A in the same step, hits A's blocks
    (3 of 4: prefills 16 tokens). llmsim caches blocks when the step that computes them ends: B misses and both
    prefill all 64 tokens in one step of 128."""
    reqs = [req(0, 0.0, 64, 2, [1, 2, 3, 4]), req(1, 0.0, 64, 2, [1, 2, 3, 4])]
    df = run(reqs).requests
    assert df.cached_tokens.tolist() == [0, 0]
    assert df.first_token.tolist() == pytest.approx([0.138, 0.138])


def test_the_default_budget_and_seats_do_not_depend_on_the_gpu():
    """A documented difference: ``vllm serve`` defaults to 8192 batched tokens and 1024 seats on GPUs of >= 70 GiB
    other than the A100 (EngineArgs.get_batch_defaults); llmsim's chunked policy uses 2048 and 256 on every GPU."""
    cfg = EngineConfig(policy="chunked").resolved(4096)
    assert (cfg.max_num_batched_tokens, cfg.max_num_seqs) == (2048, 256)


def v1_schedule(running: list, waiting: list, free: int, budget: int, seats: int, bs: int) -> tuple[list, int]:
    """One call of vLLM V1's ``Scheduler.schedule`` without prefix caching, written from its source independently of
    the chunked policy: running requests first (preempting ``running.pop()`` to the front of the waiting queue, itself
    last), then waiting ones FCFS when nothing was preempted. Requests are dicts; returns ([(request, tokens)],
    free blocks)."""
    def need(r, n):
        return max(0, -(-(r["comp"] + n) // bs) - r["held"])

    sched, preempted, i = [], False, 0
    while i < len(running) and budget > 0:
        r = running[i]
        n = min(r["p"] + r["gen"] - r["comp"], budget)
        victim = None
        while need(r, n) > free and victim is not r:
            victim = running.pop()
            free, victim["held"], victim["comp"], victim["pre"] = free + victim["held"], 0, 0, victim["pre"] + 1
            waiting.insert(0, victim)
            preempted = True
        if victim is r:
            break
        free, r["held"] = free - need(r, n), r["held"] + need(r, n)
        sched.append((r, n))
        budget -= n
        i += 1
    while not preempted and waiting and budget > 0 and len(running) < seats:
        r = waiting[0]
        n = min(r["p"] + r["gen"] - r["comp"], budget)
        if need(r, n) > free:
            break
        waiting.pop(0)
        free, r["held"] = free - need(r, n), r["held"] + need(r, n)
        running.append(r)
        sched.append((r, n))
        budget -= n
    return sched, free


def v1_reference(rows, budget, seats, bs, blocks):
    """(first token, finish, preemptions) per request from stepping :func:`v1_schedule` with PROF's step time."""
    reqs = [dict(p=p, out=o, gen=0, comp=0, held=0, pre=0, ft=None, fin=None, t=a) for a, p, o in rows]
    pending, waiting, running, free, now = list(reqs), [], [], blocks, 0.0
    while pending or waiting or running:
        while pending and pending[0]["t"] <= now:
            waiting.append(pending.pop(0))
        if not waiting and not running:
            now = pending[0]["t"]
            continue
        sched, free = v1_schedule(running, waiting, free, budget, seats, bs)
        now += 0.01 + 0.001 * sum(n for _, n in sched)
        for r, n in sched:
            r["comp"] += n
            if r["comp"] == r["p"] + r["gen"]:
                r["gen"] += 1
                r["ft"] = now if r["ft"] is None else r["ft"]
                if r["gen"] >= r["out"]:
                    r["fin"] = now
                    running.remove(r)
                    free, r["held"] = free + r["held"], 0
    return [(round(r["ft"], 9), round(r["fin"], 9), r["pre"]) for r in reqs]


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
    want = v1_reference(rows, budget, seats, bs, blocks)
    for fast in (False, True):
        df = run(rows, fast, max_num_batched_tokens=budget, max_num_seqs=seats, block_size=bs, num_gpu_blocks=blocks,
                 enable_prefix_caching=False).requests.sort_values("id")
        got = [(round(a, 9), round(b, 9), int(c)) for a, b, c in zip(df.first_token, df.finish, df.preemptions)]
        assert got == want, (fast, rows)


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
