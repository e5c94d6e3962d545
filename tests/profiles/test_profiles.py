"""Measured profiles: loading and its errors, monotonicity, capacity, build determinism, measuring, replay."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from llmsim.errors import ProfileError
from llmsim.perf.models import from_hf_config, get_model
from llmsim.perf.profile import RooflineProfile, load_profile
from llmsim.perf.profile_table import MeasuredProfile, load_profile_file
from llmsim.profiles.build import build_all
from llmsim.profiles.cli import main
from llmsim.profiles.compare import compare_profile_texts
from llmsim.profiles.measure import profile_model, resolve_model
from tests.profiles.helpers import DATA, RAW, needs_raw, tiny_raw


def test_load_measured_default():
    p = load_profile("llama-2-7b", "a100-80gb")
    assert isinstance(p, MeasuredProfile)
    assert not p.estimated
    assert p.describe()["kind"] == "measured"
    assert isinstance(load_profile("llama-2-7b", "a100-80gb", kind="roofline"), RooflineProfile)


def test_estimated_parts_flagged():
    p = load_profile("llama-2-7b", "v100-32gb")
    assert p.estimated and "decode_attention" in p.describe()["estimated_parts"]


def test_errors_are_clear(tmp_path):
    with pytest.raises(ProfileError, match="does not exist"):
        load_profile_file(tmp_path / "nope.yaml")
    with pytest.raises(ProfileError, match="unknown model 'no-such-model'"):
        load_profile("no-such-model", "a100-80gb")
    with pytest.raises(ProfileError, match="unknown GPU 'no-such-gpu'"):
        load_profile("llama-2-7b", "no-such-gpu")
    with pytest.raises(ProfileError, match="no measured profile"):
        load_profile("llama-2-70b", "a10", kind="measured")
    good = yaml.safe_load((DATA / "a100-80gb" / "llama-2-7b.yaml").read_text())
    bad = dict(good, decode_attention={"fixed": 0.0, "per_seq": "fast", "per_ctx_token": 1e-7})
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(bad))
    with pytest.raises(ProfileError, match=r"bad.yaml.*decode_attention.per_seq"):
        load_profile_file(f)
    bad = dict(good)
    del bad["memory"]
    f.write_text(yaml.safe_dump(bad))
    with pytest.raises(ProfileError, match=r"key 'memory': missing"):
        load_profile_file(f)
    f.write_text("dense: [1, 2\n")
    with pytest.raises(ProfileError, match="not valid YAML"):
        load_profile_file(f)


@pytest.mark.parametrize(
    "model,gpu",
    [
        ("llama-2-7b", "a100-80gb"),
        ("llama-3.1-8b", "rtx4090"),
        ("llama-2-7b", "v100-16gb"),
        ("opt-6.7b", "titan-rtx"),
        ("mistral-7b", "h100"),
    ],
)
def test_step_time_monotone(model, gpu):
    p = load_profile(model, gpu)
    prev = 0.0
    for n in [1, 2, 3, 7, 16, 100, 513, 2048, 5000, 20000, 40000]:
        t = p.step_time(n, 1, 0, 0, 1, 100)
        assert t >= prev and t > 0
        prev = t
    prev = 0.0
    for ctx in [0, 10, 1000, 10**5, 10**6]:
        t = p.step_time(64, 64, 0, 0, 64, ctx)
        assert t >= prev
        prev = t
    base = p.step_time(512, 1, 512 * 512, 0, 0, 0)
    assert p.step_time(512, 1, 512 * 512, 512 * 1000, 0, 0) > base
    assert p.step_time(512, 2, 512 * 512, 0, 0, 0) >= base
    assert p.step_time(513, 2, 512 * 512, 0, 1, 0) >= base
    assert p.step_time(40, 40, 0, 0, 40, 4000) == p.step_time(40, 40, 0, 0, 40, 4000)


def test_capacity_anchors():
    assert load_profile("llama-3.1-8b", "rtx4090").kv_capacity_tokens(0.9) == pytest.approx(41_408, rel=0.01)
    # DistServe OPT-13B TP1 on A100-80GB: 66,144 tokens (utilisation not recorded): within 10 % at 0.9
    assert load_profile("opt-13b", "a100-80gb").kv_capacity_tokens(0.9) == pytest.approx(66_144, rel=0.10)
    with pytest.raises(ValueError, match="does not fit"):
        load_profile("llama-2-13b", "v100-16gb", kind="roofline").kv_capacity_tokens(0.9)


def test_build_from_fixture_deterministic(tmp_path):
    tiny_raw(tmp_path / "raw")
    for out in ("o1", "o2"):
        assert main(["build", "--from-raw", str(tmp_path / "raw"), "--out", str(tmp_path / out)]) == 0
    a, b = (tmp_path / o / "a10" / "llama-2-7b.yaml" for o in ("o1", "o2"))
    assert a.read_bytes() == b.read_bytes()
    p = load_profile_file(a)
    assert p.step_time(1, 1, 0, 0, 1, 16) == pytest.approx(
        32 * (7 * 5.1 + 5 + 0.016 * 1e-3 * 1e3) * 1e-6 + 2 * 5.1e-6 + 121e-6 + 5e-4 + 2e-6, rel=0.1
    )


@needs_raw
def test_build_deterministic_and_matches_committed(tmp_path):
    """Two builds in one process are byte-identical; the committed files agree with them numerically
    (llmsim.profiles.compare: rounding to 4 digits may flip a last digit on another machine)."""
    # vidur (repeated token counts), LLMServingSim, vidur + all-reduce at TP 2/4/8
    for out in ("a", "b"):
        for only in ("a100-80gb/llama-2-7b", "a100-80gb/llama-3.1-8b", "rtx4090/llama-3.1-8b", "h100/llama-2-70b"):
            build_all(RAW, tmp_path / out, only=only, verbose=False)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").glob("*/*.yaml"))
    assert len(files) == 6
    for rel in files:
        a, b = (tmp_path / "a" / rel).read_bytes(), (tmp_path / "b" / rel).read_bytes()
        assert a == b, rel
        diffs = compare_profile_texts((DATA / rel).read_text(), a.decode())
        assert not diffs, f"committed {rel} is stale (python -m llmsim.profiles build --write): " + "; ".join(
            map(str, diffs[:5])
        )


def test_committed_files_small_and_valid():
    files = sorted(DATA.glob("*/*.yaml"))
    assert len(files) >= 20
    for f in files:
        assert f.stat().st_size < 8000, f
        load_profile_file(f)


def test_profiler_cpu_tiny(tmp_path):
    pytest.importorskip("torch")

    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "_name_or_path": "tiny-test-llama",
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "intermediate_size": 128,
                "vocab_size": 256,
            }
        )
    )
    m = resolve_model(str(cfg))
    raw = profile_model(
        m,
        "cpu",
        tmp_path / "raw",
        gpu_name="a10",
        quick=True,
        max_tokens=64,
        max_ctx=256,
        max_batch=8,
        iters=1,
        repeats=1,
    )
    meta = yaml.safe_load((raw / "meta.yaml").read_text())
    assert meta["timing"]["method"] == "perf_counter" and meta["shape"]["n_kv_heads"] == 2
    assert main(["build", "--from-raw", str(raw), "--out", str(tmp_path / "out")]) == 0
    p = load_profile_file(tmp_path / "out" / "a10" / "tiny-test-llama.yaml")
    assert p.step_time(64, 1, 64 * 64, 0, 0, 0) >= p.step_time(1, 1, 1, 0, 0, 0) > 0


def test_replay_tiny_fixture(tmp_path, capsys):
    p = load_profile("llama-2-7b", "a100-80gb")
    rows = ["arrival,prompt_tokens,output_tokens,ttft,e2e"]
    for i in range(12):
        pre = p.step_time(200, 1, 200 * 200, 0, 0, 0)
        rows.append(f"{i * 2.0},200,20,{pre:.4f},{pre + 19 * p.step_time(1, 1, 0, 0, 1, 210):.4f}")
    f = tmp_path / "reqs.csv"
    f.write_text("\n".join(rows) + "\n")
    assert main(["replay", "--requests", str(f), "--model", "llama-2-7b", "--gpu", "a100-80gb", "--json"]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    by = {r["metric"]: r for r in out}
    assert set(out[0]) == {"metric", "simulated", "measured", "error_pct"}
    assert abs(by["mean_e2el_ms"]["error_pct"]) < 15
    assert abs(by["mean_tpot_ms"]["error_pct"]) < 15


def test_from_hf_config_opt(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "model_type": "opt",
                "_name_or_path": "facebook/opt-125m",
                "num_hidden_layers": 12,
                "hidden_size": 768,
                "num_attention_heads": 12,
                "ffn_dim": 3072,
                "vocab_size": 50272,
                "max_position_embeddings": 2048,
                "torch_dtype": "float16",
            }
        )
    )
    m = from_hf_config(str(cfg), name="opt-125m-copy")
    ref = get_model("opt-125m")
    assert (m.n_layers, m.hidden, m.intermediate, m.gated_mlp, m.kv_bytes_per_token) == (
        ref.n_layers,
        ref.hidden,
        ref.intermediate,
        ref.gated_mlp,
        ref.kv_bytes_per_token,
    )
    shutil.rmtree(tmp_path, ignore_errors=True)
