"""Exact resume: what a checkpoint keeps of the experience loop, so a resumed run goes on bit for bit as the run
that never stopped.

trainer.pt's ``resume`` part holds the replay's sampling RNG, the loop's current observations, masks and last
training statistics, the per-request credit book (``reward_credit: request``) and, for each training env, how its
episode in progress was reset (the seed, or the env's RNG state before the reset, and a randomised env's episode
count) and the actions taken since. A simulated cluster is not copied (it could only be pickled): the resume
rebuilds the episode in progress by resetting the env the same way and replaying those actions (at most one
episode of env steps, no network call), then checks that it sees the observations and masks that were saved.
The agent's own RNG and torch's are saved with the agent (agents/base.py). Everything is tensors, plain values
and numpy generator states as JSON text: trainer.pt still loads weights-only (agents/checkpoint_files.py).
"""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import numpy as np

from llmsim.agents.checkpoint_files import one_line

FORMAT = 1  # of trainer.pt's ``resume`` part


def rng_text(gen: np.random.Generator) -> str:
    """A numpy generator's state as JSON text (its 128-bit integers as JSON numbers)."""
    return json.dumps(gen.bit_generator.state, sort_keys=True)


def set_rng(gen: np.random.Generator, text: Any) -> None:
    """Put a state of :func:`rng_text` into ``gen``; ValueError when it is not one of a generator of its kind."""
    if not isinstance(text, str):
        raise ValueError(f"expected a generator state as JSON text, got {type(text).__name__}")
    try:
        gen.bit_generator.state = json.loads(text)
    except (TypeError, ValueError, KeyError) as e:
        raise ValueError(f"not a {type(gen.bit_generator).__name__} generator state: {one_line(e, 120)}") from None


class EpisodeRecorder(gym.Wrapper):
    """A training env that remembers how its episode in progress began and the actions since, so a checkpoint
    can have it rebuilt (:meth:`replay`) in a resumed run. Nothing else changes: the same RNG draws, the same
    steps."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.began: dict[str, Any] = {}
        self.actions: list[int] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        episodes = getattr(self.env, "episodes", None)  # a randomised env's curriculum counts its episodes
        self.began = {"seed": seed, "rng": None if seed is not None else rng_text(self.env.np_random),
                      "episodes": episodes if isinstance(episodes, int) else None,
                      "options": json.dumps(options, sort_keys=True) if options else None}
        self.actions = []
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any):
        self.actions.append(int(action))
        return self.env.step(action)

    def episode_record(self) -> dict[str, Any]:
        """How the episode in progress began and its actions so far (plain values and an int64 array)."""
        return {**self.began, "actions": np.asarray(self.actions, np.int64)}

    def replay(self, record: dict[str, Any]) -> tuple[Any, np.ndarray | None, str | None]:
        """The recorded episode rebuilt: reset as it began, then its actions; (observation, action mask, None), or
        (None, None, why) when it cannot be (a record of another env, an episode that now ends sooner)."""
        try:
            if record.get("episodes") is not None:
                self.env.episodes = int(record["episodes"])
            if record.get("seed") is None:
                set_rng(self.env.np_random, record.get("rng"))
            options = json.loads(record["options"]) if record.get("options") else None
            obs, info = self.reset(seed=record.get("seed"), options=options)
            for i, a in enumerate(np.asarray(record["actions"]).tolist()):
                obs, _, term, trunc, info = self.step(a)
                if (term or trunc) and i + 1 < len(record["actions"]):
                    return None, None, f"its episode ended after {i + 1} of the {len(record['actions'])} actions"
            return obs, np.asarray(info["action_mask"]), None
        except Exception as e:  # noqa: BLE001 - any failure means the episode cannot be rebuilt; the caller says why
            return None, None, one_line(e, 160)
