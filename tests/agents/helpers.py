"""Shared builders of the agents' tests (tests/helpers.py: no test module imports another)."""

from __future__ import annotations

from typing import Any

import numpy as np

from llmsim.envs.testbeds import make_from_config


def episode_observations(env_cfg: dict[str, Any], n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` observations and action masks of episodes of ``env_cfg`` driven by the actions 1, 2, 0, 1, ... (the
    first three model sizes in turn on the best-effort testbed), a new seed at each episode end."""
    env = make_from_config(env_cfg)
    obs, info = env.reset(seed=0)
    xs, ms = [], []
    while len(xs) < n:
        xs.append(obs)
        ms.append(info["action_mask"])
        obs, _, term, trunc, info = env.step(len(xs) % 3)
        if term or trunc:
            obs, info = env.reset(seed=len(xs))
    return np.array(xs, np.float32), np.array(ms)
