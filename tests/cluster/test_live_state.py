"""The lazy paths of the cluster state are exact: what they give equals the eager computation, bit for bit.

* ``ClusterView.live_state(sync=False)`` (no engine sync: decode runs in closed form, running rows shifted,
  queued parts from the engine's totals) equals ``live_state()`` (sync, then read) in every field, row and sum;
* ``live_state(at=(t, phase))`` before the next event equals what an event at ``(t, phase)`` observes;
* ``ClusterView.live_progress`` equals the state's ``(central_queue, (num_requests, progress))``;
* ``DecodeRun.used_blocks`` equals the per-request count that ``materialise`` settles;
* the engine's queued totals (``llmsim.engine.queues``) equal sums over its queues after every event;
* an env that accounts for ticks between events without an event each (``DecisionPoints.quiet_ticks``) gives the
  same observations, rewards and infos as one event per tick, and the workload-aware reward's backlog read
  through ``true_progress`` equals the one computed from ``true_state``.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from llmsim.cluster import Cluster, InstanceConfig
from llmsim.engine.config import EngineConfig
from llmsim.engine.fastpath import DecodeRun
from llmsim.event_loop import ARRIVAL, ROUTE
from llmsim.request import Request
from llmsim.routing import Router
from llmsim.state.cluster_state import StaleStateError
from llmsim.state.request_sums import sum_context, sum_pending_prefill

EDGES = ((64.0, 256.0), (10.0, 50.0, 150.0))


def _instances() -> list[InstanceConfig]:
    # vLLM V0 and chunked prefill on small caches (recompute: several preempted requests wait at once on the
    # chunked one) and a swapping vLLM V0: preemptions of both kinds
    def engine(policy: str, blocks: int, **kw) -> EngineConfig:
        return EngineConfig(policy=policy, num_gpu_blocks=blocks, **kw)

    engines = [engine("vllm_v0", 60), engine("vllm_v0", 90, preemption="swap", swap_space_gb=1.0),
               engine("chunked", 60, max_num_seqs=64, max_num_batched_tokens=256)]
    return [InstanceConfig("llama-2-7b", "a100-80gb", engine=e) for e in engines]


def _requests(n: int = 150) -> list[Request]:
    reqs = []
    for i in range(n):
        r = Request(i, 0.011 * i, 120 + (37 * i) % 400, 20 + (53 * i) % 220, task=("a", "b")[i % 2])
        r.predicted_output = None if i % 7 == 0 else float(10 + (29 * i) % 200) + 0.37
        reqs.append(r)
    return reqs


class _RoundRobin(Router):
    name = "rr_test"

    def __init__(self) -> None:
        super().__init__(0)
        self.k = 0

    def route(self, req, view):
        self.k += 1
        return self.k % 3


def _everything(s) -> tuple:
    """Every field, row and sum of a ClusterState (reading it all)."""
    sums = tuple((i.context_tokens, i.pending_prefill_tokens, i.pending_decode_tokens, i.progress,
                  *(i.detail.phase_summary(e, 100.0) for e in EDGES), i.detail.head("running", 3),
                  i.detail.head("waiting", 2)) for i in s.instances)
    return s.to_dict(), sums


def _reference(cluster: Cluster, like):
    """The state as the original eager path builds it: engines synced, every row copied, every sum a full pass
    over the copies (plain ``InstanceRequests``), nothing cached."""
    cluster.sync_all()
    return like._replace(instances=cluster.view._snapshot_states())


def _check_queued_totals(cluster: Cluster) -> None:
    for inst in cluster.instances:
        assert inst.queued.context == sum_context(inst.waiting, inst.swapped)
        assert inst.queued.prefill == sum_pending_prefill(inst.waiting, inst.swapped)
        assert list(inst.queued.waiting_started) == [r for r in inst.waiting if r.generated]
        assert list(inst.queued.swapped_started) == [r for r in inst.swapped if r.generated]


def _drive(check_every: int = 3, seed: int = 0) -> dict[str, int]:
    """Run a cluster event by event, comparing lazy and eager states (and projections) along the way."""
    rng = random.Random(seed)
    cluster = Cluster(_instances(), _RoundRobin())
    env, view = cluster.env, cluster.view
    counts = {"compared": 0, "mid_run": 0, "projected": 0, "requeued": 0}
    pending: list[tuple] = []

    def check_projection(expected) -> None:
        ref = _reference(cluster, view.live_state())
        assert _everything(ref) == expected[0]
        assert (ref.central_queue, tuple((i.num_requests, i.progress) for i in ref.instances)) == expected[1]
        counts["projected"] += 1

    cluster.start(_requests())
    n = 0
    while env.active > 0:
        env.step()
        n += 1
        _check_queued_totals(cluster)
        counts["requeued"] += any(len(i.queued.waiting_started) > 1 for i in cluster.instances)
        if n % check_every:
            continue
        lazy = view.live_state(sync=False)  # first: it must not need (nor do) a sync
        counts["mid_run"] += sum(i.seen_iterations(env.now, env.phase) > i.iterations for i in cluster.instances)
        prog = view.live_progress()
        got = _everything(lazy)
        ref = _reference(cluster, lazy)  # syncs the engines
        assert got == _everything(ref)
        assert prog == (ref.central_queue, tuple((i.num_requests, i.progress) for i in ref.instances))
        assert _everything(lazy) == got  # still readable after the sync (nothing moved)
        assert _everything(view.live_state()) == got  # and the synced path gives it too
        counts["compared"] += 1
        t_next = env.peek()
        if env.now < t_next < float("inf") and rng.random() < 0.5:
            t = env.now + (t_next - env.now) * rng.choice((0.25, 0.5, 0.999))
            if env.now < t < t_next:
                proj = view.live_state(at=(t, ROUTE))
                expected = (_everything(proj), view.live_progress(at=(t, ROUTE)))
                pending.append(expected)
                env.call_at(t, ROUTE, check_projection, expected)
    assert cluster.instances[1].swap_outs > 0 and cluster.instances[2].preemptions > 0  # both kinds exercised
    assert counts["requeued"] > 20  # several preempted requests waiting at once (their order is kept)
    return counts


def test_lazy_state_equals_the_synced_state_and_projections_equal_the_future():
    counts = _drive()
    assert counts["compared"] > 300 and counts["mid_run"] > 100 and counts["projected"] > 50


def test_a_lazy_state_read_after_the_engine_moved_on_is_an_error():
    cluster = Cluster(_instances(), _RoundRobin())
    cluster.start(_requests())
    env = cluster.env
    while env.now < 0.6:
        env.step()
    s = cluster.view.live_state(sync=False)
    busy = [i for i in s.instances if i.num_running][0]
    n = busy.context_tokens
    t0 = env.now
    while env.now < t0 + 0.2:
        env.step()
    cluster.sync_all()
    assert busy.context_tokens == n  # read while current: kept
    with pytest.raises(StaleStateError, match="read after that instance changed"):
        _ = busy.running


def test_arrivals_do_not_see_a_boundary_at_their_instant():
    """The projection honours the phase order: at a boundary's own time, ARRIVAL does not see it, ROUTE does."""
    cluster = Cluster(_instances(), _RoundRobin())
    cluster.start(_requests())
    env = cluster.env
    found = 0
    while env.active > 0 and found < 20:
        env.step()
        for inst in cluster.instances:
            run = inst.decode_run
            if run is None or run.end - 1 <= run.applied + 1 or not env.now < run.bounds[run.applied] < env.peek():
                continue
            b = run.bounds[run.applied]  # a boundary inside the run, before the next event
            before = inst.seen_iterations(b, ARRIVAL)
            assert inst.seen_iterations(b, ROUTE) == before + 1
            a = cluster.view.live_state(at=(b, ARRIVAL)).instances[inst.idx]
            r = cluster.view.live_state(at=(b, ROUTE)).instances[inst.idx]
            assert r.context_tokens == a.context_tokens + len(inst.running)
            found += 1
    assert found >= 5


@pytest.mark.parametrize("block_size", [1, 4, 16, 32])
def test_used_blocks_closed_form_equals_the_per_request_count(block_size):
    rng = random.Random(block_size)
    for _ in range(300):
        cs = [rng.randint(1, 3000) for _ in range(rng.randint(1, 40))]
        res = [0] * block_size
        for c in cs:
            res[c % block_size] += 1
        run = DecodeRun("x", 0.0, [None] * len(cs), 1.0, sum(cs) + len(cs), 0, res, 10**6, 1.0, lambda c: 0.1)
        js = [rng.randint(0, 200) for _ in range(10)]
        js += sorted(js)  # incremental (from the last answer) and from scratch
        for j in js:
            assert run.used_blocks(j, block_size) == sum(-(-(c + j + 1) // block_size) for c in cs)


# ---------------------------------------------------------------------------------------------- envs


def _trajectory(env, seed: int) -> list:
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    out = [(obs.tobytes(), repr(info))]
    while True:
        valid = np.flatnonzero(env.action_masks())
        obs, r, term, trunc, info = env.step(int(valid[rng.integers(len(valid))]))
        out.append((obs.tobytes(), r.hex(), repr(info)))
        if term or trunc:
            return out


def _count_quiet_ticks(monkeypatch) -> dict:
    """Wrap ``DecisionPoints.quiet_ticks`` to count the ticks it accounts without an event of their own."""
    from llmsim.envs.decision_points import DecisionPoints

    calls = {"quiet": 0}
    quiet = DecisionPoints.quiet_ticks

    def counted(self):
        k = self.tick_k
        quiet(self)
        calls["quiet"] += self.tick_k - k

    monkeypatch.setattr(DecisionPoints, "quiet_ticks", counted)
    return calls


def test_ticks_between_events_give_the_same_episode_as_one_event_per_tick(monkeypatch):
    import gymnasium as gym

    import llmsim.envs  # noqa: F401
    from llmsim.envs.decision_points import DecisionPoints

    calls = _count_quiet_ticks(monkeypatch)
    env = gym.make("llmsim/WorkloadRouter-v0", num_requests=120).unwrapped
    fast = _trajectory(env, 3)
    assert calls["quiet"] > 1000  # most drain ticks had no event of their own
    monkeypatch.setattr(DecisionPoints, "quiet_ticks", lambda self: None)
    slow = _trajectory(env, 3)
    assert len(fast) == len(slow) > 100 and fast == slow


def test_backlog_from_true_progress_equals_the_one_from_true_state(monkeypatch):
    import gymnasium as gym

    import llmsim.envs  # noqa: F401
    from llmsim.envs.rewards.workload_aware import WorkloadAwareReward

    seen = {"ticks": 0, "quiet": 0}
    backlog = WorkloadAwareReward._backlog

    def checked(self, env):
        s = env.true_state()
        want = float(s.central_queue)
        for inst in s.instances:
            want += inst.num_requests - inst.progress
        got = backlog(self, env)
        assert got == want
        seen["ticks"] += 1
        seen["quiet"] += env.points.at is not None
        return got

    monkeypatch.setattr(WorkloadAwareReward, "_backlog", checked)
    env = gym.make("llmsim/WorkloadRouter-v0", num_requests=80).unwrapped
    _trajectory(env, 1)
    assert seen["ticks"] > 1000 and seen["quiet"] > 500


class _DyadicWorkload:
    """Arrivals on a 0.25 s grid: with 0.25 s engine steps and 0.125 s ticks, boundaries, completions and ticks
    fall on the same instants (the phase order and the step attribution of ticks then matter)."""

    task_names: list[str] = []

    def requests(self, seed: int, k: int) -> list[Request]:
        rng = random.Random(seed)
        return [Request(i, 0.25 * (i + rng.randint(0, 1)) + 0.25 * i, rng.randint(5, 60), rng.randint(20, 200))
                for i in range(k)]


def test_ticks_on_the_same_instants_as_boundaries_and_completions(monkeypatch):
    from llmsim.envs.decision_points import DecisionPoints
    from llmsim.envs.routing_env import RoutingEnv
    from llmsim.envs.workloads import EnvWorkload
    from llmsim.testing import LinearProfile

    wl = type("Dyadic", (EnvWorkload,), dict(vars(_DyadicWorkload)))()
    insts = [InstanceConfig(profile=LinearProfile(base=0.25, per_token=0.0), engine=EngineConfig(policy="vllm_v0"))
             for _ in range(2)]
    env = RoutingEnv(instances=insts, workload=wl, num_requests=30, decision="tick", tick=0.125,
                     action="instance_wait", reward="workload_aware", drain_time=60.0)
    calls = _count_quiet_ticks(monkeypatch)
    fast = _trajectory(env, 5)
    assert calls["quiet"] > 100
    monkeypatch.setattr(DecisionPoints, "quiet_ticks", lambda self: None)
    slow = _trajectory(env, 5)
    assert len(fast) == len(slow) > 30 and fast == slow
