"""``info["central_queue"]`` counts what the observation counts: every request waiting for the router's decision,
the one the next step decides included, in arrival mode (where it is being offered) as in tick mode (where it heads
the held queue)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import llmsim.envs  # noqa: F401  (registers the ids)


@pytest.mark.parametrize("options", [{}, {"decision": "tick", "action": "instance_wait"}])
def test_info_central_queue_is_the_observed_one(options: dict) -> None:
    env = gym.make("llmsim/Routing-v0", num_requests=40, **options).unwrapped
    obs, info = env.reset(seed=1)
    seen = 0
    for _ in range(80):
        if env.pending is not None:
            assert info["central_queue"] == env.state().central_queue >= 1
            assert info["central_queue"] == round(obs[0] * env.obs_builder.queue_cap)  # the flat feature 0
            seen += 1
        obs, _, term, trunc, info = env.step(int(np.flatnonzero(env.action_masks())[-1]))
        if term or trunc:
            break
    assert seen >= 30
