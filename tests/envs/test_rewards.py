"""Reward components on hand-computed tiny cases (the QoS-aware edge router's worked examples; the WorkloadRouter,
BestEffort and RouteBalance formulas)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import llmsim.envs  # noqa: F401  (registers the ids)
from llmsim.cluster import InstanceConfig
from llmsim.engine.config import EngineConfig
from llmsim.envs.rewards import action_impact, deadline_weight, latency_increase, mixing_penalty
from llmsim.envs.routing_env import RoutingEnv
from llmsim.envs.workloads import EnvWorkload
from llmsim.request import Request

K1, K2, L = 7.2e-5, 2.5e-5, 0.030


def test_eq15_worked_example_no_penalty():
    assert latency_increase(100, 200, 250, 50, K1, K2) == pytest.approx(0.0040388, abs=1e-7)
    pen, hats = action_impact(100, 200, [(250, 50, 0.020, 0.8)], K1, K2, L)
    assert hats[0] == pytest.approx(0.0240388, abs=1e-7)
    assert pen == 0.0
    # the released code's m - 1 upper limit
    assert latency_increase(100, 200, 250, 50, K1, K2, code_compat=True) == pytest.approx(0.0040088, abs=1e-7)


def test_eq15_worked_example_penalty():
    assert latency_increase(400, 300, 300, 20, K1, K2) == pytest.approx(0.0127077, abs=1e-7)
    pen, hats = action_impact(400, 300, [(300, 20, 0.022, 0.71), (250, 240, 0.010, 0.8)], K1, K2, L)
    assert hats[0] == pytest.approx(0.0347077, abs=1e-7)
    assert pen == pytest.approx(0.71)  # only the first request crosses L


def test_mixing_penalty_hand_computed():
    # resident 10_000 tokens, newcomer p=500, d=300: T_p = 3.2e-4 * 10_500 = 3.36 s < eps = 5 -> r_p = 1
    r, r_p, r_d = mixing_penalty(500, 300, 10_000)
    assert r_p == 1.0
    assert r_d == pytest.approx(-3.3e-5 * 10_800)
    assert r == pytest.approx(0.5 * 1.0 + 0.5 * r_d)
    # past eps: r_p = 1 - T_p / eps
    r, r_p, _ = mixing_penalty(0, 0, 25_000, eps=5.0)
    assert r_p == pytest.approx(1.0 - 8.0 / 5.0)


def test_deadline_weights():
    assert deadline_weight(0.4, 10, 0.04, soft=False) == 1.0
    assert deadline_weight(0.41, 10, 0.04, soft=False) == 0.0
    # soft, whole-request violation: 10 ms late on a 400 ms budget -> 1 - 0.01 * 10
    assert deadline_weight(0.41, 10, 0.04, soft=True) == pytest.approx(0.9)
    assert deadline_weight(0.45, 10, 0.04, soft=True) == 0.0  # 50 ms > 10 % of 400 ms
    # per-token reading: 1 ms/token late -> 0.99; 5 ms/token late is past the 4 ms band
    assert deadline_weight(0.41, 10, 0.04, soft=True, soft_violation="per_token") == pytest.approx(0.99)
    assert deadline_weight(0.45, 10, 0.04, soft=True, soft_violation="per_token") == 0.0


class _Fixed(EnvWorkload):
    def __init__(self, reqs):
        self.reqs = reqs
        self.task_names = sorted({r.task for r in reqs if r.task})

    def requests(self, seed, k):
        import copy

        return [copy.copy(r) for r in self.reqs[:k]]


def _tiny_env(reqs, reward, models=("llama-2-7b",), **kw) -> RoutingEnv:
    insts = [InstanceConfig(model=m, gpu="a100-80gb", engine=EngineConfig(max_num_seqs=8)) for m in models]
    return RoutingEnv(instances=insts, workload=_Fixed(reqs), num_requests=len(reqs), reward=reward, **kw)


def _run(env, actions):
    """Step ``actions`` for the decisions, then the no-op through the drain; (reward, info) per step."""
    env.reset(seed=0)
    out = []
    todo = list(actions)
    while True:
        a = todo.pop(0) if env.pending is not None and todo else int(np.flatnonzero(env.action_masks())[0])
        _, r, term, trunc, info = env.step(a)
        out.append((r, info))
        if term or trunc:
            return out


def _total(steps, key=None):
    """The episode's reward (or one component's sum)."""
    return sum(r if key is None else info["reward_components"][key] for r, info in steps)


def test_qos_reward_single_request_and_drop():
    reqs = [Request(0, 0.0, 50, 20, quality_by_model={"llama-2-7b": 0.7}),
            Request(1, 0.001, 50, 20, quality_by_model={"llama-2-7b": 0.9})]
    env = _tiny_env(reqs, {"kind": "qos", "latency_limit": 0.5}, action="instance_drop")
    steps = _run(env, [0, 2])  # route the first, drop the second (index N + 1 = 2)
    (r0, _), (r1, info) = steps
    # nothing completes between the two arrivals (1 ms apart); the drop is charged in the step it is made,
    # which runs until the first request completes (the last outcome: the episode ends there)
    assert r0 == 0.0
    assert info["reward_components"]["dropped"] == -1.0
    assert info["reward_components"]["qos_completed"] == pytest.approx(0.7)
    assert r1 == pytest.approx(0.7 - 1.0)
    assert info["summary"]["dropped"] == 1 and info["summary"]["completed"] == 1
    # an impossible limit: the completion earns nothing and is counted late
    env = _tiny_env(reqs[:1], {"kind": "qos", "latency_limit": 1e-6}, action="instance_drop")
    steps = _run(env, [0])
    assert _total(steps) == 0.0 and _total(steps, "completed_late") == 1.0


def test_qos_penalty_uses_running_requests_of_chosen_expert():
    reqs = [Request(0, 0.0, 100, 250, quality_by_model={"llama-2-7b": 0.6}),
            Request(1, 1.0, 400, 300, quality_by_model={"llama-2-7b": 0.8})]
    env = _tiny_env(reqs, {"kind": "qos", "latency_limit": 0.0001}, action="instance_drop")
    env.reset(seed=0)
    env.step(0)
    # at t = 1 s the first request is decoding on instance 0; with a tiny L it is already "late"
    assert env.true_state().instances[0].num_running == 1
    _, r, *_ , info = env.step(0)
    assert info["reward_components"]["qos_penalty"] == pytest.approx(-0.6)


def test_best_effort_reward_uses_accuracy_table():
    models = ("opt-125m", "opt-1.3b")
    reqs = [Request(0, 0.0, 20, 5, task="copa", outputs_by_model={m: 5 for m in models},
                    quality_by_model={"opt-125m": 0.8, "opt-1.3b": 0.95})]
    env = _tiny_env(reqs, {"kind": "best_effort", "deadline": 10.0}, models=models, action="model",
                    observation="model")
    assert _total(_run(env, [1])) == pytest.approx(0.95)
    env = _tiny_env(reqs, {"kind": "best_effort", "deadline": 1e-6}, models=models, action="model",
                    observation="model")
    steps = _run(env, [0])
    assert _total(steps) == 0.0 and _total(steps, "accuracy") == pytest.approx(0.8)


def test_utility_reward_terms():
    models = ("opt-125m", "opt-1.3b")
    reqs = [Request(0, 0.0, 100, 50, outputs_by_model={"opt-125m": 50, "opt-1.3b": 100},
                    quality_by_model={"opt-125m": 0.4, "opt-1.3b": 0.8})]
    env = _tiny_env(reqs, {"kind": "utility", "preset": "balance", "latency_ref": 1e9,
                           "prices": {"opt-125m": 1.0, "opt-1.3b": 2.0}}, models=models)
    steps = _run(env, [0])
    r = _total(steps)
    c = {k: _total(steps, k) for k in steps[0][1]["reward_components"]}
    # cost on opt-125m: 150 tokens * 1 = 150; max over models: 200 * 2 = 400
    assert c["cost"] == pytest.approx(1 - 150 / 400)
    assert c["quality"] == pytest.approx(0.4)
    assert c["latency"] == pytest.approx(1.0, abs=1e-6)
    assert r == pytest.approx((0.4 + (1 - 150 / 400) + c["latency"]) / 3)


def test_latency_reward_slo():
    reqs = [Request(0, 0.0, 50, 20)]
    env = _tiny_env(reqs, {"kind": "latency", "ttft_ms": 1e6, "e2el_ms": 1e6})
    steps = _run(env, [0])
    assert _total(steps) == 1.0 and _total(steps, "slo_met") == 1.0
    env = _tiny_env(reqs, {"kind": "latency", "e2el_ms": 1e-3})
    assert _total(_run(env, [0])) == 0.0


def test_workload_aware_components_reported_separately():
    env = gym.make("llmsim/WorkloadRouter-v0", num_requests=40).unwrapped
    env.reset(seed=0)
    names = set(env.reward_fn.components)
    total_c = dict.fromkeys(names, 0.0)
    rng = np.random.default_rng(0)
    tot = 0.0
    while True:
        a = int(rng.choice(np.flatnonzero(env.action_masks())))
        _, r, term, trunc, info = env.step(a)
        comps = info["reward_components"]
        assert set(comps) == names
        w = env.reward_fn.weights
        assert r == pytest.approx(env.reward_fn.scale * sum(w.get(k, 0.0) * v for k, v in comps.items()))
        for k, v in comps.items():
            total_c[k] += v
        tot += r
        if term or trunc:
            break
    assert total_c["completion"] == pytest.approx(60.0 * 40)
    assert total_c["unfinished"] < 0 and total_c["heuristic"] <= 0
    assert info["episode_components"] == pytest.approx(total_c)
    assert info["episode_reward"] == pytest.approx(tot)


def test_workload_aware_heuristic_zero_on_least_impact_instance():
    reqs = [Request(0, 0.0, 500, 400), Request(1, 0.01, 100, 50)]
    env = _tiny_env(reqs, {"kind": "workload_aware"}, models=("llama-2-7b", "llama-2-7b"))
    env.reset(seed=0)
    env.step(0)  # first request on instance 0
    _, _, _, _, info = env.step(1)  # the empty instance has the least mixing impact
    assert info["reward_components"]["heuristic"] == 0.0
    env.reset(seed=0)
    env.step(0)
    _, _, _, _, info = env.step(0)  # joining the busy instance costs h < 0
    assert info["reward_components"]["heuristic"] < 0.0
