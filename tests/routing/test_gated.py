"""The load-gated router: one rule while the cluster is light, another once it is busy (llmsim/routing/gated.py)."""

from __future__ import annotations

import numpy as np
import pytest

from llmsim.cluster import InstanceConfig
from llmsim.engine.config import EngineConfig
from llmsim.errors import ConfigError
from llmsim.routing import Router, make_router
from llmsim.routing.gated import load_signal
from llmsim.simulation.run import simulate
from llmsim.testing import LinearProfile, requests

SPLIT = {"name": "dedicated_small_large", "kwargs": {"within": "least_work_left"}}


def _cluster(n: int = 4, kv_tokens: int = 20_000) -> list[InstanceConfig]:
    return [InstanceConfig(model="llama-2-7b", engine=EngineConfig(policy="vllm_v0", max_num_seqs=8),
                           profile=LinearProfile(kv_tokens=kv_tokens)) for _ in range(n)]


def _traffic(n: int, seed: int) -> list:
    """Poisson 40 req/s, prompts 50-400 and outputs 10-600 tokens: queues build and drain on a small cache."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / 40.0, n))
    return requests(list(zip(t, rng.integers(50, 400, n), rng.integers(10, 600, n))))


def _mean_e2e(policy: str, seed: int = 1, **kwargs) -> float:
    reqs = _traffic(300, seed)
    return float(simulate(_cluster(), reqs, make_router(policy, seed, **kwargs), seed=seed).summary["mean_e2el_ms"])


def test_it_is_its_light_router_below_a_threshold_never_reached_and_its_busy_router_above_zero():
    light, busy = _mean_e2e("least_work_left"), _mean_e2e("dedicated_small_large", within="least_work_left")
    assert light != busy
    assert _mean_e2e("load_gated", light="least_work_left", busy=SPLIT, feature="waiting_per_seat",
                     below=4.0) == light  # the signal is capped at 4 requests per seat: always light
    gated = _mean_e2e("load_gated", light="least_work_left", busy=SPLIT, feature="waiting_per_seat", below=0.0)
    assert gated not in (light, busy)  # both rules act in one episode: requests queue here, and not always


def test_the_signal_counts_queued_or_running_requests_per_batch_seat():
    seen = []

    class Spy(Router):
        name = "spy"

        def __init__(self) -> None:
            super().__init__()
            self.router = make_router("least_work_left")

        def route(self, req, view):
            st = view.state()
            seats = sum(i.max_num_seqs for i in st.instances)
            waiting = sum(i.num_waiting + i.num_swapped for i in st.instances)
            seen.append((load_signal(st, "waiting_per_seat"), min(4.0, waiting / seats),
                         load_signal(st, "running_per_seat"), sum(i.num_running for i in st.instances) / seats))
            return self.router.route(req, view)

    simulate(_cluster(), _traffic(200, 2), Spy(), seed=2)
    assert all(a == b and c == d for a, b, c, d in seen)
    assert max(a for a, *_ in seen) > 0.0 and max(c for *_, c, _ in seen) > 0.0


@pytest.mark.parametrize("kwargs, key", [({"feature": "kv_used"}, "feature"), ({"below": -1.0}, "below"),
                                         ({"light": 5}, "light"), ({"busy": {"name": "jsq", "x": 1}}, "busy"),
                                         ({"light": "no_such_router"}, "policy.name")])
def test_a_bad_option_is_one_line_naming_it(kwargs, key):
    with pytest.raises(ConfigError, match=key):
        make_router("load_gated", **kwargs)


def test_reset_resets_both_rules():
    r = make_router("load_gated", light="round_robin", busy="round_robin")
    r.light.rng.random(), r.busy.rng.random()
    r.reset(7)
    assert r.light.rng.random() == r.busy.rng.random() == make_router("round_robin", 7).rng.random()
