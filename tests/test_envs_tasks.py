"""Task / quality models, labelled-data loader, YAML configs and predictors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from envs.predictors import NoisyOraclePredictor, OraclePredictor
from envs.tasks import (
    BEST_EFFORT_ACCURACY,
    WORKLOAD_ROUTER_TASKS,
    LabelledPool,
    best_effort_arrivals,
    best_effort_mixture,
    qos_edge_mixture,
    workload_router_mixture,
)
from envs.testbeds import make_from_config
from envs.workloads import LabelledWorkload

CONF = Path(__file__).resolve().parents[1] / "conf" / "env"


def test_workload_router_mixture_matches_table1():
    mix = workload_router_mixture()
    reqs = mix.sample(np.random.default_rng(0), np.arange(40_000) * 0.05)
    by_task: dict[str, list] = {}
    for r in reqs:
        by_task.setdefault(r.task, []).append(r)
    for name, p_mean, d_mean, _ in WORKLOAD_ROUTER_TASKS:
        rs = by_task[name]
        assert np.mean([r.prompt_tokens for r in rs]) == pytest.approx(p_mean, rel=0.06)
        assert np.mean([r.output_tokens for r in rs]) == pytest.approx(d_mean, rel=0.08)
    shares = np.array([len(by_task[n]) for n, *_ in WORKLOAD_ROUTER_TASKS]) / len(reqs)
    assert shares == pytest.approx(np.array([7351, 6988, 6564, 7122, 3304]) / 31329, abs=0.01)
    assert max(r.prompt_tokens + r.output_tokens for r in reqs) <= 4096


def test_best_effort_mixture_qualities_are_the_accuracy_table():
    reqs = best_effort_mixture().sample(np.random.default_rng(1), np.arange(200) * 0.1)
    for r in reqs:
        assert tuple(r.quality_by_model[m] for m in ("opt-125m", "opt-1.3b", "opt-6.7b")) == \
            BEST_EFFORT_ACCURACY[r.task]


def test_qos_mixture_per_expert_quality_and_length():
    reqs = qos_edge_mixture().sample(np.random.default_rng(2), np.arange(5000) * 0.2)
    q = {m: np.mean([r.quality_by_model[m] for r in reqs]) for m in reqs[0].quality_by_model}
    assert q["alpaca-native"] > q["mpt-7b-instruct"]
    lens = {m: np.mean([r.outputs_by_model[m] for r in reqs]) for m in reqs[0].outputs_by_model}
    assert lens["mpt-7b-instruct"] == max(lens.values())
    assert max(max(r.outputs_by_model.values()) for r in reqs) <= 300


def test_bursty_arrivals_sorted_with_rates():
    t, rates = best_effort_arrivals(np.random.default_rng(0), "bursty", 5000)
    assert np.all(np.diff(t) >= 0) and len(t) == 5000
    assert rates.min() >= 0.25 and rates.max() <= 48


def test_labelled_pool_round_trip(tmp_path):
    import pandas as pd

    rows = []
    for i in range(5):
        for m, k in (("opt-125m", 1), ("opt-1.3b", 2)):
            rows.append({"request_id": i, "model": m, "prompt_tokens": 10 + i, "output_tokens": 5 * k + i,
                         "quality": 0.1 * k, "task": "copa"})
    path = tmp_path / "labels.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    pool = LabelledPool.load(path)
    assert pool.models == ["opt-1.3b", "opt-125m"]
    reqs = LabelledWorkload(str(path), {"kind": "poisson", "rate": 2.0}).requests(0, 20)
    for r in reqs:
        i = r.prompt_tokens - 10
        assert r.outputs_by_model == {"opt-1.3b": 10 + i, "opt-125m": 5 + i}
        assert r.quality_by_model == pytest.approx({"opt-1.3b": 0.2, "opt-125m": 0.1})


def test_noisy_predictor_buckets():
    reqs = qos_edge_mixture().sample(np.random.default_rng(0), np.arange(10.0))
    models = list(reqs[0].outputs_by_model)
    lens, q = OraclePredictor().predict(reqs[0], models)
    assert list(lens) == [reqs[0].outputs_by_model[m] for m in models]
    p = NoisyOraclePredictor(len_buckets=10, len_max=300, q_buckets=10, seed=0)
    lens, q = p.predict(reqs[0], models)
    assert set(np.round((lens - 15) / 30, 6)) <= set(range(10))
    assert np.all((q * 20) % 2 == pytest.approx(1.0))


@pytest.mark.parametrize("name", sorted(p.name for p in CONF.glob("*.yaml")))
def test_env_yaml_configs_build(name):
    cfg = yaml.safe_load((CONF / name).read_text())
    cfg["num_requests"] = 10
    if cfg.get("workload", {}).get("num_requests"):
        cfg["workload"]["num_requests"] = 10
    env = make_from_config(cfg)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
