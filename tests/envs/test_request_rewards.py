"""``info["request_rewards"]`` holds every request's own part of a step's reward, whatever the reward: what is left
of the step's reward is its step-level terms only (waiting), and every request that finished or was dropped is
credited (agents' ``reward_credit: request`` moves exactly these parts to the decision that placed each request)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import llmsim.envs  # noqa: F401  (registers the ids)

WORKLOAD = {"kind": "mixture", "preset": "workload_router", "arrival": {"kind": "poisson", "rate": 40.0}}
REWARDS = [
    {"kind": "latency"},
    {"kind": "latency", "ttft_ms": 500, "tpot_ms": 40},
    {"kind": "utility", "preset": "balance", "drop_penalty": 0.5},
]
STEP_TERMS = ("waiting",)  # terms of the step, not of one request's outcome


@pytest.mark.parametrize("reward", REWARDS, ids=lambda r: "-".join(map(str, r.values())))
def test_every_outcome_is_credited_to_its_request(reward):
    env = gym.make("llmsim/Routing-v0", num_requests=60, workload=WORKLOAD, reward=reward,
                   action="instance_wait_drop", time_limit=4.0).unwrapped
    rng = np.random.default_rng(0)
    _, info = env.reset(seed=1)
    credited: set[int] = set()
    while True:
        _, r, term, trunc, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
        c, w = info["reward_components"], env.reward_fn.weights
        rest = env.reward_fn.scale * sum(w.get(k, 0.0) * c[k] for k in STEP_TERMS)
        assert r == pytest.approx(sum(info["request_rewards"].values()) + rest, abs=1e-9)
        credited |= set(info["request_rewards"])
        if term or trunc:
            break
    s = info["summary"]
    assert s["completed"] > 10 and s["dropped"] > 0
    assert len(credited) == s["completed"] + s["dropped"] == 60
