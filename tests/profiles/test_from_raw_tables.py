"""``build --from-raw`` on measurement tables that would build a wrong profile in silence: a zero time, a point
measured twice, an operator missing at some sizes or altogether, attention without decode or prefill rows, a TP the
model cannot split over (or that the profiler's own tp_degrees leave out), a mixture-of-experts model without its
expert table (or a dense one with one), a bad model shape. Each is one line naming the file, line or key and what
was expected; nothing is written. A TP > 1 profile gets the all-reduces its shard tables leave out, marked
estimated."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from llmsim.perf.parallel import ALLREDUCES_PER_LAYER, allreduce_s
from llmsim.perf.profile_table import MeasuredProfile
from llmsim.profiles.cli import main
from llmsim.profiles.from_raw import build_from_raw
from tests.profiles.helpers import tiny_raw

MLP_OPS = ("gate_up_proj", "act_fn", "down_proj")


def _append(f: Path, text: str) -> None:
    f.write_text(f.read_text() + text)


def _drop(f: Path, keep: Callable[[str], bool]) -> None:
    """Remove the data lines of table ``f`` that ``keep`` rejects (the header stays)."""
    head, *rows = f.read_text().splitlines(keepends=True)
    kept = [r for r in rows if keep(r)]
    assert len(kept) < len(rows), f  # the edit must change the table, or the test would check nothing
    f.write_text(head + "".join(kept))


def _meta(d: Path, **changes) -> None:
    meta = yaml.safe_load((d / "meta.yaml").read_text())
    (d / "meta.yaml").write_text(yaml.safe_dump({**meta, **changes}))


def _moe_model(d: Path, with_table: bool = True) -> None:
    """Make ``d`` a Qwen3-30B-A3B measurement: no dense MLP ops (its experts are in moe.csv)."""
    _meta(d, model="qwen3-30b-a3b", gpu="rtx-pro-6000")
    _drop(d / "dense.csv", lambda r: r.split(",")[0] not in MLP_OPS)
    if with_table:
        rows = [(t, e, 50 + 6 * e + 0.1 * t) for t in (1, 16, 256) for e in (8, 32, 128) if e <= 8 * t]
        body = "".join(f"{t},{e},{us}\n" for t, e, us in rows)
        (d / "moe.csv").write_text("tokens,activated_experts,time_us\n" + body)


SHAPE = {"n_layers": 4, "hidden": 512, "n_heads": 8, "n_kv_heads": 8, "intermediate": 1024, "vocab": 1000,
         "gated_mlp": True}
CASES = [
    ("zero_time", lambda d: _append(d / "dense.csv", "layernorm,4096,0\n"),
     "dense.csv: line 38: time_us: expected a finite number > 0 (microseconds), got '0'"),
    ("zero_tokens", lambda d: _append(d / "dense.csv", "layernorm,0,3\n"),
     "dense.csv: line 38: tokens: expected a whole number >= 1, got '0'"),
    ("fractional_batch", lambda d: _append(d / "attention.csv", "0,0,2.5,16,7\n"),
     "attention.csv: line 14: n_decode: expected a whole number >= 0, got '2.5'"),
    ("same_point_twice", lambda d: _append(d / "dense.csv", "qkv_proj,16,500\n"),
     "dense.csv: line 38 measures the point of line 13 again (layer='qkv_proj', tokens=16)"),
    ("decode_point_twice", lambda d: _append(d / "attention.csv", "0,0,8,1024,900\n"),
     "attention.csv: line 14 measures the point of line 11 again (prefill_chunk=0, kv_prefill=0, n_decode=8, "
     "kv_decode=1024)"),
    ("lm_head_twice", lambda d: _append(d / "per_sequence.csv", "lm_head,16,9999\n"),
     "per_sequence.csv: line 8 measures the point of line 4 again (layer='lm_head', sequences=16)"),
    ("op_missing_at_one_size", lambda d: _drop(d / "dense.csv", lambda r: not r.startswith("qkv_proj,16,")),
     "dense.csv: layer 'qkv_proj' has no row at tokens=16 (the other layers do)"),
    ("sampler_missing_at_one_size", lambda d: _drop(d / "per_sequence.csv", lambda r: not r.startswith("sampler,16,")),
     "per_sequence.csv: layer 'sampler' has no row at sequences=16"),
    ("op_missing", lambda d: _drop(d / "dense.csv", lambda r: not r.startswith("down_proj,")),
     "dense.csv: no 'down_proj' rows (layer column)"),
    ("no_decode_rows", lambda d: _drop(d / "attention.csv", lambda r: not r.startswith("0,0,")),
     "attention.csv: 0 decode points"),
    ("no_prefill_rows", lambda d: _drop(d / "attention.csv", lambda r: r.startswith("0,0,")),
     "attention.csv: 0 prefill points"),
    ("empty_batch", lambda d: _append(d / "attention.csv", "0,0,0,0,3\n"),
     "attention.csv: line 14: an empty batch (no prefill chunk, no decode)"),
    ("tp_not_dividing_heads", lambda d: _meta(d, tp=3),
     "meta.yaml: key 'tp': model 'llama-2-7b': 32 attention heads do not split over tp=3"),
    ("tp_not_profiled", lambda d: _meta(d, tp=2, tp_degrees=[1]),
     "meta.yaml: key 'tp' is 2 but tp_degrees is [1]"),
    ("moe_without_expert_table", lambda d: _moe_model(d, with_table=False),
     "moe.csv is missing: 'qwen3-30b-a3b' is a mixture-of-experts model"),
    ("moe_with_dense_mlp", lambda d: (_moe_model(d), _append(d / "dense.csv", "down_proj,1,5\n")),
     "dense.csv: MLP op(s) ['down_proj'] for the mixture-of-experts model 'qwen3-30b-a3b'"),
    ("too_many_experts", lambda d: (_moe_model(d), _append(d / "moe.csv", "4096,200,900\n")),
     "moe.csv: line 9: activated_experts: expected at most the model's 128 experts, got '200'"),
    ("expert_table_for_a_dense_model",
     lambda d: (d / "moe.csv").write_text("tokens,activated_experts,time_us\n1,8,5\n"),
     "moe.csv: 'llama-2-7b' is a dense model (no experts)"),
    ("shape_not_a_number", lambda d: _meta(d, model="mine-a", shape={**SHAPE, "n_layers": "x"}),
     "meta.yaml: key 'shape.n_layers': expected a whole number >= 1, got 'x'"),
    ("shape_negative", lambda d: _meta(d, model="mine-b", shape={**SHAPE, "hidden": -512}),
     "meta.yaml: key 'shape.hidden': expected a whole number >= 1, got -512"),
]


@pytest.mark.parametrize("name,breakit,needle", CASES, ids=[c[0] for c in CASES])
def test_a_table_that_would_build_a_wrong_profile_is_one_line(name, breakit, needle, tmp_path, capsys) -> None:
    raw = tmp_path / name
    tiny_raw(raw)
    breakit(raw)
    assert main(["build", "--from-raw", str(raw), "--out", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and captured.out == ""
    lines = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], captured.err
    assert not (tmp_path / "out").exists()


def test_a_tp2_profile_adds_the_allreduces_its_shard_tables_leave_out(tmp_path) -> None:
    """LLMServingSim-layout TP tables time one GPU's shard without the collective: the profile adds two ring
    all-reduces per layer, marked estimated (it used to be all 'measured' and have no collective at all)."""
    tiny_raw(tmp_path / "raw")  # LLMServingSim's meta.yaml: one engine_effective (its first TP's) for every TP
    _meta(tmp_path / "raw", tp=2, tp_degrees=[1, 2], engine_effective={"tensor_parallel_size": 1})
    doc, _, _, tp = build_from_raw(tmp_path / "raw")
    p = MeasuredProfile(doc)
    assert tp == 2 and p.parts["allreduce"] == "estimated" and "allreduce" in p.describe()["estimated_parts"]
    m = p.model
    want = ALLREDUCES_PER_LAYER * m.n_layers * allreduce_s(256 * m.hidden * m.dtype_bytes, 2, p.gpu)
    i = doc["allreduce"]["tokens"].index(256)
    assert doc["allreduce"]["seconds"][i] == pytest.approx(want, rel=2e-3)
    tiny_raw(tmp_path / "tp1")
    assert "allreduce" not in build_from_raw(tmp_path / "tp1")[0]
