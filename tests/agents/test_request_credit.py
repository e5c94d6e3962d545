"""``reward_credit: request``: each request's own reward (its utility at completion, its drop) reaches the replay
transition that placed it, whatever step it finished in; nothing is lost or counted twice."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

from llmsim.agents.base import LoopState  # noqa: E402
from llmsim.agents.buffer import ReplayBuffer  # noqa: E402
from llmsim.agents.ddqn import DDQNConfig, DoubleDQN  # noqa: E402
from llmsim.agents.loop import learn  # noqa: E402
from llmsim.agents.train import make_vec  # noqa: E402
from llmsim.envs.testbeds import make_from_config  # noqa: E402

ENV = {"id": "best_effort", "num_requests": 60, "num_gpus": 2, "schedule": "stable", "rate": 12.0}


def collect(credit: str, steps: int) -> tuple[ReplayBuffer, list[dict[str, Any]], float]:
    """One env, random valid sizes (epsilon 1, no gradient step): the replay and each step's info."""
    vec = make_vec(ENV, 1)
    infos: list[dict[str, Any]] = []
    agent = DoubleDQN(int(vec.observation_space.shape[0]), int(vec.action_space.n),
                      DDQNConfig(reward_credit=credit, eps_start=1.0, eps_end=1.0, learning_starts=10**9), seed=0)
    rb = ReplayBuffer(10_000, 1, agent.replay_dim, int(vec.action_space.n), seed=0)
    step = vec.step

    def watched_step(actions: np.ndarray) -> Any:
        out = step(actions)
        infos.append(out[3][0])
        return out

    vec.step = watched_step  # type: ignore[method-assign]
    st = LoopState()
    learn(agent, vec, rb, steps, st, seed=5)
    vec.close()
    return rb, infos, sum(st.returns)


def test_each_request_reward_lands_on_the_transition_that_placed_it():
    env = make_from_config(ENV)
    rb, infos, _ = collect("request", 400)  # several episodes
    n = len(infos)
    rewards = rb.rewards[:n, 0].astype(np.float64)
    step_rewards = np.array([sum(i["reward_components"].get(k, 0.0) * w
                                 for k, w in env.reward_fn.weights.items()) * env.reward_fn.scale for i in infos])
    assert rewards.sum() == pytest.approx(step_rewards.sum(), abs=1e-3)  # nothing lost, nothing counted twice
    owed, placed, placements = np.zeros(n), {}, []
    for t, info in enumerate(infos):
        if info.get("decided") is not None:
            placed[info["decided"]] = t
            placements.append(t)
        for rid, r in info["request_rewards"].items():
            owed[placed.pop(rid)] += r  # every credited request was placed by a transition of this episode
        if "terminal_observation" in info:
            placed = {}  # request ids start again in the next episode
    rest = step_rewards - np.array([sum(i["request_rewards"].values()) for i in infos])
    assert np.allclose(rewards, owed + rest, atol=1e-5)
    moved = [t for t, info in enumerate(infos) if info["request_rewards"] and set(info["request_rewards"]) - {
        info.get("decided")}]
    assert moved, "some request finished in a later step than the one that placed it"
    assert (rewards[placements] > 0).mean() > 0.5  # most placements earn their own utility


def test_step_credit_keeps_the_env_reward_per_step():
    rb, infos, _ = collect("step", 200)
    env = make_from_config(ENV)
    step_rewards = [sum(i["reward_components"].get(k, 0.0) * w for k, w in env.reward_fn.weights.items())
                    * env.reward_fn.scale for i in infos]
    assert np.allclose(rb.rewards[:len(infos), 0], step_rewards, atol=1e-5)


def test_qos_reward_credits_each_completion_and_drop_and_keeps_the_action_time_penalty_on_its_step():
    """QoSEdge: a step's reward = its requests' own outcomes (credited by id) + the Eq. 15 penalty and waiting."""
    env = make_from_config({"id": "qos_edge", "num_requests": 80, "rate": 6.0})
    rng = np.random.default_rng(0)
    _, info = env.reset(seed=3)
    credited = expected = 0
    done = False
    while not done:
        _, r, term, trunc, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
        done = term or trunc
        c, w = info["reward_components"], env.reward_fn.weights
        rest = env.reward_fn.scale * sum(w.get(k, 0.0) * c[k] for k in ("qos_penalty", "waiting"))
        assert r == pytest.approx(sum(info["request_rewards"].values()) + rest, abs=1e-9)
        credited += len(info["request_rewards"])
        expected += c["completed_in_limit"] - c["dropped"] - c["cut_off"]  # late completions earn nothing
    assert credited == expected > 20
