"""The decode cohort on a sliding-window cache (llmsim.engine.window_cohort): the window frees it keeps as sums give
the run the schedule a pass over its requests gives, and the blocks and skipped counts it writes are stepping's."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsim.cluster import Cluster, InstanceConfig
from llmsim.engine.config import EngineConfig
from llmsim.engine.kv import WindowedKVCache
from llmsim.engine.window_cohort import WindowedCohort
from llmsim.engine.window_run import WindowFrees
from llmsim.event_loop import ARRIVAL
from llmsim.request import Request
from llmsim.routing import make_router
from tests.engine.test_window_run import decoding_batch
from tests.helpers import examples
from tests.perf.helpers import tiny


def schedule(frees: WindowFrees) -> tuple:
    return frees.res, frees.pending, frees.lump, frees.cap_pre, frees.cap_post


def step(kv: WindowedKVCache, reqs: list[Request], k: int) -> None:
    """``k`` decode iterations as stepping runs them (a block at each boundary, the window frees after each)."""
    bs = kv.block_size
    for _ in range(k):
        for r in reqs:
            if r.computed % bs == 0:
                r.blocks += 1
                kv.free -= 1  # (no check: the batch may outgrow the drawn cache; only the counts are compared)
        for r in reqs:
            r.computed += 1
            r.generated += 1
        kv.computed(reqs)


@settings(max_examples=examples(300), deadline=None)
@given(decoding_batch(), st.data())
def test_the_cohorts_window_sums_equal_a_pass_over_its_members(batch, data):
    kv, reqs, waits = batch
    stepped_kv, stepped = copy.deepcopy((kv, reqs))
    cohort = WindowedCohort(kv.block_size, None, kv)
    for r in reqs:
        cohort.add(r)
    free, need1 = kv.free, sum(r.computed % kv.block_size == 0 for r in reqs)
    assert schedule(WindowFrees.of_cohort(cohort, kv, 0, free, need1, waits)) == schedule(
        WindowFrees(stepped, stepped_kv, 0, free, need1, waits))
    assert cohort.lump == 0  # (the run took the lagging members' lump)
    if data.draw(st.booleans()):  # a client leaves before the run's first iteration ends: no new lump
        i = data.draw(st.sampled_from(range(len(reqs))))
        cohort.cancel(reqs[i])
        stepped[i].target_tokens = reqs[i].target_tokens
        assert cohort.lump == 0
    # some iterations later (the lump freed), some members leave: the sums still describe the others
    left = min(r.target_tokens - r.generated for r in reqs)
    k = data.draw(st.integers(1, max(1, left - 1)))
    step(stepped_kv, stepped, k)
    cohort.advance(k, 1.0, 0)
    assert cohort.skipped_total() == sum(stepped_kv.skipped.get(r.id, 0) for r in stepped if r.prefix_state is None)
    gone = data.draw(st.lists(st.sampled_from(range(len(reqs))), unique=True, max_size=len(reqs) - 1))
    for i in gone:
        cohort.leave(reqs[i])
    cohort.settle(reqs)
    assert [(r.computed, r.generated, r.blocks) for r in reqs] == [(r.computed, r.generated, r.blocks) for r in stepped]
    assert {r.id: kv.skipped.get(r.id) for r in reqs} == {r.id: stepped_kv.skipped.get(r.id) for r in stepped}
    stay = [r for i, r in enumerate(stepped) if i not in gone]
    free = stepped_kv.free
    assert schedule(WindowFrees.of_cohort(cohort, kv, 0, free, 0, waits)) == schedule(
        WindowFrees(stay, stepped_kv, 0, free, 0, waits))


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_a_windowed_cohort_with_cancels_and_observers_equals_stepping(preemption):
    """Two vLLM V0 engines of a model with a 24-token window on every layer, small caches: clients leave mid-run,
    an observer syncs every 23.9 ms; the requests, the engines' blocks and skipped counts are stepping's."""
    results = []
    for fast in (True, False):
        eng = EngineConfig(policy="vllm_v0", num_gpu_blocks=40, block_size=4, preemption=preemption,
                           swap_space_gb=1.0, fast_path=fast)
        cluster = Cluster([InstanceConfig(tiny("tiny-mistral-window-24"), "a100-80gb", engine=eng)] * 2,
                          make_router("round_robin"))
        assert all(isinstance(i.cohort, WindowedCohort) == fast for i in cluster.instances)
        env, view = cluster.env, cluster.view
        reqs = [Request(i, 0.011 * i, 20 + (37 * i) % 90, 5 + (53 * i) % 300) for i in range(120)]
        seen: list = []

        def look(env=env, view=view, cluster=cluster, seen=seen) -> None:
            synced = [view.requests(k) for k in range(2)]
            seen.append((env.now, synced, [(inst.kv.free, dict(inst.kv.skipped)) for inst in cluster.instances]))
            env.call_bookkeeping_at(env.now + 0.0239, look)

        def leave(env=env, cluster=cluster, reqs=reqs) -> None:
            for r in reqs[10:40:3]:
                cluster.instances[r.instance].cancel(r, env.now) if r.instance is not None else None

        env.call_bookkeeping_at(0.0, look)
        env.call_at(0.9137, ARRIVAL, leave)
        cluster.run(reqs)
        stats = [(i.preemptions, i.swap_outs, i.iterations) for i in cluster.instances]
        results.append((seen, [(r.id, r.finish, r.generated, r.blocks) for r in reqs], stats))
    assert results[0] == results[1]
    seen, rows, stats = results[0]
    assert len(seen) > 100 and sum(p for p, _, _ in stats) > 0
    assert any(g < 5 + (53 * i) % 300 for i, (_, _, g, _) in enumerate(rows) if 10 <= i < 40)  # (clients left)
