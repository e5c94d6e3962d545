"""Trace readers: Azure LLM inference 2023/2024, BurstGPT, a generic CSV (and Mooncake JSONL, in mooncake.py).

Files may be plain, gzip / xz / bz2 compressed or Parquet (see :mod:`llmsim.workload.trace_io`); they are
read in chunks (the 1-based line, or Parquet row, of every value is known for error messages) and each
chunk's columns are converted with vectorised numpy/pandas. Arrivals are seconds since the first valid row
of the file ("trace start"), so a model filter does not shift the clock. Malformed rows raise
:class:`TraceError` naming the file, line, column and what was expected; with ``on_error="skip"`` they are
counted in ``stats.skipped`` instead.

Zero-length requests are never simulated: a row with 0 prompt tokens is skipped as ``zero_prompt_tokens``
(vLLM rejects empty prompts) and one with 0 output tokens as ``zero_output_tokens`` (vLLM always generates
at least one token; BurstGPT writes 0 for failed requests). A complete read that yields no request at all
raises :class:`TraceError` with the skip counts: an empty run is never silent.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llmsim.errors import ConfigError, TraceError
from llmsim.request import MAX_SIM_TIME, Request
from llmsim.workload.base import Workload, WorkloadStats, check_int, check_on_error
from llmsim.workload.mooncake import MooncakeTrace
from llmsim.workload.sessions import DEFAULT_HASH_BLOCK, DEFAULT_MAX_SESSIONS, SessionIds, check_hash_block
from llmsim.workload.trace_io import Table
from llmsim.workload.trace_values import (
    DATETIME_EXPECTED,
    TOKENS_EXPECTED,
    RowError,
    parse_datetimes_ns,
    parse_floats,
    parse_tokens,
    reject,
    require_requests,
    row_message,
)

ARRIVAL_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "datetime": 1e-9}
DEFAULT_CHUNK_ROWS = 8192
TEXT_FIELDS = ("task", "tenant", "slo_class")
ZERO_OUTPUT = "zero_output_tokens"
ZERO_PROMPT = "zero_prompt_tokens"

__all__ = ["ARRIVAL_UNITS", "BURSTGPT_RELEASES", "AzureTrace", "BurstGPTTrace", "CsvTrace", "MooncakeTrace"]


def missing_columns_error(path: Path, where: str, wanted: Sequence[str], names: Sequence[str]) -> TraceError | None:
    """The error for the first wanted column the header lacks (with a close match, for renamed columns) or names
    more than once (reading either copy would be a guess)."""
    def norm(name: str) -> str:
        return "".join(ch for ch in name.lower() if ch.isalnum())

    if names and isinstance(names[0], str) and names[0].lstrip().startswith("{"):
        return TraceError(f"{path}: {where}: expected a CSV header with columns {sorted(set(wanted))}, got a JSON "
                          f"line ({names[0][:40]!r}, ...); JSON Lines traces (Mooncake's) are read by kind: mooncake")

    for col in wanted:
        if col not in names:
            same = [n for n in names if isinstance(n, str) and norm(n) == norm(col)]
            close = same or difflib.get_close_matches(col, [n for n in names if isinstance(n, str)], n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return TraceError(f"{path}: {where}: missing column {col!r}{hint}; expected columns "
                              f"{sorted(set(wanted))}, found {list(names)}")
    for col in wanted:
        at = [i + 1 for i, n in enumerate(names) if n == col]
        if len(at) > 1:
            return TraceError(f"{path}: {where}: column {col!r} appears {len(at)} times (columns "
                              f"{', '.join(map(str, at[:-1]))} and {at[-1]}); expected each column it reads once")
    return None


def shared_column(arrival: str, prompt: str, output: str) -> str | None:
    """The message (``columns.<key>: ...``) when two of the arrival, prompt and output keys name one column (its
    values would be read as both), else None."""
    seen: dict[str, str] = {}
    for key, col in (("arrival", arrival), ("prompt", prompt), ("output", output)):
        if col in seen:
            return (f"columns.{key}: expected a column other than columns.{seen[col]}'s, got the same column "
                    f"{col!r} (one column cannot hold both)")
        seen[col] = key
    return None


class CsvTrace(Workload):
    """Generic CSV (or Parquet) trace with a column map (also the engine behind the Azure and BurstGPT readers).

    ``arrival_unit`` is ``"s"``, ``"ms"``, ``"us"`` (numbers) or ``"datetime"`` (ISO-8601 strings, or a
    Parquet timestamp column). ``task``/``tenant``/``slo_class`` name optional text columns copied onto
    the request; ``extra`` maps request ``extra`` keys to columns (raw strings). ``filters`` maps a column
    to the values to keep, with the skip reason ``<column>_filter`` unless ``filter_reasons`` names it.
    Rows with 0 prompt or 0 output tokens are always skipped (``zero_prompt_tokens`` /
    ``zero_output_tokens``); ``zero_output_reason`` is accepted for older configs and must be that name.
    """

    kind = "csv"
    min_arrival: float | None = None  # a lower bound on the arrival column's raw numbers (a reader's own rule)
    arrival_expected = ""  # what a bad arrival was expected to be, when min_arrival is set

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
        for key, col in (("arrival", arrival), ("prompt", prompt), ("output", output), ("task", task),
                         ("tenant", tenant), ("slo_class", slo_class)):
            if (col is not None or key in ("arrival", "prompt", "output")) and not (isinstance(col, str) and col):
                raise ConfigError(f"columns.{key}: expected a column name, got {col!r}")
        shared = shared_column(arrival, prompt, output)
        if shared is not None:
            raise ConfigError(shared)
        if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in "\r\n\"":
            raise ConfigError(f"delimiter: expected one character (not a quote or newline), got {delimiter!r}")
        if zero_output_reason not in (None, ZERO_OUTPUT):
            raise ConfigError(f"zero_output_reason: rows with 0 output tokens are always skipped as {ZERO_OUTPUT!r}; "
                              f"got {zero_output_reason!r}")
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
        self.on_error = check_on_error(on_error)
        self.chunk_rows = check_int("chunk_rows", chunk_rows, ge=1)
        self.delimiter = delimiter
        self.origin: float | None = None  # raw arrival value of t = 0; None: the first valid row
        self._seen: dict[str, set[str]] = {}  # values met in filtered columns, for the empty-result message

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

    def _wanted(self) -> list[str]:
        wanted = [self.arrival, self.prompt, self.output]
        wanted += [c for c in self.text_columns.values() if c]
        wanted += list(self.extra.values()) + list(self.filters)
        return list(dict.fromkeys(wanted))

    def _select(self, names: list[str], where: str) -> list[str]:
        """The columns to read, given the header (``where`` locates it for the message)."""
        wanted = self._wanted()
        err = missing_columns_error(self.path, where, wanted, names)
        if err is not None:
            raise err
        return wanted

    def _iter(self, stats: WorkloadStats) -> Iterator[Request]:
        table = Table(self.path, self.delimiter, self.chunk_rows)
        state: dict[str, Any] = {"base": self.origin, "last": -np.inf, "next_id": 0}
        numeric = (self.arrival, self.prompt, self.output)
        self._seen = {c: set() for c in self.filters}
        for cols, positions, unit in table.read(self._select, numeric, stats, self.on_error):
            yield from self._process_chunk(cols, positions, unit, state, stats)
        try:
            require_requests(self.path, stats, table.first_row)
        except TraceError as e:
            raise TraceError(f"{e}{self._filter_hint(stats)}") from None

    def _filter_hint(self, stats: WorkloadStats) -> str:
        """Which values the filtered columns hold, when a filter removed rows (a typo like 'gpt-4' shows)."""
        parts = []
        for c, seen in self._seen.items():
            if stats.skipped.get(self.filter_reasons[c]):
                shown = sorted(seen)[:10]
                more = " and more" if len(seen) > 10 else ""
                parts.append(f"column {c!r} holds {shown}{more}, kept {sorted(self.filters[c])}")
        return f"; {'; '.join(parts)}" if parts else ""

    def _value_errors(self, cols: dict[str, Sequence[Any]],
                      state: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[RowError]]:
        """(arrival s since trace start, prompt, output) of a chunk, and one RowError per bad row."""
        prompt, bad_p = parse_tokens(cols[self.prompt])
        output, bad_o = parse_tokens(cols[self.output])
        if self.arrival_unit == "datetime":
            raw, bad_a = parse_datetimes_ns(cols[self.arrival])
            time_expected = DATETIME_EXPECTED
        else:
            raw, bad_a = parse_floats(cols[self.arrival])
            time_expected = f"a finite number of {self.arrival_unit}"
            if self.min_arrival is not None:  # checked before the first valid row sets the trace start
                with np.errstate(invalid="ignore"):
                    bad_a |= raw < self.min_arrival
                time_expected = self.arrival_expected
        ok = np.flatnonzero(~(bad_a | bad_p | bad_o))
        if state["base"] is None and ok.size:
            state["base"] = raw[ok[0]]
        base = state["base"] if state["base"] is not None else 0
        with np.errstate(over="ignore", invalid="ignore"):
            if self.arrival_unit == "datetime":
                arrival = (raw - base).astype(np.float64) / 1e9
            else:
                arrival = (raw - base) * ARRIVAL_UNITS[self.arrival_unit]
            far = np.isfinite(arrival) & (arrival > MAX_SIM_TIME) & ~bad_a  # past the simulated horizon
        bad_t = ~np.isfinite(arrival) & ~bad_a | far
        errors = []
        for i in np.flatnonzero(bad_a | bad_p | bad_o | bad_t).tolist():
            if bad_a[i] or bad_t[i]:
                expected = (time_expected if bad_a[i] else f"a time at most {MAX_SIM_TIME:g} s after the trace start "
                            "(the simulated horizon)" if far[i] else "a time within the float range of the trace start")
                errors.append(RowError(i, self.arrival, expected, cols[self.arrival][i]))
            else:
                col = self.prompt if bad_p[i] else self.output
                errors.append(RowError(i, col, TOKENS_EXPECTED, cols[col][i]))
        return arrival, prompt, output, errors

    def _order_errors(self, arrival: np.ndarray, valid: np.ndarray, cols: dict[str, Sequence[Any]],
                      state: dict[str, Any]) -> list[RowError]:
        """Rows earlier than a previous valid row (also across chunks): arrivals must be non-decreasing."""
        a = np.where(valid, arrival, -np.inf)
        prev_max = np.maximum.accumulate(np.concatenate(([state["last"]], a)))[:-1]
        late = valid & (arrival < prev_max)
        errors = [RowError(i, self.arrival, f"a time >= the previous row's ({prev_max[i]:.6f} s after trace start)",
                           cols[self.arrival][i], reason="out_of_order") for i in np.flatnonzero(late).tolist()]
        ok = valid & ~late
        if ok.any():
            state["last"] = max(state["last"], float(arrival[ok].max()))
        return errors

    def _process_chunk(self, cols: dict[str, Sequence[Any]], positions: list[int], unit: str,
                       state: dict[str, Any], stats: WorkloadStats) -> Iterator[Request]:
        """Validate, filter and count one chunk; returns the generator of its requests (not one itself, so a
        request passes through one generator less)."""
        arrival, prompt, output, errors = self._value_errors(cols, state)
        keep = np.ones(len(positions), dtype=bool)
        keep[[e.index for e in errors]] = False
        errors += self._order_errors(arrival, keep, cols, state)
        for err in sorted(errors, key=lambda e: e.index):
            msg = row_message(self.path, f"{unit} {positions[err.index]}", err.column, err.expected, err.got)
            reject(stats, self.on_error, msg, err.reason)
            keep[err.index] = False
        for c, allowed in self.filters.items():
            if len(self._seen[c]) <= 10:
                self._seen[c].update(v for v in set(cols[c]) if isinstance(v, str))
            ok = np.fromiter((v in allowed for v in cols[c]), dtype=bool, count=len(positions))
            stats.skip(self.filter_reasons[c], int((keep & ~ok).sum()))
            keep &= ok
        for reason, tokens in ((ZERO_PROMPT, prompt), (ZERO_OUTPUT, output)):
            zero = keep & (tokens == 0)
            stats.skip(reason, int(zero.sum()))
            keep &= ~zero
        idx = np.flatnonzero(keep)
        return self._requests(idx, arrival, prompt, output, cols, state, stats) if idx.size else iter(())

    def _requests(self, idx: np.ndarray, arrival: np.ndarray, prompt: np.ndarray, output: np.ndarray,
                  cols: dict[str, Sequence[Any]], state: dict[str, Any], stats: WorkloadStats) -> Iterator[Request]:
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


BURSTGPT_RELEASES = "https://github.com/HPMLL/BurstGPT/releases"
BURSTGPT_DOWNLOAD = (f"download a BurstGPT CSV (BurstGPT_1.csv, ..._2, ..._3 or a without_fails file; "
                     f"CC-BY 4.0) from {BURSTGPT_RELEASES}")
BURSTGPT_PATH_HINT = f"expected the path of a BurstGPT CSV file: {BURSTGPT_DOWNLOAD}"
TIME_ORIGINS = ("first_row", "midnight")
BURSTGPT_EXTRA = {
    "model": "Model",
    "log_type": "Log Type",
    "session_id": "Session ID",
    "elapsed_time": "Elapsed time",
}


def _labels(name: str, value: str | Collection[str] | None) -> list[str] | None:
    if value is None:
        return None
    values = [value] if isinstance(value, str) else list(value)
    if not values or not all(isinstance(v, str) and v for v in values):
        raise ConfigError(f"{name}: expected a name or a non-empty list of names, got {value!r}")
    return values


class BurstGPTTrace(CsvTrace):
    """BurstGPT (HPMLL/BurstGPT) CSV, parsed by column name since ``_3`` files add two columns.

    Rows with ``Response tokens == 0`` are failed requests: skipped and counted under
    ``zero_output_tokens`` like every reader's zero-output rows (the ``without_fails`` files are the same
    trace minus these rows). ``model`` (``"ChatGPT"``/``"GPT-4"``) and ``log_type``
    (``"Conversation log"``/``"API log"``) keep matching rows, a name or a list (others counted as
    ``model_filter`` / ``log_type_filter``). Model, log type and, in ``_3`` files, session id and elapsed time
    are kept in ``request.extra``. ``time_origin="midnight"`` keeps ``Timestamp`` as written (seconds since
    0:00 of the trace's first day), so a window can be set in hour-of-day terms; the default
    ``"first_row"`` starts the clock at the file's first valid row like every reader. A negative ``Timestamp`` is
    a bad row on either clock (it would otherwise become the first row's trace start).

    ``sessions=True`` (``_3`` files) gives every request prefix-block ids (``hash_block`` tokens each) so that
    consecutive rows of one ``Session ID`` form a conversation for the prefix cache: see
    :class:`llmsim.workload.sessions.SessionIds` for the rule (an assumption: the trace holds no content) and
    its cap of ``max_sessions`` open conversations. Off by default, so a replay without it is unchanged.
    """

    kind = "burstgpt"
    min_arrival = 0.0  # Timestamp counts seconds from 0:00 of the trace's first day
    arrival_expected = "a finite number of seconds >= 0 (BurstGPT's Timestamp is never negative)"

    def __init__(
        self,
        path: str | Path,
        model: str | Collection[str] | None = None,
        log_type: str | Collection[str] | None = None,
        on_error: str = "raise",
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
        time_origin: str = "first_row",
        sessions: bool = False,
        hash_block: int = DEFAULT_HASH_BLOCK,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> None:
        if not isinstance(path, str | Path) or not str(path):
            raise ConfigError(f"path: {BURSTGPT_PATH_HINT}, got {path!r}")
        if time_origin not in TIME_ORIGINS:
            raise ConfigError(f"time_origin: expected one of {list(TIME_ORIGINS)}, got {time_origin!r}")
        if not isinstance(sessions, bool):
            raise ConfigError(f"sessions: expected true or false, got {sessions!r}")
        self.sessions = sessions
        self.hash_block = check_hash_block(hash_block)
        self.max_sessions = check_int("max_sessions", max_sessions, ge=1)
        filters: dict[str, Collection[str]] = {}
        models = _labels("model", model)
        log_types = _labels("log_type", log_type)
        if models is not None:
            filters["Model"] = models
        if log_types is not None:
            filters["Log Type"] = log_types
        super().__init__(
            path,
            "Timestamp",
            "Request tokens",
            "Response tokens",
            arrival_unit="s",
            extra={"model": "Model", "log_type": "Log Type"},
            filters=filters,
            filter_reasons={"Model": "model_filter", "Log Type": "log_type_filter"},
            on_error=on_error,
            chunk_rows=chunk_rows,
        )
        self.model = models
        self.log_type = log_types
        self.time_origin = time_origin
        self.origin = 0.0 if time_origin == "midnight" else None

    def _iter(self, stats: WorkloadStats) -> Iterator[Request]:
        if not self.path.exists():
            raise TraceError(f"{self.path}: trace file not found; {BURSTGPT_DOWNLOAD}")
        if not self.sessions:
            yield from super()._iter(stats)
            return
        ids = SessionIds(self.hash_block, self.max_sessions)
        for r in super()._iter(stats):
            r.hash_ids = ids.assign(r.extra["session_id"] if r.extra else None, r.prompt_tokens, r.output_tokens)
            r.hash_block = self.hash_block
            stats.sessions_forgotten = ids.forgotten  # (reported by the run: their later turns lose reuse)
            yield r

    def _select(self, names: list[str], where: str) -> list[str]:
        if self.sessions and BURSTGPT_EXTRA["session_id"] not in names:
            raise TraceError(f"{self.path}: {where}: sessions: true needs the 'Session ID' column (BurstGPT_3 "
                             f"files), found {list(names)}")
        # keep the _3 files' extra columns when present
        self.extra = {k: c for k, c in BURSTGPT_EXTRA.items() if c in names or k in ("model", "log_type")}
        return super()._select(names, where)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": str(self.path),
            "model": self.model,
            "log_type": self.log_type,
            "time_origin": self.time_origin,
            "on_error": self.on_error,
            **({"sessions": True, "hash_block": self.hash_block, "max_sessions": self.max_sessions}
               if self.sessions else {}),
        }
