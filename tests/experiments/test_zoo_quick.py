"""The quick reproduction tells the truth: one line per learned policy saying what its own short run learned,
and the learned claims measured on the zoo's shipped router, labelled with the command that trained it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from experiments.harness import zoo_routers  # noqa: E402
from experiments.harness.zoo_routers import finding, learned_nothing  # noqa: E402
from experiments.papers import intelligent_router, qos_edge  # noqa: E402
from experiments.papers.best_effort import experiment as best_effort_experiment  # noqa: E402
from experiments.papers.intelligent_router import VARIANTS, ZOO_LABEL  # noqa: E402
from tests.experiments.zoo_helpers import TRAIN_COMMAND, fake_zoo  # noqa: E402


def _meta(updates: int, warnings: list[str], best_untrained: bool = False) -> dict[str, Any]:
    return {"steps": 12_000, "updates": updates, "best_untrained": best_untrained,
            "warnings": [{"step": 0, "message": w} for w in warnings],
            "evaluations": [{"step": 12_000, "warnings": warnings}]}


def test_a_run_that_learned_nothing_says_why_in_one_line() -> None:
    budget = "trainer.total_steps=12000 is below agent.learning_starts=20000: no gradient step will be taken"
    assert learned_nothing(_meta(0, [budget])) == "no learning happened (no gradient step)"
    assert "untrained" in learned_nothing(_meta(50, [], best_untrained=True))
    one = "the greedy policy takes one action at 100% of its decisions with two or more valid choices " \
          "(collapsed to one action)"
    assert learned_nothing(_meta(900, [one])).startswith("it did not learn to route (the greedy policy takes one")
    assert learned_nothing(_meta(900, [])) is None
    line = finding("Baseline RL", _meta(0, [budget]))
    assert line == ("Baseline RL: this run's own training, 12,000 steps and 0 gradient steps: no learning happened "
                    "(no gradient step)")
    assert "\n" not in line and finding("x", _meta(900, [])).endswith("no training warning")


@pytest.fixture(scope="module")
def zoo_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The tiny intelligent_router run once without a zoo (its best/ becomes the zoo's router), then with it."""
    mp = pytest.MonkeyPatch()
    first = tmp_path_factory.mktemp("own")
    mp.setattr(zoo_routers, "zoo", fake_zoo(tmp_path_factory.mktemp("empty_zoo"), {}))
    own = intelligent_router.run(False, first, 1, False, size="tiny")
    ckpt = first / "train" / f"{intelligent_router.PRESET}_guided" / "best"
    mp.setattr(zoo_routers, "zoo", fake_zoo(tmp_path_factory.mktemp("zoo"), {"workload_router": ("workload_router",
                                                                                                   ckpt)}))
    second = tmp_path_factory.mktemp("with_zoo")
    rows = intelligent_router.run(False, second, 1, False, size="tiny")
    mp.undo()
    return {"own": own, "rows": rows, "out": second}


@pytest.mark.slow
def test_without_a_zoo_each_learned_policy_has_its_line_and_its_own_checkpoint_is_measured(zoo_run) -> None:
    lines = zoo_run["own"][0]["learned"]
    assert [ln.split(":")[0] for ln in lines] == [v.name for v in VARIANTS]
    assert all("the zoo has no workload_router router: the claims measure this run's own checkpoint" in ln
               for ln in lines)
    assert all("this run's own training, 400 steps and" in ln for ln in lines)


@pytest.mark.slow
def test_with_the_zoo_the_learned_claims_measure_its_router_labelled_with_its_command(zoo_run) -> None:
    rows, out = zoo_run["rows"], zoo_run["out"]
    label = f"zoo router workload_router, trained by `{TRAIN_COMMAND}`, 400 steps"
    assert len(rows[0]["learned"]) == len(VARIANTS)
    assert all(ln.endswith(f"the claims measure the {label} instead") for ln in rows[0]["learned"])
    evaluated = {p["label"] for p in json.loads((out / "evaluation.json").read_text())["policies"]}
    assert ZOO_LABEL in evaluated
    gains = [r for r in rows if r["claim"].endswith("gain vs RR, mean E2E (4 instances)")]
    assert len(gains) == len(VARIANTS) and len({r["measured"] for r in gains}) == 1  # one router stands for all
    for v, r in zip(VARIANTS, gains):
        assert r["note"].startswith(f"{v.name}: this run's own training") and label in r["note"]


# ---------------------------------------------------------------------- qos_edge and best_effort: which router
def _run(root: Path, name: str, updates: int, experts: list[str] | None = None) -> Path:
    """A finished training run directory (training.json, best/checkpoint.json) made by hand."""
    d = root / name
    (d / "best").mkdir(parents=True)
    (d / "best" / "checkpoint.json").write_text(json.dumps({"env": {"id": "qos_edge", "experts": experts or []}}))
    (d / "training.json").write_text(json.dumps({"steps": 4000, "updates": updates, "warnings": [],
                                                 "evaluations": [{"step": 4000, "warnings": []}]}))
    return d


EXPERTS = ["alpaca-native", "chatglm-6b"]


@pytest.mark.parametrize("size,zoo_experts,replaced", [("quick", EXPERTS, True), ("quick", ["chatglm-6b"], False),
                                                       ("full", EXPERTS, False)])
def test_qos_edge_measures_the_zoo_router_for_ours_only_when_it_serves_the_same_experts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: str, zoo_experts: list[str], replaced: bool) -> None:
    runs = {k: _run(tmp_path, k, 0 if k == "sac_han" else 10, EXPERTS) for k in ("sac_han", "baseline_rl")}
    shipped_run = _run(tmp_path / "shipped", "router", 10, zoo_experts)
    zoo = fake_zoo(tmp_path / "zoo", {"qos_edge": ("qos_edge", shipped_run / "best")})
    monkeypatch.setattr(zoo_routers, "zoo", zoo)
    ckpts = {k: d / "best" for k, d in runs.items()}
    instead = qos_edge.use_zoo(ckpts, size, EXPERTS)
    assert (ckpts["sac_han"] == tmp_path / "zoo" / "qos_edge" / "checkpoint") is replaced
    assert ckpts["baseline_rl"] == runs["baseline_rl"] / "best"
    by = {"round_robin": {"avg_qos_mean": 0.5}, "sac_han": {"avg_qos_mean": 0.4}, "baseline_rl": {"avg_qos_mean": 0.6}}
    lines = qos_edge.learned_lines(runs, instead, by)
    assert lines["sac_han"].startswith("sac_han: this run's own training, 4,000 steps and 0 gradient steps: no "
                                       "learning happened")
    assert ("the claims measure the zoo router qos_edge, trained by" in lines["sac_han"]) is replaced
    assert ("does not beat round_robin in avg QoS (-20.0 %)" in lines["sac_han"]) is not replaced
    assert lines["baseline_rl"] == ("baseline_rl: this run's own training, 4,000 steps and 10 gradient steps: no "
                                    "training warning; its own checkpoint beats round_robin in avg QoS by 20.0 %; "
                                    "the claims measure this run's own checkpoint")
    if size == "quick" and not replaced:
        assert "serves other experts than this setting's" in lines["sac_han"]


def test_best_effort_measures_the_zoo_router_for_the_hard_deadline_one(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    runs = {k: _run(tmp_path, k, 5) for k in ("hard", "soft")}
    shipped_run = _run(tmp_path / "shipped", "router", 10)
    monkeypatch.setattr(zoo_routers, "zoo", fake_zoo(tmp_path / "zoo", {"best_effort": ("best_effort",
                                                                                          shipped_run / "best")}))
    ckpts = {k: d / "best" for k, d in runs.items()}
    lines = best_effort_experiment.use_zoo(ckpts, runs, "quick")
    assert ckpts == {"hard": tmp_path / "zoo" / "best_effort" / "checkpoint", "soft": runs["soft"] / "best"}
    assert lines["hard-deadline router"].endswith(f"the claims measure the zoo router best_effort, trained by "
                                                  f"`{TRAIN_COMMAND}`, 400 steps instead")
    assert "this run's own checkpoint (fine-tuned from this run's hard one)" in lines["soft-deadline router"]
