"""Gymnasium's own vector envs over every id: two envs whose steps differ (one places a request while the other waits
or drains) stack their infos without error, and autoreset starts the next episode."""

from __future__ import annotations

from functools import partial

import gymnasium as gym
import numpy as np
import pytest

from llmsim import envs


def make(env_id: str, num_requests: int = 12) -> gym.Env:
    return gym.make("llmsim.envs:" + env_id, num_requests=num_requests)  # the worker imports llmsim.envs itself


def masked_actions(vec: gym.vector.VectorEnv, rng: np.random.Generator) -> np.ndarray:
    return np.array([int(rng.choice(np.flatnonzero(m))) for m in vec.call("action_masks")])


def run_until_both_ended(vec: gym.vector.VectorEnv, max_steps: int = 5000) -> dict:
    """Step with random valid actions until each env has ended an episode; the infos of every step."""
    rng = np.random.default_rng(0)
    vec.reset(seed=[1, 2])
    ended = np.zeros(2, dtype=bool)
    seen: dict = {"decided_masks": set(), "summaries": 0}
    for _ in range(max_steps):
        obs, _, term, trunc, info = vec.step(masked_actions(vec, rng))
        assert vec.observation_space.contains(obs)
        if "_decided" in info:
            seen["decided_masks"].add(tuple(bool(x) for x in info["_decided"]))
        seen["summaries"] += int(np.sum(info.get("_summary", np.zeros(2, bool))))
        ended |= term | trunc
        if ended.all():
            return seen
    raise AssertionError("the episodes did not end")


@pytest.mark.parametrize("env_id", envs.ENV_IDS)
def test_sync_vector_env_steps_through_whole_episodes(env_id):
    # episodes of different lengths: one env drains (no request to place) while the other still places
    vec = gym.vector.SyncVectorEnv([partial(make, env_id, n) for n in (6, 12)])
    try:
        seen = run_until_both_ended(vec)
    finally:
        vec.close()
    assert {(True, False), (False, True)} & seen["decided_masks"]
    assert seen["summaries"] >= 2


def test_async_vector_env_steps_through_whole_episodes():
    vec = gym.vector.AsyncVectorEnv([partial(make, "llmsim/Routing-v0", n) for n in (6, 12)])
    try:
        seen = run_until_both_ended(vec)
    finally:
        vec.close()
    assert seen["summaries"] >= 2


def test_decided_is_absent_when_no_request_was_placed():
    env = make("llmsim/Routing-v0").unwrapped
    _, info = env.reset(seed=0)
    assert "decided" not in info
    placed = []
    while True:
        pending = env.pending
        _, _, term, trunc, info = env.step(int(np.flatnonzero(env.action_masks())[0]))
        assert ("decided" in info) == (pending is not None)
        if pending is not None:
            placed.append(info["decided"])
            assert info["decided"] == pending.id
        if term or trunc:
            break
    assert sorted(placed) == [r.id for r in env.episode_requests]
