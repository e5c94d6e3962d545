"""Per-testbed drain time: each testbed's default time limit leaves room for its drain, and an explicit
``drain_time`` wins (docs/testbeds.md, "Drain time")."""

from __future__ import annotations

import gymnasium as gym
import pytest

import llmsim.envs  # noqa: F401  (registers the ids)
from llmsim.envs import testbeds
from llmsim.envs.routing_env import RoutingEnv
from llmsim.errors import ConfigError
from llmsim.routing import make_router

DEFAULT_DRAIN = {
    "llmsim/QoSEdge-v0": testbeds.QOS_EDGE_DRAIN_S,
    "llmsim/WorkloadRouter-v0": testbeds.WORKLOAD_ROUTER_DRAIN_S,
    "llmsim/BestEffort-v0": testbeds.BEST_EFFORT_DRAIN_S,
}


def _heuristic_episode(env: RoutingEnv, seed: int) -> dict:
    env.reset(seed=seed)
    router = make_router("jsq")
    for _ in range(100_000):
        _, _, term, trunc, info = env.step(env.heuristic_action(router))
        if term or trunc:
            return info
    raise AssertionError("episode did not end")


def test_testbed_defaults():
    assert DEFAULT_DRAIN == {"llmsim/QoSEdge-v0": 60.0, "llmsim/WorkloadRouter-v0": 600.0,
                             "llmsim/BestEffort-v0": 300.0}


@pytest.mark.parametrize("env_id", list(DEFAULT_DRAIN))
def test_default_episode_terminates_under_a_heuristic(env_id):
    env = gym.make(env_id, num_requests=60).unwrapped
    assert env.drain_time == DEFAULT_DRAIN[env_id]
    info = _heuristic_episode(env, seed=0)
    assert env.terminated and not env.truncated
    last = max(r.arrival for r in env.episode_requests)
    assert info["time"] <= env.limit and env.limit == pytest.approx(last + env.max_wait_s + env.drain_time)
    assert info["summary"]["completed"] == env.num_requests
    assert "episode_truncated" not in info["summary"]["dropped_by_reason"]


@pytest.mark.parametrize("env_id", list(DEFAULT_DRAIN))
def test_explicit_drain_time_overrides_the_default(env_id):
    env = gym.make(env_id, num_requests=20, drain_time=1234.5).unwrapped
    assert env.drain_time == 1234.5
    env.reset(seed=0)
    last = max(r.arrival for r in env.episode_requests)
    assert env.limit == pytest.approx(last + env.max_wait_s + 1234.5)
    assert gym.make(env_id, num_requests=20, drain_time=0).unwrapped.drain_time == 0.0
    # time_limit still replaces the whole default
    fixed = gym.make(env_id, num_requests=20, time_limit=7.0).unwrapped
    fixed.reset(seed=0)
    assert fixed.limit == 7.0


def test_drain_time_from_a_config_and_routing_keeps_the_env_default():
    env = testbeds.make_from_config({"id": "qos_edge", "num_requests": 20, "drain_time": 15.0})
    assert env.drain_time == 15.0
    assert testbeds.make_from_config({"id": "best_effort", "num_requests": 20}).drain_time == 300.0
    assert gym.make("llmsim/Routing-v0", num_requests=20).unwrapped.drain_time == 600.0


def test_a_short_drain_time_truncates_the_tail():
    """The default is what keeps the heuristic's episode whole: a drain_time far below the drain cuts it off."""
    env = gym.make("llmsim/WorkloadRouter-v0", num_requests=60, drain_time=0.0, max_wait_s=None).unwrapped
    info = _heuristic_episode(env, seed=0)
    assert env.truncated and not env.terminated
    assert info["summary"]["dropped_by_reason"].get("episode_truncated", 0) > 0


@pytest.mark.parametrize("env_id", list(DEFAULT_DRAIN))
def test_bad_drain_time_names_the_testbed(env_id):
    with pytest.raises(ConfigError, match=rf"{env_id.split('/')[1]}.drain_time: expected a value >= 0"):
        gym.make(env_id, drain_time=-1.0)
