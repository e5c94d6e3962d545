"""A bad observation option is one line naming ``observation.<key>`` at construction: zero scales and caps divided by
zero or built an empty space deep in the first reset, a negative scale or a zero window went through silently."""

from __future__ import annotations

import gymnasium as gym
import pytest

import llmsim.envs  # noqa: F401  (registers the ids)
from llmsim.errors import ConfigError

BAD = [
    ({"kind": "model", "rate": "x"}, r"observation.rate: unknown value 'x'; expected one of"),
    ({"kind": "model", "window": 0}, "observation.window: expected a positive integer, got 0"),
    ({"kind": "model", "batch_scale": 0}, "observation.batch_scale: expected a positive number, got 0"),
    ({"kind": "model", "rate_scale": float("nan")}, "observation.rate_scale: expected a positive number, got nan"),
    ({"kind": "graph", "cap_running": 0}, "observation.cap_running: expected a positive integer, got 0"),
    ({"kind": "graph", "cap_waiting": 2.5}, "observation.cap_waiting: expected a positive integer, got 2.5"),
    ({"kind": "graph", "latency_scale": -1}, "observation.latency_scale: expected a positive number, got -1"),
    ({"kind": "expert_flat", "out_scale": True}, "observation.out_scale: expected a positive number, got True"),
    ({"kind": "flat", "queue_cap": 0}, "observation.queue_cap: expected a positive integer, got 0"),
    ({"kind": "flat", "time_scale": 0.0}, "observation.time_scale: expected a positive number, got 0.0"),
    ({"kind": "flat", "buckets": [2048, 256]}, r"observation.buckets: expected increasing bounds \[low, high\]"),
    ({"kind": "flat", "buckets": [256]}, r"observation.buckets: expected two output-token bounds"),
]


@pytest.mark.parametrize(("observation", "message"), BAD, ids=[f"{o['kind']}-{k}" for o, _ in BAD
                                                             for k in o if k != "kind"])
def test_a_bad_option_is_one_line_naming_it(observation, message):
    with pytest.raises(ConfigError, match=message) as err:
        gym.make("llmsim/Routing-v0", num_requests=5, observation=observation)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("observation", [{"kind": "model", "window": 3, "batch_scale": 32},
                                         {"kind": "graph", "cap_running": 4, "latency_scale": 0.05},
                                         {"kind": "flat", "buckets": [128, 1024], "queue_cap": 64}])
def test_good_options_build(observation):
    env = gym.make("llmsim/Routing-v0", num_requests=5, observation=observation)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
