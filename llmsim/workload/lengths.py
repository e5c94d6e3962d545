"""Token-length models for synthetic workloads, sampled in numpy batches.

A :class:`LengthModel` samples one dimension (prompt or output); a :class:`PairModel` samples
(prompt, output) jointly, which the empirical model needs to keep a trace's correlation.
All samples are rounded to integers and clipped to ``[min, max]``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmsim.errors import ConfigError, DuplicateJSONKey, TraceError
from llmsim.workload.base import MAX_TOKENS, WorkloadStats, check_float, check_int
from llmsim.workload.trace_io import (
    Table,
    base_suffix,
    duplicate_key_message,
    json_line,
    open_text,
    sniff,
)
from llmsim.workload.trace_values import TOKENS_EXPECTED, parse_tokens, row_message

MAX_SIGMA = 10.0  # a log-sd beyond this puts almost every sample at min or max: surely a typo


def _clip(x: np.ndarray, lo: int, hi: int | None) -> np.ndarray:
    """Round and clip to [lo, hi] (hi defaults to MAX_TOKENS, so an inf sample never reaches int64)."""
    return np.clip(np.rint(x), lo, hi if hi is not None else MAX_TOKENS).astype(np.int64)


def _check_bounds(name: str, lo: Any, hi: Any) -> tuple[int, int | None]:
    """min >= 1 (a request has at least one prompt and one output token), max >= min, both <= MAX_TOKENS."""
    lo = check_int(f"{name}.min", lo, ge=1, le=MAX_TOKENS)
    if hi is None:
        return lo, None
    return lo, check_int(f"{name}.max", hi, ge=lo, le=MAX_TOKENS)


class LengthModel:
    """One token-length dimension; ``sample(rng, n)`` returns an int64 array."""

    name = "length"

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass
class Fixed(LengthModel):
    """Every request has ``value`` tokens."""

    value: int

    def __post_init__(self) -> None:
        self.value = check_int("fixed.value", self.value, ge=1, le=MAX_TOKENS)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, int(self.value), dtype=np.int64)

    def describe(self) -> dict[str, Any]:
        return {"dist": "fixed", "value": self.value}


@dataclass
class Uniform(LengthModel):
    """Integer uniform on ``[lo, hi]`` inclusive."""

    lo: int
    hi: int

    def __post_init__(self) -> None:
        self.lo, hi = _check_bounds("uniform", self.lo, self.hi)
        if hi is None:
            raise ConfigError(f"uniform.max: expected an integer >= {self.lo}, got None")
        self.hi = hi

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(self.lo, self.hi, size=n, endpoint=True, dtype=np.int64)

    def describe(self) -> dict[str, Any]:
        return {"dist": "uniform", "lo": self.lo, "hi": self.hi}


@dataclass
class LogNormal(LengthModel):
    """Lognormal with log-mean ``mu`` and log-sd ``sigma``, rounded and clipped to ``[min, max]``.

    Build it from the moments you know with :meth:`from_mean_sigma` or :meth:`from_mean_median`.
    """

    mu: float
    sigma: float
    min: int = 1
    max: int | None = None

    def __post_init__(self) -> None:
        self.mu = check_float("lognormal.mu", self.mu, ge=-50.0, le=50.0)
        self.sigma = check_float("lognormal.sigma", self.sigma, ge=0.0, le=MAX_SIGMA)
        self.min, self.max = _check_bounds("lognormal", self.min, self.max)

    @classmethod
    def from_mean_sigma(cls, mean: float, sigma: float, min: int = 1, max: int | None = None) -> LogNormal:
        """Unclipped mean ``mean``: mu = ln(mean) - sigma^2 / 2."""
        mean = check_float("lognormal.mean", mean, gt=0.0)
        sigma = check_float("lognormal.sigma", sigma, ge=0.0, le=MAX_SIGMA)
        return cls(float(np.log(mean) - sigma * sigma / 2), sigma, min, max)

    @classmethod
    def from_mean_median(cls, mean: float, median: float, min: int = 1, max: int | None = None) -> LogNormal:
        """Unclipped mean and median (p50): mu = ln(p50), sigma = sqrt(2 ln(mean / p50))."""
        mean = check_float("lognormal.mean", mean, gt=0.0)
        median = check_float("lognormal.p50", median, gt=0.0)
        if mean < median:
            raise ConfigError(f"lognormal: expected mean >= p50 > 0, got mean={mean!r}, p50={median!r}")
        return cls(float(np.log(median)), float(np.sqrt(2 * np.log(mean / median))), min, max)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return _clip(rng.lognormal(self.mu, self.sigma, size=n), self.min, self.max)

    def describe(self) -> dict[str, Any]:
        return {"dist": "lognormal", "mu": self.mu, "sigma": self.sigma, "min": self.min, "max": self.max}


class PairModel:
    """Samples (prompt, output) token counts together."""

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass
class Independent(PairModel):
    """Prompt and output drawn independently (from one generator, prompt first)."""

    prompt: LengthModel
    output: LengthModel

    def __post_init__(self) -> None:
        for name in ("prompt", "output"):
            if not isinstance(getattr(self, name), LengthModel):
                raise ConfigError(f"lengths.{name}: expected a LengthModel (Fixed, Uniform, LogNormal), "
                                  f"got {getattr(self, name)!r}")

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        return self.prompt.sample(rng, n), self.output.sample(rng, n)

    def describe(self) -> dict[str, Any]:
        return {"prompt": self.prompt.describe(), "output": self.output.describe()}


# Known (prompt, output) column pairs, tried in order when the caller names none.
KNOWN_LENGTH_COLUMNS = (
    ("num_prefill_tokens", "num_decode_tokens"),  # sharegpt_lengths (sarathi-serve / vidur)
    ("ContextTokens", "GeneratedTokens"),  # Azure LLM inference 2023/2024
    ("Request tokens", "Response tokens"),  # BurstGPT
    ("input_length", "output_length"),  # Mooncake JSONL
    ("prompt_tokens", "output_tokens"),
)


class Empirical(PairModel):
    """Resamples (prompt, output) pairs jointly, with replacement, from a trace or a table.

    ``table`` is a path (CSV, Parquet or JSONL, plain or compressed), a pandas DataFrame, a mapping of
    column -> values, or a sequence of (prompt, output) pairs. Only the two length columns are kept in
    memory. Rows with 0 prompt or 0 output tokens (e.g. BurstGPT failures) are dropped and counted in
    ``skipped`` (``zero_prompt_tokens`` / ``zero_output_tokens``); any other bad value is a TraceError
    naming the row and column. Samples are clipped per dimension.
    """

    def __init__(
        self,
        table: str | Path | pd.DataFrame | Mapping[str, Sequence[int]] | Sequence[tuple[int, int]],
        prompt_column: str | None = None,
        output_column: str | None = None,
        prompt_min: int = 1,
        prompt_max: int | None = None,
        output_min: int = 1,
        output_max: int | None = None,
    ) -> None:
        self.prompt_min, self.prompt_max = _check_bounds("lengths.prompt", prompt_min, prompt_max)
        self.output_min, self.output_max = _check_bounds("lengths.output", output_min, output_max)
        self.source = str(table) if isinstance(table, str | Path) else type(table).__name__
        prompt, output, self.columns = _load_pairs(table, prompt_column, output_column)
        keep = (prompt > 0) & (output > 0)
        self.skipped = {k: v for k, v in (("zero_prompt_tokens", int((prompt == 0).sum())),
                                          ("zero_output_tokens", int(((prompt > 0) & (output == 0)).sum()))) if v}
        self.dropped_rows = int((~keep).sum())
        self.prompt = prompt[keep]
        self.output = output[keep]
        # rows outside the bounds are sampled at the bound: counted, so a run can say how much of the table it bent
        self.clipped = {f"{dim}_{side}": n for dim, x, lo, hi in (
            ("prompt", self.prompt, self.prompt_min, self.prompt_max),
            ("output", self.output, self.output_min, self.output_max))
            for side, n in (("min", int((x < lo).sum())), ("max", 0 if hi is None else int((x > hi).sum()))) if n}
        if self.prompt.size == 0:
            raise TraceError(
                f"{self.source}: expected at least one row with prompt and output > 0 for empirical lengths, "
                f"got none ({len(prompt)} rows; skipped: {self.skipped or 'none'})"
            )

    def __len__(self) -> int:
        return int(self.prompt.size)

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        idx = rng.integers(0, self.prompt.size, size=n)
        return (
            _clip(self.prompt[idx], self.prompt_min, self.prompt_max),
            _clip(self.output[idx], self.output_min, self.output_max),
        )

    def describe(self) -> dict[str, Any]:
        return {
            "dist": "empirical",
            "source": self.source,
            "columns": list(self.columns),
            "rows": len(self),
            "prompt_clip": [self.prompt_min, self.prompt_max],
            "output_clip": [self.output_min, self.output_max],
            "skipped": dict(self.skipped),
            "clipped": dict(self.clipped),
        }


def table_rows_skipped(described: Any, key: str = "skipped") -> dict[str, int]:
    """The rows every empirical length table in a workload's ``describe()`` left out, by reason: they are no
    request (the table is resampled), so they are not in ``stats.skipped``, but a run says how many there were.
    ``key="clipped"``: the rows sampled at a bound instead, by bound; ``key="rows"``: ``{"rows": rows used}``."""
    out: dict[str, int] = {}
    for table in _empirical_tables(described):
        counts = {"rows": table.get("rows") or 0} if key == "rows" else table.get(key) or {}
        for k, v in counts.items():
            out[k] = out.get(k, 0) + int(v)
    return out


def _empirical_tables(described: Any) -> Iterator[Mapping[str, Any]]:
    """Every empirical length table's ``describe()`` inside a workload's."""
    if isinstance(described, Mapping):
        if described.get("dist") == "empirical":
            yield described
        parts: Any = described.values()
    elif isinstance(described, list | tuple):
        parts = described
    else:
        return
    for part in parts:
        yield from _empirical_tables(part)


def _pick_columns(
    names: Sequence[str], prompt: str | None, output: str | None, where: str
) -> tuple[str, str]:
    """The (prompt, output) columns: as named, else the first known pair; a column named twice is an error."""
    p, o = _find_columns(names, prompt, output, where)
    for c in (p, o):
        at = [i + 1 for i, n in enumerate(names) if n == c]
        if len(at) > 1:
            raise TraceError(f"{where}: column {c!r} appears {len(at)} times (columns {', '.join(map(str, at[:-1]))} "
                             f"and {at[-1]}); expected each column it reads once")
    return p, o


def _find_columns(
    names: Sequence[str], prompt: str | None, output: str | None, where: str
) -> tuple[str, str]:
    if prompt is not None or output is not None:
        if prompt is None or output is None:
            raise ConfigError(
                "empirical lengths: expected both 'prompt_column' and 'output_column', or neither"
            )
        if prompt == output:
            raise ConfigError(f"empirical lengths: expected an 'output_column' other than the 'prompt_column', got "
                              f"the same column {prompt!r} (one column cannot hold both)")
        for c in (prompt, output):
            if c not in names:
                raise TraceError(f"{where}: missing column {c!r}; found {list(names)}")
        return prompt, output
    for p, o in KNOWN_LENGTH_COLUMNS:
        if p in names and o in names:
            return p, o
    raise TraceError(
        f"{where}: expected a known (prompt, output) column pair {[list(c) for c in KNOWN_LENGTH_COLUMNS]} "
        f"or explicit 'prompt_column'/'output_column'; found {list(names)}"
    )


def _as_tokens(values: Sequence[Any], where: str, column: str, positions: Sequence[int] | None,
               unit: str = "row") -> np.ndarray:
    """Token counts, or a TraceError naming the first bad value's line/row (``positions``; else 1-based index)."""
    x, bad = parse_tokens(values)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        pos = positions[i] if positions is not None else i + 1
        raise TraceError(row_message(Path(where), f"{unit} {pos}", column, TOKENS_EXPECTED, values[i]))
    return x


def _load_table(path: Path, prompt_column: str | None, output_column: str | None,
                ) -> tuple[np.ndarray, np.ndarray, tuple[str, str]]:
    """Two token columns of a CSV / Parquet file (plain or compressed), validated chunk by chunk."""
    picked: list[tuple[str, str]] = []

    def select(names: list[str], where: str) -> list[str]:
        picked.append(_pick_columns(names, prompt_column, output_column, f"{path}: {where}"))
        return list(picked[0])

    prompts, outputs = [], []
    for cols, positions, unit in Table(path).read(select, None, WorkloadStats(), "raise"):
        p, o = picked[0]
        prompts.append(_as_tokens(cols[p], str(path), p, positions, unit))
        outputs.append(_as_tokens(cols[o], str(path), o, positions, unit))
    if not picked:  # pragma: no cover - Table.read always reads the header first
        raise TraceError(f"{path}: expected a header row")
    if not prompts:
        raise TraceError(f"{path}: expected at least one data row for empirical lengths, got none")
    return np.concatenate(prompts), np.concatenate(outputs), picked[0]


def _load_jsonl(path: Path, prompt_column: str | None, output_column: str | None,
                ) -> tuple[np.ndarray, np.ndarray, tuple[str, str]]:
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    with open_text(path) as (f, _):
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json_line(line)
            except DuplicateJSONKey as e:
                raise TraceError(duplicate_key_message(path, f"line {line_no}", e.key)) from None
            except (json.JSONDecodeError, RecursionError, UnicodeDecodeError):
                obj = None
            if not isinstance(obj, dict):
                raise TraceError(f"{path}: line {line_no}: expected a JSON object per line, got {line[:60]!r}")
            rows.append(obj)
            lines.append(line_no)
    if not rows:
        raise TraceError(f"{path}: expected at least one JSON line for empirical lengths, got none")
    p, o = _pick_columns(list(rows[0]), prompt_column, output_column, f"{path}: line {lines[0]}")
    prompt = _as_tokens([r.get(p) for r in rows], str(path), p, lines, "line")
    output = _as_tokens([r.get(o) for r in rows], str(path), o, lines, "line")
    return prompt, output, (p, o)


def _load_pairs(
    table: Any, prompt_column: str | None, output_column: str | None
) -> tuple[np.ndarray, np.ndarray, tuple[str, str]]:
    if isinstance(table, str | Path):
        path = Path(table)
        fmt = sniff(path)
        if fmt != "parquet" and base_suffix(path) in (".jsonl", ".json"):
            return _load_jsonl(path, prompt_column, output_column)
        return _load_table(path, prompt_column, output_column)
    if isinstance(table, pd.DataFrame):
        p, o = _pick_columns(list(table.columns), prompt_column, output_column, "DataFrame")
        return (_as_tokens(table[p].to_numpy(), "DataFrame", p, None),
                _as_tokens(table[o].to_numpy(), "DataFrame", o, None), (p, o))
    if isinstance(table, Mapping):
        p, o = _pick_columns(list(table), prompt_column, output_column, "mapping")
        return _as_tokens(list(table[p]), "mapping", p, None), _as_tokens(list(table[o]), "mapping", o, None), (p, o)
    arr = np.asarray(table, dtype=object)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ConfigError(
            f"empirical lengths: expected a sequence of (prompt, output) pairs, got shape {arr.shape}"
        )
    return (_as_tokens(list(arr[:, 0]), "pairs", "prompt", None),
            _as_tokens(list(arr[:, 1]), "pairs", "output", None), ("prompt", "output"))


# Fitted to shared/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv (19,366 rows; prompt
# mean 1154.70 / p50 1020 / max 14050; output mean 211.13 / p50 129 / max 1000). Per dimension:
# mu = ln(p50), and sigma solved (scipy brentq) so that the mean of the lognormal clipped to
# [1, file max] equals the file mean (the output is capped at 1000 in the trace, so clipping
# matters there). A 4M-sample check gives means 1155.2 / 211.3 and medians 1021 / 129.
AZURE_CONV_PROMPT = LogNormal(mu=6.927557906278317, sigma=0.4980678270303568, min=1, max=14050)
AZURE_CONV_OUTPUT = LogNormal(mu=4.859812404361672, sigma=1.071749622287092, min=1, max=1000)

# Plain data, not a registry of classes: each entry is a ready (immutable in use) pair model.
LENGTH_PRESETS: dict[str, Independent] = {
    "azure_conv_like": Independent(AZURE_CONV_PROMPT, AZURE_CONV_OUTPUT),
}
