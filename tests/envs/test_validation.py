"""Env actions and constructor options are validated like Gymnasium's own envs and like llmsim configs."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import llmsim.envs  # noqa: F401  (registers the ids)
from llmsim.envs.routing_env import InvalidAction
from llmsim.envs.testbeds import make_from_config
from llmsim.errors import ConfigError, ProfileError


@pytest.fixture(scope="module")
def env():
    e = gym.make("llmsim/Routing-v0", num_requests=20, action="instance_drop")
    e.reset(seed=0)
    return e


@pytest.mark.parametrize("action", [math.nan, None, 1.7, "1", -1, -3, 6, 99, True, np.float32(1.0), [0, 1],
                                    np.array([1, 2])])
def test_bad_actions_rejected(env, action) -> None:
    with pytest.raises(InvalidAction, match=r"Discrete\(6\): expected an integer in \[0, 5\]"):
        env.step(action)


@pytest.mark.parametrize("action", [0, np.int64(1), np.int32(2), np.uint8(3), np.array(4), np.array([5]),
                                    np.array([0])])
def test_integer_actions_accepted(action) -> None:
    e = gym.make("llmsim/Routing-v0", num_requests=5, action="instance_drop")
    e.reset(seed=0)
    e.step(action)


def test_defer_code_is_not_an_action() -> None:
    """-3 is the cluster's internal DEFER code; as an action it used to be accepted and could hang."""
    e = gym.make("llmsim/Routing-v0", num_requests=5)
    e.reset(seed=0)
    with pytest.raises(InvalidAction, match="out of range"):
        e.step(-3)


BAD_OPTIONS = [
    ({"tick": 0, "decision": "tick", "action": "instance_wait"}, r"env.tick: expected a value > 0, got 0"),
    ({"tick": -1, "decision": "tick", "action": "instance_wait"}, r"env.tick: expected a value > 0, got -1"),
    ({"tick": math.nan}, r"env.tick: expected a finite number"),
    ({"num_requests": 0}, r"env.num_requests: expected a value >= 1, got 0"),
    ({"num_requests": 2.5}, r"env.num_requests: expected an integer, got 2.5"),
    ({"time_limit": -1.0}, r"env.time_limit: expected a value >= 0"),
    ({"time_limit": math.inf}, r"env.time_limit: expected a finite number"),
    ({"decision": "sometimes"}, r"env.decision: expected one of arrival, tick"),
    ({"action": "teleport"}, r"env.action: expected one of instance, instance_wait, instance_drop, "
                             r"instance_wait_drop, model, model_wait, model_drop, model_wait_drop"),
    ({"decision": "tick", "action": "instance"}, r"env.action: decision='tick' needs an action with wait"),
    ({"max_wait_s": 0}, r"env.max_wait_s: expected a value > 0"),
    ({"wait_fallback": "retry"}, r"env.wait_fallback: expected one of least_loaded, drop"),
    ({"view_staleness": -1}, r"env.view_staleness: expected a value >= 0"),
    ({"drain_time": math.nan}, r"env.drain_time: expected a finite number"),
    ({"slo": {"ttft_ms": math.nan}}, r"slo.ttft_ms: expected a finite number"),
    ({"reward": "fastest"}, r"reward: unknown reward 'fastest'; expected one of"),
    ({"observation": {"kind": "pixels"}}, r"observation: unknown observation 'pixels'"),
    ({"instances": [{"model": "llama-2-7b", "tp": 0}]}, r"env.instances\[0\].tp: expected a value >= 1"),
]


@pytest.mark.parametrize("kwargs,pattern", BAD_OPTIONS, ids=[str(k) for k, _ in BAD_OPTIONS])
def test_bad_env_options(kwargs, pattern) -> None:
    with pytest.raises(ConfigError, match=pattern):
        gym.make("llmsim/Routing-v0", **kwargs)


@pytest.mark.parametrize("env_id,kwargs,pattern", [
    ("llmsim/QoSEdge-v0", {"rate": math.nan}, r"QoSEdge-v0.rate: expected a finite number"),
    ("llmsim/QoSEdge-v0", {"timing": "fast"}, r"QoSEdge-v0.timing: expected one of measured, paper"),
    ("llmsim/WorkloadRouter-v0", {"tick": 0}, r"env.tick: expected a value > 0"),
    ("llmsim/WorkloadRouter-v0", {"num_instances": 0}, r"WorkloadRouter-v0.num_instances: expected a value >= 1"),
    ("llmsim/BestEffort-v0", {"schedule": "calm"}, r"BestEffort-v0.schedule: expected one of stable, bursty"),
    ("llmsim/BestEffort-v0", {"deadline": -0.04}, r"BestEffort-v0.deadline: expected a value > 0"),
    # options of a union type: the member the value was meant for, not pydantic's names of the members
    ("llmsim/QoSEdge-v0", {"experts": 0}, r"^QoSEdge-v0.experts: expected a value >= 1, got 0$"),
    ("llmsim/QoSEdge-v0", {"experts": [1]}, r"^QoSEdge-v0.experts\[0\]: expected a string, got 1$"),
    ("llmsim/WorkloadRouter-v0", {"task_weights": {"qna": -1, "translation": 2}},
     r"^WorkloadRouter-v0.task_weights.qna: expected a value >= 0, got -1$"),
    ("llmsim/WorkloadRouter-v0", {"task_weights": 3},
     r"^WorkloadRouter-v0.task_weights: expected a string or a mapping, got 3$"),
    # told under the testbed's keys (were the preset's ``qos_edge experts`` and the engine's key)
    ("llmsim/QoSEdge-v0", {"experts": 99}, r"^QoSEdge-v0.experts: expected a count from 1 to 10 or a list of names"),
    ("llmsim/WorkloadRouter-v0", {"gpu_memory_utilization": 1.5},
     r"^WorkloadRouter-v0.gpu_memory_utilization: expected a value <= 1, got 1.5$"),
])
def test_testbed_options_checked(env_id, kwargs, pattern) -> None:
    with pytest.raises(ConfigError, match=pattern):
        gym.make(env_id, **kwargs)


def test_qos_edge_unknown_gpu_names_the_key() -> None:
    """The paper's step model read the GPU without a word of which key named it."""
    with pytest.raises(ProfileError, match=r"^QoSEdge-v0.gpu: 'h900' \(expert alpaca-native\): .*unknown GPU 'h900'"):
        gym.make("llmsim/QoSEdge-v0", gpu="h900")


def test_make_from_config_names_bad_id() -> None:
    with pytest.raises(ConfigError, match=r"env.id: unknown value 'qos'.*expected one of"):
        make_from_config({"id": "qos"})


@pytest.mark.parametrize("env_id", ["llmsim/Routing-v0", "llmsim/BestEffort-v0"])
def test_step_before_reset_is_one_line(env_id) -> None:
    """A step before the first reset used to fail deep inside with an AttributeError on ``steps``."""
    e = gym.make(env_id, num_requests=5)
    with pytest.raises(RuntimeError, match=r"^step\(\) called before reset\(\); call reset\(\) first$"):
        e.step(0)
    e.reset(seed=0)
    e.step(0)


@pytest.mark.parametrize("env_id,kwargs,pattern", [
    ("llmsim/QoSEdge-v0", {"experts": []}, r"^QoSEdge-v0.experts: expected at least one expert, got \[\]$"),
    ("llmsim/QoSEdge-v0", {"experts": ["alpaca-native", "llama-2-7b"]},
     r"^QoSEdge-v0.experts\[1\]: timing='paper' has step-time constants for .*'alpaca-native'.*; got 'llama-2-7b' "
     r"\(timing='measured' takes any model with a profile\)$"),
    ("llmsim/BestEffort-v0", {"tasks": []}, r"^BestEffort-v0.tasks: expected at least one task, got \[\]$"),
    ("llmsim/BestEffort-v0", {"tasks": ["copa", "mmlu"]},
     r"^BestEffort-v0.tasks\[1\]: unknown value 'mmlu'; "
     r"expected one of \['copa', 'hellaswag', 'openbookqa', 'piqa'\]$"),
    ("llmsim/BestEffort-v0", {"tasks": "copa"},
     r"^BestEffort-v0.tasks: expected a list of strings, not one string, got 'copa'$"),
    ("llmsim/WorkloadRouter-v0", {"task_weights": {}},
     r"^task_weights: expected a weight > 0 for at least one of \['translation', .*\], got \{\}$"),
    ("llmsim/WorkloadRouter-v0", {"task_weights": {"qna": 0}},
     r"^task_weights: expected a weight > 0 for at least one of .*, got \{'qna': 0(\.0)?\}$"),
    ("llmsim/BestEffort-v0", {"task_deadlines": {"coppa": 0.05}},
     r"^BestEffort-v0.task_deadlines: unknown value 'coppa' \(did you mean 'copa'\?\); expected one of "),
    ("llmsim/BestEffort-v0", {"tasks": ["copa"], "task_deadlines": {"piqa": 0.05}},
     r"^BestEffort-v0.task_deadlines: unknown value 'piqa'; expected one of \['copa'\]$"),
])
def test_testbed_names_checked(env_id, kwargs, pattern) -> None:
    """Expert and task names: an empty list used to fall back to the default silently (tasks) or fail with a
    message about the task model (experts); an unknown name raised a bare KeyError; an unknown task of
    ``task_deadlines`` was ignored, so the deadline meant for it applied nowhere."""
    with pytest.raises(ConfigError, match=pattern):
        gym.make(env_id, num_requests=5, **kwargs)


def test_qos_edge_measured_timing_takes_any_profiled_model() -> None:
    e = gym.make("llmsim/QoSEdge-v0", num_requests=5, experts=["llama-2-7b"], timing="measured")
    assert e.unwrapped.instance_models == ["llama-2-7b"]


@pytest.mark.parametrize("options,pattern", [
    ({"workload_seed": -1}, r"^reset options.workload_seed: expected an integer >= 0, got -1$"),
    ({"workload_seed": 1.5}, r"^reset options.workload_seed: expected an integer >= 0, got 1.5$"),
    ({"workload_seed": True}, r"^reset options.workload_seed: expected an integer >= 0, got True$"),
    ({"workload_seed": "7"}, r"^reset options.workload_seed: expected an integer >= 0, got '7'$"),
    ({"workload_sed": 3}, r"^reset options: unknown key 'workload_sed' \(did you mean 'workload_seed'\?\); "
                          r"allowed keys: \['workload_seed'\]$"),
    ("x", r"^reset options: expected a mapping like \{'workload_seed': 7\} or None, got 'x'$"),
    ([("workload_seed", 3)], r"^reset options: expected a mapping like .* got \[\('workload_seed', 3\)\]$"),
])
def test_reset_options_checked(options, pattern) -> None:
    """A float seed used to be floored, True read as 1, a negative or text seed raised a bare ValueError, and a
    misspelt option was ignored (a fresh random workload instead of the pinned one)."""
    e = gym.make("llmsim/Routing-v0", num_requests=5)
    with pytest.raises(ConfigError, match=pattern):
        e.reset(seed=0, options=options)
    e.reset(seed=0, options={"workload_seed": np.int64(7)})
    assert e.unwrapped.workload_seed == 7


@pytest.mark.parametrize("env_id,kwargs,pattern", [
    ("llmsim/Routing-v0", {"instances": [{"model": "llama-2-7b", "count": 2}, {"model": "nope"}]},
     r"^env.instances\[2\] \(nope on a100-80gb\): cannot load a profile: unknown model 'nope'"),
    ("llmsim/WorkloadRouter-v0", {"gpu": "h900"}, r"^env.instances\[0\] \(llama-2-7b on h900\): cannot load a "
                                                   r"profile: unknown GPU 'h900'"),
])
def test_an_unknown_model_or_gpu_names_the_instance(env_id, kwargs, pattern) -> None:
    """As the CLI does (cluster.instances[k] (model on gpu): ...); the env's message used to name no instance."""
    from llmsim.errors import ProfileError

    with pytest.raises(ProfileError, match=pattern):
        gym.make(env_id, **kwargs)


def test_an_episode_that_ends_at_reset_accounts_for_every_request() -> None:
    """A time limit before the first decision ended the episode inside reset(), where the requests were never
    recorded: the summary said 0 requests, 0 dropped, instead of K cut off."""
    e = gym.make("llmsim/Routing-v0", num_requests=5, time_limit=0.01)
    _, info = e.reset(seed=0)
    assert e.unwrapped.truncated
    s = info["summary"]
    assert (s["num_requests"], s["completed"], s["dropped"]) == (5, 0, 5)
    assert s["dropped_by_reason"] == {"episode_truncated": 5}
    assert info["episode_components"]["cut_off"] == -5 and info["episode_reward"] < 0
