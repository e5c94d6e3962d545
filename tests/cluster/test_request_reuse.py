"""Request objects fed to a second simulation start afresh: the cluster resets what an earlier simulation wrote into
them (``Request.reset_lifecycle``) at their arrival. It skips that for a request nothing was written into yet (never
routed, dropped or capped by a router), so the check must catch every request an earlier run touched."""

from __future__ import annotations

import pandas as pd

from llmsim.cluster import Cluster, InstanceConfig
from llmsim.engine.config import EngineConfig
from llmsim.request import Request
from llmsim.routing.base import WAIT, Router
from llmsim.routing.heuristics import RoundRobinRouter


def _requests(n: int = 200) -> list[Request]:
    """Arrivals every 20-50 ms with mixed lengths; every 31st prompt is too long (dropped at its arrival)."""
    reqs, t = [], 0.0
    for i in range(n):
        t += 0.02 + 0.03 * ((17 * i) % 5) / 5
        prompt = 5000 if i % 31 == 7 else 50 + (41 * i) % 700
        reqs.append(Request(i, t, prompt, 4 + (29 * i) % 120))
    return reqs


def _cluster(router: Router) -> Cluster:
    engine = EngineConfig(policy="vllm_v0", num_gpu_blocks=300)
    return Cluster([InstanceConfig("llama-2-7b", "a100-80gb", engine=engine) for _ in range(2)], router,
                   on_unservable="drop", metrics_interval=1.0)


def _tables(reqs: list[Request]) -> tuple[pd.DataFrame, pd.DataFrame]:
    cluster = _cluster(RoundRobinRouter())
    cluster.run(reqs)
    return cluster.recorder.requests_frame(), cluster.recorder.dropped_frame()


class CapAndWait(Router):
    """Caps every request's output at 2 tokens and keeps it waiting (as a capping router may before it routes)."""

    name = "cap_and_wait"

    def route(self, req, view):
        req.token_cap = 2
        return WAIT


def test_requests_simulated_again_give_the_same_tables():
    reqs = _requests()
    first = _tables(reqs)
    again = _tables(reqs)
    for a, b in zip(first, again, strict=True):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert len(first[0]) > 150 and len(first[1]) > 3


def test_a_request_an_abandoned_run_capped_but_never_routed_starts_afresh():
    reqs = _requests()
    held = _cluster(CapAndWait())
    held.start(reqs)
    while held.num_arrived < 20:  # an outside driver that stops with requests still held, never calling finish()
        held.env.step()
    assert sum(r.token_cap == 2 for r in reqs) >= 15
    fresh = _tables(_requests())
    reused = _tables(reqs)
    for a, b in zip(fresh, reused, strict=True):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
