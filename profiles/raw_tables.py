"""The measured tables of ``build --from-raw``, read and checked before anything is fitted.

A table that would fit a wrong profile in silence is refused in one line naming the file, the line or the column
and what was expected: a time that is not a positive number, a size that is not a whole number, a point measured
twice (two runs merged into one file), an operator missing at some sizes (the sum over operators would skip it
there) or altogether, attention without a decode or a prefill point, an empty batch, a mixture-of-experts model
without its expert table or with a dense MLP as well.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from llmsim.errors import ProfileError
from llmsim.perf.models import ModelSpec

MEASURE_HINT = "expected the output of python -m llmsim.profiles measure"
TIME = "time_us"
# table -> (text columns, grid columns with the least value each takes); every table also has TIME
TABLES: dict[str, tuple[tuple[str, ...], dict[str, int]]] = {
    "dense.csv": (("layer",), {"tokens": 1}),
    "attention.csv": ((), {"prefill_chunk": 0, "kv_prefill": 0, "n_decode": 0, "kv_decode": 0}),
    "per_sequence.csv": (("layer",), {"sequences": 1}),
    "moe.csv": ((), {"tokens": 1, "activated_experts": 1}),
}
ATTENTION_OPS = ("qkv_proj", "o_proj")  # every decoder layer's projections
MLP_OPS = ("gate_up_proj", "act_fn", "down_proj")  # a dense MLP's; a MoE model's experts are moe.csv
FIT_POINTS = 1  # prefill and decode attention are each fitted on their own points (none: a zero part)


def read_table(f: Path) -> pd.DataFrame:
    """One measured table: its columns present, sizes whole numbers, times finite and > 0, each point once."""
    text_cols, grid = TABLES[f.name]
    try:
        df = pd.read_csv(f, dtype=str, keep_default_na=False)
    except (ValueError, UnicodeDecodeError) as e:  # EmptyDataError / ParserError are ValueErrors
        raise ProfileError(f"{f}: not a readable CSV ({' '.join(str(e).split())})") from None
    missing = [c for c in (*text_cols, *grid, TIME) if c not in df.columns]
    if missing:
        raise ProfileError(f"{f}: cannot build a profile: missing column(s) {missing} (have {list(df.columns)}; "
                           f"{MEASURE_HINT})")
    if df.empty:
        raise ProfileError(f"{f}: no rows after the header ({MEASURE_HINT})")
    for c, least in grid.items():
        vals = pd.to_numeric(df[c], errors="coerce").to_numpy(float)
        _refuse_first(f, df, c, ~np.isfinite(vals) | (vals < least) | (vals != np.round(vals)),
                      f"a whole number >= {least}")
        df[c] = vals.astype(np.int64)
    times = pd.to_numeric(df[TIME], errors="coerce").to_numpy(float)
    _refuse_first(f, df, TIME, ~np.isfinite(times) | (times <= 0), "a finite number > 0 (microseconds)")
    df[TIME] = times
    _refuse_repeats(f, df, text_cols, list(grid))
    return df


def _refuse_first(f: Path, df: pd.DataFrame, col: str, bad: np.ndarray, what: str) -> None:
    if bad.any():
        i = int(np.argmax(bad))
        raise ProfileError(f"{f}: line {i + 2}: {col}: expected {what}, got {df[col].iloc[i]!r}")


def _refuse_repeats(f: Path, df: pd.DataFrame, text_cols: tuple[str, ...], grid: list[str]) -> None:
    """A point measured twice: the fit would take the median of two runs, or of a run and a stray row."""
    key = [*text_cols, *grid]
    again = df.duplicated(key, keep="first").to_numpy()
    if again.any():
        i = int(np.argmax(again))
        j = int(np.argmax((df[key] == df[key].iloc[i]).all(axis=1).to_numpy()))
        point = ", ".join([f"{k}={str(df[k].iloc[i])!r}" for k in text_cols] + [f"{k}={int(df[k].iloc[i])}"
                                                                                for k in grid])
        raise ProfileError(f"{f}: line {i + 2} measures the point of line {j + 2} again ({point}): expected one "
                           "time per point (two measurements merged into one file?)")


def check_layers(f: Path, df: pd.DataFrame, size: str, required: tuple[str, ...]) -> None:
    """Each required op present, and every op at every size the table has (a gap would drop the op there)."""
    ops = list(dict.fromkeys(df["layer"]))
    for op in required:
        if op not in ops:
            raise ProfileError(f"{f}: no {op!r} rows (layer column): expected every op of a layer "
                               f"(have {ops}; {MEASURE_HINT})")
    sizes = sorted(set(df[size]))
    for op in ops:
        have = set(df.loc[df["layer"] == op, size])
        gap = [s for s in sizes if s not in have]
        if gap:
            raise ProfileError(f"{f}: layer {op!r} has no row at {size}={gap[0]} (the other layers do): expected "
                               f"every op at each {size} value of the table")


def check_attention(f: Path, att: pd.DataFrame) -> None:
    """Mixed-batch rows need a prefill chunk or decodes, and both fits need enough points of their own."""
    empty = ((att.prefill_chunk == 0) & (att.n_decode == 0)).to_numpy()
    if empty.any():
        raise ProfileError(f"{f}: line {int(np.argmax(empty)) + 2}: an empty batch (no prefill chunk, no decode): "
                           "expected prefill_chunk >= 1 or n_decode >= 1")
    dec = att[(att.prefill_chunk == 0) & (att.n_decode > 0) & (att.kv_decode > 0)]
    pf = att[(att.n_decode == 0) & (att.prefill_chunk > 0)]
    for what, rows, cols, how in (
        ("decode", dec, ["n_decode", "kv_decode"], "prefill_chunk 0, n_decode >= 1, kv_decode >= 1"),
        ("prefill", pf, ["prefill_chunk", "kv_prefill"], "n_decode 0, prefill_chunk >= 1"),
    ):
        n = len(rows.drop_duplicates(cols))
        if n < FIT_POINTS:
            raise ProfileError(f"{f}: {n} {what} points ({how}): expected at least {FIT_POINTS} to fit "
                               f"{what} attention ({MEASURE_HINT})")


def check_moe(d: Path, m: ModelSpec, dense: pd.DataFrame) -> pd.DataFrame | None:
    """A MoE model's expert table (required, its experts within the model's), none for a dense model."""
    f = d / "moe.csv"
    if not m.is_moe:
        if f.is_file():
            raise ProfileError(f"{f}: {m.name!r} is a dense model (no experts): expected no moe.csv (a table of "
                               "another model?)")
        return None
    if not f.is_file():
        raise ProfileError(f"--from-raw {d}: moe.csv is missing: {m.name!r} is a mixture-of-experts model and its "
                           "experts are timed there (tokens, activated_experts, time_us; LLMServingSim's layout)")
    mlp = [op for op in MLP_OPS if op in set(dense["layer"])]
    if mlp:
        raise ProfileError(f"{d / 'dense.csv'}: MLP op(s) {mlp} for the mixture-of-experts model {m.name!r}: its "
                           "experts are timed in moe.csv, so a dense MLP would count them twice")
    moe = read_table(f)
    _refuse_first(f, moe.astype({"activated_experts": str}), "activated_experts",
                  (moe.activated_experts > m.n_experts).to_numpy(), f"at most the model's {m.n_experts} experts")
    return moe
