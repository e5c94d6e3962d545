"""The envs' trajectories, pinned: a fixed-seed rollout under a random mask-respecting policy hashes its observations,
rewards, episode ends and infos to the values recorded before the per-step speed work (the arrival env, the tick
env with the workload-aware reward, and a noisy predictor's tick env). A shortcut that changes a bit fails here."""

from __future__ import annotations

import hashlib

import gymnasium as gym
import numpy as np
import pytest

import llmsim.envs  # noqa: F401  (registers the ids)

RECORDED = [
    ("llmsim/Routing-v0", {}, "030b88482a245fd7c95da8efb1b8de8d0a429e9e112f8868eb12e7e7338feb74"),
    ("llmsim/WorkloadRouter-v0", {"num_requests": 300},
     "919f591af1f0dd8eab706cf32aa78c5eedd0a0155bbc02e853e01f6ec95c1161"),
    ("llmsim/Routing-v0", {"decision": "tick", "action": "instance_wait", "reward": "workload_aware",
                           "predictor": "noisy", "num_requests": 200},
     "8f7ddd962b9c7251657c9efdde83d3cb595ba6e133f3b39847931006c430aa6a"),
]


@pytest.mark.parametrize(("env_id", "options", "digest"), RECORDED)
def test_a_seeded_rollout_is_the_recorded_one(env_id: str, options: dict, digest: str) -> None:
    env = gym.make(env_id, **options).unwrapped
    rng, h = np.random.default_rng(3), hashlib.sha256()
    obs, info = env.reset(seed=3)
    for _ in range(700):
        valid = np.flatnonzero(env.action_masks())
        obs, r, term, trunc, info = env.step(int(valid[rng.integers(len(valid))]))
        h.update(obs.tobytes() + float(r).hex().encode() + repr((term, trunc, info)).encode())
        if term or trunc:
            obs, info = env.reset()
    assert h.hexdigest() == digest
