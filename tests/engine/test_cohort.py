"""The decode cohort (llmsim.engine.cohort) keeps running requests' counts lazily; whoever reads them sees the values
the per-request fast path and stepping write: observers at fixed instants (the lazy state, the synced state and the
engine's own requests once settled) see the same rows with the cohort, without it and when stepping."""

from __future__ import annotations

import pytest

from llmsim.cluster import Cluster, InstanceConfig
from llmsim.engine.config import EngineConfig
from llmsim.engine.scheduling import VllmV0Policy
from llmsim.event_loop import ARRIVAL
from llmsim.request import Request
from llmsim.routing import make_router


def _requests(n: int = 160) -> list[Request]:
    return [Request(i, 0.013 * i, 90 + (37 * i) % 380, 5 + (53 * i) % 200) for i in range(n)]


def _observe(fast: bool, model: str = "llama-2-7b", gpu: str = "a100-80gb") -> tuple[list, dict]:
    """Run two small vLLM V0 engines (recompute and swap preemption) and look at them every 37.1 ms."""
    engines = [EngineConfig(policy="vllm_v0", num_gpu_blocks=60, fast_path=fast),
               EngineConfig(policy="vllm_v0", num_gpu_blocks=90, preemption="swap", swap_space_gb=1.0,
                            fast_path=fast)]
    cluster = Cluster([InstanceConfig(model, gpu, engine=e) for e in engines],
                      make_router("round_robin"))
    env, view = cluster.env, cluster.view
    seen: list = []

    def look() -> None:
        lazy = view.live_state(sync=False)
        rows = [(i.detail.running, i.pending_decode_tokens, i.progress) for i in lazy.instances]
        synced = [view.requests(k) for k in range(len(engines))]
        own = [[(r.id, r.computed, r.generated, r.last_token_time) for r in inst.running]
               for inst in cluster.instances]
        seen.append((env.now, rows, synced, own))
        env.call_bookkeeping_at(env.now + 0.0371, look)

    env.call_bookkeeping_at(0.0, look)
    reqs = _requests()
    cluster.run(reqs)
    stats = {"preemptions": sum(i.preemptions for i in cluster.instances),
             "swap_outs": sum(i.swap_outs for i in cluster.instances)}
    return seen + [[(r.id, r.finish, r.generated) for r in reqs]], stats


# the second profile has a decode_skew part: the cohort also keeps its longest member (llmsim.perf.decode_skew)
@pytest.mark.parametrize("pair", [("llama-2-7b", "a100-80gb"), ("llama-3.1-8b", "rtx4090")])
def test_observers_see_the_same_counts_with_the_cohort_without_it_and_stepping(monkeypatch, pair):
    with_cohort, stats = _observe(True, *pair)
    assert stats["preemptions"] > 0 and stats["swap_outs"] > 0  # the slow paths that settle the cohort ran
    assert len(with_cohort) > 100
    assert with_cohort == _observe(False, *pair)[0]
    monkeypatch.setattr(VllmV0Policy, "lazy_running", False)
    assert with_cohort == _observe(True, *pair)[0]


def test_a_cancelled_member_finishes_at_its_next_token_mid_run():
    results = []
    for fast in (True, False):
        cluster = Cluster([InstanceConfig("llama-2-7b", "a100-80gb", engine=EngineConfig(fast_path=fast))],
                          make_router("round_robin"))
        env = cluster.env
        reqs = [Request(i, 0.0, 100 + 10 * i, 300) for i in range(8)]
        inst = cluster.instances[0]
        env.call_at(1.2345, ARRIVAL, lambda e=env, i=inst, rs=reqs: [i.cancel(r, e.now) for r in rs[2:5]])
        cluster.run(reqs)
        results.append([(r.id, r.generated, r.finish) for r in reqs])
    assert results[0] == results[1]
    assert all(g < 300 for _, g, _ in results[0][2:5]) and all(g == 300 for _, g, _ in results[0][5:])


@pytest.mark.parametrize("policy", ["vllm_v0", "vllm_v0_sjf"])
def test_the_cohort_is_used_only_on_the_fast_path_of_a_lazy_policy(policy):
    fast = Cluster([InstanceConfig("llama-2-7b", "a100-80gb", engine=EngineConfig(policy=policy))],
                   make_router("round_robin"))
    slow = Cluster([InstanceConfig("llama-2-7b", "a100-80gb", engine=EngineConfig(policy=policy, fast_path=False))],
                   make_router("round_robin"))
    chunked = Cluster([InstanceConfig("llama-2-7b", "a100-80gb", engine=EngineConfig(policy="chunked"))],
                      make_router("round_robin"))
    assert fast.instances[0].cohort is not None
    assert slow.instances[0].cohort is None and chunked.instances[0].cohort is None
