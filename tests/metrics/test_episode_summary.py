"""The summary without the tables (``summary_of``, what an env reports each episode) is ``collect``'s summary:
the same keys in the same order and the same numbers, bit for bit, whatever the run holds."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from llmsim import InstanceConfig, envs
from llmsim.cluster import Cluster
from llmsim.metrics.episode_summary import nan_mean, summary_of
from llmsim.routing import make_router
from llmsim.schema import SLO
from llmsim.simulation.run import collect
from llmsim.testing import LinearProfile, requests

pytestmark = pytest.mark.timeout(120)


def _rows(n: int, seed: int) -> list[tuple[float, int, int]]:
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(0.01, n))
    return [(float(t), int(p), int(o)) for t, p, o in zip(times, rng.integers(10, 600, n), rng.integers(1, 120, n))]


def _same(cluster: Cluster, slo: SLO) -> None:
    want, got = collect(cluster, slo).summary, summary_of(cluster, slo)
    assert list(got) == list(want)
    assert repr(got) == repr(want)  # (repr: NaN equals NaN, and 1 differs from 1.0)


@pytest.mark.parametrize("classes", [False, True])
def test_a_finished_run_with_drops_and_classes(classes: bool) -> None:
    rows = _rows(300, 1)
    rows[7] = (rows[7][0], 10**6, 5)  # a prompt no instance can hold: dropped
    reqs = requests(rows)
    if classes:
        for r in reqs[100:]:  # the first requests have no class
            r.slo_class = "fast" if r.id % 2 else "slow"
    slo = SLO.parse({"ttft_ms": 300.0, "e2el_ms": 4000.0,
                     **({"classes": {"fast": {"e2el_ms": 2000.0}, "slow": {"tpot_ms": 50.0}}} if classes else {})})
    cluster = Cluster([InstanceConfig(profile=LinearProfile()) for _ in range(3)], make_router("jsq"),
                      on_unservable="drop")
    cluster.run(reqs)
    assert len(cluster.recorder.dropped) == 1  # the check covers the dropped table
    _same(cluster, slo)


def test_a_run_with_nothing_done_yet() -> None:
    cluster = Cluster([InstanceConfig(profile=LinearProfile())], make_router("round_robin"))
    _same(cluster, SLO())


@pytest.mark.parametrize("env_id", envs.ENV_IDS)
def test_every_env_episode_summary_is_collects(env_id: str) -> None:
    env = gym.make(env_id, num_requests=150).unwrapped
    rng = np.random.default_rng(0)
    env.reset(seed=2)
    done, k = False, 0
    while not done:
        valid = np.flatnonzero(env.action_masks())
        _, _, term, trunc, info = env.step(int(valid[rng.integers(len(valid))]))
        done, k = term or trunc, k + 1
        if k == 40:
            _same(env.cluster, env.slo)  # mid-episode: requests still running
    assert repr(info["summary"]) == repr(collect(env.cluster, env.slo).summary)


def test_nan_mean_skips_nan_like_pandas() -> None:
    assert nan_mean([1.0, float("nan"), 2.0]) == 1.5
    assert np.isnan(nan_mean([float("nan")]))
