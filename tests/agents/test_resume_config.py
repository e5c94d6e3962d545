"""Resuming with another config: another agent is one line; a changed key is said and takes effect."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("stable_baselines3")

from llmsim.agents.train import TrainingRun, train  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402

SMALL_ENV = {"id": "workload_router", "num_requests": 30, "rate": 20.0,
             "reward": {"kind": "workload_aware", "guidance": 0.0}}


def _cfg(total: int = 300, agent: dict | None = None, env: dict | None = None, **trainer) -> dict:
    base = {"name": "ddqn", "hidden": [16], "batch_size": 32, "learning_starts": 100, "buffer_size": 2000,
            "train_freq": 4, "target_update": 100, "lr": 1e-4}
    tr = {"total_steps": total, "eval_every": 0, "eval_seeds": [500], "progress": False, **trainer}
    return {"env": {**SMALL_ENV, **(env or {})}, "agent": {**base, **(agent or {})}, "seed": 0, "trainer": tr}


@pytest.fixture(scope="module")
def last(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("trained")
    assert train(_cfg(), run)["updates"] > 0
    return run / "last"


def test_resuming_another_agent_s_checkpoint_names_both(last: Path, tmp_path: Path) -> None:
    sac = {"name": "sac", "encoder": "mlp", "hidden": [16], "batch_size": 32, "learning_starts": 100}
    cfg = _cfg(600, resume=str(last))
    cfg["agent"] = sac
    with pytest.raises(ConfigError) as e:
        TrainingRun(cfg, tmp_path / "r")
    msg = str(e.value)
    assert "\n" not in msg and f"trainer.resume={last}: a ddqn checkpoint, but this run's agent is sac" in msg, msg


def test_a_changed_key_is_said_and_its_learning_rate_is_used(last: Path, tmp_path: Path) -> None:
    run = TrainingRun(_cfg(600, agent={"lr": 0.01}, env={"rate": 30.0}, resume=str(last)), tmp_path / "r")
    [w] = [w["message"] for w in run.warnings if "config.yaml" in w["message"]]
    assert w == (f"trainer.resume={last}: this run's config differs from the resumed run's config.yaml at "
                 "agent.lr (0.0001 -> 0.01), env.rate (20.0 -> 30.0); repeat that run's overrides to continue it "
                 "as it was")
    assert [g["lr"] for g in run.agent.opt.param_groups] == [0.01]


def test_an_unchanged_resume_says_nothing(last: Path, tmp_path: Path) -> None:
    run = TrainingRun(_cfg(600, resume=str(last)), tmp_path / "r")
    assert not [w for w in run.warnings if "config.yaml" in w["message"]]
    assert [g["lr"] for g in run.agent.opt.param_groups] == [1e-4]


def test_resuming_through_a_link_keeps_the_best_beside_its_target(last: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(last, target_is_directory=True)
    run = TrainingRun(_cfg(600, resume=str(link)), tmp_path / "r")
    assert (tmp_path / "r" / "best" / "checkpoint.json").is_file()
    assert not [w for w in run.warnings if "no best/" in w["message"]]
