"""BestEffort's calibration: static OPT-6.7B serving is near peak up to ~2 req/s and declines beyond
(spec 002 section 4.3.1)."""

import gymnasium as gym
import numpy as np

import envs  # noqa: F401


def _deadline_met(rate: float, **kw) -> float:
    env = gym.make("llmsim/BestEffort-v0", num_requests=500, rate=rate, **kw).unwrapped
    env.reset(seed=0)
    big = env.models.index("opt-6.7b")
    done = False
    while not done:
        *_, term, trunc, _ = env.step(big)
        done = term or trunc
    df = env.cluster.recorder.requests_frame()
    return float(np.mean((df.finish - df.arrival) / df.output_tokens <= 0.04))


def test_static_large_model_saturates_near_two_requests_per_second():
    low, mid, high = _deadline_met(1.0), _deadline_met(2.0), _deadline_met(4.0)
    assert low > 0.95 and mid > 0.9
    assert high < mid - 0.1
    assert _deadline_met(4.0, step_time_scale=1.0) > 0.95  # uncalibrated, the same load is easy
