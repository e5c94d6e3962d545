"""Under ``Cluster.run`` with a router whose next choices are fixed in advance (round robin), the cluster pulls as
many requests ahead as there are instances and tells each engine when its own next arrival comes
(``Instance.next_arrival``): its decode runs plan no further than the first boundary that sees it.

* results (every table, every engine statistic) equal those of the same run without the hints, with arrivals
  that stop runs and arrivals that do not (dropped as unservable), and with a router whose hints are wrong;
* with the right hints no engine event is superseded by a moved run end (without them, many are);
* a router without known choices, or an outside driver, gets no lookahead.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from llmsim.cluster import Cluster, InstanceConfig
from llmsim.engine.config import EngineConfig
from llmsim.engine.instance import Instance
from llmsim.event_loop import ENGINE
from llmsim.request import Request
from llmsim.routing.heuristics import RoundRobinRouter
from tests.helpers import python_engine_only

N_INSTANCES = 3


class NoHintRoundRobin(RoundRobinRouter):
    """Round robin that does not say where the next requests go: no lookahead."""

    def upcoming(self, view, k):
        return None


class WrongHintRoundRobin(RoundRobinRouter):
    """Round robin whose hints name the wrong instance: slower, never different."""

    def upcoming(self, view, k):
        return (super().upcoming(view, k) + 1) % view.num_instances


def _requests(n: int = 600, drops: bool = True) -> list[Request]:
    """Arrivals every 10-40 ms with mixed lengths; with ``drops`` every 29th prompt is too long for the engines
    (dropped: its arrival routes nothing)."""
    reqs, t = [], 0.0
    for i in range(n):
        t += 0.01 + 0.03 * ((31 * i) % 7) / 7
        prompt = 5000 if drops and i % 29 == 5 else 60 + (37 * i) % 900
        reqs.append(Request(i, t, prompt, 5 + (53 * i) % 180))
    return reqs


def _cluster(router: RoundRobinRouter) -> Cluster:
    engine = EngineConfig(policy="vllm_v0", num_gpu_blocks=400)
    return Cluster([InstanceConfig("llama-2-7b", "a100-80gb", engine=engine) for _ in range(N_INSTANCES)], router,
                   on_unservable="drop", metrics_interval=1.0)


def _count_moved_run_ends(cluster: Cluster) -> list[int]:
    """Wrap the cluster's ``call_at``: count engine events scheduled before an earlier-scheduled one of the same
    engine that is still ahead (the earlier one is then superseded and fires for nothing)."""
    env = cluster.env
    plain = env.call_at
    ahead = {id(inst): -math.inf for inst in cluster.instances}
    moved = [0]

    def call_at(when, phase, fn, *args):
        owner = getattr(fn, "__self__", None)
        if phase == ENGINE and isinstance(owner, Instance):
            key = id(owner)
            if when < ahead[key] and env.now < ahead[key]:
                moved[0] += 1
            ahead[key] = when
        plain(when, phase, fn, *args)

    env.call_at = call_at  # (an instance attribute: the engines look it up on every call)
    return moved


def _outcome(cluster: Cluster) -> tuple:
    rec = cluster.recorder
    stats = [(i.iterations, i.tokens_out, i.busy_time, i.preemptions, i.finished, i.prefill_tokens)
             for i in cluster.instances]
    return rec.requests_frame(), rec.dropped_frame(), rec.timeline_frame(), list(rec.itl_hist), stats


def _run(router: RoundRobinRouter) -> tuple[tuple, int]:
    cluster = _cluster(router)
    moved = _count_moved_run_ends(cluster)
    cluster.run(_requests())
    return _outcome(cluster), moved[0]


@python_engine_only
@pytest.mark.parametrize("other", [NoHintRoundRobin, WrongHintRoundRobin])
def test_results_equal_the_run_without_or_with_wrong_hints(other):
    hinted, moved = _run(RoundRobinRouter())
    plain, moved_plain = _run(other())
    for a, b in zip(hinted[:3], plain[:3], strict=True):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert hinted[3:] == plain[3:]
    assert len(hinted[1]) > 10 and len(hinted[0]) > 500  # drops and completions
    assert moved_plain > 50  # without the right hints, arrivals move run ends earlier
    assert moved == 0


@python_engine_only  # (patches the event loop's call_at, which a compiled cluster calls directly)
def test_each_engine_learns_its_own_next_arrival():
    cluster = _cluster(RoundRobinRouter())
    reqs = _requests(40, drops=False)
    seen: list[list[float]] = [[] for _ in range(N_INSTANCES)]
    plain = cluster.env.call_at

    def call_at(when, phase, fn, *args):  # at every arrival: what each engine was told so far
        for k, inst in enumerate(cluster.instances):
            seen[k].append(inst.next_arrival)
        plain(when, phase, fn, *args)

    cluster.env.call_at = call_at
    cluster.run(reqs)
    for k in range(N_INSTANCES):
        mine = [r.arrival for r in reqs if r.instance == k]
        told = [t for t in dict.fromkeys(seen[k]) if t != math.inf]
        assert told == mine  # in order, every one of its arrivals
        assert cluster.instances[k].next_arrival == math.inf  # none left


def test_no_lookahead_without_known_choices_or_under_an_outside_driver():
    cluster = _cluster(NoHintRoundRobin())
    cluster.run(_requests(30))
    assert all(i.next_arrival == math.inf for i in cluster.instances)
    driven = _cluster(RoundRobinRouter())
    driven.start(_requests(30))
    driven.env.step()
    assert all(i.next_arrival == math.inf for i in driven.instances)
