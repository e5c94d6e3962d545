"""A bad reward option is one line naming ``reward.<key>`` at construction: a zero scale or limit divided by zero at
the first completion, an unknown preset was a KeyError, and a negative target or wait cost went through silently."""

from __future__ import annotations

import gymnasium as gym
import pytest

import llmsim.envs  # noqa: F401  (registers the ids)
from llmsim.errors import ConfigError

BAD = [
    ({"kind": "latency", "latency_scale": 0}, "reward.latency_scale: expected a positive number, got 0"),
    ({"kind": "latency", "ttft_ms": -5}, "reward.ttft_ms: expected a positive number, got -5"),
    ({"kind": "latency", "wait_cost": -1}, "reward.wait_cost: expected a number >= 0, got -1"),
    ({"kind": "latency", "scale": 0}, "reward.scale: expected a positive number, got 0"),
    ({"kind": "latency", "weights": {"bogus": 1}}, r"reward.weights: reward 'latency' has no component\(s\)"),
    ({"kind": "utility", "latency_ref": 0}, "reward.latency_ref: expected a positive number, got 0"),
    ({"kind": "utility", "preset": "nope"}, r"reward.preset: unknown value 'nope'; expected one of"),
    ({"kind": "workload_aware", "eps": 0}, "reward.eps: expected a positive number, got 0"),
    ({"kind": "workload_aware", "completion_reward": 0}, "reward.completion_reward: expected a positive number, got 0"),
    ({"kind": "best_effort", "deadline": 0}, "reward.deadline: expected a positive number, got 0"),
    ({"kind": "best_effort", "task_deadlines": {"copa": 0}}, "reward.task_deadlines.copa: expected a positive number"),
    ({"kind": "qos", "latency_limit": float("inf")}, "reward.latency_limit: expected a positive number, got inf"),
]


@pytest.mark.parametrize(("reward", "message"), BAD, ids=[f"{r['kind']}-{k}" for r, _ in BAD for k in r if k != "kind"])
def test_a_bad_option_is_one_line_naming_it(reward, message):
    with pytest.raises(ConfigError, match=message) as err:
        gym.make("llmsim/Routing-v0", num_requests=5, reward=reward)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("reward", [{"kind": "latency", "ttft_ms": 500, "wait_cost": 0},
                                    {"kind": "utility", "preset": "quality", "latency_ref": 5},
                                    {"kind": "workload_aware", "eps": 2.0, "scale": 0.5}])
def test_good_options_build(reward):
    env = gym.make("llmsim/Routing-v0", num_requests=5, reward=reward)
    env.reset(seed=0)
    _, r, *_ = env.step(0)
    assert isinstance(r, float)
