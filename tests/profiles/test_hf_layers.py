"""LLMServingSim's v0 per-layer tables (profiles/providers/hf_layers.py): nanoseconds to operator records with the
Llama-3.1-8B shapes, one line for a bad row, the units checked against AIConfigurator's H100, and only their GEMMs
in the calibration of the estimate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmsim.errors import ProfileError
from llmsim.perf.models import get_model
from llmsim.profiles import estimate_check as ec
from llmsim.profiles.providers.hf_layers import COLUMNS, HF_ATTENTION, HF_ELEMENTWISE, v0_dir, v0_records
from llmsim.profiles.providers.operators import gemm_cost, prefill_cost
from llmsim.profiles.providers.raw import Raw
from tests.profiles.helpers import RAW, needs_raw

LAYERS = ("embedding", "input_layernorm", "q_proj", "k_proj", "v_proj", "rope", "attn", "o_proj", "post_layernorm",
          "gate_proj", "up_proj", "act_fn", "down_proj", "final_layernorm", "lm_head")


def write_table(root: Path, gpu: str, rows: list[str]) -> Path:
    d = v0_dir(root, gpu)
    d.mkdir(parents=True)
    (d / "layers.csv").write_text(",".join(COLUMNS) + "\n" + "\n".join(rows) + "\n")
    return d / "layers.csv"


def test_records_from_nanoseconds_with_the_llama_shapes(tmp_path: Path) -> None:
    rows = [f"{op},{t},0,1,{1000 * (i + 1) * t}" for t in (1, 3, 16) for i, op in enumerate(LAYERS)]
    write_table(tmp_path, "rtx3090", rows)
    recs = {r.label: r for r in v0_records(tmp_path, "rtx3090")}
    m = get_model("llama-3.1-8b")
    assert "q_proj@3" not in recs  # only the power-of-two token counts are kept
    q = recs["q_proj@16"]
    assert q.cls == "gemm" and q.seconds == pytest.approx(3000 * 16 * 1e-9)  # ns -> s
    assert (q.flops, q.bytes) == gemm_cost(16, m.q_dim, m.hidden)
    assert (recs["down_proj@1"].flops, recs["down_proj@1"].bytes) == gemm_cost(1, m.hidden, m.intermediate)
    assert recs["lm_head@1"].flops == gemm_cost(1, m.vocab, m.hidden)[0]
    assert recs["rope@16"].cls == HF_ELEMENTWISE and recs["rope@16"].bytes == 2 * (m.q_dim + m.kv_dim) * 16 * 2
    assert "attn@1+0" not in recs and recs["attn@16+0"].cls == HF_ATTENTION
    assert recs["attn@16+0"].flops == prefill_cost(m, m.n_heads, m.n_kv_heads, 16, 0)[0]


@pytest.mark.parametrize("bad", ["q_proj,16,0,1,-5", "qq_proj,16,0,1,100", "q_proj,x,0,1,100", "q_proj,16,0,2,100",
                                 "q_proj,1.5,0,1,100"])
def test_a_bad_row_is_one_line_naming_file_and_line(tmp_path: Path, bad: str) -> None:
    path = write_table(tmp_path, "rtx-a6000", ["q_proj,1,0,1,100", bad])
    with pytest.raises(ProfileError) as e:
        v0_records(tmp_path, "rtx-a6000")
    msg = str(e.value)
    assert "\n" not in msg and f"{path}:3" in msg


def test_wrong_columns_are_refused(tmp_path: Path) -> None:
    d = v0_dir(tmp_path, "h100")
    d.mkdir(parents=True)
    (d / "layers.csv").write_text("layer,tokens,time_us\nq_proj,1,5\n")
    with pytest.raises(ProfileError, match="columns"):
        v0_records(tmp_path, "h100")


@needs_raw
def test_v0_h100_gemms_are_aiconfigurators_in_nanoseconds() -> None:
    """The unit check of the reader: the v0 H100 GEMMs up to 256 tokens are AIConfigurator's H100 GEMMs of the same
    shapes (median ratio 1.0; a microsecond or millisecond misreading would be off by 10^3)."""
    gm = Raw(RAW).aic_gemm("h100")
    m = get_model("llama-3.1-8b")
    nk = {"q_proj": (m.q_dim, m.hidden), "gate_proj": (m.intermediate, m.hidden),
          "down_proj": (m.hidden, m.intermediate)}
    ratios = []
    for r in v0_records(RAW, "h100"):
        op, tokens = r.label.split("@")
        if op in nk and int(tokens) <= 256:
            ratios.append(r.seconds / gm(int(tokens), *nk[op]))
    assert len(ratios) == 27 and 0.95 < np.median(ratios) < 1.05


@needs_raw
def test_calibration_takes_the_v0_gemms_of_rtx3090_and_a6000_only() -> None:
    recs = ec.calibration_records(str(RAW.resolve()))
    v0 = [r for r in recs if r.source.startswith("llmservingsim-v0:")]
    assert {r.gpu for r in v0} == {"rtx3090", "rtx-a6000"} and {r.cls for r in v0} == {"gemm"}
    rows = {(r.gpu, r.what): r for r in ec.operator_error_rows(RAW)}
    for gpu in ("rtx3090", "rtx-a6000"):
        row = rows[(gpu, "gemm")]
        assert gpu not in row.calibrated_on and len(row.err) == 96 and np.mean(np.abs(row.err)) < 30
    assert {"rtx3090", "rtx-a6000"} <= set(rows[("rtx4090", "gemm")].calibrated_on)
