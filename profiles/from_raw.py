"""A profile from your own measurements: the output directory of ``python -m llmsim.profiles measure``.

That directory holds LLMServingSim-like operator tables (``dense.csv``, ``attention.csv``, ``per_sequence.csv``,
and for a mixture-of-experts model ``moe.csv``; microseconds) and ``meta.yaml`` (model, GPU, TP, hardware,
software, and the model's shape when it is not in the registry). Every input error is a one-line
:class:`ProfileError` naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from llmsim.errors import ProfileError, load_yaml_file
from llmsim.perf.hardware import get_gpu
from llmsim.perf.models import ModelSpec, get_model, register_model
from llmsim.profiles.document import Built, Part, render
from llmsim.profiles.providers.experts import moe_curves
from llmsim.profiles.providers.fits import lss_attention, lss_dense, lss_lm_head
from llmsim.profiles.providers.overhead import MODERN_OVERHEAD

MEASURE_HINT = "expected the output of python -m llmsim.profiles measure"
# table -> (text columns, numeric columns): what python -m llmsim.profiles measure writes
TABLES = {
    "dense.csv": (("layer",), ("tokens", "time_us")),
    "attention.csv": ((), ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us")),
    "per_sequence.csv": (("layer",), ("sequences", "time_us")),
    "moe.csv": ((), ("tokens", "activated_experts", "time_us")),
}


def read_table(f: Path) -> pd.DataFrame:
    """One measured table, checked: its columns present, every cell of a numeric column a finite number >= 0;
    else one line naming the file, the line and the column (a NaN or negative time would be built in silence)."""
    text_cols, num_cols = TABLES[f.name]
    try:
        df = pd.read_csv(f, dtype=str, keep_default_na=False)
    except (ValueError, UnicodeDecodeError) as e:  # EmptyDataError / ParserError are ValueErrors
        raise ProfileError(f"{f}: not a readable CSV ({' '.join(str(e).split())})") from None
    missing = [c for c in (*text_cols, *num_cols) if c not in df.columns]
    if missing:
        raise ProfileError(f"{f}: cannot build a profile: missing column(s) {missing} (have {list(df.columns)}; "
                           f"{MEASURE_HINT})")
    if df.empty:
        raise ProfileError(f"{f}: no rows after the header ({MEASURE_HINT})")
    for c in num_cols:
        vals = pd.to_numeric(df[c], errors="coerce").to_numpy(float)
        bad = ~np.isfinite(vals) | (vals < 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise ProfileError(f"{f}: line {i + 2}: {c}: expected a finite number >= 0, got {df[c].iloc[i]!r}")
        df[c] = vals
    return df


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
    try:
        get_gpu(meta["gpu"])
    except ValueError as e:
        raise ProfileError(f"{f}: {e}") from None
    for name in ("dense.csv", "attention.csv", "per_sequence.csv"):
        if not (d / name).is_file():
            raise ProfileError(f"--from-raw {d}: {name} is missing")
    return meta


def raw_model(meta: dict, f: Path) -> ModelSpec:
    """The registry model named in meta.yaml, or one registered from its recorded shape (HF config models)."""
    try:
        return get_model(meta["model"])
    except ValueError:
        pass
    sh = meta.get("shape")
    need = ("n_layers", "hidden", "n_heads", "n_kv_heads", "intermediate", "vocab", "gated_mlp")
    if not isinstance(sh, dict) or any(k not in sh for k in need):
        raise ProfileError(f"{f}: unknown model {meta['model']!r} and no complete 'shape' ({', '.join(need)})")
    m = ModelSpec(
        meta["model"],
        sh["n_layers"],
        sh["hidden"],
        sh["n_heads"],
        sh["n_kv_heads"],
        sh["intermediate"],
        sh["vocab"],
        gated_mlp=sh["gated_mlp"],
        head_dim=sh.get("head_dim", 0),
        tied_embeddings=sh.get("tied_embeddings", False),
        max_position=sh.get("max_position", 4096),
    )
    register_model(m)
    return m


def build_from_raw(d: Path) -> tuple[dict, str, str, int]:
    """``(document, model, gpu, tp)`` of the profile measured in directory ``d``."""
    meta = read_meta(d)
    m = raw_model(meta, d / "meta.yaml")
    dn, att, ps = (read_table(d / name) for name in ("dense.csv", "attention.csv", "per_sequence.csv"))
    if "lm_head" not in set(ps["layer"]):
        raise ProfileError(f"{d / 'per_sequence.csv'}: no 'lm_head' row (layer column; {MEASURE_HINT})")
    try:
        gpu = get_gpu(meta["gpu"]).name
        tp = int(meta.get("tp", 1))
        dense = lss_dense(dn, m)
        prefill, decode = lss_attention(att, m.n_layers)
        lm_head = lss_lm_head(ps)
    except (ValueError, KeyError, AttributeError, IndexError, TypeError) as e:
        raise ProfileError(f"--from-raw {d}: cannot build a profile: {type(e).__name__}: {e}") from None
    src = f"llmsim.profiles measure on {meta.get('device_name', '?')} ({meta.get('software', {})})"
    parts = {p: Part("measured", src) for p in ("dense", "prefill_attention", "decode_attention", "lm_head")}
    parts["overhead"] = Part("estimated", "framework overhead not measured by the operator profiler; vLLM V1 default")
    parts["memory"] = Part("estimated", "from the model config and the calibrated reserve")
    optional = {}
    if m.is_moe and (d / "moe.csv").is_file():  # LLMServingSim's moe.csv layout: tokens, activated_experts, time_us
        optional["moe"] = {"n_experts": m.n_experts, "experts_per_token": m.experts_per_token,
                           "layers": m.n_moe_layers, **moe_curves(read_table(d / "moe.csv"), m.n_moe_layers)}
        parts["moe"] = Part("measured", src + "; moe.csv at the expected distinct experts of the batch")
    b = Built(dense, lm_head, prefill, decode, dict(MODERN_OVERHEAD), parts, [], [f"raw dir {d.name}"],
              optional=optional)
    doc = render(b, m.name, meta["gpu"], tp)
    doc["provenance"]["sources"] = [
        {"repo": "local measurement", "commit": "", "license": "user data", "software": str(meta.get("software", {}))}
    ]
    doc["provenance"]["hardware"] = meta.get("hardware", {})
    return doc, m.name, gpu, tp
