"""The envs' trajectories, pinned: a fixed-seed rollout under a random mask-respecting policy hashes its observations,
rewards, episode ends and infos to the values recorded before the per-step speed work (the arrival env, the tick
env with the workload-aware reward, and a noisy predictor's tick env). A shortcut that changes a bit fails here.
Re-recorded when ``info["decided"]`` became absent on steps that place no request (it was None, which vector envs
cannot stack), when the latency reward credited its completions in ``info["request_rewards"]``, and when the
episode summary gained ``std_itl_ms`` (as ``vllm bench serve`` saves it), and when the arrival env's
``info["central_queue"]`` came to count the request being offered (as the observation does), and when the episode
summary's ITL median, std, p90 and p99 came to read a sub-second gap as its own histogram bin's centre (they read one
bin, 0.01 %, high), each time after checking that the rollouts' observations, rewards, ends and other info keys were
unchanged (the digests without the new or changed key equal the old ones). The noisy predictor's digest was
re-recorded once more when a machine with AVX2 only (no AVX-512) gave another one with no code changed: its noise
factors, like the envs' and workloads' log-normal draws, now go through llmsim.portable (the C library's scalar exp,
not numpy's kernels chosen by vector width)."""

from __future__ import annotations

import hashlib

import gymnasium as gym
import numpy as np
import pytest

import llmsim.envs  # noqa: F401  (registers the ids)

RECORDED = [
    ("llmsim/Routing-v0", {}, "928ebb0f59955d3c1180f3818d357b6346479ad63c835a30d0ac2d2ecad7ecd6"),
    ("llmsim/WorkloadRouter-v0", {"num_requests": 300},
     "0f8c5d152cb5c5f6cc88f5a8bb717f8d0acebe6b8007d214be43fa4832877a60"),
    ("llmsim/Routing-v0", {"decision": "tick", "action": "instance_wait", "reward": "workload_aware",
                           "predictor": "noisy", "num_requests": 200},
     "8bbee4504584ecfe7f77c43538905a6f9b7d53c975a036ff2fff36edeb120f64"),
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
