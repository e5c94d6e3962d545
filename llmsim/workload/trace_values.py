"""Row values of trace files: vectorised parsing of one chunk's columns, and the one-line row errors.

A chunk's column is parsed in one numpy/pandas call into values and a mask of bad rows, so a chunk
with bad rows costs no more than a clean one and every error names its exact row. Every message has the same shape::

    traces/conv.csv: line 4, column 'GeneratedTokens': expected an integer token count in [0, 100000000], got '-3'

(``row N`` instead of ``line N`` for Parquet). With ``on_error="skip"`` the same message is kept in
``stats.errors`` and the row counted by reason instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmsim.errors import TraceError
from llmsim.workload.base import MAX_TOKENS, WorkloadStats

TOKENS_EXPECTED = f"an integer token count in [0, {MAX_TOKENS}]"
DATETIME_EXPECTED = "an ISO-8601 timestamp like '2023-11-16 18:17:03.9799600'"
MAX_SHOWN = 60  # characters of a bad value quoted in a message (a garbage line can be megabytes)


class RowError(Exception):
    """One bad row (``index`` into the chunk), turned into a TraceError or a skip count by the caller."""

    def __init__(self, index: int, column: str, expected: str, got: Any, reason: str = "malformed"):
        super().__init__(column)
        self.index = index
        self.column = column
        self.expected = expected
        self.got = got
        self.reason = reason


def show(value: Any) -> str:
    """``repr`` of a bad value for a message: numpy scalars as Python ones (a Parquet timestamp as its ISO text, not
    the nanosecond count ``.item()`` gives), long strings cut."""
    if isinstance(value, np.datetime64):
        value = None if np.isnat(value) else str(value)
    elif isinstance(value, np.generic):
        value = value.item()
    if value is None:
        return "an empty value (null)"
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 5] + "...'"


def row_message(path: Path, where: str, column: str, expected: str, got: Any) -> str:
    """``<path>: <line 4 | row 3>, column 'x': expected ..., got ...``."""
    return f"{path}: {where}, column {column!r}: expected {expected}, got {show(got)}"


def reject(stats: WorkloadStats, on_error: str, message: str, reason: str = "malformed") -> None:
    """Raise ``message`` as a TraceError, or (``on_error="skip"``) count the row under ``reason``."""
    if on_error == "raise":
        raise TraceError(message)
    stats.skip(reason)
    stats.note_error(message)


def require_requests(path: Path, stats: WorkloadStats, first: str, what: str = "data rows") -> None:
    """A complete read that yielded nothing is an error, never a silent empty run (called at the end).

    ``first`` locates where the first data row was expected (``"line 2"`` after a CSV header, ``"row 1"``).
    """
    if stats.yielded:
        return
    if stats.rows_read == 0:
        blank = f" ({stats.skipped['blank_line']} blank lines)" if stats.skipped.get("blank_line") else ""
        raise TraceError(f"{path}: {first}: no request in the file: expected {what}, got none (the file has no "
                         f"data{blank})")
    first = f"; first error: {stats.errors[0]}" if stats.errors else ""
    raise TraceError(
        f"{path}: expected at least one usable request, got none: all {stats.rows_read} {what} were skipped "
        f"({stats.describe_skips()}){first}"
    )


def _floats(values: Sequence[Any]) -> np.ndarray:
    """Values as float64, NaN where a value is not a number (None, '', 'abc', booleans, ...)."""
    if isinstance(values, np.ndarray):
        if values.dtype.kind in "iuf":
            return values.astype(np.float64, copy=False)
        if values.dtype.kind not in "OUS":  # booleans, datetimes: not counts or seconds
            return np.full(values.shape, np.nan)
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        out = np.empty(len(values))
        for i, v in enumerate(values):
            try:
                out[i] = np.nan if isinstance(v, bool) else float(v)
            except (TypeError, ValueError, OverflowError):
                out[i] = np.nan
        return out


def parse_floats(values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """(float64 values, bad mask): non-numbers, NaN and +-inf are bad (their value is left as NaN)."""
    out = _floats(values)
    return out, ~np.isfinite(out)


def parse_tokens(values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """(int64 counts, bad mask): token counts are integers in [0, MAX_TOKENS] ("12" or "12.0"; 1e30, -3 are bad)."""
    x, bad = parse_floats(values)
    with np.errstate(invalid="ignore"):
        bad |= (x < 0) | (x != np.floor(x)) | (x > MAX_TOKENS)
    return np.where(bad, 0, x).astype(np.int64), bad


def parse_datetimes_ns(values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """(int64 ns since the epoch, bad mask) of ISO-8601 strings (naive = UTC; mixed fractional/tz formats
    allowed) or of a Parquet timestamp column (numpy datetime64)."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "M":
        ns = values.astype("datetime64[ns]")
        bad = np.isnat(ns)
        return np.where(bad, 0, ns.view(np.int64)), bad
    if isinstance(values, np.ndarray) and values.dtype.kind not in "OUS":
        return np.zeros(len(values), dtype=np.int64), np.ones(len(values), dtype=bool)
    strings = pd.Series(list(values), dtype=object)
    try:  # a CSV chunk is all strings; a Parquet text column may hold None (-> NaT, bad)
        ts = pd.to_datetime(strings, format="ISO8601", utc=True, errors="coerce")
    except (TypeError, ValueError, OverflowError):  # a value pandas refuses to even try: check one by one
        is_str = np.fromiter((isinstance(v, str) for v in values), dtype=bool, count=len(values))
        ts = pd.to_datetime(strings.where(is_str, None), format="ISO8601", utc=True, errors="coerce")
    bad = ts.isna().to_numpy()
    ns = ts.dt.tz_convert(None).to_numpy(dtype="datetime64[ns]")
    return np.where(bad, 0, ns.view(np.int64)), bad
