"""A misspelt testbed option is matched against the testbed's own options, which the message lists with the env
keys (before: "env: unknown key 'latency_limt' (did you mean 'time_limit'?)", and no testbed option listed)."""

from __future__ import annotations

import gymnasium as gym
import pytest

import llmsim.envs  # noqa: F401  (registers the ids)
from llmsim.envs.testbeds import make_from_config
from llmsim.errors import ConfigError


@pytest.mark.parametrize(("env_id", "typo", "meant"), [("llmsim/QoSEdge-v0", "latency_limt", "latency_limit"),
                                                        ("llmsim/BestEffort-v0", "schedul", "schedule"),
                                                        ("llmsim/WorkloadRouter-v0", "num_instance", "num_instances")])
def test_a_misspelt_option_suggests_the_testbed_option(env_id, typo, meant):
    with pytest.raises(ConfigError) as err:
        gym.make(env_id, num_requests=5, **{typo: 1})
    msg = str(err.value)
    name = env_id.split("/")[1]
    assert msg.startswith(f"{name}: unknown key '{typo}' (did you mean '{meant}'?); its options: [")
    assert f"'{meant}'" in msg.split("its options:")[1].split("env keys:")[0] and "\n" not in msg


def test_env_keys_still_pass_through_a_testbed():
    env = make_from_config({"id": "workload_router", "num_requests": 5, "observation": "instance_set", "tick": 0.05})
    assert env.tick == 0.05 and env.observation_space.shape == (232,)
