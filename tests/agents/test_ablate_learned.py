"""llmsim-train with an ``ablate`` predictor over a learned base (the QoS-aware edge router's ZS+PL and PS+ZL
presets with the learned bucket predictors): the base is fitted once and saved in the run directory, and every env
of the run wraps it, zeroing the named output; a bad ablation is refused before the fit. llmsim-evaluate runs a
checkpoint trained with a learned predictor (ablated or not) on the predictor its run saved."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("stable_baselines3")
pytest.importorskip("xgboost")

from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from llmsim.agents.env_setup import env_config, make_env  # noqa: E402
from llmsim.agents.evaluate import evaluate  # noqa: E402
from llmsim.agents.train import train  # noqa: E402
from llmsim.envs.predictors.base import AblatedPredictor  # noqa: E402
from llmsim.envs.predictors.qos import QoSBucketPredictor  # noqa: E402
from llmsim.envs.tasks import qos_edge_mixture  # noqa: E402
from llmsim.envs.workloads import MixtureWorkload  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402
from llmsim.resources import conf_dir  # noqa: E402

TINY = ["env.num_requests=40", "trainer.total_steps=60", "trainer.eval_every=0", "trainer.eval_seeds=[1000]",
        "trainer.progress=false", "agent.learning_starts=30", "agent.batch_size=16"]
LEARNED_BASE = ["~predictor.base", "+predictor.base={kind: learned_qos, samples: 300}"]


def preset(overrides: list[str]) -> dict[str, Any]:
    """conf/train.yaml with the given overrides, as llmsim-train composes it."""
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    return OmegaConf.to_container(cfg, resolve=True)


@pytest.mark.parametrize(("experiment", "zeroed", "kept"), [("qos_edge_zs_pl", "score", "length"),
                                                            ("qos_edge_ps_zl", "length", "score")])
def test_a_preset_trains_with_a_learned_base(experiment: str, zeroed: str, kept: str, tmp_path: Path) -> None:
    meta = train(preset([f"+experiment={experiment}", *LEARNED_BASE, *TINY]), tmp_path)
    path = tmp_path / "qos_predictor.json"
    assert path.is_file() and meta["steps"] == 60
    assert meta["env"]["predictor"] == {"kind": "ablate", "base": {"kind": "learned_qos", "path": str(path)},
                                        "zero": [zeroed]}
    pred = make_env(meta["env"]).predictor  # as every env of the run (and the checkpoint's) builds it
    assert isinstance(pred, AblatedPredictor) and isinstance(pred.base, QoSBucketPredictor)
    experts = pred.base.model.experts
    outs = {"length": [], "score": []}
    for req in MixtureWorkload(qos_edge_mixture(experts)).requests(0, 20):
        (lens, quals), (base_lens, base_quals) = pred.predict(req, experts), pred.base.predict(req, experts)
        got = {"length": (lens, base_lens), "score": (quals, base_quals)}
        assert not got[zeroed][0].any()
        assert np.array_equal(*got[kept])
        outs[kept].append(got[kept][0])
    assert np.any(outs[kept])  # the kept output is the base's, and not trivially 0
    assert_evaluates(tmp_path / "best")


def assert_evaluates(ckpt: Path) -> None:
    """The checkpoint, copied away from its run and with the run's own predictor files gone (it carries its
    predictor), runs in llmsim-evaluate's episodes on a QoSEdge env of the evaluation's own predictor."""
    moved = Path(shutil.copytree(ckpt, ckpt.parent / "shipped" / ckpt.name))
    for f in ckpt.parent.glob("qos_predictor*"):
        f.unlink()
    rows = evaluate({"id": "qos_edge", "num_requests": 20}, [{"checkpoint": str(moved)}], seeds=[2000])
    assert len(rows) == 1 and rows[0]["completed"] + rows[0]["dropped"] == 20, rows


def test_a_checkpoint_trained_with_a_learned_predictor_evaluates(tmp_path: Path) -> None:
    meta = train(preset(["+experiment=qos_edge_learned_pred", "predictor.samples=300", *TINY]), tmp_path)
    assert meta["env"]["predictor"] == {"kind": "learned_qos", "path": str(tmp_path / "qos_predictor.json")}
    assert_evaluates(tmp_path / "best")


@pytest.mark.parametrize(("predictor", "message"), [
    ({"kind": "ablate", "base": {"kind": "learned_qos", "samples": 300}, "zero": ["quality"]},
     "predictor.zero: expected a non-empty list of distinct names from ['score', 'length']"),
    ({"kind": "ablate", "base": {"kind": "learned_qos", "samples": -1}, "zero": ["score"]},
     "predictor.base.samples: expected a non-negative integer, got -1"),
    ({"kind": "ablate", "base": {"kind": "learned", "model": "sklearn"}, "zero": ["length"]},
     "predictor.base.model=sklearn: "),
    ({"kind": "ablate", "base": "learned_qos", "zero": ["score"], "seed": 3},
     "predictor: unknown key(s) ['seed'] for kind 'ablate'"),
])
def test_a_bad_ablation_of_a_learned_base_is_one_line_before_the_fit(predictor: dict, message: str,
                                                                      tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        env_config({"id": "qos_edge"}, predictor, tmp_path)
    assert "\n" not in str(e.value) and str(e.value).startswith(message), str(e.value)
    assert not list(tmp_path.iterdir())  # nothing fitted, nothing saved
