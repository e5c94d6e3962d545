"""An episode can end inside reset() (a time limit before the first decision, or every request unservable): step()
then says why in one line, instead of asking for the reset() that would end the same way."""

from __future__ import annotations

import gymnasium as gym
import pytest

import llmsim.envs  # noqa: F401  (registers the ids)

LONG_PROMPTS = {"kind": "synthetic", "arrival": {"process": "poisson", "rate": 20.0}, "num_requests": 3,
                "prompt": {"dist": "fixed", "value": 9000}, "output": {"dist": "fixed", "value": 10}}


def test_a_time_limit_before_the_first_decision_is_named():
    env = gym.make("llmsim/Routing-v0", num_requests=3, time_limit=0.0).unwrapped
    _, info = env.reset(seed=0)
    assert info["summary"]["dropped_by_reason"] == {"episode_truncated": 3}
    with pytest.raises(RuntimeError, match=r"ended at reset: its time limit \(0 s of simulated time\) comes before "
                                           r"the first decision; raise env.time_limit$"):
        env.step(0)


def test_every_request_dropped_before_the_first_decision_is_named():
    env = gym.make("llmsim/Routing-v0", num_requests=3, workload=LONG_PROMPTS,
                   instances=[{"model": "llama-2-7b", "gpu": "a100-80gb"}]).unwrapped
    _, info = env.reset(seed=0)
    assert info["summary"]["dropped_by_reason"] == {"prompt_exceeds_max_model_len": 3}
    with pytest.raises(RuntimeError, match="ended at reset: every request was dropped before the first decision"):
        env.step(0)


def test_after_a_stepped_episode_the_message_asks_for_reset():
    env = gym.make("llmsim/Routing-v0", num_requests=2).unwrapped
    env.reset(seed=0)
    while not (env.terminated or env.truncated):
        env.step(0)
    with pytest.raises(RuntimeError, match=r"after the episode ended; call reset\(\)$"):
        env.step(0)
