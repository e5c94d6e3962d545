"""Mooncake JSONL trace reader (plain or gzip / xz / bz2 compressed).

Each line is validated on its own (JSON syntax, types, ranges, order); a bad line raises one
:class:`TraceError` naming the file, line and key, or with ``on_error="skip"`` is counted by reason.
Zero-length requests are skipped and counted like in every reader (see :mod:`llmsim.workload.traces`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from llmsim.errors import ConfigError, DuplicateJSONKey
from llmsim.request import MAX_SIM_TIME, Request
from llmsim.workload.base import MAX_TOKENS, Workload, WorkloadStats, check_float, check_int, check_on_error
from llmsim.workload.trace_io import (
    DECODE_ERRORS,
    decode_failure,
    duplicate_key_message,
    json_line,
    open_text,
    undecodable,
    undecodable_message,
)
from llmsim.workload.trace_values import TOKENS_EXPECTED, reject, require_requests, row_message

MOONCAKE_BUCKET_S = 3.0
MOONCAKE_HASH_BLOCK = 512  # tokens per id (FAST25 README; every row of both traces has ceil(input / 512) ids)
# the simulated horizon in ms (llmsim.request.MAX_SIM_TIME), below 2**53: every such integer is exact as a float
MAX_TIMESTAMP_MS = int(MAX_SIM_TIME * 1000)
TIMESTAMP_EXPECTED = f"an integer number of ms in [0, {MAX_TIMESTAMP_MS}]"
LENGTH_KEYS = (("input_length", "zero_prompt_tokens"), ("output_length", "zero_output_tokens"))

Row = tuple[int, int, int, tuple[int, ...] | None]


class _BadLine(Exception):
    """Internal: one rejected line (message, skip reason)."""

    def __init__(self, message: str, reason: str = "malformed") -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


def _is_int_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(h, int) and not isinstance(h, bool) for h in value)


def _integer(value: Any, hi: int) -> int | None:
    """``value`` as an int in [0, hi] (``12`` or ``12.0``), else None; NaN, inf, bools and strings are None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value == math.floor(value)):
        return None
    return int(value) if 0 <= value <= hi else None


class MooncakeTrace(Workload):
    """Mooncake JSONL (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids``).

    ``hash_ids`` (512-token prefix-block ids) are kept on the request as a tuple with ``hash_block=512`` set
    explicitly; the engine maps them onto its own block size (16 tokens by default) with
    :func:`llmsim.engine.prefix_cache.block_keys`, so only full engine blocks are cached and a prompt's partial last
    512-token block still shares its full 16-token blocks. The ids cover the prompt only
    (``ceil(input_length / 512)``), so outputs are never reused. The conversation
    trace quantises arrivals to ~3 s buckets; ``jitter_s > 0`` (a number of seconds, e.g. 3.0) spreads
    the requests that share a timestamp uniformly over ``[t, t + min(jitter_s, gap to the next
    timestamp))`` (seeded, sorted), so the replay does not see an artificial burst. 0 (the default)
    is off. Arrivals are ``timestamp`` / 1000 (the trace starts at 0).
    """

    kind = "mooncake"

    def __init__(self, path: str | Path, jitter_s: float = 0.0, seed: int = 0, on_error: str = "raise") -> None:
        super().__init__()
        if isinstance(jitter_s, bool):
            raise ConfigError(f"jitter_s: expected a number of seconds >= 0 (0 = off, {MOONCAKE_BUCKET_S} = the "
                              f"trace's bucket), got {jitter_s!r}")
        self.path = Path(path)
        self.jitter_s = check_float("jitter_s", jitter_s, ge=0.0)
        self.seed = check_int("seed", seed, ge=0)
        self.on_error = check_on_error(on_error)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": str(self.path),
            "jitter_s": self.jitter_s,
            "seed": self.seed,
            "on_error": self.on_error,
        }

    def _parse(self, line: str, line_no: int, last: int | None, ids_from: int | None = None) -> Row:
        """One line -> (timestamp ms, input, output, hash_ids); raises _BadLine. ``ids_from``: the line of the first
        row with ``hash_ids``, after which every row needs them (a row without would share nothing, silently)."""
        try:
            obj = json_line(line)
        except DuplicateJSONKey as e:
            raise _BadLine(duplicate_key_message(self.path, f"line {line_no}", e.key)) from None
        except (json.JSONDecodeError, RecursionError) as e:
            obj = e
        if isinstance(obj, dict):
            ts, p, o = obj.get("timestamp"), obj.get("input_length"), obj.get("output_length")
            if not (type(ts) is int and type(p) is int and type(o) is int  # the fast path of almost every line
                    and 0 <= ts <= MAX_TIMESTAMP_MS and 0 <= p <= MAX_TOKENS and 0 <= o <= MAX_TOKENS):
                ts, p, o = self._values(obj, line, line_no)
        else:
            raise self._not_an_object(obj, line, line_no)
        if last is not None and ts < last:
            raise _BadLine(row_message(self.path, f"line {line_no}", "timestamp",
                                       f"a time >= the previous row's ({last} ms)", ts), reason="out_of_order")
        hashes = obj.get("hash_ids")
        if hashes is None and ids_from is not None:
            raise _BadLine(f"{self.path}: line {line_no}, column 'hash_ids': expected the prefix-block ids every "
                           f"earlier row has (line {ids_from} has them), got "
                           f"{'no such key' if 'hash_ids' not in obj else 'null'}")
        if hashes is not None and not _is_int_list(hashes):
            raise _BadLine(row_message(self.path, f"line {line_no}", "hash_ids", "a list of integers", hashes))
        if hashes is not None and len(hashes) * MOONCAKE_HASH_BLOCK < p:  # Mooncake: an id per block, the last partial
            need = -(-p // MOONCAKE_HASH_BLOCK)
            raise _BadLine(row_message(self.path, f"line {line_no}", "hash_ids", f"at least {need} ids (one per "
                                       f"{MOONCAKE_HASH_BLOCK}-token block of input_length {p})", f"{len(hashes)} ids"))
        return ts, p, o, (tuple(hashes) if hashes is not None else None)

    def _not_an_object(self, obj: Any, line: str, line_no: int) -> _BadLine:
        where = f"line {line_no}"
        bad_bytes = undecodable(line)
        if bad_bytes is not None:
            return _BadLine(undecodable_message(self.path, where, "(JSON text)", bad_bytes[1]))
        if isinstance(obj, json.JSONDecodeError | RecursionError):
            detail = obj.msg if isinstance(obj, json.JSONDecodeError) else "nested too deeply"
            if line_no == 1 and "," in line and not line.lstrip().startswith(("{", "[")):
                detail += "; the first line looks like a CSV header: CSV traces are read by kind azure, burstgpt or csv"
            return _BadLine(f"{self.path}: {where}, column '*': expected a JSON object, got invalid JSON ({detail})")
        return _BadLine(row_message(self.path, where, "*", "a JSON object", obj))

    def _values(self, obj: dict[str, Any], line: str, line_no: int) -> tuple[int, int, int]:
        """The slow path: (timestamp, input, output) of an object whose values need a closer look."""
        where = f"line {line_no}"
        vals = []
        for key, hi, expected in (("timestamp", MAX_TIMESTAMP_MS, TIMESTAMP_EXPECTED),
                                  ("input_length", MAX_TOKENS, TOKENS_EXPECTED),
                                  ("output_length", MAX_TOKENS, TOKENS_EXPECTED)):
            if key not in obj:
                raise _BadLine(f"{self.path}: {where}, column {key!r}: expected {expected}, got no such key "
                               f"(keys: {sorted(obj)[:8]})")
            v = _integer(obj[key], hi)
            if v is None:
                bad_bytes = undecodable(line)
                if bad_bytes is not None:
                    raise _BadLine(undecodable_message(self.path, where, "(JSON text)", bad_bytes[1]))
                raise _BadLine(row_message(self.path, where, key, expected, obj[key]))
            vals.append(v)
        return vals[0], vals[1], vals[2]

    def _rows(self, stats: WorkloadStats) -> Iterator[Row]:
        """Validated rows with prompt and output >= 1, in file order."""
        last = ids_from = None
        with open_text(self.path) as (f, fmt):
            line_no = 0
            try:
                for line_no, line in enumerate(f, start=1):
                    if not line.strip():
                        stats.skip("blank_line")
                        continue
                    stats.rows_read += 1
                    try:
                        row = self._parse(line, line_no, last, ids_from)
                    except _BadLine as e:
                        bad = e
                    else:
                        bad = None
                    if bad is not None:  # raised outside the except block: no chained traceback
                        reject(stats, self.on_error, bad.message, bad.reason)
                        continue
                    last = row[0]
                    if ids_from is None and row[3] is not None:
                        ids_from = line_no
                    if row[1] == 0 or row[2] == 0:
                        stats.skip(LENGTH_KEYS[0][1] if row[1] == 0 else LENGTH_KEYS[1][1])
                        continue
                    yield row
            except DECODE_ERRORS as e:
                raise decode_failure(self.path, fmt, e, line_no + 1) from None

    def _iter(self, stats: WorkloadStats) -> Iterator[Request]:
        yield from self._requests(self._rows(stats), stats)
        require_requests(self.path, stats, "line 1", "JSON lines")

    def _requests(self, rows: Iterator[Row], stats: WorkloadStats) -> Iterator[Request]:
        if self.jitter_s <= 0:
            for i, (ts, p, o, h) in enumerate(rows):
                stats.yielded += 1
                yield Request(i, ts * 1e-3, p, o, hash_ids=h, hash_block=MOONCAKE_HASH_BLOCK)
            return
        rng = np.random.default_rng(self.seed)
        next_id = 0
        group: list[Row] = []
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
    def _spread(group: list[Row], width: float, rng: np.random.Generator, first_id: int) -> Iterator[Request]:
        base = group[0][0] * 1e-3
        offsets = np.sort(rng.uniform(0.0, width, size=len(group))).tolist()
        for k, ((_, p, o, h), off) in enumerate(zip(group, offsets)):
            yield Request(first_id + k, base + off, p, o, hash_ids=h, hash_block=MOONCAKE_HASH_BLOCK)


__all__ = ["MOONCAKE_BUCKET_S", "MOONCAKE_HASH_BLOCK", "MooncakeTrace"]
