"""The Learned Best-Effort LLM Serving reproduction: the metrics on crafted outcomes, the experiment presets, a tiny
end-to-end run."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from experiments.harness.training import compose
from experiments.papers.best_effort import metrics as M
from experiments.papers.best_effort import run
from experiments.papers.best_effort.setup import PRESET


def test_window_means_slide_with_stride_one() -> None:
    u = [1.0] * 20 + [0.0] * 20
    w = M.window_means(u)
    assert len(w) == 21
    assert w[0] == 1.0 and w[-1] == 0.0 and w[10] == pytest.approx(0.5)
    assert len(M.window_means([1.0] * 5)) == 0


def test_window_counts_thresholds_are_inclusive() -> None:
    # one window of 19 x 1.0 + one 0.2: mean exactly 0.96 (as floats, a hair off): counts at >= 0.96, not 0.98
    u = [1.0] * 19 + [0.2]
    c = M.window_counts(u)
    assert c["windows"] == 1
    assert c["counts"]["0.96"] == 1 and c["counts"]["0.94"] == 1
    assert c["counts"]["0.98"] == 0 and c["counts"]["1.00"] == 0
    full = M.window_counts([1.0] * 25)
    assert full["counts"]["1.00"] == 6 and full["fractions"]["1.00"] == 1.0


def test_static_large_model_windows_are_met_fractions() -> None:
    # with one model of accuracy 1.0 a window's mean is its deadline-met share: ">= 0.96" == "= 1.00" for
    # fewer than 1 miss in 20 (the spec's sanity property of Tables 3-4)
    rng = np.random.default_rng(0)
    u = (rng.random(500) > 0.1).astype(float)
    c = M.window_counts(u)
    assert c["counts"]["1.00"] == c["counts"]["0.96"] <= c["counts"]["0.94"]


def test_availability_is_contiguous_from_the_lowest_rate() -> None:
    rates = [8.0, 0.25, 1.0, 2.0, 4.0]
    met = [0.99, 1.0, 1.0, 0.96, 0.5]
    assert M.availability(rates, met) == 2.0  # 8 req/s meets again but 4 does not
    assert M.availability(rates, [0.1] * 5) == 0.0
    assert M.availability(rates, [1.0] * 5) == 8.0
    assert M.utility_availability([1, 2], [0.9, 0.7], 0.8) == 1.0


def test_hardware_utility_and_ratios() -> None:
    pol, base = [0.8] * 40, [1.0] * 20 + [0.0] * 20
    h = M.hardware_utility(pol, 4, base, 8)
    assert h["policy_per_gpu"] == pytest.approx(0.2)
    assert h["base_per_gpu"] == pytest.approx(0.0625)  # mean window 0.5 over 21 windows / 8 GPUs
    assert h["ratio"] == pytest.approx(3.2)
    assert h["higher_frac"] == pytest.approx(1.0)
    assert M.ratio(1, 0) == math.inf and math.isnan(M.ratio(0, 0))
    assert M.verdict_more_often(4.0, 4.11) == "reproduced"
    assert M.verdict_more_often(1.5, 4.11) == "partly"
    assert M.verdict_more_often(0.5, 4.11) == "not"


def test_riemann_usage_and_model_shares() -> None:
    assert M.riemann_usage([0, 2, 1], [1.0, 0.0, 1.0]) == pytest.approx(1.5)
    assert M.model_shares(["a", "b", "", "a"], ["a", "b"]) == {"a": 0.5, "b": 0.25}


def _req(task: str, inst: int, e2e: float, tokens: int = 100, dropped: str = "") -> SimpleNamespace:
    acc = {"opt-125m": 0.45, "opt-6.7b": 1.0}
    return SimpleNamespace(task=task, instance=inst, arrival=1.0, finish=1.0 + e2e if inst >= 0 else -1.0,
                           generated=tokens, dropped=dropped, quality_by_model=acc)


def test_request_outcomes_hard_soft_and_unserved() -> None:
    models = ["opt-125m", "opt-6.7b"]
    reqs = [_req("hellaswag", 0, 3.0), _req("hellaswag", 1, 4.0), _req("hellaswag", 1, 4.2),
            _req("hellaswag", 1, 5.0), _req("hellaswag", -1, 0.0, dropped="cut")]
    out = M.request_outcomes(reqs, models, deadline=0.04)
    assert list(out["model"]) == ["opt-125m", "opt-6.7b", "opt-6.7b", "opt-6.7b", ""]
    assert out["utility_hard"].tolist() == pytest.approx([0.45, 1.0, 0.0, 0.0, 0.0])
    # soft: 2 ms over a 4 s deadline (100 tokens x 40 ms) keeps 1 - 0.01 * 2
    soft = M.request_outcomes([_req("copa", 1, 4.002)], models, deadline=0.04)
    assert soft["utility_soft"][0] == pytest.approx(0.98) and soft["utility_hard"][0] == 0.0
    assert out["met"].tolist() == [True, True, False, False, False]


@pytest.mark.parametrize("exp, soft", [("hard", False), ("soft", True)])
def test_presets_compose(exp: str, soft: bool) -> None:
    extra = ["trainer.init_from=/tmp/x/best"] if soft else []
    cfg = compose([f"+experiment={PRESET}_{exp}", *extra])
    assert cfg["env"]["id"] == "best_effort" and cfg["env"]["schedule"] == "stable" and cfg["env"]["rate"] is None
    assert cfg["env"]["soft"] is soft
    assert cfg["agent"]["hidden"] == [256, 256] and cfg["agent"]["batch_size"] == 1024
    assert cfg["agent"]["target_update"] == 500 and cfg["agent"]["tau"] is None
    assert cfg["trainer"]["eval_metric"] == "return" and cfg["trainer"]["total_steps"] > 0
    assert cfg["trainer"]["init_from"] == ("/tmp/x/best" if soft else None)


@pytest.mark.slow
def test_tiny_end_to_end(tmp_path) -> None:
    claims = run(True, tmp_path, 1, False, size="tiny")
    assert claims and all({"paper", "claim", "paper_value", "measured", "verdict"} <= set(c) for c in claims)
    assert all(c["verdict"] in {"reproduced", "partly", "not"} for c in claims)
    assert all(c["setting"] == "tiny" and c["seeds"] and "evaluation grid" in c["setting_note"] for c in claims)
    assert {c["paper"] for c in claims} == {"best_effort"}
    rep = json.loads((tmp_path / "results.json").read_text())
    assert rep["same_requests"] is True
    assert (tmp_path / "results.md").is_file() and (tmp_path / "availability.png").is_file()
    assert (tmp_path / "train_soft" / "best" / "checkpoint.json").is_file()


@pytest.mark.parametrize("value", ["garbage", {"hard": "a"}, {"hard": "a", "soft": "b", "x": "c"}])
def test_from_runs_must_name_hard_and_soft(tmp_path, value):
    """A --from-runs that is not exactly hard=DIR,soft=DIR is one ConfigError naming the option, not a crash."""
    from llmsim.errors import ConfigError

    with pytest.raises(ConfigError, match=r"--from-runs: best_effort expects hard=DIR,soft=DIR"):
        run(False, tmp_path, from_runs=value, size="tiny")
