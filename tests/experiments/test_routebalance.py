"""``llmsim-reproduce routebalance`` (experiments/papers/routebalance/): the label -> policy mapping, the cell
metrics, a smoke run at the tiny size, missing predictor arms, the sections and ``--json``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from experiments import reproduce
from experiments.harness.claims import KEYS, VERDICTS
from experiments.harness.sizes import SIZE_ENV
from experiments.papers import routebalance
from experiments.papers.routebalance import cells as R
from experiments.papers.routebalance import setup as S
from experiments.papers.routebalance.experiment import sections_of
from llmsim.errors import ConfigError
from llmsim.routing.routebalance.estimators import ESTIMATORS

pytestmark = pytest.mark.timeout(60)


def test_labels_map_to_the_documented_policies() -> None:
    name, kw, tick = S.policy("rb:quality")
    assert name == "routebalance" and kw["weights"] == [0.8, 0.1, 0.1] and tick == S.RB_TICK
    assert S.policy("rb:w=0.5,0.5,0")[1]["weights"] == [0.5, 0.5, 0.0]
    assert S.policy("rbn:uniform")[1]["estimator"] == "noisy"
    _, a2, _ = S.policy("arm2")
    _, a3, _ = S.policy("arm3")
    _, a4, _ = S.policy("arm4")
    assert a2["weights"] == a3["weights"] == [0.5, 0.5, 0.0] and a2["tiebreak"] == "queue"
    assert a3["tiebreak"] == "latency" and a4["latency"] == "static"
    name, kw, tick = S.policy("br:0.5:sq")
    assert name == "best_route" and kw["scoring"] == "concurrent" and kw["scoring_ms"] == 431.0
    assert kw["dispatcher"] == "shortest_queue" and tick == S.BR_TICK
    name, kw, tick = S.policy("brser:0:rr")
    assert kw["scoring"] == "serial" and kw["scoring_ms"] == S.SERIAL_EFFECTIVE_MS and tick == S.SERIAL_TICK
    assert S.policy("ap:0.53:rr")[0] == "avengers_pro" and S.policy("pt:sq")[0] == "jsq"
    with pytest.raises(ValueError):
        S.policy("rb:nonsense")
    assert len(S.SIZES["full"].weights) == 16 and len(set(S.SIZES["full"].weights)) == 16


def test_slow72_scales_only_the_72b_tier_and_metrics_are_zero_safe() -> None:
    fast, slow = S.instances(False), S.instances(True)
    assert [i.model for i in fast] == [i.model for i in slow] and len(slow) == 13
    for f, s in zip(fast, slow):
        want = S.SLOW72 if f.model == "qwen2.5-72b" else 1.0
        assert s.engine.step_time_scale == pytest.approx(want)
    reqs = S.workload(12.0, 4, 5)
    reqs[0].quality_by_model["qwen2.5-3b"] = 0.0
    df = pd.DataFrame({"id": [0, 1], "instance": [12, 0], "arrival": [reqs[0].arrival, reqs[1].arrival],
                       "finish": [reqs[0].arrival + 1, reqs[1].arrival + 3], "first_token": [0.0, 0.0],
                       "routed_time": [reqs[0].arrival, reqs[1].arrival]})
    m = R.metrics(reqs, fast, df)
    assert m["quality"] == pytest.approx(reqs[1].quality_by_model["qwen2.5-72b"] / 2)  # the 0.0 counts
    assert m["e2e"] == pytest.approx(2.0) and m["mix_3B"] == m["mix_72B"] == 0.5
    assert R.rel(3.0, 2.0) == pytest.approx(50.0) and math.isnan(R.rel(1.0, 0.0))


def test_missing_predictor_arm_is_an_error_row_not_a_fake(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(S.ARM_KW, "armx", {"estimator": "no_such_estimator"})
    out = R.run_cell(R.Cell("iso", "armx", 12.0, 5, 30))
    assert "no_such_estimator" in out["error"] and "quality" not in out  # recorded as missing, never run as arm 1
    monkeypatch.setattr(S, "TELEMETRY", "llmsim.no_such_telemetry_module")
    out = R.run_cell(R.Cell("iso", "arm1_xgb", 12.0, 5, 30))
    assert "no_such_telemetry_module" in out["error"] and "quality" not in out


def test_knn_arm_uses_the_registered_estimator_when_present() -> None:
    if R.load_predictors() or "knn" not in ESTIMATORS:
        pytest.skip("the knn estimator is not registered in this checkout")
    out = R.run_cell(R.Cell("iso", "arm1_knn", 12.0, 5, 60))
    assert "error" not in out and out["completed"] == 60 and 0.0 <= out["best_model_acc"] <= 1.0


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("spec004")
    return out, routebalance.run(False, out, 1, False, size="tiny")


def test_smoke_run_rows_and_files(smoke: tuple[Path, list[dict[str, Any]]]) -> None:
    out, rows = smoke
    assert len(rows) >= 25
    for r in rows:
        assert tuple(r)[:5] == KEYS and r["verdict"] in VERDICTS and r["paper"] == "routebalance"
    report = json.loads((out / "results.json").read_text())
    assert report["size_name"] == "tiny" and (out / "results.md").is_file() and (out / "routebalance.png").is_file()
    runs = [r for r in report["runs"] if "error" not in r]
    assert runs and all(r["completed"] + r["dropped"] == r["n"] for r in runs)
    assert all(0.0 <= r["quality"] <= 1.0 and r["cost"] > 0 for r in runs)
    assert {r["exp"] for r in report["runs"]} >= {"grid", "serial", "iso", "slow72"}
    by = {(r["label"], r["rate"]): r for r in runs if r["exp"] == "grid"}
    assert by[("rb:quality", 12.0)]["quality"] > by[("rb:cost", 12.0)]["quality"]
    assert by[("rb:quality", 12.0)]["cost"] > by[("rb:cost", 12.0)]["cost"]


def test_json_through_the_common_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SIZE_ENV, "tiny")
    reproduce.main(["routebalance", "--json", "--no-progress", "--out", str(tmp_path)])
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.strip()]
    assert lines and all(tuple(x)[:5] == KEYS and x["verdict"] in VERDICTS for x in lines)
    assert len(json.loads((tmp_path / "claims.json").read_text())["claims"]) == len(lines)


def test_bad_size_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--size='huge'"):
        routebalance.run(False, tmp_path, 1, False, size="huge")


def test_budget_and_batching_sections_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--sections budget,batching`` runs the budget study and the batching ablation without the main grid;
    LLMSIM_REPRODUCE_SIZE=tiny means the tiny size."""
    monkeypatch.setenv(SIZE_ENV, "tiny")
    reproduce.main(["routebalance", "--sections", "budget,batching", "--json", "--no-progress", "--out",
                    str(tmp_path)])
    rows = json.loads((tmp_path / "claims.json").read_text())["claims"]
    report = json.loads((tmp_path / "results.json").read_text())
    assert report["size_name"] == "tiny" and report["sections"] == ["budget", "batching"]
    assert {r["exp"] for r in report["runs"]} == {"budget", "batching"}
    assert not (tmp_path / "routebalance.png").exists()
    assert rows and all(r["verdict"] in VERDICTS for r in rows)
    claims = " ".join(r["claim"] for r in rows)
    assert "admission filter" in claims and "LPT-off" in claims and "decision compute" in claims
    runs = {r["label"]: r for r in report["runs"] if r["exp"] == "budget"}
    assert runs["rbb:uniform:0:f"]["budgeted"] == 0 and runs["rbb:uniform:75:f"]["budgeted"] > 0
    assert runs["rbb:uniform:75:f"]["over_budget"] == 0 and 0 < runs["rbb:uniform:75:n"]["clamped_share"] <= 1
    md = (tmp_path / "results.md").read_text()
    assert "Budget study" in md and "Batching ablation (b)" in md and "Frontier" not in md
    with pytest.raises(ConfigError, match="--sections"):
        sections_of("budget,nope")
