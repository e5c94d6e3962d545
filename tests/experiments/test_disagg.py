"""``llmsim-reproduce disagg`` end to end at the test size (seconds), plus what a broken P/D split would fail."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from experiments.harness.claims import KEYS, VERDICTS
from experiments.studies import disagg
from experiments.studies.disagg import setup as D
from llmsim import simulate
from llmsim.cluster import InstanceConfig
from llmsim.errors import ConfigError
from llmsim.schema import SLO

pytestmark = pytest.mark.skipif(not D.lengths_path().is_file(),
                                reason="ShareGPT lengths (../shared/traces/sharegpt_lengths) not available")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], dict, Path]:
    """The whole study once at LLMSIM_REPRODUCE_SIZE=tiny, written under a temporary directory."""
    out = tmp_path_factory.mktemp("disagg")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LLMSIM_REPRODUCE_SIZE", "tiny")
        rows = disagg.run(False, out, 1, False)
    return rows, json.loads((out / "results.json").read_text()), out


def test_harness_writes_page_and_claims(tiny_run: tuple[list[dict], dict, Path]) -> None:
    rows, rep, out = tiny_run
    assert rep["size_name"] == "tiny"
    assert rows and all(list(r)[:5] == list(KEYS) and r["verdict"] in VERDICTS for r in rows)
    assert all("NOT the full setting" in r["setting_note"] for r in rows)
    page = (out / "results.md").read_text()
    for section in ("## Capacity", "## Attainment vs rate", "## KV link", "## Claims", "## Where llmsim differs"):
        assert section in page
    assert not rep["errors"], rep["errors"]
    # every (layout, policy) has a capacity, and the link arms ran for the best layout
    arms = {(c["layout"], c["policy"], c["link"], c["transfer"]) for c in rep["capacity"]}
    assert {("mixed", "vllm_v0", "infiniband", "overlap"), ("2:2", "chunked", "infiniband", "overlap"),
            ("2:2", "vllm_v0", "nvlink", "overlap"), ("2:2", "vllm_v0", "infiniband", "blocking")} <= arms
    assert all(c["capacity_rps"] > 0 for c in rep["capacity"])


def test_prefill_instances_give_faster_first_tokens(tiny_run: tuple[list[dict], dict, Path]) -> None:
    """At 1 req/s per GPU (little queueing), a prompt on a prefill-only instance never shares an iteration with
    decodes (chunked) nor waits behind a decode iteration (vllm_v0), so 2:2's TTFT is below the colocated
    cluster's, whose prompts do both; and every multi-token request crosses the link exactly once. A P/D split
    that counted TTFT after the KV copy, ran decodes on prefill instances or skipped the copy fails this."""
    _, rep, _ = tiny_run
    g = {(r["layout"], r["policy"]): r for r in rep["grid"]}
    for pol in ("vllm_v0", "chunked"):
        d = g[("2:2", pol)]
        assert d["p90_ttft_ms"] < g[("mixed", "chunked")]["p90_ttft_ms"]
        assert d["mean_ttft_ms"] < g[("mixed", "vllm_v0")]["mean_ttft_ms"]
        assert d["kv_transfers"] == d["multi_token"] == d["completed"]
        assert d["mean_kv_transfer_ms"] > 0
        assert g[("mixed", pol)]["kv_transfers"] in (None, 0)


def test_score_matches_llmsim_slo_summary() -> None:
    """The study re-scores one run for several SLOs; for the SLO given to simulate it equals llmsim's own."""
    reqs = D.requests_of(6.0, 120, 3)
    insts = [InstanceConfig(model=D.MODEL, gpu=D.GPU, role=r) for r in D.roles_of("1:1", 2)]
    res = simulate(insts, reqs, D.ROUTER, seed=3, slo=SLO(ttft_ms=300.0, tpot_ms=40.0), on_unservable="drop")
    s = res.summary
    dur = len(res.requests) / s["request_throughput"]
    got = D.score(res.requests, len(reqs), dur, {"x": [300.0, 40.0]})
    assert got["att_x"] == pytest.approx(s["slo_attainment"])
    assert got["att_ttft_x"] == pytest.approx(s["slo_ttft_attainment"])
    assert got["att_tpot_x"] == pytest.approx(s["slo_tpot_attainment"])
    assert math.isclose(got["goodput_x"], s["request_goodput"], rel_tol=1e-9)


def test_layouts_and_size_errors(tmp_path: Path) -> None:
    assert D.roles_of("1:3", 4) == ["prefill", "decode", "decode", "decode"]
    assert D.roles_of("mixed", 2) == ["mixed", "mixed"]
    with pytest.raises(ConfigError):
        D.roles_of("2:3", 4)
    with pytest.raises(ConfigError):
        disagg.run(False, tmp_path, 1, False, size="huge")
