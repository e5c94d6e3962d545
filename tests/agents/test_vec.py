"""The training vector env without stable-baselines3's per-step deepcopy gives exactly DummyVecEnv's steps."""

from __future__ import annotations

import functools

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

from llmsim.agents.env_setup import make_env  # noqa: E402
from llmsim.agents.vec import FreshInfoVecEnv  # noqa: E402

ENV = {"id": "workload_router", "num_requests": 12, "rate": 20.0, "reward": {"kind": "workload_aware", "guidance": 0.0}}


def _run(cls: type, steps: int = 300) -> list:
    vec = cls([functools.partial(make_env, ENV)])
    vec.seed(3)
    vec.reset()
    rng = np.random.default_rng(0)
    masks = vec.reset_infos[0]["action_mask"]
    out = []
    for _ in range(steps):
        obs, rew, done, infos = vec.step(np.array([rng.choice(np.flatnonzero(masks))]))
        masks = vec.reset_infos[0]["action_mask"] if done[0] else infos[0]["action_mask"]
        out.append((obs.copy(), rew.copy(), done.copy(), sorted(infos[0]), infos[0]["dt"],
                    infos[0]["action_mask"].copy(), infos[0]["TimeLimit.truncated"]))
    vec.close()
    return out


@pytest.mark.timeout(120)
def test_same_steps_as_dummy_vec_env_and_infos_are_not_shared() -> None:
    a, b = _run(FreshInfoVecEnv), _run(DummyVecEnv)
    assert any(s[2][0] for s in a), "no episode ended: the terminal path was not exercised"
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x[0], y[0])
        assert (x[1] == y[1]).all() and (x[2] == y[2]).all() and x[3:5] == y[3:5]
        np.testing.assert_array_equal(x[5], y[5])
        assert x[6] == y[6]
    vec = FreshInfoVecEnv([functools.partial(make_env, ENV)])
    vec.reset()
    first = vec.step(np.array([0]))[3]
    second = vec.step(np.array([0]))[3]
    assert first[0] is not second[0]  # each step's info dict is the env's own fresh dict, not a reused buffer
    obs = vec.step(np.array([0]))[0]
    kept = obs.copy()
    vec.step(np.array([0]))
    np.testing.assert_array_equal(obs, kept)  # observations are copies: the next step does not overwrite them
    assert not any(np.shares_memory(obs, buf) for buf in vec.buf_obs.values())
    vec.close()
