"""A learned predictor in a randomised run (its slot envs load the run's fitted predictor once and share it), and
a checkpoint trained with one carrying the predictor in its folder: moved elsewhere, it still evaluates; without
the file, one line names the checkpoint and the path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("stable_baselines3")
pytest.importorskip("xgboost")

from llmsim.agents.env_setup import make_slot_env  # noqa: E402
from llmsim.agents.evaluate import evaluate  # noqa: E402
from llmsim.agents.train import train  # noqa: E402
from llmsim.envs.predictors.length_buckets import LearnedPredictor  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402

OBS = {"kind": "instance_set", "n_max": 4}
ENV = {"id": "workload_router", "num_requests": 20, "reward": {"kind": "workload_aware", "guidance": 0.0}}
LEARNED = {"kind": "learned", "samples": 300, "seed": 0}
AGENT = {"name": "ddqn", "hidden": [8], "batch_size": 16, "learning_starts": 20, "train_freq": 4}
TRAINER = {"total_steps": 60, "eval_every": 0, "eval_seeds": [1000], "progress": False}
RANDOMIZE = {"sizes": [2, 4], "start_size": 2, "num_requests": 20, "curriculum_episodes": 1}


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here on one torch thread (tests/conftest.py)."""


def run_config(**extra: Any) -> dict[str, Any]:
    return {"env": dict(ENV), "seed": 0, "predictor": dict(LEARNED), "agent": dict(AGENT), "trainer": dict(TRAINER),
            **extra}


def assert_evaluates(ckpt: Path) -> None:
    rows = evaluate({"id": "workload_router", "num_requests": 20}, [{"checkpoint": str(ckpt)}], seeds=[2000])
    assert len(rows) == 1 and rows[0]["completed"] + rows[0]["dropped"] == 20, rows


def test_a_randomised_run_trains_with_a_learned_predictor(tmp_path: Path) -> None:
    cfg = run_config(randomize=RANDOMIZE, validation=[{"num_instances": 2, "rate": 10.0}])
    cfg["env"]["observation"] = OBS
    cfg["agent"]["network"] = "set"
    meta = train(cfg, tmp_path / "run")
    assert meta["steps"] == 60
    env = make_slot_env(meta["env"], randomize=RANDOMIZE)  # as the run's training envs are built
    pred = env.env.predictor
    assert isinstance(pred, LearnedPredictor)
    for seed in range(2):
        env.reset(seed=seed)
        assert env.env.predictor is pred  # loaded once, shared by every episode's env
    moved = Path(shutil.move(tmp_path / "run" / "best", tmp_path / "elsewhere"))
    assert_evaluates(moved)


def test_a_moved_checkpoint_evaluates_on_the_predictor_in_its_folder(tmp_path: Path) -> None:
    train(run_config(), tmp_path / "run")
    recorded = json.loads((tmp_path / "run" / "best" / "checkpoint.json").read_text())["env"]["predictor"]
    assert recorded == {"kind": "learned", "path": "predictor.json"}
    assert {"predictor.json", "predictor.model.ubj"} <= {f.name for f in (tmp_path / "run" / "best").iterdir()}
    moved = Path(shutil.move(tmp_path / "run", tmp_path / "copied" / "run"))  # the whole run: its own file is gone
    assert_evaluates(moved / "best")
    (moved / "last" / "predictor.json").unlink()
    with pytest.raises(ConfigError) as e:
        assert_evaluates(moved / "last")
    assert str(e.value) == (f"{moved / 'last' / 'checkpoint.json'}: env.predictor.path 'predictor.json': no such "
                            f"predictor file ({(moved / 'last' / 'predictor.json').absolute()}); expected the learned "
                            f"predictor the checkpoint was trained with, saved in its folder")
