"""The load gate's burst condition (envs/load_gate.py ``margin_burst``): the margin applies while at least that share
of the recent decisions came bunched (within a tenth of the recent mean interval of the one before), or the load is
below ``margin_below`` if that is set. Pinned here: the share's exact weighting, that it reads batches of
simultaneous arrivals as bunched and evenly or Poisson spaced ones as not, whatever the time scale; that the margin
follows it; that a gate without it is written as before. That evaluation and the exported live router apply it
alike: tests/agents/test_load_gate.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmsim.envs.load_gate import BUNCHED, LoadGate
from llmsim.envs.testbeds import make_from_config
from llmsim.errors import ConfigError
from llmsim.state.cluster_state import ClusterState


@pytest.fixture(scope="module")
def state() -> ClusterState:
    env = make_from_config({"id": "qos_edge", "num_requests": 10})
    env.reset(seed=1000)
    return env.cluster.view.state()


def bunched_after(state: ClusterState, times: list[float], smooth_s: float = 30.0) -> float:
    meter = LoadGate(router="jsq", below=1.0, smooth_s=smooth_s, margin=2.0, margin_burst=0.5).meter()
    for t in times:
        meter.light(state._replace(now=float(t)))
    return meter.bunched


def batches(n: int, size: int, every_s: float) -> list[float]:
    return [k * every_s for k in range(n) for _ in range(size)]


def test_the_bunched_share_is_the_decision_weighted_average_over_time(state: ClusterState) -> None:
    meter = LoadGate(router="jsq", below=1.0, smooth_s=10.0).meter()
    shares = []
    for t in (0.0, 1.0, 1.0, 3.0):
        meter.light(state._replace(now=t))
        shares.append(meter.bunched)
    assert shares[:3] == [0.0, 0.0, 0.5]  # the first interval is not bunched; 0 s after a mean of 1 s is
    d = 2 * math.exp(-0.2) + 1  # 2 s later the two decisions before weigh e^-0.2 each
    assert meter.decisions == pytest.approx(d)
    assert meter.bunched == pytest.approx(0.5 - 0.5 / d)  # 2 s is far above a tenth of the mean 0.5 s
    assert meter.gap == pytest.approx(0.5 + 1.5 / d)


def test_batches_at_one_instant_are_bunched_and_poisson_or_even_arrivals_are_not(state: ClusterState) -> None:
    assert bunched_after(state, batches(60, 10, 3.0)) == pytest.approx(0.9, abs=0.02)  # 9 of each 10
    poisson = np.cumsum(np.random.default_rng(0).exponential(0.2, 600))
    share = bunched_after(state, list(poisson))
    assert abs(share - (1 - math.exp(-BUNCHED))) < 0.06  # about a tenth under Poisson arrivals
    assert bunched_after(state, list(poisson * 1000.0), smooth_s=30_000.0) == pytest.approx(share)  # no scale
    assert bunched_after(state, [0.2 * k for k in range(600)]) == 0.0


def test_the_margin_applies_where_the_decisions_come_bunched_or_the_load_is_below_margin_below(
        state: ClusterState) -> None:
    busy = state._replace(instances=tuple(i._replace(num_running=4) for i in state.instances))
    gate = LoadGate(router="jsq", below=1.0, smooth_s=30.0, margin=2.0, margin_burst=0.5)
    bursty, even, light = gate.meter(), gate.meter(), gate.meter()
    for t in batches(10, 10, 3.0):
        bursty.light(busy._replace(now=t))
    for k in range(100):
        even.light(busy._replace(now=0.3 * k))
        light.light(state._replace(now=0.3 * k))
    assert gate.margin_now(bursty) == 2.0 and gate.margin_now(even) == 0.0 and gate.margin_now(light) == 0.0
    anyhow = LoadGate(router="jsq", below=1.0, smooth_s=30.0, margin=2.0)
    assert anyhow.margin_now(even) == 2.0  # neither condition set: at any load, however the decisions come
    either = LoadGate(router="jsq", below=1.0, margin=2.0, margin_below=3.0, margin_burst=0.5)
    assert [either.margin_now(m) for m in (bursty, even, light)] == [2.0, 0.0, 2.0]  # bunched, or 0 < 3 in flight
    assert LoadGate(router="jsq", below=1.0, margin=2.0, margin_below=3.0).margin_now(bursty) == 0.0  # 4 in flight


def test_a_gate_without_it_is_written_as_before_and_with_it_carries_it() -> None:
    shipped = {"router": "qos_lookahead", "kwargs": {}, "below": 1.5, "smooth_s": 30.0, "margin": 2.0,
               "margin_below": None}
    assert LoadGate.parse(shipped).model_dump() == shipped  # the same keys: checkpoint.json and the manifest
    assert LoadGate.parse({**shipped, "margin_burst": 0.5}).model_dump() == {**shipped, "margin_burst": 0.5}


@pytest.mark.parametrize("value", [0, -0.5, 1.5])
def test_a_bad_burst_share_is_one_line_naming_the_key(value: float) -> None:
    with pytest.raises(ConfigError) as e:
        LoadGate.parse({"router": "jsq", "below": 2, "margin": 2, "margin_burst": value})
    assert str(e.value).startswith("load_gate.margin_burst") and "\n" not in str(e.value)


@pytest.mark.parametrize("key", ["costless", "informed"])
def test_a_gate_switch_takes_only_true_or_false(key) -> None:
    """'yes' was read as True without a word."""
    with pytest.raises(ConfigError, match=rf"{key}: expected true or false, got 'yes'"):
        LoadGate.parse({"router": "jsq", "below": 1.0, key: "yes"})
