"""A profile from your own measurements: the output directory of ``python -m llmsim.profiles measure``.

That directory holds LLMServingSim-like operator tables (``dense.csv``, ``attention.csv``, ``per_sequence.csv``,
and for a mixture-of-experts model ``moe.csv``; microseconds) and ``meta.yaml`` (model, GPU, TP, hardware,
software, and the model's shape when it is not in the registry). Every input error is a one-line
:class:`ProfileError` naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmsim.errors import ConfigError, ProfileError, load_yaml_file
from llmsim.perf.hardware import get_gpu
from llmsim.perf.models import ModelSpec, get_model, register_model
from llmsim.perf.parallel import ALLREDUCES_PER_LAYER, allreduce_s, check_degrees
from llmsim.profiles.document import Built, Part, render
from llmsim.profiles.providers.experts import moe_curves
from llmsim.profiles.providers.fits import TOKEN_GRID, lss_attention, lss_dense, lss_lm_head
from llmsim.profiles.providers.overhead import MODERN_OVERHEAD
from llmsim.profiles.raw_tables import (
    ATTENTION_OPS,
    MEASURE_HINT,
    MLP_OPS,
    check_attention,
    check_layers,
    check_moe,
    read_table,
)

SHAPE_SIZES = ("n_layers", "hidden", "n_heads", "n_kv_heads", "intermediate", "vocab")


def read_meta(d: Path) -> dict:
    """meta.yaml of a measurement directory, checked; errors are one-line ProfileErrors."""
    f = d / "meta.yaml"
    if not d.is_dir():
        raise ProfileError(f"--from-raw {d}: not a directory ({MEASURE_HINT})")
    if not f.is_file():
        raise ProfileError(f"--from-raw {d}: meta.yaml is missing ({MEASURE_HINT})")
    meta = load_yaml_file(f, ProfileError)
    if not isinstance(meta, dict):
        raise ProfileError(f"{f}: expected a mapping, got {type(meta).__name__}")
    for key in ("model", "gpu"):
        if not isinstance(meta.get(key), str) or not meta[key]:
            raise ProfileError(f"{f}: key {key!r} missing or not a string")
    tp = meta.get("tp", 1)
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ProfileError(f"{f}: key 'tp': expected an integer >= 1, got {tp!r}")
    check_recorded_tp(f, meta, tp)
    try:
        get_gpu(meta["gpu"])
    except ValueError as e:
        raise ProfileError(f"{f}: {e}") from None
    for name in ("dense.csv", "attention.csv", "per_sequence.csv"):
        if not (d / name).is_file():
            raise ProfileError(f"--from-raw {d}: {name} is missing")
    return meta


def check_recorded_tp(f: Path, meta: dict, tp: int) -> None:
    """The TPs the profiler itself recorded (LLMServingSim's ``tp_degrees``) must include ``tp``: tables of one TP
    built as another are wrong by the TP factor. (Its ``engine_effective.tensor_parallel_size`` is one run's, the
    same for every TP directory, so it is not checked.)"""
    degrees = meta.get("tp_degrees")
    if isinstance(degrees, list) and tp not in degrees:
        raise ProfileError(f"{f}: key 'tp' is {tp} but tp_degrees is {degrees!r}: expected one of the TPs profiled")


def raw_model(meta: dict, f: Path) -> ModelSpec:
    """The registry model named in meta.yaml, or one registered from its recorded shape (HF config models); its
    TP checked against the model's heads."""
    try:
        m = get_model(meta["model"])
    except ValueError:
        m = shape_model(meta, f)
    try:
        check_degrees(m, meta.get("tp", 1))
    except ConfigError as e:
        raise ProfileError(f"{f}: key 'tp': {e}") from None
    return m


def shape_model(meta: dict, f: Path) -> ModelSpec:
    """A model from meta.yaml's ``shape`` (every size a whole number >= 1), registered under its name."""
    sh = meta.get("shape")
    need = (*SHAPE_SIZES, "gated_mlp")
    if not isinstance(sh, dict) or any(k not in sh for k in need):
        raise ProfileError(f"{f}: unknown model {meta['model']!r} and no complete 'shape' ({', '.join(need)})")
    for k in SHAPE_SIZES:
        _shape_number(f, k, sh[k], 1)
    for k, least in (("head_dim", 0), ("max_position", 1)):
        if k in sh:
            _shape_number(f, k, sh[k], least)
    for k in ("gated_mlp", "tied_embeddings"):
        if k in sh and not isinstance(sh[k], bool):
            raise ProfileError(f"{f}: key 'shape.{k}': expected true or false, got {sh[k]!r}")
    m = ModelSpec(meta["model"], *(sh[k] for k in SHAPE_SIZES), gated_mlp=sh["gated_mlp"],
                  head_dim=sh.get("head_dim", 0), tied_embeddings=sh.get("tied_embeddings", False),
                  max_position=sh.get("max_position", 4096))
    register_model(m)
    return m


def _shape_number(f: Path, key: str, v: Any, least: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < least:
        raise ProfileError(f"{f}: key 'shape.{key}': expected a whole number >= {least}, got {v!r}")


def read_tables(d: Path, m: ModelSpec) -> tuple[Any, Any, Any, Any]:
    """dense, attention, per-sequence and (MoE models) expert tables of ``d``, each checked."""
    dn, att, ps = (read_table(d / name) for name in ("dense.csv", "attention.csv", "per_sequence.csv"))
    if "lm_head" not in set(ps["layer"]):
        raise ProfileError(f"{d / 'per_sequence.csv'}: no 'lm_head' row (layer column; {MEASURE_HINT})")
    moe = check_moe(d, m, dn)
    check_layers(d / "dense.csv", dn, "tokens", ATTENTION_OPS + (() if m.is_moe else MLP_OPS[-1:]))
    check_layers(d / "per_sequence.csv", ps, "sequences", ("lm_head",))
    check_attention(d / "attention.csv", att)
    return dn, att, ps, moe


def allreduce_part(m: ModelSpec, gpu: str, tp: int) -> tuple[list[float], Part]:
    """The all-reduces a TP shard's tables leave out (LLMServingSim's layout times one GPU's shard and no
    collective): two ring all-reduces of tokens x hidden per layer from the hardware table, estimated."""
    g = get_gpu(gpu)
    per = ALLREDUCES_PER_LAYER * m.n_layers
    curve = [per * allreduce_s(t * m.hidden * m.dtype_bytes, tp, g) for t in TOKEN_GRID]
    src = (f"not in the measured tp{tp} tables (one GPU's shard, no collective): {ALLREDUCES_PER_LAYER} ring "
           f"all-reduces of tokens x hidden per layer over {g.interconnect or 'the link'} (llmsim.perf.parallel."
           "allreduce_s, hardware table)")
    return curve, Part("estimated", src)


def build_from_raw(d: Path) -> tuple[dict, str, str, int]:
    """``(document, model, gpu, tp)`` of the profile measured in directory ``d``."""
    meta = read_meta(d)
    m = raw_model(meta, d / "meta.yaml")
    dn, att, ps, moe = read_tables(d, m)
    gpu, tp = get_gpu(meta["gpu"]).name, int(meta.get("tp", 1))
    try:
        dense = lss_dense(dn, m)
        prefill, decode = lss_attention(att, m.n_layers)
        lm_head = lss_lm_head(ps)
    except (ValueError, KeyError, AttributeError, IndexError, TypeError) as e:
        raise ProfileError(f"--from-raw {d}: cannot build a profile: {type(e).__name__}: {e}") from None
    src = f"llmsim.profiles measure on {meta.get('device_name', '?')} ({meta.get('software', {})})"
    parts = {p: Part("measured", src) for p in ("dense", "prefill_attention", "decode_attention", "lm_head")}
    parts["overhead"] = Part("estimated", "framework overhead not measured by the operator profiler; vLLM V1 default")
    parts["memory"] = Part("estimated", "from the model config and the calibrated reserve")
    optional: dict[str, Any] = {}
    if moe is not None:  # LLMServingSim's moe.csv layout: tokens, activated_experts, time_us
        optional["moe"] = {"n_experts": m.n_experts, "experts_per_token": m.experts_per_token,
                           "layers": m.n_moe_layers, **moe_curves(moe, m.n_moe_layers)}
        parts["moe"] = Part("measured", src + "; moe.csv at the expected distinct experts of the batch")
    if tp > 1:
        optional["allreduce"], parts["allreduce"] = allreduce_part(m, gpu, tp)
    b = Built(dense, lm_head, prefill, decode, dict(MODERN_OVERHEAD), parts, [], [f"raw dir {d.name}"],
              optional=optional)
    doc = render(b, m.name, meta["gpu"], tp)
    doc["provenance"]["sources"] = [
        {"repo": "local measurement", "commit": "", "license": "user data", "software": str(meta.get("software", {}))}
    ]
    doc["provenance"]["hardware"] = meta.get("hardware", {})
    return doc, m.name, gpu, tp
