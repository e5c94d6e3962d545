"""The public ClusterState: equal to the engines when fresh, the last scrape when stale, plain values, versioned."""

from __future__ import annotations

import json
import math
import random

import pytest

from llmsim.cluster import Cluster, InstanceConfig
from llmsim.engine.config import EngineConfig
from llmsim.errors import ConfigError
from llmsim.request import Request
from llmsim.routing import Router
from llmsim.state.cluster_state import (
    LAYOUT_VERSION,
    ClusterState,
    InstanceRequests,
    InstanceState,
    RequestState,
    StaleStateError,
    phase_summary_of,
)


def _instances(fast: bool = True) -> list[InstanceConfig]:
    # a small KV cache (preemptions), chunked prefill (partly computed prompts) and a heterogeneous pair
    return [InstanceConfig("llama-2-7b", "a100-80gb", engine=EngineConfig(policy="chunked", num_gpu_blocks=120,
                                                                           max_num_batched_tokens=256,
                                                                           fast_path=fast)),
            InstanceConfig("llama-2-7b", "a100-80gb", engine=EngineConfig(policy="vllm_v0", max_num_seqs=8,
                                                                           fast_path=fast))]


def _requests(n: int = 120) -> list[Request]:
    reqs = []
    for i in range(n):
        r = Request(i, 0.013 * i, 150 + (37 * i) % 400, 20 + (53 * i) % 180, task=("a", "b")[i % 2])
        r.predicted_output = None if i % 5 == 0 else float(10 + (29 * i) % 200)
        reqs.append(r)
    return reqs


def _expected(inst, state_inst: InstanceState) -> None:
    """``state_inst`` describes the engine ``inst`` exactly (counts, KV, every request, the sums)."""
    assert (state_inst.num_running, state_inst.num_waiting, state_inst.num_swapped) == (
        len(inst.running), len(inst.waiting), len(inst.swapped))
    assert state_inst.kv_blocks_used == inst.kv_total - inst.kv.free
    assert state_inst.kv_blocks_total == inst.kv_total
    for q, name in ((inst.running, "running"), (inst.waiting, "waiting"), (inst.swapped, "swapped")):
        want = [(r.id, r.prompt_tokens, r.generated, r.computed, r.predicted_output, r.task, r.arrival) for r in q]
        assert [tuple(x) for x in getattr(state_inst, name)] == want
    everyone = [*inst.running, *inst.waiting, *inst.swapped]
    assert state_inst.context_tokens == sum(r.prompt_tokens + r.generated for r in everyone)
    prefill = 0
    for r in everyone:
        left = r.prompt_tokens + r.generated - r.computed
        if left > 1 or r.generated == 0:
            prefill += left
    assert state_inst.pending_prefill_tokens == prefill
    assert state_inst.pending_decode_tokens == pytest.approx(sum(
        max(0.0, r.predicted_output - r.generated) for r in everyone if r.predicted_output is not None))
    assert state_inst.step_time == inst.step_time
    assert state_inst.step_time > 0 or not inst.busy


class _Spy(Router):
    """Routes round robin and checks / records the state a router sees at every arrival."""

    name = "spy"

    def __init__(self, check=None) -> None:
        super().__init__(0)
        self.check = check
        self.seen: list[ClusterState] = []
        self.k = 0

    def route(self, req, view):
        s = view.state()
        if self.check is not None:
            self.check(s, view)
        self.seen.append(s)
        self.k += 1
        return self.k % 2


def test_fresh_state_equals_the_engines():
    checked = []

    def check(s: ClusterState, view) -> None:
        c = view._c  # (white-box: the test compares the public state with the engines)
        assert s.now == s.taken_at == c.env.now and s.age == 0.0
        assert s.num_arrived == c.num_arrived and s.arrivals_done == c.arrivals_done
        assert s.central_queue == len(c.central) + len(c.deferred)
        for inst, si in zip(c.instances, s.instances, strict=True):
            _expected(inst, si)
        checked.append(sum(i.num_requests for i in s.instances))

    cluster = Cluster(_instances(), _Spy(check))
    cluster.run(_requests())
    assert len(checked) == 120 and max(checked) > 10  # checked under load
    assert any(st.instances[0].num_swapped or st.instances[0].pending_prefill_tokens for st in cluster.router.seen)


def test_state_is_the_same_on_the_fast_path_and_stepping():
    """Observations do not depend on how the engine is simulated (same dicts at every arrival)."""
    runs = []
    for fast in (True, False):
        spy = _Spy(lambda s, view: runs[-1].append(s.to_dict()) if runs else None)
        runs.append([])
        Cluster(_instances(fast), spy).run(_requests())
    assert len(runs[0]) == 120 and runs[0] == runs[1]


def test_stale_state_lags_by_the_scrape_interval():
    staleness = 0.25
    ages, differs = [], []

    def check(s: ClusterState, view) -> None:
        c = view._c
        live = view.live_state()
        assert s.now == live.now == c.env.now
        assert s.taken_at <= s.now
        k = s.taken_at / staleness
        assert abs(k - round(k)) < 1e-9  # refreshes sit on the grid k * staleness
        ages.append(s.age)
        assert s.central_queue == live.central_queue  # the router's own queue is never stale
        differs.append(s.instances != live.instances)
        assert s.queue_lengths() == view.queue_lengths()  # the routers' list helpers read the same scrape

    cluster = Cluster(_instances(), _Spy(check), view_staleness=staleness)
    cluster.run(_requests())
    assert max(ages) > 0 and all(a < staleness + 1e-9 for a in ages)
    assert any(differs)  # the stale view really lags behind the engines


def _summary(s: ClusterState) -> list[tuple]:
    return [(i.num_running, i.num_waiting, i.num_swapped, i.kv_blocks_used, i.running, i.waiting, i.swapped,
             i.context_tokens) for i in s.instances]


def test_stale_snapshot_is_the_live_state_at_its_scrape():
    """What a stale router sees at t is exactly what a fresh one saw at the last refresh before t."""
    staleness = 0.25
    fresh: dict[float, list[tuple]] = {}
    ref = Cluster(_instances(), _Spy())
    for k in range(40):
        t = k * staleness
        ref.env.call_bookkeeping_at(t, lambda t=t: fresh.__setitem__(t, _summary(ref.view.live_state())))
    ref.run(_requests())
    stale: list[tuple[float, list[tuple]]] = []
    cluster = Cluster(_instances(), _Spy(lambda s, view: stale.append((s.taken_at, _summary(s)))),
                      view_staleness=staleness)
    cluster.run(_requests())
    stale = [(t, got) for t, got in stale if t > 0]  # the first snapshot is taken before anything arrives
    assert all(t in fresh for t, _ in stale)
    assert all(got == fresh[t] for t, got in stale)
    assert len({t for t, _ in stale}) > 4


def test_reading_requests_after_the_engine_changed_is_an_error():
    cluster = Cluster(_instances(), _Spy())
    cluster.start(_requests())
    while cluster.env.now < 0.5:
        cluster.env.step()
    s = cluster.view.live_state()
    busy = [i for i in s.instances if i.num_requests][0]
    n = busy.context_tokens  # read while current: kept
    again = cluster.view.live_state()
    assert again.instances[busy.idx] is busy  # nothing changed: the next state reuses it (and its sums)
    while cluster.env.now < s.now + 0.1:
        cluster.env.step()
    cluster.sync_all()
    assert busy.context_tokens == n
    with pytest.raises(StaleStateError, match="read after that instance changed"):
        _ = busy.running  # never read before: the engine has changed since


def test_plain_values_round_trip_and_version():
    r = RequestState(id=7, prompt_tokens=100, generated=3, computed=102, predicted_output=50.0, task="qa",
                     arrival=1.5)
    inst = InstanceState(idx=0, name="0:llama", model="llama-2-7b", gpu="a100-80gb", up=True, num_running=1,
                         num_waiting=0, num_swapped=0, kv_blocks_used=7, kv_blocks_total=100, block_size=16,
                         max_num_seqs=256, max_model_len=4096, max_prompt_tokens=1599, step_time=0.02,
                         throughput=50.0, detail=InstanceRequests(running=(r,)))
    s = ClusterState(now=2.0, taken_at=1.5, central_queue=2, arrivals_done=False, num_arrived=9, mean_output=64.0,
                     instances=(inst,))
    assert s.version == LAYOUT_VERSION and s.age == 0.5
    assert inst.context_tokens == 103 and inst.pending_prefill_tokens == 0 and inst.pending_decode_tokens == 47.0
    assert inst.progress == pytest.approx(3 / 50) and inst.can_serve(1599) and not inst.can_serve(1600)
    d = json.loads(json.dumps(s.to_dict()))
    back = ClusterState.from_dict(d)
    assert back == s and back.instances[0].running == (r,)
    with pytest.raises(ConfigError, match=f"layout version 99; this code reads version {LAYOUT_VERSION}"):
        ClusterState.from_dict({**d, "version": 99})
    with pytest.raises(ConfigError, match="ClusterState.from_dict"):
        ClusterState.from_dict({k: v for k, v in d.items() if k != "now"})


def test_phase_summary_matches_its_definition():
    reqs = (RequestState(1, 100, 0, 40, 300.0, None, 0.0),  # prefilling
            RequestState(2, 50, 10, 59, 100.0, None, 0.0),  # decoding, 90 left, bin 0
            RequestState(3, 50, 10, 59, 3000.0, None, 0.0),  # bin 2
            RequestState(4, 50, 5, 54, None, None, 0.0))  # no prediction: the default (500) -> bin 1
    d = InstanceRequests(running=reqs, waiting=(RequestState(5, 10, 0, 0, 20.0, None, 0.0),))
    pre, counts, left, resident = d.phase_summary((256, 2048), 500.0)
    assert (pre, counts, left, resident) == (2, [1, 1, 1], 90.0, 100 + 60 + 60 + 55)
    assert InstanceRequests().phase_summary((1.0,), 1.0) == (0, [0, 0], math.inf, 0)


def test_two_edge_phase_summary_equals_the_general_one():
    # a third edge at infinity adds an empty bin and changes nothing else
    rng = random.Random(7)
    for _ in range(50):
        rows = tuple(RequestState(i, rng.randint(1, 900), rng.choice([0, 0, rng.randint(1, 400)]), 0,
                                  rng.choice([None, rng.uniform(1.0, 4000.0)]), None, 0.0) for i in range(12))
        shift = rng.choice([0, 3])
        two = phase_summary_of(rows[:8], rows[8:9], rows[9:], (256, 2048), 700.0, shift)
        three = phase_summary_of(rows[:8], rows[8:9], rows[9:], (256, 2048, math.inf), 700.0, shift)
        assert two[1] == three[1][:3] and three[1][3] == 0
        assert (two[0], two[2], two[3]) == (three[0], three[2], three[3])
