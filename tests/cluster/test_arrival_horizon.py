"""A single-instance cluster tells its engine when the next arrival comes (``Instance.next_arrival``), and the
engine's decode runs plan no further than the first boundary that sees it: the run's event sits there from the
start instead of being moved earlier by the arrival (which left the old event behind, superseded).

* results (every table, every engine statistic) equal those of the same run without the horizon, with arrivals
  that stop runs and arrivals that do not (dropped as unservable: the run goes on from a planning checkpoint);
* no engine event is superseded by a moved run end any more (without the horizon, many are);
* the lazily read state equals the synced one at every event of such a run;
* ``DecodeRun.plan`` with a horizon plans a prefix of the same boundaries, ending at the first at or after it.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from llmsim.cluster import Cluster, InstanceConfig
from llmsim.engine.config import EngineConfig
from llmsim.engine.fastpath import DecodeRun
from llmsim.engine.instance import Instance
from llmsim.event_loop import ENGINE
from llmsim.request import Request
from llmsim.routing import make_router
from tests.helpers import python_engine_only


def _requests(n: int = 400) -> list[Request]:
    """Arrivals every 40-90 ms with mixed lengths; every 23rd prompt is too long for the engine (dropped: its
    arrival does not stop the run in progress)."""
    reqs, t = [], 0.0
    for i in range(n):
        t += 0.04 + 0.05 * ((31 * i) % 7) / 7
        prompt = 5000 if i % 23 == 5 else 60 + (37 * i) % 900
        reqs.append(Request(i, t, prompt, 5 + (53 * i) % 180))
    return reqs


def _cluster() -> Cluster:
    engine = EngineConfig(policy="vllm_v0", num_gpu_blocks=400)
    return Cluster([InstanceConfig("llama-2-7b", "a100-80gb", engine=engine)], make_router("round_robin"),
                   on_unservable="drop", metrics_interval=1.0)


def _count_moved_run_ends(cluster: Cluster) -> list[int]:
    """Wrap the cluster's ``call_at``: count engine events scheduled before an earlier-scheduled one of the same
    engine that is still ahead (the earlier one is then superseded and fires for nothing)."""
    env, inst = cluster.env, cluster.instances[0]
    plain = env.call_at
    ahead = [-math.inf]
    moved = [0]

    def call_at(when, phase, fn, *args):
        if phase == ENGINE and getattr(fn, "__self__", None) is inst:
            if when < ahead[0] and env.now < ahead[0]:
                moved[0] += 1
            ahead[0] = when
        plain(when, phase, fn, *args)

    env.call_at = call_at  # (an instance attribute: the engine looks it up on every call)
    return moved


def _outcome(cluster: Cluster) -> tuple:
    rec = cluster.recorder
    inst = cluster.instances[0]
    stats = (inst.iterations, inst.tokens_out, inst.busy_time, inst.preemptions, inst.finished, inst.prefill_tokens)
    return rec.requests_frame(), rec.dropped_frame(), rec.timeline_frame(), list(rec.itl_hist), stats


def _run(monkeypatch: pytest.MonkeyPatch | None) -> tuple[tuple, int]:
    if monkeypatch is not None:  # no horizon: the engine never learns when arrivals come
        monkeypatch.setattr(Instance, "next_arrival", property(lambda self: math.inf, lambda self, v: None),
                            raising=False)
    cluster = _cluster()
    moved = _count_moved_run_ends(cluster)
    cluster.run(_requests())
    return _outcome(cluster), moved[0]


@python_engine_only
def test_results_equal_the_run_without_the_horizon_and_no_run_end_moves(monkeypatch):
    with_horizon, moved = _run(None)
    with monkeypatch.context() as m:
        without, moved_without = _run(m)
    for a, b in zip(with_horizon[:3], without[:3], strict=True):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert with_horizon[3:] == without[3:]
    assert len(with_horizon[1]) > 10 and len(with_horizon[0]) > 300  # drops (runs go on) and completions
    assert moved_without > 50  # without the horizon, arrivals move run ends earlier
    assert moved == 0


def test_lazy_state_equals_the_synced_state_at_every_event():
    cluster = _cluster()
    cluster.start(_requests(150))
    env, view = cluster.env, cluster.view
    mid_run = 0
    while env.active > 0:
        env.step()
        inst = cluster.instances[0]
        mid_run += inst.seen_iterations(env.now, env.phase) > inst.iterations
        lazy = view.live_state(sync=False).to_dict()
        assert lazy == view.live_state().to_dict()
    assert mid_run > 20


@pytest.mark.parametrize("horizon", [0.35, 0.5, 0.9, 5.0])
def test_plan_with_a_horizon_is_a_prefix_ending_at_the_first_boundary_at_or_after_it(horizon):
    def run() -> DecodeRun:
        return DecodeRun("x", 0.0, [None] * 3, 0.1, 300, 10**6, [1, 1, 1, 0], 10**6, 1.0, lambda c: 0.05 + c * 1e-6)

    free, capped = run(), run()
    free.plan(4)
    capped.plan(4, horizon)
    b = list(capped.bounds)
    assert b == free.bounds[:len(b)]
    assert b[-1] >= horizon or len(b) == len(free.bounds)
    assert all(x < horizon for x in b[:-1])
    free.plan(4)  # (its next chunk, to compare with)
    capped.end = len(b)  # a checkpoint at the last planned boundary, the horizon passed: it still plans on
    capped.plan(4, horizon)
    assert len(capped.bounds) > len(b)
    assert capped.bounds == free.bounds[:len(capped.bounds)]
