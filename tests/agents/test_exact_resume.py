"""Exact resume: a run stopped right after a checkpoint and resumed from it ends where the run that never stopped
ends (weights, optimiser, replay, RNG states, progress.csv rows but wall-clock ones), for Double DQN and SAC on
their default presets; a checkpoint without the RNG states still resumes, with one warning line."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("stable_baselines3")

from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from llmsim.agents.checkpoint_files import TRAINER_FILE, read_tensors  # noqa: E402
from llmsim.agents.train import TrainingRun, train  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402
from llmsim.resources import conf_dir  # noqa: E402
from tests.agents.helpers import (  # noqa: E402
    assert_same_end,
    rows,
    small_ddqn_config,
    train_killed_after_episode_past,
)


class Stopped(Exception):
    """The run was killed right after a checkpoint."""


def preset(overrides: list[str]) -> dict[str, Any]:
    """conf/train.yaml with the given overrides, as llmsim-train composes it."""
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    return OmegaConf.to_container(cfg, resolve=True)


def stopped_at(cfg: dict[str, Any], run_dir: Path, at: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``cfg``'s run, killed right after its evaluation (and checkpoint) at step ``at``."""
    evaluate = TrainingRun.evaluate

    def then_stop(self: TrainingRun) -> None:
        evaluate(self)
        if self.state.step >= at:
            raise Stopped

    with monkeypatch.context() as m:
        m.setattr(TrainingRun, "evaluate", then_stop)
        with pytest.raises(Stopped):
            train(cfg, run_dir)


DDQN = ["agent=ddqn", "env=workload_router", "env.num_requests=60", "agent.learning_starts=300",
        "agent.batch_size=64", "agent.target_update=400", "trainer.total_steps=2400", "trainer.eval_every=600",
        "trainer.eval_seeds=[1000]", "trainer.save_replay=true", "trainer.progress=false"]
SAC = ["agent=sac_han", "env=qos_edge", "env.num_requests=50", "agent.learning_starts=100", "agent.batch_size=32",
       "agent.train_freq=2", "agent.buffer_size=5000", "trainer.total_steps=450", "trainer.eval_every=150",
       "trainer.eval_seeds=[1000]",
       "trainer.eval_metric=avg_qos", "trainer.save_replay=true", "trainer.progress=false"]


@pytest.mark.parametrize(("overrides", "total", "at", "weights"), [(DDQN, 2400, 1200, "q_net.pt"),
                                                                   (SAC, 450, 300, "policy.pt")], ids=["ddqn", "sac"])
def test_stopped_and_resumed_ends_as_the_run_that_never_stopped(overrides: list[str], total: int, at: int,
                                                                weights: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = preset(overrides)
    whole = train(cfg, tmp_path / "whole")
    stopped_at(cfg, tmp_path / "stopped", at, monkeypatch)
    saved = read_tensors(tmp_path / "stopped" / "last" / TRAINER_FILE, "trainer state")
    assert saved["loop"]["step"] == at and len(saved["resume"]["envs"][0]["actions"]) > 0  # mid-episode
    resumed = train({**cfg, "trainer": {**cfg["trainer"], "resume": str(tmp_path / "stopped" / "last")}},
                    tmp_path / "resumed")
    assert resumed["steps"] == whole["steps"] == total and resumed["updates"] == whole["updates"] > 0
    assert resumed["episodes"] == whole["episodes"] > saved["loop"]["episode"]
    assert not [w for w in resumed["warnings"] if "trainer.resume" in w["message"]]
    assert_same_end(tmp_path / "whole", tmp_path / "resumed", tmp_path / "stopped", at, weights)


small = small_ddqn_config


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("small")
    train(small(), run)
    return run


def resume_warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if "bit-identical" in line]


def test_two_envs_stopped_and_resumed_end_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Envs in worker processes (trainer.num_envs=2) are rebuilt there, each at its own episode in progress."""
    cfg = small(600, num_envs=2, eval_every=200)
    train(cfg, tmp_path / "whole")
    stopped_at(cfg, tmp_path / "stopped", 400, monkeypatch)
    saved = read_tensors(tmp_path / "stopped" / "last" / TRAINER_FILE, "trainer state")
    assert [len(e["actions"]) > 0 for e in saved["resume"]["envs"]] == [True, True]
    train({**cfg, "trainer": {**cfg["trainer"], "resume": str(tmp_path / "stopped" / "last")}}, tmp_path / "resumed")
    assert_same_end(tmp_path / "whole", tmp_path / "resumed", tmp_path / "stopped", 400, "q_net.pt")


def test_an_older_checkpoint_resumes_with_one_warning(small_run: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A trainer.pt from before exact resume (no ``resume`` part) still resumes, from new episodes, and says
    in one line that the run will not be bit-identical."""
    old = tmp_path / "old"
    shutil.copytree(small_run, old)
    state = read_tensors(old / "last" / TRAINER_FILE, "trainer state")
    del state["resume"]
    torch.save(state, old / "last" / TRAINER_FILE)
    meta = train(small(600, resume=str(old / "last")), tmp_path / "r")
    assert meta["steps"] == 600
    assert resume_warnings(capsys.readouterr().err) == [
        f"llmsim-train: warning: trainer.resume={old / 'last'}: its trainer.pt has no RNG states of the training "
        "envs and the replay (an older llmsim saved it): training goes on from new episodes: this run will not be "
        "bit-identical to one that never stopped"]


def test_a_resume_without_the_replay_says_it_refills(small_run: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(small_run, copy)
    (copy / "last" / "replay.npz").unlink()
    train(small(400, resume=str(copy / "last")), tmp_path / "r")
    assert resume_warnings(capsys.readouterr().err) == [
        f"llmsim-train: warning: trainer.resume={copy / 'last'}: no replay.npz (trainer.save_replay=false): the "
        "replay buffer refills: this run will not be bit-identical to one that never stopped"]


def test_an_episode_that_cannot_be_rebuilt_starts_new_ones(small_run: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Resumed on another env (more requests), the saved actions lead elsewhere: a warning, then new episodes."""
    cfg = small(400, resume=str(small_run / "last"))
    cfg["env"]["rate"] = 5.0
    meta = train(cfg, tmp_path / "r")
    assert meta["steps"] == 400
    [line] = resume_warnings(capsys.readouterr().err)
    assert line.startswith(f"llmsim-train: warning: trainer.resume={small_run / 'last'}: training env 0: "), line
    assert line.endswith(": training goes on from new episodes, so this run will not be bit-identical to one that "
                         "never stopped"), line


def test_a_damaged_resume_part_is_one_line(small_run: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(small_run, bad)
    state = read_tensors(bad / "last" / TRAINER_FILE, "trainer state")
    state["resume"]["replay_rng"] = "{not json"
    torch.save(state, bad / "last" / TRAINER_FILE)
    with pytest.raises(ConfigError) as e:
        train(small(400, resume=str(bad / "last")), tmp_path / "r")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{bad / 'last' / TRAINER_FILE}: resume: not the state of an "
                                              "experience loop this llmsim saves (not a PCG64 generator state"), msg


SET_ENV = {"id": "workload_router", "num_requests": 60, "observation": {"kind": "instance_set", "n_max": 8},
           "reward": {"kind": "workload_aware_tail", "guidance": 0.0}}


def test_randomised_scenarios_and_request_credit_resume_exactly(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A policy that transfers (drawn scenarios, a curriculum counting each env's episodes) with per-request
    credit: the scenario in progress and the credits still owed are rebuilt as well."""
    cfg = {"env": SET_ENV, "seed": 0, "validation": [{"num_instances": 4, "rate": 20.0}],
           "randomize": {"sizes": [2, 6], "num_requests": 60, "curriculum_episodes": 2},
           "agent": {"name": "ddqn", "network": "set", "hidden": [16, 16], "batch_size": 64, "learning_starts": 200,
                     "train_freq": 4, "demo_steps": 300, "demo_margin_weight": 1.0, "eps_start": 0.1,
                     "reward_credit": "request"},
           "trainer": {"total_steps": 900, "eval_every": 300, "eval_seeds": [1000], "progress": False,
                       "eval_metric": "gain_vs_guide", "save_replay": True}}
    train(cfg, tmp_path / "whole")
    stopped_at(cfg, tmp_path / "stopped", 600, monkeypatch)
    saved = read_tensors(tmp_path / "stopped" / "last" / TRAINER_FILE, "trainer state")["resume"]
    assert saved["envs"][0]["episodes"] >= 1 and len(saved["envs"][0]["actions"]) > 0
    assert any(saved["credit"]["slots"][0])  # placements whose requests have not finished yet
    train({**cfg, "trainer": {**cfg["trainer"], "resume": str(tmp_path / "stopped" / "last")}}, tmp_path / "resumed")
    assert_same_end(tmp_path / "whole", tmp_path / "resumed", tmp_path / "stopped", 600, "q_net.pt")


def test_a_run_resumed_in_its_own_directory_keeps_its_progress_rows(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Resumed in the directory it was stopped in, progress.csv keeps the rows up to the checkpoint (not a new
    file), drops the ones written after it, and ends with the rows of the run that never stopped."""
    cfg = small(600, eval_every=200)
    train(cfg, tmp_path / "whole")
    train_killed_after_episode_past(cfg, tmp_path / "run", 400, monkeypatch)  # after the checkpoint at 400
    assert len(rows(tmp_path / "run" / "progress.csv")) > len(rows(tmp_path / "run" / "progress.csv", upto=400))
    train({**cfg, "trainer": {**cfg["trainer"], "resume": str(tmp_path / "run" / "last")}}, tmp_path / "run")
    assert rows(tmp_path / "run" / "progress.csv") == rows(tmp_path / "whole" / "progress.csv")
