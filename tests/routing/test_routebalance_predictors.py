"""RouteBalance's learned predictors (docs/routebalance_predictors.md): the kNN estimator, the
telemetry export and the per-tier XGBoost TPOT head, alone and inside the router."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from llmsim import simulate
from llmsim.envs.routebalance_tasks import MODELS, TIERS, routebalance_instances, routebalance_workload
from llmsim.envs.tasks import TaskMixture, TaskSpec
from llmsim.errors import ConfigError
from llmsim.routing import make_router
from llmsim.routing.routebalance.predictors import (
    LABEL,
    KnnEstimator,
    XgbTpotHead,
    estimator_accuracy,
    tpot_accuracy,
)
from llmsim.routing.routebalance.state import DEFAULT_TPOT_MS
from llmsim.simulation.telemetry import COLUMNS, collect_telemetry
from tests.helpers import REPO

pytest.importorskip("sklearn")
pytest.importorskip("xgboost")

STATIC_S = {m: v / 1000.0 for m, v in DEFAULT_TPOT_MS.items()}
TRAIN = {"sampler": "routebalance_workload", "n": 400, "seed": 101}


def four_instances() -> list:
    return routebalance_instances(tiers=[dataclasses.replace(t, count=1) for t in TIERS])


def skewed(n: int, seed: int) -> list:
    """A labelled sample whose quality depends on the task (the routebalance task model's does not)."""
    best = {"a": "qwen2.5-3b", "b": "qwen2.5-7b", "c": "qwen2.5-72b"}
    specs = [TaskSpec(t, pm, 0.4, 2000, out_mean=dict.fromkeys(MODELS, om), out_sigma=dict.fromkeys(MODELS, 0.3),
                      out_max=1024, q_mean={m: 0.75 if m == best[t] else 0.3 for m in MODELS},
                      q_sd=dict.fromkeys(MODELS, 0.1), rho_quality=0.5)
             for t, pm, om in (("a", 100.0, 60.0), ("b", 400.0, 300.0), ("c", 900.0, 150.0))]
    rng = np.random.default_rng(seed)
    return TaskMixture(specs, list(MODELS)).sample(rng, np.arange(n) * 0.1)


@pytest.fixture(scope="module")
def telemetry() -> tuple[pd.DataFrame, pd.DataFrame]:
    # topic_signal=0: the pre-topic qualities, under which these 300-request runs put some traffic on every tier
    tr = pd.concat([collect_telemetry(four_instances(), routebalance_workload(rate, n=300, seed=s, topic_signal=0.0),
                                      run=rate) for s, rate in ((1, 2.0), (2, 5.0))], ignore_index=True)
    te = collect_telemetry(four_instances(), routebalance_workload(4.0, n=300, seed=9, topic_signal=0.0), run=4.0)
    return tr, te


# ---------------------------------------------------------------------- kNN estimator
def test_knn_beats_the_constant_predictor_where_features_carry_signal() -> None:
    train, test = skewed(600, 1), skewed(600, 2)
    acc = estimator_accuracy(KnnEstimator(train=train, k=10), test, train=train)
    assert acc["quality_mae"] < acc["const_quality_mae"] - 0.02, acc
    assert acc["best_model_acc"] > acc["const_best_model_acc"] + 0.1, acc
    assert acc["length_mae"] < acc["const_length_mae"], acc
    assert acc["routed_quality"] > acc["const_routed_quality"], acc


def test_knn_on_the_routebalance_task_model_learns_lengths_only() -> None:
    """Lengths are learnable from task and prompt length; quality only through the topic embedding, which a
    400-request sample barely covers (accuracy near chance; the 14,919-request case is in test_routebalance_clamp)."""
    est = KnnEstimator(train=TRAIN, k=50, weights="uniform")
    test = routebalance_workload(12.0, n=400, seed=7)
    acc = estimator_accuracy(est, test, train=routebalance_workload(12.0, n=400, seed=101))
    assert acc["length_mape"] < acc["const_length_mape"], acc
    assert 0.15 < acc["best_model_acc"] < 0.4 and acc["quality_mae"] < 0.3, acc


def test_knn_is_deterministic_and_uses_routing_time_features_only() -> None:
    train = skewed(300, 1)
    r = skewed(5, 3)[0]
    a = KnnEstimator(train=train).predict(r, MODELS)
    b = KnnEstimator(train=train).predict(r, MODELS)
    assert a == b
    r.quality_by_model = {m: 1.0 for m in MODELS}  # its hidden labels change nothing
    r.outputs_by_model = dict.fromkeys(MODELS, 1)
    assert KnnEstimator(train=train).predict(r, MODELS) == a


# ---------------------------------------------------------------------- telemetry and the TPOT head
def test_telemetry_has_the_documented_columns_with_finite_values(telemetry) -> None:
    tr, te = telemetry
    assert list(tr.columns) == list(COLUMNS)
    num = tr[[c for c in COLUMNS if c not in ("run", "name", "model", "gpu")]]
    assert len(tr) > 1000 and np.isfinite(num.to_numpy(dtype=float)).all()
    assert set(tr["model"]) == set(MODELS) and (tr[LABEL] > 0).all()
    assert (tr["kv_used_frac"].between(0, 1)).all() and tr["pending_decode_tokens"].max() > 0


def test_xgboost_head_beats_the_static_prior(telemetry) -> None:
    tr, te = telemetry
    head = XgbTpotHead(train=tr, rounds=100)
    acc = tpot_accuracy(head, te, STATIC_S)
    assert acc["xgboost_mae_ms"] < 0.7 * acc["static_mae_ms"], acc
    assert acc["xgboost_mae_ms"] < acc["step_time_mae_ms"], acc


def test_routebalance_end_to_end_with_knn_and_xgboost(telemetry, tmp_path: Path) -> None:
    tr, _ = telemetry
    path = tmp_path / "tele.parquet"
    tr.to_parquet(path)
    reqs = routebalance_workload(6.0, n=300, seed=3)
    router = make_router("routebalance", estimator="knn", estimator_kwargs={"train": TRAIN, "k": 10},
                         tpot_prior="xgboost", tpot_kwargs={"train": str(path), "rounds": 50})
    res = simulate(four_instances(), reqs, router, central_queue_tick=0.004)
    assert res.summary["completed"] == 300 and router.held == 0
    assert router.tpot_head.calls > 0 and router.stats["no_quality"] == 0
    assert len(set(res.requests["instance"])) > 1


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"estimator": "knn"}, "estimator_kwargs.train"),
    ({"estimator": "knn", "estimator_kwargs": {"train": TRAIN, "k": 0}}, "estimator_kwargs.k"),
    ({"estimator": "knn", "estimator_kwargs": {"train": TRAIN, "weights": "x"}}, "estimator_kwargs.weights"),
    ({"estimator": "knn", "estimator_kwargs": {"train": "x"}}, "estimator_kwargs.train"),
    ({"estimator": "knn", "estimator_kwargs": {"train": {"sampler": "nope:f"}}}, "estimator_kwargs.train.sampler"),
    ({"estimator": "knn", "estimator_kwargs": {"train": TRAIN, "bogus": 1}}, "estimator_kwargs"),
    ({"tpot_prior": "xgboost"}, "tpot_kwargs.train"),
    ({"tpot_prior": "xgboost", "tpot_kwargs": {"train": "/nonexistent.parquet"}}, "tpot_kwargs.train"),
    ({"tpot_prior": "xgboost", "tpot_kwargs": {"train": [{"model": "m"}]}}, "tpot_kwargs.train"),
    ({"tpot_prior": "xgboost", "tpot_kwargs": 3}, "tpot_kwargs"),
    ({"tpot_prior": "xgboost", "tpot_kwargs": {"bogus": 1}}, "tpot_kwargs"),
    ({"tpot_kwargs": {"train": "x"}}, "tpot_kwargs"),
    ({"tpot_prior": "lstm"}, "tpot_prior"),
])
def test_bad_options_are_one_line_config_errors(kwargs: dict, key: str) -> None:
    with pytest.raises(ConfigError) as e:
        make_router("routebalance", **kwargs)
    msg = str(e.value)
    assert msg.startswith(f"policy.kwargs.{key}") and "\n" not in msg, msg


def test_xgboost_rounds_option_is_checked(telemetry) -> None:
    with pytest.raises(ConfigError, match=r"^policy\.kwargs\.tpot_kwargs\.rounds"):
        make_router("routebalance", tpot_prior="xgboost", tpot_kwargs={"train": telemetry[0], "rounds": 0.5})


def test_import_llmsim_loads_neither_sklearn_nor_xgboost() -> None:
    code = ("import sys, llmsim, llmsim.routing; from llmsim.routing.routebalance.estimators import ESTIMATORS; "
            "assert 'knn' in ESTIMATORS; bad = [m for m in sys.modules if m.split('.')[0] in ('sklearn', 'xgboost')]; "
            "assert not bad, bad")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]


def test_telemetry_cli(tmp_path: Path) -> None:
    out = tmp_path / "outputs" / "telemetry" / "t.csv"  # the documented folder need not exist yet
    p = subprocess.run([sys.executable, "-m", "llmsim.simulation.telemetry", "--out", str(out), "--rates", "3",
                        "--n", "60"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    df = pd.read_csv(out)
    assert list(df.columns) == list(COLUMNS) and len(df) > 0 and math.isfinite(df[LABEL].sum())
