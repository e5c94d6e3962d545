"""A bad noisy-predictor option is one line naming ``predictor.<key>`` at construction: a NaN noise scale made NaN
predictions (observations outside their space), a zero bucket range divided by zero at the first arrival."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import llmsim.envs  # noqa: F401  (registers the ids)
from llmsim.errors import ConfigError

BAD = [
    ({"q_sd": float("nan")}, "predictor.q_sd: expected a number >= 0, got nan"),
    ({"len_sigma": -1}, "predictor.len_sigma: expected a number >= 0, got -1"),
    ({"len_max": 0, "len_buckets": 3}, "predictor.len_max: expected a positive number, got 0"),
    ({"len_buckets": -2}, r"predictor.len_buckets: expected an integer >= 0 \(0: no buckets\), got -2"),
    ({"q_buckets": 1.5}, r"predictor.q_buckets: expected an integer >= 0 \(0: no buckets\), got 1.5"),
]


@pytest.mark.parametrize(("options", "message"), BAD, ids=[next(iter(o)) for o, _ in BAD])
def test_a_bad_option_is_one_line_naming_it(options, message):
    with pytest.raises(ConfigError, match=message):
        gym.make("llmsim/Routing-v0", num_requests=5, predictor={"kind": "noisy", **options})


def test_good_options_give_finite_observations_in_the_space():
    env = gym.make("llmsim/Routing-v0", num_requests=5, observation="graph",
                   predictor={"kind": "noisy", "q_sd": 0.0, "len_buckets": 0, "q_buckets": 4}).unwrapped
    obs, _ = env.reset(seed=0)
    for _ in range(3):
        obs, *_ = env.step(0)
        assert env.observation_space.contains(obs)
        assert all(np.isfinite(v).all() for v in obs.values())
