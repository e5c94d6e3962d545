"""QoSEdge with the paper's own step-time fit: the 30 ms/token limit binds under quality-greedy routing."""

import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401
from envs.paper_timing import qos_edge_paper_profile


def test_paper_profile_is_the_linear_fit():
    p = qos_edge_paper_profile("alpaca-native")
    # 200-token prefill: 200 * 7.2e-5; a decode step over 1,200 context tokens: 1200 * 2.5e-5 = 30 ms
    assert p.step_time(200, 1, 200 * 200, 0, 0, 0) == pytest.approx(0.0144)
    assert p.step_time(4, 4, 0, 0, 4, 1200) == pytest.approx(0.030)
    assert p.kv_capacity_tokens(0.9) > 10_000


def _per_token_latency(timing, greedy):
    env = gym.make("llmsim/QoSEdge-v0", num_requests=400, rate=5.0, timing=timing)
    env.reset(seed=0)
    done = False
    while not done:
        m = env.unwrapped.action_masks()
        if greedy:
            a = next(k for k in range(len(m)) if m[k])
        else:
            q = [len(i.waiting) + len(i.running) for i in env.unwrapped.cluster.instances]
            a = min((k for k in range(len(m) - 1) if m[k]), key=lambda k: q[k])
        _, _, term, trunc, _ = env.step(a)
        done = term or trunc
    df = env.unwrapped.cluster.recorder.requests_frame()
    return ((df.finish - df.arrival) / df.output_tokens).to_numpy()


def test_limit_binds_for_greedy_routing_only_under_paper_timing():
    greedy = _per_token_latency("paper", greedy=True)
    balanced = _per_token_latency("paper", greedy=False)
    assert np.mean(greedy <= 0.03) < 0.5
    assert np.mean(balanced <= 0.03) > 0.95
