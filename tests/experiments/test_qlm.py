"""``llmsim-reproduce qlm`` (experiments/papers/qlm/): the W_A workload's model shares, the claim helpers, a smoke
run at the tiny size, and ``--json`` through the common command line."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from experiments import reproduce
from experiments.harness.claims import KEYS, VERDICTS
from experiments.harness.sizes import SIZE_ENV
from experiments.papers import qlm
from experiments.papers.qlm import claims as R
from experiments.papers.qlm import setup as S
from llmsim.errors import ConfigError

pytestmark = pytest.mark.timeout(60)


def test_wa_workload_model_shares_and_tail_models() -> None:
    mix = S.model_mix(0.2)
    assert math.isclose(sum(mix.values()), 1.0)
    assert math.isclose(sum(mix[m] for m in S.TAIL), 0.2)
    assert len(S.TAIL) / len(S.MODELS) > 0.5                      # > 50 % of the models are tail models
    assert len(S.MODELS) > len(S.wa_cluster(4))                    # more models than instances
    reqs = S.make_requests(20_000, 2.0, 0, mix, 0.2)
    seen = {m: sum(r.model == m for r in reqs) / len(reqs) for m in S.MODELS}
    for m in S.MODELS:
        assert seen[m] == pytest.approx(mix[m], abs=0.01), m
    assert max(seen[m] for m in S.TAIL) < min(seen[m] for m in S.HEAD)  # the tail models are the rarely used ones
    assert sum(r.slo_class == S.LS for r in reqs) / len(reqs) == pytest.approx(0.2, abs=0.01)
    again = S.make_requests(20_000, 2.0, 0, S.model_mix(0.4), 0.5)    # other mixes, the same arrival times
    assert [r.arrival for r in again[:100]] == [r.arrival for r in reqs[:100]]
    for inst in S.wa_cluster(4):
        assert set(inst.models) | {inst.model} == set(S.MODELS) and inst.host_cache_gb == S.HOST_CACHE_GB


def test_mega_prompts_and_clusters() -> None:
    reqs = S.make_requests(2000, 2.0, 1, S.model_mix(0.2), 0.2, mega_share=0.1)
    mega = [r for r in reqs if (r.prompt_tokens, r.output_tokens) == S.MEGA]
    assert len(mega) / len(reqs) == pytest.approx(0.1, abs=0.02)
    het = S.hetero_cluster(4, 0.5)
    assert [i.gpu for i in het].count(S.A10) == 2
    assert all(i.model == S.WB_MODEL for i in het)
    assert all(i.gpu == S.A100 for i in S.hetero_cluster(4, 0.0))


def test_policy_labels_and_claim_helpers() -> None:
    assert S.policy("vllm") == ("round_robin", {})
    name, kw = S.policy("qlm_no_warm_start", scale=2.0)
    assert name == "qlm" and kw["ops"]["warm_start"] is False and kw["ops"]["pulling"] is True
    assert kw["slo_s"][S.LS] == 2 * S.SLO_S[S.LS]
    with pytest.raises(ValueError):
        S.policy("qlm_no_magic")
    assert R.rel(3.0, 1.0) == pytest.approx(200.0) and R.rel(1.0, 0.0) == 9999.0 and math.isnan(R.rel(math.nan, 1))
    cells = {1.0: {"attainment": 0.5}, 3.0: {"attainment": 0.995}, 5.0: {"attainment": 1.0}}
    assert R.smallest_scale(cells) == 3.0 and math.isinf(R.smallest_scale({1.0: {"attainment": 0.2}}))


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("spec003")
    rows = qlm.run(False, out, 1, False, size="tiny")
    return out, rows


def test_smoke_run_rows_and_files(smoke: tuple[Path, list[dict[str, Any]]]) -> None:
    out, rows = smoke
    assert len(rows) >= 15
    for r in rows:
        assert tuple(r)[:5] == KEYS and r["verdict"] in VERDICTS and r["paper"] == "qlm"
    report = json.loads((out / "results.json").read_text())
    assert report["size_name"] == "tiny" and (out / "results.md").is_file() and (out / "qlm.png").is_file()
    runs = [r for r in report["runs"] if "error" not in r]
    assert runs and all(r["completed"] + r["dropped"] == r["n"] for r in runs)
    assert {"wa_tail", "wb_rate", "wc", "hetero", "abl_wa", "abl_wb", "relax"} <= set(report["tables"])


def test_json_through_the_common_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SIZE_ENV, "tiny")
    reproduce.main(["spec003", "--json", "--no-progress", "--out", str(tmp_path)])  # the old spec id names QLM
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.strip()]
    assert lines and all(tuple(x)[:5] == KEYS and x["verdict"] in VERDICTS for x in lines)
    assert (tmp_path / "claims.json").is_file() and (tmp_path / "claims.md").is_file()
    assert len(json.loads((tmp_path / "claims.json").read_text())["claims"]) == len(lines)


def test_bad_size_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--size='huge'"):
        qlm.run(False, tmp_path, 1, False, size="huge")
