"""RouteBalance's objective (the RouteBalance paper's Eq. 1): what a candidate instance is worth for a request.

    S = w_qual * Q + w_cost * (1 - C / max C) + w_lat * (1 - T / max T)

over the request's candidate set, with Q the predicted quality of the instance's model, C the predicted cost in USD
at per-token prices (Eq. 2) and T the predicted latency. This module holds the parts a config sets - the weight
presets and per-token prices, checked into one-line ConfigErrors - and the scoring itself; the router decides
which candidates are scored and in which order (:mod:`llmsim.routing.routebalance.router`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llmsim.errors import ConfigError
from llmsim.routing.base import kwarg_number

# (w_qual, w_cost, w_lat) of the paper's named operating points (the paper writes uniform as 0.33 each: exact thirds)
PRESETS: dict[str, tuple[float, float, float]] = {
    "uniform": (1 / 3, 1 / 3, 1 / 3), "quality": (0.8, 0.1, 0.1), "latency": (0.1, 0.1, 0.8),
    "cost": (0.1, 0.8, 0.1)}
# USD per 1M tokens [input, output] of the paper's four Qwen2.5 tiers (conf/token_prices/routebalance.yaml)
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "qwen2.5-3b": (0.06, 0.06), "qwen2.5-7b": (0.07, 0.07), "qwen2.5-14b": (0.15, 0.15),
    "qwen2.5-72b": (0.38, 0.40)}
# Normalising denominators: the paper's code adds 1e-8 to avoid dividing by zero; with costs of ~1e-5 USD that would
# shift the cost term by ~0.1 %, so a zero denominator is guarded explicitly instead (the term is then 0).


@dataclass(slots=True)
class Candidate:
    """One candidate instance's terms for one request (what ``RouteBalanceRouter.score`` returns)."""

    instance: int
    model: str
    quality: float
    length: float
    cost: float  # USD (Eq. 2)
    latency: float  # s (the paper's predicted end-to-end latency, llmsim.routing.routebalance.state)
    score: float = 0.0


def parse_weights(value: Any) -> tuple[float, float, float]:
    """A preset name, [w_qual, w_cost, w_lat] or {qual, cost, lat}: non-negative, summing to 1 (within 0.01,
    then rescaled so the paper's 0.33 / 0.33 / 0.33 is accepted)."""
    if isinstance(value, str):
        if value not in PRESETS:
            raise ConfigError(f"policy.kwargs.weights: unknown preset {value!r}; known: {sorted(PRESETS)} or "
                              "[w_qual, w_cost, w_lat]")
        return PRESETS[value]
    if isinstance(value, Mapping):
        if set(value) != {"qual", "cost", "lat"}:
            raise ConfigError(f"policy.kwargs.weights: a mapping needs exactly the keys qual, cost, lat; got {value!r}")
        value = [value["qual"], value["cost"], value["lat"]]
    if isinstance(value, str) or not isinstance(value, Sequence) or len(value) != 3:
        raise ConfigError(f"policy.kwargs.weights: expected a preset name or [w_qual, w_cost, w_lat], got {value!r}")
    w = [kwarg_number("weights", v, strict=False) for v in value]
    if abs(sum(w) - 1.0) > 0.01 + 1e-9:
        raise ConfigError(f"policy.kwargs.weights: must sum to 1 (w_qual + w_cost + w_lat), got {value!r}")
    s = sum(w)
    return (w[0] / s, w[1] / s, w[2] / s)


def parse_prices(value: Any) -> dict[str, tuple[float, float]]:
    """{model: [in, out]} USD per 1M tokens, merged over :data:`DEFAULT_PRICES`."""
    out = dict(DEFAULT_PRICES)
    if value is None:
        return out
    if not isinstance(value, Mapping):
        raise ConfigError(f"policy.kwargs.prices: expected a mapping of model to [in, out] USD per 1M tokens, "
                          f"got {value!r}")
    for k, v in value.items():
        if isinstance(v, str) or not isinstance(v, Sequence) or len(v) != 2:
            raise ConfigError(f"policy.kwargs.prices.{k}: expected [in, out] USD per 1M tokens, got {v!r}")
        out[str(k)] = (kwarg_number(f"prices.{k}", v[0], strict=False),
                       kwarg_number(f"prices.{k}", v[1], strict=False))
    return out


def minmax(x: float, xs: list[float]) -> float:
    """``x`` rescaled to [0, 1] over ``xs`` (0 when they are all equal)."""
    lo, hi = min(xs), max(xs)
    return (x - lo) / (hi - lo) if hi > lo else 0.0


def normalised(x: float, xs: list[float], norm: str) -> float:
    """Cost or latency relative to the candidate set: ``x / max`` (``norm="max"``, the paper) or min-max."""
    if norm == "minmax":
        return minmax(x, xs)
    hi = max(xs)
    return x / hi if hi > 0 else 0.0


def score_candidates(pool: list[Candidate], weights: tuple[float, float, float], quality_norm: str, norm: str) -> None:
    """Eq. 1 over the candidate set, written to each ``Candidate.score``: raw (or min-max) quality, max-divided (or
    min-max) cost and latency."""
    wq, wc, wl = weights
    qs = [c.quality for c in pool]
    cs = [c.cost for c in pool]
    ts = [c.latency for c in pool]
    for c in pool:
        q = c.quality if quality_norm == "raw" else minmax(c.quality, qs)
        c.score = wq * q + wc * (1 - normalised(c.cost, cs, norm)) + wl * (1 - normalised(c.latency, ts, norm))
