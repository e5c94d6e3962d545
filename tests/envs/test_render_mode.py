"""Gymnasium's ``render_mode`` keyword: None (what ``gym.make`` / ``make_vec`` may pass) builds every env, and
``render()`` returns None; a mode the envs do not have is one line naming it, a TypeError as for an unknown keyword, so
stable-baselines3's ``make_vec_env`` (which tries ``rgb_array`` first) falls back and builds the env."""

from __future__ import annotations

import gymnasium as gym
import pytest

from llmsim import envs
from llmsim.envs.routing_env import UnsupportedRenderMode
from llmsim.errors import ConfigError


@pytest.mark.parametrize("env_id", envs.ENV_IDS)
def test_render_mode_none_is_accepted_and_render_returns_none(env_id):
    env = gym.make(env_id, num_requests=5, render_mode=None)
    assert env.render_mode is None
    env.reset(seed=0)
    assert env.render() is None


@pytest.mark.parametrize("env_id", envs.ENV_IDS)
def test_an_unsupported_render_mode_is_one_line_naming_it(env_id):
    with pytest.warns(UserWarning, match="render_modes"), pytest.raises(UnsupportedRenderMode) as err:
        gym.make(env_id, num_requests=5, render_mode="rgb_array")
    msg = str(err.value)
    assert "\n" not in msg and "env.render_mode: 'rgb_array' is not supported" in msg
    assert isinstance(err.value, TypeError) and isinstance(err.value, ConfigError)


def test_make_vec_passes_render_mode_none():
    vec = gym.make_vec("llmsim/Routing-v0", num_envs=2, vectorization_mode="sync", num_requests=5, render_mode=None)
    try:
        assert vec.reset(seed=0)[0].shape == (2, 27)
    finally:
        vec.close()


def test_sb3_make_vec_env_builds_the_envs():
    env_util = pytest.importorskip("stable_baselines3.common.env_util")
    with pytest.warns(UserWarning, match="render_modes"):  # Gymnasium's note on the rgb_array try
        vec = env_util.make_vec_env("llmsim/Routing-v0", n_envs=2, env_kwargs={"num_requests": 5})
    try:
        assert vec.reset().shape == (2, 27)
    finally:
        vec.close()
