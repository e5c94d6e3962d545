"""Shared builders of the agents' tests (tests/helpers.py: no test module imports another). Imported only by
modules that skip without torch."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from llmsim.agents.checkpoint import save_checkpoint
from llmsim.agents.checkpoint_files import TRAINER_FILE, read_tensors
from llmsim.agents.checkpoint_meta import action_layout, observation_layout
from llmsim.agents.train import TrainingRun, train
from llmsim.envs.testbeds import make_from_config

SMALL_ENV = {"id": "workload_router", "num_requests": 30, "rate": 20.0,
             "reward": {"kind": "workload_aware", "guidance": 0.0}}


def small_ddqn_config(total: int = 300, **trainer: Any) -> dict[str, Any]:
    """A Double DQN run of ``total`` steps on a 30-request WorkloadRouter env, small enough for a test to train
    (replay saved, no evaluations); ``trainer`` keys override or add to the trainer's."""
    agent = {"name": "ddqn", "hidden": [16], "batch_size": 32, "learning_starts": 100, "buffer_size": 2000,
             "train_freq": 4, "target_update": 100}
    tr = {"total_steps": total, "eval_every": 0, "eval_seeds": [500], "progress": False, "save_replay": True,
          **trainer}
    return {"env": dict(SMALL_ENV), "agent": agent, "seed": 0, "trainer": tr}


WALL = ("wall_s", "steps_per_s")  # wall-clock fields: the only ones a resume may change


def rows(path: Path, upto: int | None = None) -> list[dict[str, str]]:
    """progress.csv's rows as their non-empty values, wall-clock ones left out (``upto``: rows up to the
    evaluation at that step)."""
    out: list[dict[str, str]] = []
    with path.open() as f:
        for r in csv.DictReader(f):
            out.append({k: v for k, v in r.items() if v != "" and not k.endswith(WALL)})
            if upto is not None and out[-1].get("eval/step") == str(upto):
                break
    return out


def flat(x: Any) -> list[Any]:
    """A trainer state's leaves in a fixed order, wall-clock fields left out."""
    if isinstance(x, dict):
        return [(k, v) for k in sorted(x, key=str) if not str(k).endswith(WALL) for v in flat(x[k])]
    if isinstance(x, list | tuple):
        return [v for item in x for v in flat(item)]
    if isinstance(x, torch.Tensor):
        return [(str(x.dtype), tuple(x.shape), x.numpy().tobytes())]
    return ["nan" if isinstance(x, float) and x != x else x]  # NaN: an evaluation with nothing completed


def assert_same_end(whole: Path, resumed: Path, stopped: Path, at: int, weights: str) -> None:
    """``resumed`` (from ``stopped``'s checkpoint at step ``at``) ends as ``whole``: last/'s weights, trainer state and
    replay, and the progress.csv rows of both runs but wall-clock values."""
    for f in (weights, "checkpoint.json"):
        assert (whole / "last" / f).is_file()
    a, b = (torch.load(d / "last" / weights, weights_only=True) for d in (whole, resumed))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "weights differ"
    ta, tb = (read_tensors(d / "last" / TRAINER_FILE, "trainer state") for d in (whole, resumed))
    assert ta["loop"] == tb["loop"]
    for key in ta:
        assert flat(ta[key]) == flat(tb[key]), key
    with np.load(whole / "last" / "replay.npz") as za, np.load(resumed / "last" / "replay.npz") as zb:
        assert za.files == zb.files and all(np.array_equal(za[k], zb[k]) for k in za.files)
    assert rows(stopped / "progress.csv", upto=at) + rows(resumed / "progress.csv") == rows(whole / "progress.csv")


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


def save_flat_checkpoint(path: Path, net: nn.Module, env_cfg: dict[str, Any], label: str) -> Path:
    """``net`` saved as an untrained Double DQN checkpoint of ``env_cfg``'s layouts (what export and loading read)."""
    env = make_from_config(env_cfg)
    meta = {"agent": "ddqn", "label": label, "observation": observation_layout(env), "actions": action_layout(env),
            "env": env_cfg, "steps": 0, "episodes": 0, "best_score": None, "eval_metric": "return", "evaluations": [],
            "seed": 0}
    return save_checkpoint(path, net, meta, config_yaml="{}\n")


class Killed(Exception):
    """A training run killed from a test."""


def train_killed_after_episode_past(cfg: dict[str, Any], run_dir: Path, step: int, monkeypatch: pytest.MonkeyPatch,
                                    ) -> None:
    """Train in ``run_dir`` and kill the run after the first episode that ends past ``step`` (its log rows and
    events written, as a kill between a checkpoint and the next leaves them)."""
    on_episode = TrainingRun.on_episode

    def then_kill(self: TrainingRun, st: Any, info: dict[str, Any]) -> None:
        on_episode(self, st, info)
        if st.step > step:
            raise Killed

    with monkeypatch.context() as m:
        m.setattr(TrainingRun, "on_episode", then_kill)
        with pytest.raises(Killed):
            train(cfg, run_dir)
