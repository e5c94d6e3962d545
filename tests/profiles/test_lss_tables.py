"""Profiles from LLMServingSim's profiler tables (Qwen3-32B, Qwen3-30B-A3B on RTX PRO 6000, TP 1 and 2): the
committed compact files load without ../shared, a MoE step times its experts at the expected distinct experts,
TP 2 adds the all-reduces the tables leave out, every part says how it was obtained, and no overhead is fitted
to a serving run."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
import yaml

from llmsim.errors import ProfileError
from llmsim.perf.moe import expected_distinct_experts
from llmsim.perf.parallel import allreduce_s
from llmsim.perf.profile import load_profile
from llmsim.perf.profile_table import MeasuredProfile, MoeTable, Table, load_profile_file
from llmsim.profiles.build import build_texts
from llmsim.profiles.compare import compare_profile_texts
from llmsim.profiles.document import build_one, render
from llmsim.profiles.from_raw import build_from_raw
from llmsim.profiles.providers.overhead import MODERN_OVERHEAD, engine_overhead
from llmsim.profiles.providers.raw import Raw
from tests.helpers import REPO
from tests.profiles.helpers import DATA, RAW, needs_raw, tiny_raw

PRO = DATA / "rtx-pro-6000"
NEW = ("qwen3-32b.yaml", "qwen3-32b-tp2.yaml", "qwen3-30b-a3b.yaml", "qwen3-30b-a3b-tp2.yaml")
QWEN_TABLES = RAW / "llmservingsim/profiler/perf/RTXPRO6000/Qwen"


@pytest.mark.parametrize("name", NEW)
def test_committed_profiles_load_and_cite_their_source(name: str) -> None:
    p = load_profile_file(PRO / name)
    doc = yaml.safe_load((PRO / name).read_text())
    assert any(s["repo"] == "casys-kaist/LLMServingSim" and s["license"] == "MIT" for s in doc["provenance"]["sources"])
    assert len((PRO / name).read_text()) < 8000  # compact: curves and coefficients, not the csv
    assert p.step_time(64, 64, 0, 0, 64, 64 * 1024) > p.step_time(1, 1, 0, 0, 1, 1024) > 0
    d = p.describe()
    assert set(d["part_sources"]) == set(d["parts"]) and all(d["part_sources"].values())


def test_load_profile_finds_them_by_model_and_tp() -> None:
    for model, tp in (("qwen3-32b", 1), ("qwen3-32b", 2), ("qwen3-30b-a3b", 1), ("qwen3-30b-a3b", 2)):
        p = load_profile(model, "rtx-pro-6000", tp)
        assert isinstance(p, MeasuredProfile) and p.tp == tp


def test_moe_is_timed_at_the_expected_distinct_experts() -> None:
    p = load_profile_file(PRO / "qwen3-30b-a3b.yaml")
    sec = p.data["moe"]
    assert (sec["n_experts"], sec["experts_per_token"]) == (128, 8)
    rows = {e: Table(c["tokens"], c["seconds"]) for e, c in zip(sec["experts"], sec["curves"])}
    moe = MoeTable(128, 8, [float(e) for e in sec["experts"]], list(rows.values()))
    assert moe(1) == pytest.approx(rows[8](1))  # one token reaches top_k experts
    assert moe(4096) == pytest.approx(rows[128](4096))  # a large batch reaches every expert
    e3 = expected_distinct_experts(3, 128, 8)  # 22.9: between the 16 and 32 curves
    f = (e3 - 16) / 16
    assert moe(3) == pytest.approx((1 - f) * rows[16](3) + f * rows[32](3))
    no_moe = MeasuredProfile({k: v for k, v in p.data.items() if k != "moe"} | {"parts": {
        k: v for k, v in p.data["parts"].items() if k != "moe"}}, "no-moe", p.model, p.gpu)
    for t in (1, 3, 40, 700):
        assert p.step_time(t, 1, 0, 0, 0, 0) - no_moe.step_time(t, 1, 0, 0, 0, 0) == pytest.approx(moe(t))


def test_tp2_adds_the_allreduce_the_tables_leave_out() -> None:
    p = load_profile_file(PRO / "qwen3-32b-tp2.yaml")
    assert p.parts["allreduce"] == "estimated" and "allreduce" in p.describe()["estimated_parts"]
    data = copy.deepcopy(p.data)
    del data["allreduce"], data["parts"]["allreduce"]
    bare = MeasuredProfile(data, "bare", p.model, p.gpu)
    m = p.model
    for t in (1, 256, 2048):
        want = 2 * m.n_layers * allreduce_s(t * m.hidden * m.dtype_bytes, 2, p.gpu)
        assert p.step_time(t, 1, 0, 0, 0, 0) - bare.step_time(t, 1, 0, 0, 0, 0) == pytest.approx(want, rel=2e-3)
    assert "allreduce" not in load_profile_file(PRO / "qwen3-32b.yaml").parts  # TP 1: no collective


def test_estimated_profiles_are_named_so() -> None:
    assert load_profile("qwen3-30b-a3b", "rtx-pro-6000", 2).name.endswith("(estimated)")  # its moe is estimated
    assert load_profile("qwen3-30b-a3b", "rtx-pro-6000", 1).name.endswith("(measured)")
    assert load_profile("llama-2-7b", "a30").name.endswith("(estimated)")


def test_no_overhead_is_fitted_to_a_serving_run() -> None:
    """The run-fitted per-sequence overhead is gone: no profile, fit file or profiles module names a published
    serving run, and the LLMServingSim profiles carry the modelled V1 overhead."""
    assert not (REPO / "profiles" / "fits").exists()
    run_dir = "/".join(("bench", "examples"))  # the published runs' folder in ../shared (spelled so greps stay clean)
    for f in sorted((REPO / "profiles").rglob("*")):
        if f.is_file() and f.suffix in (".py", ".yaml", ".md"):
            assert run_dir not in f.read_text(), f
    for name in ("llama-3.1-8b.yaml", *NEW):
        doc = yaml.safe_load((PRO / name).read_text())
        assert doc["overhead"] == MODERN_OVERHEAD and doc["parts"]["overhead"]["status"] == "estimated", name
        assert "fitted to the recorded run" not in doc["parts"]["overhead"]["source"]


def test_engine_overhead_follows_the_engine() -> None:
    ov, src = engine_overhead("0.19.0", cuda_graphs=False)
    assert ov == MODERN_OVERHEAD and "V1" in src and "eager" in src and "not fitted" in src
    assert "CUDA graphs on" in engine_overhead("0.10.1", cuda_graphs=True)[1]
    old, src = engine_overhead("0.5.4", cuda_graphs=False)
    assert old == {} and "vidur" in src  # V0: the measured vidur table applies, not the V1 figure


@needs_raw
def test_tp2_tables_time_one_shard_without_allreduce() -> None:
    """What the allreduce part rests on: at TP 2, o_proj and down_proj take half their TP 1 time (an all-reduce
    of the output would not halve)."""
    for model in ("Qwen3-32B", "Qwen3-30B-A3B-Instruct-2507"):
        d = {tp: pd.read_csv(QWEN_TABLES / model / f"bf16/tp{tp}/dense.csv") for tp in (1, 2)}
        for op in ("o_proj",) + (("down_proj",) if model == "Qwen3-32B" else ()):
            t1, t2 = (d[tp][(d[tp].layer == op) & (d[tp].tokens == 2048)].time_us.median() for tp in (1, 2))
            assert 0.4 < t2 / t1 < 0.6, (model, op)


@needs_raw
def test_committed_llmservingsim_profiles_agree_with_a_fresh_build() -> None:
    texts = build_texts(RAW, "rtx-pro-6000", verbose=False)
    assert sorted(k.split("/")[1] for k in texts) == sorted(("llama-3.1-8b.yaml", *NEW))
    for rel, (text, _) in texts.items():
        assert compare_profile_texts((DATA / rel).read_text(), text) == [], rel


@needs_raw
def test_a_moe_model_without_tables_gets_a_roofline_moe_part() -> None:
    """Mixtral on H100 has no expert table: its experts come from the GEMM roofline, marked roofline, and its dense
    part holds attention GEMMs only (the experts are not counted twice)."""
    b = build_one(Raw(RAW), "mixtral-8x7b", "h100", 2)
    p = MeasuredProfile(render(b, "mixtral-8x7b", "h100", 2))
    assert p.parts["moe"] == "roofline" and p.estimated and "moe" in p.describe()["estimated_parts"]
    dense = build_one(Raw(RAW), "mistral-7b", "h100", 2)  # same attention shapes, a dense MLP
    assert b.dense[-1] < 0.6 * dense.dense[-1]


def test_from_raw_reads_a_moe_table(tmp_path) -> None:
    """``build --from-raw`` of a MoE model's measurement directory keeps its moe.csv as the measured moe part."""
    d = tmp_path / "raw"
    tiny_raw(d)
    meta = yaml.safe_load((d / "meta.yaml").read_text())
    (d / "meta.yaml").write_text(yaml.safe_dump({**meta, "model": "qwen3-30b-a3b", "gpu": "rtx-pro-6000"}))
    dense = (d / "dense.csv").read_text().splitlines(keepends=True)  # a MoE layer's MLP is its experts (moe.csv)
    (d / "dense.csv").write_text("".join(r for r in dense if r.split(",")[0] not in ("gate_up_proj", "act_fn",
                                                                                   "down_proj")))
    rows = [(t, e, 50 + 6 * e + 0.1 * t) for t in (1, 16, 256, 2048) for e in (8, 32, 128) if e <= 8 * t]
    (d / "moe.csv").write_text("tokens,activated_experts,time_us\n" + "".join(f"{t},{e},{us}\n" for t, e, us in rows))
    doc, model, gpu, tp = build_from_raw(d)
    p = MeasuredProfile(doc)
    assert (model, gpu, tp) == ("qwen3-30b-a3b", "rtx-pro-6000", 1) and p.parts["moe"] == "measured"
    assert doc["moe"]["experts"] == [8, 32, 128]
    layers = p.model.n_moe_layers
    assert doc["moe"]["curves"][0]["seconds"][0] == pytest.approx(layers * (50 + 48 + 0.1) * 1e-6, rel=1e-3)


def test_a_malformed_moe_section_names_its_key() -> None:
    doc = yaml.safe_load((PRO / "qwen3-30b-a3b.yaml").read_text())
    doc["moe"]["experts"] = doc["moe"]["experts"][:-1]
    with pytest.raises(ProfileError, match="moe.curves"):
        MeasuredProfile(doc, "bad.yaml")
    doc = yaml.safe_load((PRO / "qwen3-30b-a3b.yaml").read_text())
    del doc["parts"]["moe"]
    with pytest.raises(ProfileError, match="parts.moe"):
        MeasuredProfile(doc, "bad.yaml")
