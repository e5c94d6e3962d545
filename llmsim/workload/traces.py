"""Trace readers: Azure LLM inference 2023/2024, BurstGPT, Mooncake JSONL and a generic CSV.

CSV files are read with the ``csv`` module in chunks (so the 1-based line of every row is known
exactly for error messages) and each chunk's columns are converted with vectorised numpy/pandas.
Arrivals are seconds since the first valid row of the file ("trace start"), so a model filter does
not shift the clock. Malformed rows raise :class:`TraceError` naming the file, line, column and
what was expected; with ``on_error="skip"`` they are counted in ``stats.skipped`` instead.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmsim.errors import ConfigError, TraceError
from llmsim.request import Request
from llmsim.workload.base import Workload, WorkloadStats, check_on_error

ARRIVAL_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "datetime": 1e-9}
DEFAULT_CHUNK_ROWS = 8192
TEXT_FIELDS = ("task", "tenant", "slo_class")
TOKENS_EXPECTED = "a non-negative integer token count"


class _RowError(Exception):
    """Internal: one bad row, turned into a TraceError or a skip count by the caller."""

    def __init__(self, index: int, column: str, expected: str, got: Any, reason: str = "malformed"):
        super().__init__(column)
        self.index = index
        self.column = column
        self.expected = expected
        self.got = got
        self.reason = reason


def _message(path: Path, line: int, column: str, expected: str, got: Any) -> str:
    return f"{path}: line {line}, column {column!r}: expected {expected}, got {got!r}"


def _parse_floats(values: Sequence[str], column: str, expected: str = "a number") -> np.ndarray:
    """Vectorised float parse; on failure find the first bad value for the error message."""
    try:
        out = np.array(values, dtype=np.float64)
    except ValueError:
        for i, v in enumerate(values):
            try:
                float(v)
            except ValueError:
                raise _RowError(i, column, expected, v) from None
        raise  # pragma: no cover - numpy and float() disagree
    bad = np.flatnonzero(~np.isfinite(out))
    if bad.size:
        raise _RowError(int(bad[0]), column, expected, values[int(bad[0])])
    return out


def _parse_tokens(values: Sequence[str], column: str) -> np.ndarray:
    """Token counts: non-negative integers (``"12"`` or ``"12.0"``)."""
    x = _parse_floats(values, column, TOKENS_EXPECTED)
    bad = np.flatnonzero((x < 0) | (x != np.floor(x)))
    if bad.size:
        i = int(bad[0])
        raise _RowError(i, column, TOKENS_EXPECTED, values[i])
    return x.astype(np.int64)


def _parse_datetimes_ns(values: Sequence[str], column: str) -> np.ndarray:
    """ISO-8601 timestamps (naive = UTC; mixed fractional/tz formats allowed) as int64 ns."""
    ts = pd.to_datetime(pd.Series(values, dtype=object), format="ISO8601", utc=True, errors="coerce")
    bad = np.flatnonzero(ts.isna().to_numpy())
    if bad.size:
        i = int(bad[0])
        raise _RowError(i, column, "an ISO-8601 timestamp like '2023-11-16 18:17:03.9799600'", values[i])
    return ts.dt.tz_convert(None).to_numpy(dtype="datetime64[ns]").view(np.int64)


class CsvTrace(Workload):
    """Generic CSV trace with a column map (also the engine behind the Azure and BurstGPT readers).

    ``arrival_unit`` is ``"s"``, ``"ms"``, ``"us"`` (numbers) or ``"datetime"`` (ISO-8601 strings).
    ``task``/``tenant``/``slo_class`` name optional text columns copied onto the request; ``extra``
    maps request ``extra`` keys to columns (raw strings). ``filters`` maps a column to the values
    to keep, with the skip reason ``<column>_filter`` unless ``filter_reasons`` names it.
    ``zero_output_reason``: when set, rows with 0 output tokens are skipped and counted under it.
    """

    kind = "csv"

    def __init__(
        self,
        path: str | Path,
        arrival: str,
        prompt: str,
        output: str,
        arrival_unit: str = "s",
        task: str | None = None,
        tenant: str | None = None,
        slo_class: str | None = None,
        extra: Mapping[str, str] | Sequence[str] | None = None,
        filters: Mapping[str, Collection[str]] | None = None,
        filter_reasons: Mapping[str, str] | None = None,
        zero_output_reason: str | None = None,
        on_error: str = "raise",
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
        delimiter: str = ",",
    ) -> None:
        super().__init__()
        if arrival_unit not in ARRIVAL_UNITS:
            raise ConfigError(f"arrival_unit: expected one of {list(ARRIVAL_UNITS)}, got {arrival_unit!r}")
        if chunk_rows < 1:
            raise ConfigError(f"chunk_rows: expected a positive integer, got {chunk_rows!r}")
        self.path = Path(path)
        self.arrival = arrival
        self.prompt = prompt
        self.output = output
        self.arrival_unit = arrival_unit
        self.text_columns = {"task": task, "tenant": tenant, "slo_class": slo_class}
        if extra is None:
            self.extra: dict[str, str] = {}
        elif isinstance(extra, Mapping):
            self.extra = dict(extra)
        else:
            self.extra = {c: c for c in extra}
        self.filters = {c: frozenset([v] if isinstance(v, str) else v) for c, v in (filters or {}).items()}
        self.filter_reasons = {c: (filter_reasons or {}).get(c, f"{c}_filter") for c in self.filters}
        self.zero_output_reason = zero_output_reason
        self.on_error = check_on_error(on_error)
        self.chunk_rows = chunk_rows
        self.delimiter = delimiter

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "kind": self.kind,
            "path": str(self.path),
            "columns": {"arrival": self.arrival, "prompt": self.prompt, "output": self.output},
            "arrival_unit": self.arrival_unit,
            "on_error": self.on_error,
        }
        d["columns"].update({k: v for k, v in self.text_columns.items() if v})
        if self.extra:
            d["extra"] = dict(self.extra)
        if self.filters:
            d["filters"] = {c: sorted(v) for c, v in self.filters.items()}
        return d

    # -- reading -------------------------------------------------------------------------------

    def _open(self) -> Any:
        if not self.path.exists():
            raise TraceError(f"{self.path}: trace file not found")
        return open(self.path, newline="", encoding="utf-8-sig")

    def _header_index(self, header: list[str]) -> dict[str, int]:
        names = [h.strip() for h in header]
        index = {n: i for i, n in enumerate(names)}
        wanted = [self.arrival, self.prompt, self.output]
        wanted += [c for c in self.text_columns.values() if c]
        wanted += list(self.extra.values()) + list(self.filters)
        for col in wanted:
            if col not in index:
                raise TraceError(
                    f"{self.path}: line 1 (header): missing column {col!r}; expected columns "
                    f"{sorted(set(wanted))}, found {names}"
                )
        return index

    def _chunks(self, reader: Any) -> Iterator[tuple[list[list[str]], list[int]]]:
        rows: list[list[str]] = []
        lines: list[int] = []
        append_row = rows.append
        append_line = lines.append
        for row in reader:
            append_row(row)
            append_line(reader.line_num)
            if len(rows) >= self.chunk_rows:
                yield rows, lines
                rows, lines = [], []
                append_row, append_line = rows.append, lines.append
        if rows:
            yield rows, lines

    def _iter(self, stats: WorkloadStats) -> Iterator[Request]:
        with self._open() as f:
            reader = csv.reader(f, delimiter=self.delimiter)
            try:
                header = next(reader)
            except StopIteration:
                raise TraceError(f"{self.path}: line 1: expected a header row, got an empty file") from None
            except csv.Error as e:
                raise TraceError(f"{self.path}: line 1: unreadable header ({e})") from None
            index = self._header_index(header)
            ncols = len(header)
            state: dict[str, Any] = {"base": None, "last": -np.inf, "next_id": 0}
            try:
                for rows, lines in self._chunks(reader):
                    yield from self._process_chunk(rows, lines, index, ncols, state, stats)
            except csv.Error as e:
                raise TraceError(f"{self.path}: line {reader.line_num}: malformed CSV ({e})") from None

    def _fail(self, stats: WorkloadStats, line: int, err: _RowError) -> None:
        msg = _message(self.path, line, err.column, err.expected, err.got)
        if self.on_error == "raise":
            raise TraceError(msg)
        stats.skip(err.reason)
        stats.note_error(msg)

    def _convert(
        self, cols: dict[str, Sequence[str]], state: dict[str, Any]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Columns of one chunk -> (arrival s, prompt, output); raises _RowError at the first bad row."""
        prompt = _parse_tokens(cols[self.prompt], self.prompt)
        output = _parse_tokens(cols[self.output], self.output)
        if self.arrival_unit == "datetime":
            raw = _parse_datetimes_ns(cols[self.arrival], self.arrival)
            if state["base"] is None:
                state["base"] = int(raw[0]) if raw.size else None
            arrival = (raw - state["base"]).astype(np.float64) / 1e9 if raw.size else raw.astype(float)
        else:
            raw = _parse_floats(cols[self.arrival], self.arrival)
            if state["base"] is None and raw.size:
                state["base"] = float(raw[0])
            arrival = (raw - (state["base"] or 0.0)) * ARRIVAL_UNITS[self.arrival_unit]
        return arrival, prompt, output

    def _process_chunk(
        self,
        rows: list[list[str]],
        lines: list[int],
        index: dict[str, int],
        ncols: int,
        state: dict[str, Any],
        stats: WorkloadStats,
    ) -> Iterator[Request]:
        # blank lines and rows with the wrong number of fields
        lens = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        blank = lens == 0
        if blank.any():
            stats.skip("blank_line", int(blank.sum()))
        stats.rows_read += int((~blank).sum())
        wrong = np.flatnonzero((lens != ncols) & ~blank)
        for i in wrong:
            i = int(i)
            got = f"{len(rows[i])} fields"
            self._fail(stats, lines[i], _RowError(i, "*", f"{ncols} fields as in the header", got))
        keep_idx = np.flatnonzero(lens == ncols)
        if keep_idx.size < len(rows):
            rows = [rows[i] for i in keep_idx]
            lines = [lines[i] for i in keep_idx]
        if not rows:
            return
        needed = {self.arrival, self.prompt, self.output, *self.extra.values(), *self.filters}
        needed.update(c for c in self.text_columns.values() if c)
        transposed = list(zip(*rows))
        cols = {c: transposed[index[c]] for c in needed}
        # convert, dropping bad rows one at a time in skip mode (rare; raise mode stops at the first)
        while True:
            try:
                arrival, prompt, output = self._convert(cols, state)
                break
            except _RowError as err:
                self._fail(stats, lines[err.index], err)
                cols = {c: v[: err.index] + v[err.index + 1 :] for c, v in cols.items()}
                lines = lines[: err.index] + lines[err.index + 1 :]
                if not lines:
                    return
        # arrivals must be non-decreasing (also across chunks)
        prev_max = np.maximum.accumulate(np.concatenate(([state["last"]], arrival)))[:-1]
        late = arrival < prev_max
        if late.any():
            for i in np.flatnonzero(late):
                i = int(i)
                err = _RowError(
                    i,
                    self.arrival,
                    f"a time >= the previous row's ({prev_max[i]:.6f} s after trace start)",
                    cols[self.arrival][i],
                    reason="out_of_order",
                )
                self._fail(stats, lines[i], err)
        state["last"] = max(state["last"], float(arrival.max()))
        keep = ~late
        for c, allowed in self.filters.items():
            ok = np.fromiter((v in allowed for v in cols[c]), dtype=bool, count=len(lines))
            drop = keep & ~ok
            stats.skip(self.filter_reasons[c], int(drop.sum()))
            keep &= ok
        if self.zero_output_reason is not None:
            drop = keep & (output == 0)
            stats.skip(self.zero_output_reason, int(drop.sum()))
            keep &= output != 0
        idx = np.flatnonzero(keep)
        if idx.size == 0:
            return
        a_l = arrival[idx].tolist()
        p_l = prompt[idx].tolist()
        o_l = output[idx].tolist()
        text = {k: c for k, c in self.text_columns.items() if c}
        next_id = state["next_id"]
        state["next_id"] = next_id + len(a_l)
        if not text and not self.extra:
            for a, p, o in zip(a_l, p_l, o_l):
                stats.yielded += 1
                yield Request(next_id, a, p, o)
                next_id += 1
            return
        idx_l = idx.tolist()
        text_cols = {k: cols[c] for k, c in text.items()}
        extra_cols = {k: cols[c] for k, c in self.extra.items()}
        for j, (a, p, o) in enumerate(zip(a_l, p_l, o_l)):
            i = idx_l[j]
            kw = {k: v[i] for k, v in text_cols.items()}
            extra = {k: v[i] for k, v in extra_cols.items()} if extra_cols else None
            stats.yielded += 1
            yield Request(next_id, a, p, o, extra=extra, **kw)
            next_id += 1


AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


class AzureTrace(CsvTrace):
    """Azure LLM inference trace, 2023 (naive, 7 fractional digits) or 2024 (tz-aware, mixed format).

    Columns ``TIMESTAMP,ContextTokens,GeneratedTokens``; arrival = seconds since the first row.
    """

    kind = "azure"

    def __init__(
        self, path: str | Path, on_error: str = "raise", chunk_rows: int = DEFAULT_CHUNK_ROWS
    ) -> None:
        super().__init__(
            path, *AZURE_COLUMNS, arrival_unit="datetime", on_error=on_error, chunk_rows=chunk_rows
        )

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.path), "on_error": self.on_error}


BURSTGPT_EXTRA = {
    "model": "Model",
    "log_type": "Log Type",
    "session_id": "Session ID",
    "elapsed_time": "Elapsed time",
}


class BurstGPTTrace(CsvTrace):
    """BurstGPT (HPMLL/BurstGPT) CSV, parsed by column name since ``_3`` files add two columns.

    Rows with ``Response tokens == 0`` are failed requests: skipped and counted under
    ``zero_response_tokens``. ``model`` (``"ChatGPT"``/``"GPT-4"``) and ``log_type``
    (``"Conversation log"``/``"API log"``) filter rows (counted as ``model_filter`` /
    ``log_type_filter``). Model, log type and, in ``_3`` files, session id and elapsed time are kept
    in ``request.extra``.
    """

    kind = "burstgpt"

    def __init__(
        self,
        path: str | Path,
        model: str | Collection[str] | None = None,
        log_type: str | Collection[str] | None = None,
        on_error: str = "raise",
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
    ) -> None:
        filters: dict[str, Collection[str]] = {}
        if model is not None:
            filters["Model"] = [model] if isinstance(model, str) else list(model)
        if log_type is not None:
            filters["Log Type"] = [log_type] if isinstance(log_type, str) else list(log_type)
        super().__init__(
            path,
            "Timestamp",
            "Request tokens",
            "Response tokens",
            arrival_unit="s",
            extra={"model": "Model", "log_type": "Log Type"},
            filters=filters,
            filter_reasons={"Model": "model_filter", "Log Type": "log_type_filter"},
            zero_output_reason="zero_response_tokens",
            on_error=on_error,
            chunk_rows=chunk_rows,
        )
        self.model = model
        self.log_type = log_type

    def _header_index(self, header: list[str]) -> dict[str, int]:
        names = {h.strip() for h in header}
        # keep the _3 files' extra columns when present
        self.extra = {k: c for k, c in BURSTGPT_EXTRA.items() if c in names or k in ("model", "log_type")}
        return super()._header_index(header)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": str(self.path),
            "model": self.model,
            "log_type": self.log_type,
            "on_error": self.on_error,
        }


MOONCAKE_BUCKET_S = 3.0


def _is_int_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(h, int) and not isinstance(h, bool) for h in value)


class MooncakeTrace(Workload):
    """Mooncake JSONL (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids``).

    ``hash_ids`` (512-token prefix-block ids) are kept on the request as a tuple. The conversation
    trace quantises arrivals to ~3 s buckets; ``jitter_s > 0`` spreads the requests that share a
    timestamp uniformly over ``[t, t + min(jitter_s, gap to the next timestamp))`` (seeded, sorted),
    so the replay does not see an artificial burst; ``jitter_s=True`` means the 3 s bucket. Off by
    default.
    """

    kind = "mooncake"

    def __init__(
        self,
        path: str | Path,
        jitter_s: float | bool = 0.0,
        seed: int = 0,
        on_error: str = "raise",
    ) -> None:
        super().__init__()
        if jitter_s is True:
            jitter_s = MOONCAKE_BUCKET_S
        if isinstance(jitter_s, bool) or jitter_s < 0:
            raise ConfigError(f"jitter_s: expected a non-negative number of seconds, got {jitter_s!r}")
        self.path = Path(path)
        self.jitter_s = float(jitter_s)
        self.seed = seed
        self.on_error = check_on_error(on_error)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": str(self.path),
            "jitter_s": self.jitter_s,
            "seed": self.seed,
            "on_error": self.on_error,
        }

    def _fail(self, stats: WorkloadStats, msg: str, reason: str = "malformed") -> None:
        if self.on_error == "raise":
            raise TraceError(msg)
        stats.skip(reason)
        stats.note_error(msg)

    def _rows(self, stats: WorkloadStats) -> Iterator[tuple[int, int, int, tuple[int, ...] | None]]:
        """Validated rows (timestamp ms, input, output, hash_ids) in file order."""
        if not self.path.exists():
            raise TraceError(f"{self.path}: trace file not found")
        last = None
        with open(self.path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, start=1):
                if not line.strip():
                    stats.skip("blank_line")
                    continue
                stats.rows_read += 1
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    self._fail(
                        stats, f"{self.path}: line {line_no}: expected a JSON object, got invalid JSON ({e})"
                    )
                    continue
                if not isinstance(obj, dict):
                    self._fail(stats, _message(self.path, line_no, "*", "a JSON object", obj))
                    continue
                bad = None
                vals = []
                for key in ("timestamp", "input_length", "output_length"):
                    v = obj.get(key)
                    if key not in obj:
                        bad = _message(self.path, line_no, key, "a non-negative integer (key missing)", None)
                    elif isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v != int(v):
                        bad = _message(self.path, line_no, key, "a non-negative integer", v)
                    if bad:
                        break
                    vals.append(int(v))
                if bad is None and last is not None and vals[0] < last:
                    self._fail(
                        stats,
                        _message(
                            self.path,
                            line_no,
                            "timestamp",
                            f"a time >= the previous row's ({last} ms)",
                            vals[0],
                        ),
                        reason="out_of_order",
                    )
                    continue
                hashes = obj.get("hash_ids")
                if bad is None and hashes is not None and not _is_int_list(hashes):
                    bad = _message(self.path, line_no, "hash_ids", "a list of integers", hashes)
                if bad:
                    self._fail(stats, bad)
                    continue
                last = vals[0]
                yield vals[0], vals[1], vals[2], (tuple(hashes) if hashes is not None else None)

    def _iter(self, stats: WorkloadStats) -> Iterator[Request]:
        rows = self._rows(stats)
        if self.jitter_s <= 0:
            for i, (ts, p, o, h) in enumerate(rows):
                stats.yielded += 1
                yield Request(i, ts * 1e-3, p, o, hash_ids=h)
            return
        rng = np.random.default_rng(self.seed)
        next_id = 0
        group: list[tuple[int, int, int, tuple[int, ...] | None]] = []
        for row in rows:
            if group and row[0] != group[0][0]:
                gap = (row[0] - group[0][0]) * 1e-3
                for req in self._spread(group, min(self.jitter_s, gap), rng, next_id):
                    stats.yielded += 1
                    next_id += 1
                    yield req
                group = []
            group.append(row)
        if group:
            for req in self._spread(group, self.jitter_s, rng, next_id):
                stats.yielded += 1
                yield req

    @staticmethod
    def _spread(
        group: list[tuple[int, int, int, tuple[int, ...] | None]],
        width: float,
        rng: np.random.Generator,
        first_id: int,
    ) -> Iterator[Request]:
        base = group[0][0] * 1e-3
        offsets = np.sort(rng.uniform(0.0, width, size=len(group))).tolist()
        for k, ((_, p, o, h), off) in enumerate(zip(group, offsets)):
            yield Request(first_id + k, base + off, p, o, hash_ids=h)
