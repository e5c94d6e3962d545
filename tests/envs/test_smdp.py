"""The envs as semi-MDPs: dt, drain steps, time limits, bounded and costed waits, every loss in the reward."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest

from llmsim import envs
from llmsim.cluster import InstanceConfig
from llmsim.engine.config import EngineConfig
from llmsim.envs.routing_env import RoutingEnv
from llmsim.envs.workloads import EnvWorkload
from llmsim.errors import ConfigError
from llmsim.request import Request
from llmsim.routing import DROP, WAIT

SMALL = {"num_requests": 40}


def _episode(env, seed: int, policy):
    """Run one episode with ``policy(env, rng) -> action``; (reset info, [(reward, info)])."""
    _, info0 = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    steps = []
    for _ in range(200_000):
        _, r, term, trunc, info = env.step(policy(env, rng))
        steps.append((r, info))
        if term or trunc:
            return info0, steps
    raise AssertionError("episode did not end")


def _random(env, rng):
    return int(rng.choice(np.flatnonzero(env.action_masks())))


def _always_wait(env, rng):
    return env.wait_action


class _Fixed(EnvWorkload):
    def __init__(self, reqs):
        self.reqs = reqs

    def requests(self, seed, k):
        return [copy.copy(r) for r in self.reqs[:k]]


def _env(reqs, insts=None, **kw) -> RoutingEnv:
    insts = insts or [InstanceConfig("llama-2-7b", "a100-80gb")]
    return RoutingEnv(instances=insts, workload=_Fixed(reqs), num_requests=len(reqs), **kw)


@pytest.mark.parametrize("env_id", envs.ENV_IDS)
def test_dt_sums_to_the_episode_span_and_the_drain_is_stepped(env_id):
    env = gym.make(env_id, **SMALL).unwrapped
    info0, steps = _episode(env, 3, _random)
    dts = [i["dt"] for _, i in steps]
    assert info0["dt"] == 0.0 and min(dts) >= 0.0
    assert sum(dts) == pytest.approx(steps[-1][1]["time"] - info0["time"], rel=1e-9, abs=1e-9)
    # after the last arrival the episode goes on step by step: completions are rewarded when they happen
    last = max(r.arrival for r in env.episode_requests)
    drain = [i for _, i in steps if i["time"] > last]
    done_in_drain = steps[-1][1]["completed"] - (drain[0]["completed"] if drain else 0)
    assert len(drain) >= 3 and done_in_drain > 0
    completed = [b["completed"] - a["completed"] for (_, a), (_, b) in zip(steps, steps[1:])]
    assert max(completed) < env.num_requests / 2  # no step lumps the drain together


@pytest.mark.parametrize("env_id", envs.ENV_IDS)
def test_every_env_has_a_default_time_limit(env_id):
    env = gym.make(env_id, **SMALL).unwrapped
    env.reset(seed=0)
    last = max(r.arrival for r in env.episode_requests)
    assert env.limit == pytest.approx(last + env.max_wait_s + env.drain_time)
    fixed = gym.make(env_id, time_limit=7.0, **SMALL).unwrapped
    fixed.reset(seed=0)
    assert fixed.limit == 7.0


@pytest.mark.parametrize("env_id", envs.ENV_IDS)
def test_always_wait_ends_by_the_time_limit_with_waits_penalised(env_id):
    env = gym.make(env_id, num_requests=15).unwrapped
    _, steps = _episode(env, 0, _always_wait)
    info = steps[-1][1]
    assert info["time"] <= env.limit + 1e-9
    comps = info["episode_components"]
    assert comps["waiting"] < 0  # each held request-second costs
    assert comps["timeouts"] == -env.num_requests  # each was routed by the fallback after max_wait_s
    assert info["timeouts"] == env.num_requests and info["summary"]["completed"] == env.num_requests
    if env.reward_fn.weights["waiting"] > 0:
        assert info["episode_reward"] < 0


def test_always_wait_without_a_wait_bound_is_truncated_at_the_limit():
    env = gym.make("llmsim/Routing-v0", num_requests=6, max_wait_s=None, drain_time=2.0).unwrapped
    _, steps = _episode(env, 0, _always_wait)
    info = steps[-1][1]
    assert env.truncated and not env.terminated
    assert info["time"] == pytest.approx(env.limit)
    comps = info["episode_components"]
    assert comps["waiting"] < 0 and comps["cut_off"] == -6 and info["episode_reward"] < 0
    assert info["summary"]["dropped_by_reason"] == {"episode_truncated": 6}


def test_wait_timeout_can_drop_instead():
    reqs = [Request(i, 0.1 * i, 50, 10) for i in range(5)]
    env = _env(reqs, max_wait_s=0.5, wait_fallback="drop")
    _, steps = _episode(env, 0, _always_wait)
    info = steps[-1][1]
    assert info["episode_components"]["dropped"] == -5 and info["episode_components"]["timeouts"] == 0
    assert info["summary"]["dropped_by_reason"] == {"wait_timeout": 5}
    # the held time is charged up to the timeout (seen at the first retry tick after it, 0.02 s apart):
    # 5 requests x 0.5 s x 0.1 per request-second
    assert -0.26 <= info["episode_components"]["waiting"] <= -0.25


def test_engine_drop_reaches_the_reward():
    """A prompt longer than the only instance's max_model_len is dropped by the simulator (on_unservable=drop):
    the reward sees it exactly like the agent's own DROP."""
    small = [InstanceConfig("llama-2-7b", "a100-80gb", engine=EngineConfig(max_model_len=300))]
    reqs = [Request(0, 0.0, 50, 10), Request(1, 0.01, 500, 10), Request(2, 0.02, 60, 10)]
    env = _env(reqs, small, reward="latency")
    _, steps = _episode(env, 0, lambda e, rng: 0)
    info = steps[-1][1]
    assert info["summary"]["dropped_by_reason"] == {"prompt_exceeds_max_model_len": 1}
    assert info["episode_components"]["dropped"] == -1
    assert info["decisions"] == 2  # the unservable request never reached the agent


@pytest.mark.parametrize("late", [Request(1, 0.01, 500, 10), Request(1, 0.01, 50, 10, model="no-such-model")])
def test_an_unservable_request_with_on_unservable_error_names_the_envs_key(late):
    """The env's config has ``env.on_unservable``, not the simulator CLI's ``sim.on_unservable``: the hint says
    the key the env user can set."""
    small = [InstanceConfig("llama-2-7b", "a100-80gb", engine=EngineConfig(max_model_len=300))]
    env = _env([Request(0, 0.0, 50, 10), late], small, on_unservable="error")
    with pytest.raises(ConfigError, match=r"request 1 .*set env\.on_unservable=drop to count it") as e:
        _episode(env, 0, lambda e, rng: 0)
    assert "sim.on_unservable" not in str(e.value)


def test_routing_to_an_unfit_instance_costs_a_drop():
    """Sending a request where it can never run is no cheaper than dropping it (no reward hacking)."""
    insts = [InstanceConfig("llama-2-7b", "a100-80gb", engine=EngineConfig(max_model_len=300)),
             InstanceConfig("llama-2-7b", "a100-80gb")]
    reqs = [Request(0, 0.0, 500, 10)]
    for action, reason in ((0, "routed_to_unfit_instance:prompt_exceeds_max_model_len"), (3, "router")):
        env = _env(reqs, insts, action="instance_drop", reward="latency")
        _, steps = _episode(env, 0, lambda e, rng, a=action: a if e.pending is not None else e.wait_action)
        info = steps[-1][1]
        assert info["summary"]["dropped_by_reason"] == {reason: 1}
        assert info["episode_reward"] == -1.0


def test_output_truncated_at_max_model_len_reaches_the_reward():
    insts = [InstanceConfig("llama-2-7b", "a100-80gb", engine=EngineConfig(max_model_len=300))]
    env = _env([Request(0, 0.0, 250, 100)], insts, reward={"kind": "latency", "e2el_ms": 1e6})
    _, steps = _episode(env, 0, lambda e, rng: 0)
    comps = steps[-1][1]["episode_components"]
    assert comps["truncated"] == -1 and comps["slo_met"] == 1


def test_drop_is_wait_where_the_env_offers_no_drop():
    env = gym.make("llmsim/Routing-v0", **SMALL).unwrapped  # action="instance": neither wait nor drop offered
    env.reset(seed=0)
    assert env.decode(env.drop_action) == WAIT and env.decode(env.wait_action) == WAIT
    qos = gym.make("llmsim/QoSEdge-v0", **SMALL).unwrapped
    assert qos.decode(qos.drop_action) == DROP


@pytest.mark.parametrize("env_id", envs.ENV_IDS)
def test_action_layout_is_the_same_everywhere(env_id):
    env = gym.make(env_id, **SMALL).unwrapped
    k = env.num_instances if env.action_kind.startswith("instance") else len(env.models)
    assert env.action_space.n == k + 2 and env.wait_action == k and env.drop_action == k + 1
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    while env.pending is None:
        env.step(_random(env, rng))
    m = env.action_masks()
    assert m[env.wait_action] == env.offer_wait and m[env.drop_action] == env.offer_drop


@pytest.mark.parametrize("env_id", envs.ENV_IDS)
def test_typical_step_reward_is_of_order_one(env_id):
    env = gym.make(env_id, num_requests=150).unwrapped
    _, steps = _episode(env, 1, _random)
    r = np.abs([s[0] for s in steps])
    nonzero = r[r > 0]
    assert 0.02 < np.median(nonzero) < 10, np.median(nonzero)
    for _, info in steps:
        assert set(info["reward_components"]) == set(env.reward_fn.components)


def test_observations_honour_view_staleness():
    env = gym.make("llmsim/Routing-v0", num_requests=150, view_staleness=0.5,
                   workload={"kind": "mixture", "preset": "workload_router",
                             "arrival": {"kind": "poisson", "rate": 40.0}}).unwrapped
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    ages, lagging = [], 0
    while True:
        s, t = env.state(), env.true_state()
        ages.append(s.age)
        lagging += s.queue_lengths() != t.queue_lengths()
        *_, term, trunc, _ = env.step(_random(env, rng))
        if term or trunc:
            break
    assert max(ages) > 0 and max(ages) <= 0.5 + 1e-9 and lagging > 10
