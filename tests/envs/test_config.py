"""One validated config per env, three spellings of it, and one documented class per registered id."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import llmsim.envs  # noqa: F401  (registers the ids)
from llmsim.envs import ENTRY_POINTS, ENV_IDS
from llmsim.envs.config import RoutingEnvConfig
from llmsim.envs.routing_env import RoutingEnv
from llmsim.envs.testbeds import TESTBEDS, QoSEdgeEnv, make_from_config
from llmsim.errors import ConfigError

SMALL = {"instances": [{"model": "llama-2-7b", "gpu": "a100-80gb", "count": 2}], "num_requests": 12}
SECTIONS = ("## Description", "## Action Space", "## Observation Space", "## Rewards", "## Episode End",
            "## Arguments")


def _first_obs(env: RoutingEnv) -> np.ndarray:
    obs, _ = env.reset(seed=3)
    return obs


def test_a_config_a_mapping_and_keywords_build_the_same_env() -> None:
    a = RoutingEnv(RoutingEnvConfig(**SMALL))
    b = RoutingEnv(SMALL)
    c = RoutingEnv(**SMALL)
    d = gym.make("llmsim/Routing-v0", **SMALL).unwrapped
    assert a.config == b.config == c.config == d.config
    assert a.num_requests == 12 and a.num_instances == 2 and isinstance(a.config, RoutingEnvConfig)
    first = _first_obs(a)
    for env in (b, c, d):
        np.testing.assert_array_equal(_first_obs(env), first)


def test_keywords_override_a_config() -> None:
    env = RoutingEnv(RoutingEnvConfig(**SMALL), num_requests=5, reward="latency")
    assert env.config.num_requests == 5 and env.config.instances == SMALL["instances"]


def test_none_cluster_or_workload_means_the_default() -> None:
    env = RoutingEnv(instances=None, workload=None, num_requests=3)
    assert env.num_instances == 4 and env.instance_models == ["llama-2-7b"] * 4


@pytest.mark.parametrize("kwargs,pattern", [
    ({"num_request": 5}, r"^env: unknown key 'num_request' \(did you mean 'num_requests'\?\)"),
    ({"instances": "llama"}, r"^env.instances: expected a list"),
    ({"slo": {"ttft_ms": -1}}, r"^env.slo.ttft_ms: expected a value > 0"),
    ({"tick_when_empty": "yes"}, r"^env.tick_when_empty: expected true or false, got 'yes'"),
])
def test_a_bad_key_is_one_line_naming_it(kwargs, pattern) -> None:
    with pytest.raises(ConfigError, match=pattern) as e:
        RoutingEnv(**kwargs)
    assert "\n" not in str(e.value)


def test_a_positional_list_is_not_a_config() -> None:
    with pytest.raises(ConfigError, match=r"^env: expected a mapping of RoutingEnvConfig keys"):
        RoutingEnv([{"model": "llama-2-7b"}])  # type: ignore[arg-type]


def test_testbed_options_and_env_keys_combine() -> None:
    env = QoSEdgeEnv(num_requests=7, experts=3, reward={"kind": "qos", "weights": {"dropped": 0.0}})
    assert env.num_requests == 7 and env.num_instances == 3 and env.reward_fn.weights["dropped"] == 0.0
    assert isinstance(env, RoutingEnv) and env.action_kind == "instance_drop"
    assert type(make_from_config({"id": "qos_edge", "num_requests": 7, "experts": 3})) is QoSEdgeEnv


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_each_id_is_one_documented_class(env_id) -> None:
    module, name = ENTRY_POINTS[env_id].split(":")
    cls = gym.spec(env_id).entry_point
    assert cls == f"{module}:{name}"
    env_cls = TESTBEDS["routing"] if name == "RoutingEnv" else getattr(__import__(module, fromlist=[name]), name)
    doc = env_cls.__doc__ or ""
    assert f"``{env_id}``" in doc
    for section in SECTIONS:
        assert section in doc, (env_id, section)
    assert isinstance(gym.make(env_id, num_requests=4).unwrapped, env_cls)


@pytest.mark.parametrize("value", ["yes", 1])
def test_a_testbed_switch_takes_only_true_or_false(value) -> None:
    """'yes' or 1 for BestEffort's ``soft`` was read as True without a word."""
    with pytest.raises(ConfigError, match=r"soft") as e:
        gym.make("llmsim/BestEffort-v0", soft=value)
    assert "\n" not in str(e.value)
