"""Env API: checkers, seeded determinism, masks, vectorisation, and parity with the CLI summary."""

from __future__ import annotations

import math
import warnings

import gymnasium as gym
import numpy as np
import pytest

from llmsim import envs
from llmsim.envs.routing_env import RoutingEnv
from llmsim.routing import Router
from llmsim.schema import SLO
from llmsim.simulation.run import simulate

SMALL = {"num_requests": 30}


def _random_episode(env, seed: int, max_steps: int = 100_000):
    obs, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    traj = []
    for _ in range(max_steps):
        m = env.unwrapped.action_masks()
        a = int(rng.choice(np.flatnonzero(m)))
        obs, r, term, trunc, info = env.step(a)
        traj.append((a, r, obs))
        if term or trunc:
            return traj, info
    raise AssertionError("episode did not end")


@pytest.mark.parametrize("env_id", envs.ENV_IDS)
def test_gymnasium_check_env(env_id):
    from gymnasium.utils.env_checker import check_env

    env = gym.make(env_id, **SMALL).unwrapped
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env, skip_render_check=True)


@pytest.mark.parametrize("env_id", envs.ENV_IDS)
def test_sb3_check_env(env_id):
    from stable_baselines3.common.env_checker import check_env

    env = gym.make(env_id, **SMALL).unwrapped
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env, warn=False)


def _assert_same_summary(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for k in a:
        if isinstance(a[k], float) and math.isnan(a[k]):
            assert math.isnan(b[k]), k
        else:
            assert a[k] == b[k], k


def _same_obs(a, b) -> bool:
    if isinstance(a, dict):
        return all(np.array_equal(a[k], b[k]) for k in a)
    return np.array_equal(a, b)


@pytest.mark.parametrize("env_id", envs.ENV_IDS)
def test_seeded_determinism(env_id):
    t1, i1 = _random_episode(gym.make(env_id, **SMALL), seed=7)
    t2, i2 = _random_episode(gym.make(env_id, **SMALL), seed=7)
    assert len(t1) == len(t2)
    for (a1, r1, o1), (a2, r2, o2) in zip(t1, t2):
        assert a1 == a2 and r1 == r2 and _same_obs(o1, o2)
    _assert_same_summary(i1["summary"], i2["summary"])


def test_reset_draws_new_workload_and_pinning():
    env = gym.make("llmsim/Routing-v0", **SMALL).unwrapped
    env.reset(seed=1)
    a = [(r.arrival, r.prompt_tokens) for r in env.episode_requests]
    env.reset()
    b = [(r.arrival, r.prompt_tokens) for r in env.episode_requests]
    assert a != b
    env.reset(options={"workload_seed": 5})
    c = [(r.arrival, r.prompt_tokens) for r in env.episode_requests]
    env.reset(seed=99, options={"workload_seed": 5})
    assert c == [(r.arrival, r.prompt_tokens) for r in env.episode_requests]
    pinned = gym.make("llmsim/Routing-v0", fixed_workload_seed=3, **SMALL).unwrapped
    pinned.reset(seed=1)
    d = [r.arrival for r in pinned.episode_requests]
    pinned.reset(seed=2)
    assert d == [r.arrival for r in pinned.episode_requests]


def test_masks():
    env = gym.make("llmsim/QoSEdge-v0", num_requests=200, rate=200.0).unwrapped
    env.reset(seed=0)
    n = env.num_instances
    saw_full = False
    for _ in range(200):
        m = env.action_masks()
        assert m.dtype == np.bool_ and m.shape == (n + 2,)  # instances, wait, drop
        if env.pending is None:
            break  # the drain
        assert m[n + 1] and not m[n]  # QoSEdge offers drop, not wait
        full = [i.num_waiting >= 10 for i in env.state().instances]
        assert list(m[:n]) == [not f for f in full]
        saw_full |= any(full)
        a = int(np.flatnonzero(m)[0])  # always the first valid expert: fills it up
        *_, term, trunc, _ = env.step(a)
        if term or trunc:
            break
    assert saw_full
    # tick mode: with an empty central queue only "wait" is valid
    tick = gym.make("llmsim/WorkloadRouter-v0", num_requests=20, tick_when_empty=True).unwrapped
    tick.reset(seed=0)
    assert tick.pending is None  # the first request arrives after the first tick
    assert list(tick.action_masks()) == [False] * 4 + [True, False]  # wait (index 4); drop is not offered
    for _ in range(1000):  # wait until a request is at the head of the queue: then every instance is valid
        tick.step(4)
        if tick.pending is not None:
            break
    assert tick.pending is not None
    assert list(tick.action_masks()) == [True] * 5 + [False]


def test_model_action_routes_to_least_loaded_replica():
    env = gym.make("llmsim/BestEffort-v0", num_requests=50, schedule="stable", rate=40.0).unwrapped
    env.reset(seed=0)
    for _ in range(30):
        req = env.pending
        loads = [i.num_requests for i in env.state().instances]
        reps = env.replicas[2]
        want = min(reps, key=lambda k: (loads[k], k))
        assert env.decode(2) == want
        env.step(2)
        assert req.instance == want


@pytest.mark.slow
def test_subproc_vec_env():
    from stable_baselines3.common.vec_env import SubprocVecEnv

    def make(i):
        return lambda: gym.make("llmsim.envs:llmsim/Routing-v0", num_requests=20)  # imports envs in the worker

    vec = SubprocVecEnv([make(0), make(1)])
    try:
        vec.seed(0)
        obs = vec.reset()
        assert obs.shape == (2, vec.observation_space.shape[0])
        masks = np.stack(vec.env_method("action_masks"))
        assert masks.shape == (2, 6)  # 4 instances, wait, drop
        for _ in range(50):
            obs, rew, done, infos = vec.step(np.array([0, 1]))
            assert "reward_components" in infos[0]
    finally:
        vec.close()


class _Replay(Router):
    name = "replay"

    def __init__(self, decisions: dict[int, int]) -> None:
        super().__init__(0)
        self.decisions = decisions

    def route(self, req, view):
        return self.decisions[req.id]


@pytest.mark.parametrize("env_id,kw", [("llmsim/Routing-v0", {}), ("llmsim/QoSEdge-v0", {}),
                                       ("llmsim/BestEffort-v0", {"schedule": "stable", "rate": 30.0})])
def test_episode_summary_equals_cli_summary(env_id, kw):
    slo = SLO(ttft_ms=500.0, tpot_ms=50.0)
    env = gym.make(env_id, num_requests=300, slo=slo, **kw).unwrapped
    env.reset(seed=3)
    reqs = env.workload.requests(env.workload_seed, env.num_requests)
    rng = np.random.default_rng(0)
    decisions = {}
    while True:
        req = env.pending
        a = int(rng.choice(np.flatnonzero(env.action_masks())))
        if req is not None:  # (drain steps decide nothing)
            decisions[req.id] = env.decode(a)
        *_, term, trunc, info = env.step(a)
        if term or trunc:
            break
    assert term and not trunc
    res = simulate(env.instance_configs, reqs, policy=_Replay(decisions), slo=slo, on_unservable="drop")
    _assert_same_summary(info["summary"], res.summary)


def test_truncation_by_time_limit():
    env = gym.make("llmsim/Routing-v0", num_requests=500, time_limit=5.0).unwrapped
    _, info = _random_episode(env, seed=0)
    assert info["time"] == pytest.approx(5.0)
    assert env.truncated and not env.terminated
    assert info["summary"]["completed"] + info["summary"]["dropped"] == 500


def test_routing_from_config_dict():
    from llmsim.envs.testbeds import make_from_config

    env = make_from_config({
        "id": "routing", "num_requests": 20, "decision": "arrival", "action": "instance_wait",
        "instances": [{"model": "llama-2-7b", "gpu": "a100-80gb", "count": 2},
                      {"model": "mistral-7b", "gpu": "a100-80gb"}],
        "workload": {"kind": "mixture", "preset": "qos_edge",
                     "preset_kwargs": {"experts": ["llama-2-7b", "mistral-7b"]},
                     "arrival": {"kind": "poisson", "rate": 5.0}},
        "observation": {"kind": "graph"}, "reward": {"kind": "utility", "preset": "quality"},
    })
    assert isinstance(env, RoutingEnv)
    assert env.action_space.n == 5  # 3 instances, wait, drop
    _, info = _random_episode(env, seed=0)
    assert info["summary"]["completed"] == 20


def test_tick_episode_summary_equals_core_replay():
    """Tick mode: replaying the agent's (time, request, instance) decisions on a plain Cluster at the same
    instants (phase ROUTE) gives the summary the env reports."""
    from llmsim.cluster import Cluster
    from llmsim.event_loop import ROUTE
    from llmsim.routing import WAIT
    from llmsim.simulation.run import collect

    slo = SLO(ttft_ms=500.0, tpot_ms=50.0)
    env = gym.make("llmsim/WorkloadRouter-v0", num_requests=200, slo=slo, max_wait_s=None).unwrapped
    env.reset(seed=5)
    reqs = env.workload.requests(env.workload_seed, env.num_requests)
    rng = np.random.default_rng(1)
    decisions = []
    while True:
        req = env.pending
        a = int(rng.choice(np.flatnonzero(env.action_masks())))
        d = env.decode(a)
        if req is not None and d >= 0:
            decisions.append((env.cluster.env.now, req.id, d))
        *_, term, trunc, info = env.step(a)
        if term or trunc:
            break
    assert term and not trunc and decisions

    class AlwaysWait(Router):
        name = "always_wait"

        def route(self, req, view):
            return WAIT

    cluster = Cluster(env.instance_configs, AlwaysWait(), on_unservable="drop")
    cluster.start(reqs)

    def apply(rid, inst):
        req = next(r for r in cluster.central if r.id == rid)
        cluster.central.remove(req)
        cluster.apply_decision(req, inst, ROUTE)

    for t, rid, inst in decisions:
        cluster.env.call_at(t, ROUTE, apply, rid, inst)
    cluster.env.run()
    cluster.finish()
    _assert_same_summary(info["summary"], collect(cluster, slo).summary)
