"""The envs' trajectories, pinned: a fixed-seed rollout under a random mask-respecting policy hashes its observations,
rewards, episode ends and infos to the values recorded before the per-step speed work (the arrival env, the tick
env with the workload-aware reward, and a noisy predictor's tick env). A shortcut that changes a bit fails here.
Re-recorded when ``info["decided"]`` became absent on steps that place no request (it was None, which vector envs
cannot stack), and when the latency reward credited its completions in ``info["request_rewards"]``, each time after
checking that the rollouts' observations, rewards, ends and other info keys were unchanged."""

from __future__ import annotations

import hashlib

import gymnasium as gym
import numpy as np
import pytest

import llmsim.envs  # noqa: F401  (registers the ids)

RECORDED = [
    ("llmsim/Routing-v0", {}, "6748d9e1fa4c2589e7a01b3695b365399945c3327412e6876b3ee7b603800d58"),
    ("llmsim/WorkloadRouter-v0", {"num_requests": 300},
     "fd157695da31863c9fe74b0dccbe63ae546fb661c65eb0517e22833747380aae"),
    ("llmsim/Routing-v0", {"decision": "tick", "action": "instance_wait", "reward": "workload_aware",
                           "predictor": "noisy", "num_requests": 200},
     "d3f22b0216fcc5ae38e1ca3a2e1ecfc1d0730cd831fe4e0f27183d1660c42758"),
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
