"""Token-length models for synthetic workloads, sampled in numpy batches.

A :class:`LengthModel` samples one dimension (prompt or output); a :class:`PairModel` samples
(prompt, output) jointly, which the empirical model needs to keep a trace's correlation.
All samples are rounded to integers and clipped to ``[min, max]``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmsim.errors import ConfigError, TraceError


def _clip(x: np.ndarray, lo: int, hi: int | None) -> np.ndarray:
    return np.clip(np.rint(x), lo, hi if hi is not None else np.inf).astype(np.int64)


def _check_bounds(name: str, lo: int, hi: int | None) -> None:
    if lo < 0:
        raise ConfigError(f"{name}.min: expected a non-negative integer, got {lo!r}")
    if hi is not None and hi < lo:
        raise ConfigError(f"{name}.max: expected max >= min ({lo}), got {hi!r}")


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
        if self.value < 0:
            raise ConfigError(f"value: expected a non-negative integer, got {self.value!r}")

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
        _check_bounds("uniform", self.lo, self.hi)

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
        if not (self.sigma >= 0 and np.isfinite(self.sigma)):
            raise ConfigError(f"sigma: expected a non-negative number, got {self.sigma!r}")
        _check_bounds("lognormal", self.min, self.max)

    @classmethod
    def from_mean_sigma(cls, mean: float, sigma: float, min: int = 1, max: int | None = None) -> LogNormal:
        """Unclipped mean ``mean``: mu = ln(mean) - sigma^2 / 2."""
        if mean <= 0:
            raise ConfigError(f"mean: expected a positive number, got {mean!r}")
        return cls(float(np.log(mean) - sigma * sigma / 2), float(sigma), min, max)

    @classmethod
    def from_mean_median(cls, mean: float, median: float, min: int = 1, max: int | None = None) -> LogNormal:
        """Unclipped mean and median (p50): mu = ln(p50), sigma = sqrt(2 ln(mean / p50))."""
        if median <= 0 or mean < median:
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

    ``table`` is a path (CSV or JSONL), a pandas DataFrame, a mapping of column -> values, or a
    sequence of (prompt, output) pairs. Only the two length columns are kept in memory. Rows with
    a non-positive output (e.g. BurstGPT failures) are dropped. Samples are clipped per dimension.
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
        _check_bounds("lengths.prompt", prompt_min, prompt_max)
        _check_bounds("lengths.output", output_min, output_max)
        self.source = str(table) if isinstance(table, (str, Path)) else type(table).__name__
        self.prompt_min, self.prompt_max = prompt_min, prompt_max
        self.output_min, self.output_max = output_min, output_max
        prompt, output, self.columns = _load_pairs(table, prompt_column, output_column)
        keep = output > 0
        self.dropped_rows = int((~keep).sum())
        self.prompt = prompt[keep]
        self.output = output[keep]
        if self.prompt.size == 0:
            raise TraceError(
                f"{self.source}: expected at least one row with output > 0 for empirical lengths"
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
        }


def _pick_columns(
    names: Sequence[str], prompt: str | None, output: str | None, where: str
) -> tuple[str, str]:
    if prompt is not None or output is not None:
        if prompt is None or output is None:
            raise ConfigError(
                "empirical lengths: expected both 'prompt_column' and 'output_column', or neither"
            )
        for c in (prompt, output):
            if c not in names:
                raise TraceError(f"{where}: line 1 (header): missing column {c!r}; found {list(names)}")
        return prompt, output
    for p, o in KNOWN_LENGTH_COLUMNS:
        if p in names and o in names:
            return p, o
    raise TraceError(
        f"{where}: expected a known (prompt, output) column pair {[list(c) for c in KNOWN_LENGTH_COLUMNS]} "
        f"or explicit 'prompt_column'/'output_column'; found {list(names)}"
    )


def _as_tokens(values: Any, where: str, column: str, line_offset: int) -> np.ndarray:
    x = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(x) | (x < 0) | (x != np.floor(x)))
    if bad.size:
        i = int(bad[0])
        raise TraceError(
            f"{where}: line {i + line_offset}, column {column!r}: expected a non-negative integer token "
            f"count, got {list(values)[i]!r}"
        )
    return x.astype(np.int64)


def _load_pairs(
    table: Any, prompt_column: str | None, output_column: str | None
) -> tuple[np.ndarray, np.ndarray, tuple[str, str]]:
    if isinstance(table, (str, Path)):
        path = Path(table)
        if not path.exists():
            raise TraceError(f"{path}: length table not found")
        if path.suffix in (".jsonl", ".json"):
            rows = [
                json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
            ]
            names = list(rows[0]) if rows else []
            p, o = _pick_columns(names, prompt_column, output_column, str(path))
            prompt = _as_tokens([r.get(p) for r in rows], str(path), p, 1)
            output = _as_tokens([r.get(o) for r in rows], str(path), o, 1)
            return prompt, output, (p, o)
        header = pd.read_csv(path, nrows=0).columns.str.strip().tolist()
        p, o = _pick_columns(header, prompt_column, output_column, str(path))
        df = pd.read_csv(path, usecols=lambda c: c.strip() in (p, o), dtype=str, keep_default_na=False)
        df.columns = df.columns.str.strip()
        return _as_tokens(df[p], str(path), p, 2), _as_tokens(df[o], str(path), o, 2), (p, o)
    if isinstance(table, pd.DataFrame):
        p, o = _pick_columns(list(table.columns), prompt_column, output_column, "DataFrame")
        return _as_tokens(table[p], "DataFrame", p, 0), _as_tokens(table[o], "DataFrame", o, 0), (p, o)
    if isinstance(table, Mapping):
        p, o = _pick_columns(list(table), prompt_column, output_column, "mapping")
        return _as_tokens(table[p], "mapping", p, 0), _as_tokens(table[o], "mapping", o, 0), (p, o)
    arr = np.asarray(table)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ConfigError(
            f"empirical lengths: expected a sequence of (prompt, output) pairs, got shape {arr.shape}"
        )
    return (
        _as_tokens(arr[:, 0], "pairs", "prompt", 0),
        _as_tokens(arr[:, 1], "pairs", "output", 0),
        (
            "prompt",
            "output",
        ),
    )


# Fitted to shared/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv (19,366 rows; prompt
# mean 1154.70 / p50 1020 / max 14050; output mean 211.13 / p50 129 / max 1000). Per dimension:
# mu = ln(p50), and sigma solved (scipy brentq) so that the mean of the lognormal clipped to
# [1, file max] equals the file mean (the output is capped at 1000 in the trace, so clipping
# matters there). A 4M-sample check gives means 1155.2 / 211.3 and medians 1021 / 129.
AZURE_CONV_PROMPT = LogNormal(mu=6.927557906278317, sigma=0.4980678270303568, min=1, max=14050)
AZURE_CONV_OUTPUT = LogNormal(mu=4.859812404361672, sigma=1.071749622287092, min=1, max=1000)

LENGTH_PRESETS: dict[str, Independent] = {
    "azure_conv_like": Independent(AZURE_CONV_PROMPT, AZURE_CONV_OUTPUT),
}
