"""The leave-measurements-out check of estimated profiles (profiles/estimate_check.py, estimate_report.py): the
builder never reads the hidden GPU's measurements, it is the method behind the committed estimated profiles, its
error table has the expected rows with finite numbers, and the estimated profiles state the expected error."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from llmsim.profiles import estimate_check as ec
from llmsim.profiles import estimate_report as er
from llmsim.profiles.compare import compare_docs
from llmsim.profiles.providers.raw import Raw
from tests.profiles.helpers import DATA, RAW, REPORT, needs_raw


def mirror_without(src: Path, dst: Path, hidden: tuple[str, ...]) -> None:
    """A symlink copy of ``src`` in ``dst`` in which the ``hidden`` relative paths do not exist."""
    hid = [Path(h).parts for h in hidden]

    def walk(rel: tuple[str, ...]) -> None:
        for child in sorted(src.joinpath(*rel).iterdir()):
            r = (*rel, child.name)
            if r in hid:
                continue
            if any(h[: len(r)] == r for h in hid):
                dst.joinpath(*r).mkdir()
                walk(r)
            else:
                dst.joinpath(*r).symlink_to(child)

    dst.mkdir(parents=True, exist_ok=True)
    walk(())


@needs_raw
@pytest.mark.parametrize(
    "gpu,model", [("l40s", "llama-3.1-8b"), ("a100-80gb", "opt-6.7b"), ("rtx-pro-6000", "llama-3.1-8b")]
)
def test_leave_out_never_reads_hidden_gpu(tmp_path: Path, gpu: str, model: str) -> None:
    """Removing every measurement of the hidden GPU from the raw data changes nothing in its estimate
    (a read of a removed file would raise)."""
    paths = ec.MEASUREMENT_PATHS[gpu]
    assert all((RAW / p).exists() for p in paths), "MEASUREMENT_PATHS out of date with ../shared/profiles_raw"
    mirror_without(RAW, tmp_path / "raw", paths)
    assert not any((tmp_path / "raw" / p).exists() for p in paths)
    full = ec.estimated_doc(Raw(RAW), model, gpu)
    blind = ec.estimated_doc(Raw(tmp_path / "raw"), model, gpu)
    assert blind == full
    if gpu in ec.CALIBRATION_GPUS:  # not vacuous: calibrating on the removed GPU would fail
        with pytest.raises((OSError, SystemExit)):
            ec.estimated_doc(Raw(tmp_path / "raw"), model, gpu, hidden="h100")
    # and the hidden GPU's own GEMM table left the calibration set
    _, calib = ec.leave_out_efficiency(Raw(RAW), gpu)
    assert gpu not in calib and calib


@needs_raw
@pytest.mark.parametrize("gpu,model", [("a30", "llama-3.1-8b"), ("a10", "opt-6.7b")])
def test_leave_out_builder_is_the_production_method(gpu: str, model: str) -> None:
    """For a GPU without measurements nothing is hidden: the step-time model equals the committed profile."""
    doc = ec.estimated_doc(Raw(RAW), model, gpu)
    committed = yaml.safe_load((DATA / gpu / f"{model}.yaml").read_text())
    keys = ("dense", "prefill_attention", "decode_attention", "lm_head", "overhead", "memory")
    assert compare_docs({k: committed[k] for k in keys}, {k: doc[k] for k in keys}) == []


@needs_raw
def test_error_table_rows_and_finite_numbers() -> None:
    rows = ec.leave_out_rows(RAW)
    assert {r.gpu for r in rows} == set(ec.HELD_OUT_GPUS)
    have = {(r.gpu, m) for r in rows for m in (r.model, *r.twins)}
    for want in [("rtx-pro-6000", "llama-3.1-8b"), ("rtx4090", "llama-3.1-8b"), ("l40s", "llama-2-13b"),
                 ("a100-80gb", "vicuna-7b"), ("h100", "opt-125m")]:  # fmt: skip
        assert want in have
    assert ("rtx4090", "opt-6.7b") not in have  # transferred from the L40S: not a reference
    for r in rows:
        assert set(r.kinds) == {"prefill", "decode", "mixed"}
        for e in (r.step, r.gpu_only, r.attention_only):
            assert len(e) == len(r.kinds) and np.isfinite(e).all()
    for what in ("step", "gpu_only", "attention_only"):
        p = ec.pooled(rows, what)
        assert all(math.isfinite(v) for v in p.values())
        assert 0 < p["median_abs_pct"] <= p["p90_abs_pct"] < 100
    text = er.error_tables(rows)
    assert text.count("\n| ") == len(rows) + len(ec.HELD_OUT_GPUS) + 5 + 1  # two header rows


def test_shape_grid() -> None:
    shapes = ec.shape_grid()
    assert {s.kind for s in shapes} == {"prefill", "decode", "mixed"}
    for s in shapes:
        if s.kind == "mixed":
            assert s.n_tokens == 2048 and 0 < s.n_decode < s.n_seqs
        if s.kind == "decode":
            assert s.prefill_c2 == 0 and s.n_decode == s.n_tokens
        if s.kind == "prefill":
            assert s.n_decode == 0 and s.prefill_c2 > 0


def test_estimate_kind() -> None:
    assert ec.estimate_kind("a30", {"dense": "roofline", "prefill_attention": "roofline"}) == "roofline"
    assert ec.estimate_kind("titan-rtx", {"dense": "roofline", "prefill_attention": "roofline"}) == "turing"
    assert ec.estimate_kind("a40", {"dense": "vidur", "prefill_attention": "roofline"}) == "attention"
    assert ec.estimate_kind("v100-32gb", {"dense": "apex_plus", "prefill_attention": "v100-calibrated"}) == "v100"
    assert ec.estimate_kind("h100", {"dense": "vidur", "prefill_attention": "aiconfigurator"}) is None


def test_estimated_profiles_state_expected_error() -> None:
    """Every committed profile with an estimated step-time part carries provenance.expected_error; numbers
    (when given) are finite percentages; profiles without estimated step-time parts carry none."""
    n = 0
    for f in sorted(DATA.glob("*/*.yaml")):
        doc = yaml.safe_load(f.read_text())
        estimated = any(doc["parts"][p]["status"] == "estimated" for p in ec.STEP_PARTS)
        ee = doc["provenance"].get("expected_error")
        assert (ee is not None) == estimated, f.name
        if ee is None:
            continue
        n += 1
        assert ee["applies"] in ec.APPLIES.values()
        if "median_abs_pct" in ee:
            vals = [ee["median_abs_pct"], ee["p90_abs_pct"], ee["bias_pct"], *ee["per_gpu_median_abs_pct"]]
            assert all(isinstance(v, float) and math.isfinite(v) for v in vals)
            assert 0 < ee["median_abs_pct"] <= ee["p90_abs_pct"]
    assert n >= 12  # a30, a10, titan-rtx at least


@needs_raw
def test_committed_expected_errors_are_the_methods_current_ones() -> None:
    """Every committed estimated profile states the error the method shows today, the profiles built outside
    ``build`` (docs/routebalance_testbed.md's script) included: a stale block claims an accuracy nobody measured."""
    kinds = {v: k for k, v in ec.APPLIES.items()}
    current: dict[str, dict] = {}
    stale = []
    for f in sorted(DATA.glob("*/*.yaml")):
        ee = yaml.safe_load(f.read_text())["provenance"].get("expected_error")
        if ee is None:
            continue
        kind = kinds[ee["applies"]]
        if kind not in current:
            current[kind] = ec.expected_error(RAW, kind)
        if ee != current[kind]:
            stale.append(f"{f.parent.name}/{f.name}")
    assert stale == []


def test_validation_report_has_the_section() -> None:
    text = REPORT.read_text()
    sec = text.split("## 9. Estimated profiles: leave-measurements-out check", 1)[1]
    for gpu in ec.HELD_OUT_GPUS:
        assert f"| {gpu} |" in sec
    assert "**all (pooled)**" in sec
    assert "python -m llmsim.profiles validate --write" in sec
