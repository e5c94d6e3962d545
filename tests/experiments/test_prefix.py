"""``llmsim-reproduce prefix`` (experiments/studies/prefix/): the study end to end at the tiny size, the load rule of
the rate scan, and prefix-aware routing beating round robin on hit rate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments import reproduce
from experiments.harness.claims import KEYS, VERDICTS
from experiments.studies.prefix import setup as R

pytestmark = pytest.mark.timeout(60)


def test_tiny_run_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    if not R.trace_path().exists():
        pytest.skip(f"the Mooncake conversation trace is absent here ({R.trace_path()})")
    monkeypatch.setenv("LLMSIM_REPRODUCE_SIZE", "tiny")
    out = tmp_path / "prefix"
    reproduce.main(["prefix", "--json", "--no-progress", "--out", str(out)])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows and all(list(r)[:5] == list(KEYS) and r["verdict"] in VERDICTS for r in rows)
    assert all("NOT the full setting" in r["setting_note"] for r in rows)
    ideal = rows[0]
    assert ideal["measured"] == pytest.approx(36.64, abs=0.01) and ideal["verdict"] == "reproduced"
    for name in ("claims.json", "claims.md", "results.json", "results.md"):
        assert (out / name).is_file(), name
    report = json.loads((out / "results.json").read_text())
    assert report["size_name"] == "tiny"
    assert {r["paper"] for r in rows} == {"prefix"}
    assert {r["label"] for r in report["table"]} == set(R.ROUTERS)
    page = (out / "results.md").read_text()
    assert "## 1." in page and "## 2." in page and "## 3. Verdict" in page and "Not the full setting" in page


def test_choose_rate_rule() -> None:
    def row(x: float, ttft: float, rps: float, offered: float = 1.0) -> dict[str, float]:
        return {"x": x, "ttft_mean": ttft, "rps": rps, "offered_rps": offered}

    assert R.choose_rate([row(1, 10, 1), row(2, 15, 1), row(3, 25, 0.95), row(4, 900, 0.5)])[0] == 3
    assert R.choose_rate([row(1, 10, 1), row(2, 12, 1), row(3, 900, 0.5)])[0] == 2   # highest stable
    assert R.choose_rate([row(2, 10, 0.5), row(1, 10, 0.4)])[0] == 1                 # none stable: lightest


def test_prefix_aware_beats_round_robin_on_tiny_multi_turn() -> None:
    sz = R.SIZES["tiny"]
    cell = R.Cell("route", "multi_turn", 4, "round_robin", sz.mt_rates[0], 0, n_req=sz.mt_requests)
    rr = R.run_cell(cell)
    pa = R.run_cell(R.Cell(**{**cell.__dict__, "label": "prefix_precise"}))
    assert rr["completed"] == pa["completed"] == sz.mt_requests
    assert pa["hit_rate"] > rr["hit_rate"] + 0.05
    assert pa["hits"] > rr["hits"] and pa["queries"] == pytest.approx(rr["queries"], rel=0.05)
