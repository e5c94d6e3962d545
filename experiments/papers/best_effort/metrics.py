"""The Learned Best-Effort LLM Serving paper's metrics as pure functions over per-request outcomes, so every number
of the reproduction (claims.py) can be checked on crafted inputs without a simulation.

A request's *utility* is Eq. 1's ``w * A[task, model]``: the normalised accuracy of the model that served it
times its deadline weight (envs/rewards/best_effort.py), 0 when it was dropped or never finished. Peak
utility is 1.0 (every deadline met by the largest model, the paper's section 1.2).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from llmsim.envs.rewards.best_effort import deadline_weight

PEAK = 1.0
WINDOW = 20  # requests per window (Tables 3-4, Fig. 11)
THRESHOLDS = (1.00, 0.99, 0.98, 0.96, 0.94)
AVAILABLE_MET = 0.95  # availability: share of deadlines met at a rate (the calibration's "near peak" bar)
_EPS = 1e-9  # window means are sums of floats: 0.96 must count as >= 0.96


def request_outcomes(reqs: Iterable[Any], instance_models: Sequence[str], deadline: float,
                     task_deadlines: Mapping[str, float] | None = None,
                     soft_violation: str = "total") -> dict[str, np.ndarray]:
    """Per request, in the given (arrival) order: served model name ('' if none), hard and soft utility and
    whether the deadline was met. Reads only the finished requests' public record (instance, times, tokens)."""
    td = dict(task_deadlines or {})
    model, hard, soft, met, task = [], [], [], [], []
    for r in reqs:
        task.append(r.task or "")
        done = r.finish is not None and r.finish >= 0 and not r.dropped and r.instance is not None and r.instance >= 0
        if not done:
            model.append("")
            hard.append(0.0)
            soft.append(0.0)
            met.append(False)
            continue
        m = instance_models[r.instance]
        acc = float((r.quality_by_model or {}).get(m, 0.0))
        d = td.get(r.task, deadline) if r.task is not None else deadline
        e2e = r.finish - r.arrival
        w_hard = deadline_weight(e2e, r.generated, d, False)
        model.append(m)
        hard.append(acc * w_hard)
        soft.append(acc * deadline_weight(e2e, r.generated, d, True, soft_violation))
        met.append(w_hard >= 1.0)
    return {"model": np.array(model, dtype=object), "task": np.array(task, dtype=object),
            "utility_hard": np.array(hard, float), "utility_soft": np.array(soft, float),
            "met": np.array(met, bool)}


def window_means(utility: Sequence[float], size: int = WINDOW) -> np.ndarray:
    """Mean utility of every window of ``size`` consecutive requests (sliding, stride 1: the paper's counts
    exceed the number of disjoint windows, the paper's section 6.2); empty when there are fewer requests."""
    u = np.asarray(utility, float)
    if size < 1:
        raise ValueError(f"window size must be >= 1, got {size}")
    if len(u) < size:
        return np.zeros(0)
    c = np.concatenate([[0.0], np.cumsum(u)])
    return (c[size:] - c[:-size]) / size


def window_counts(utility: Sequence[float], thresholds: Sequence[float] = THRESHOLDS, size: int = WINDOW,
                  peak: float = PEAK) -> dict[str, Any]:
    """Tables 3-4: how many sliding windows reach each fraction of peak utility, and their share."""
    w = window_means(utility, size)
    n = len(w)
    counts = {f"{t:.2f}": int(np.sum(w >= t * peak - _EPS)) for t in thresholds}
    return {"windows": n, "counts": counts,
            "fractions": {k: (c / n if n else math.nan) for k, c in counts.items()}}


def ratio(a: float, b: float) -> float:
    """a / b, inf when only b is 0, nan when both are."""
    if b == 0:
        return math.nan if a == 0 else math.inf
    return a / b


def availability(rates: Sequence[float], met_frac: Sequence[float], threshold: float = AVAILABLE_MET) -> float:
    """The highest rate up to which the system stays available: every grid rate <= it meets at least
    ``threshold`` of deadlines (0.0 when even the lowest rate does not)."""
    pairs = sorted(zip(map(float, rates), map(float, met_frac)))
    best = 0.0
    for r, m in pairs:
        if m < threshold:
            break
        best = r
    return best


def utility_availability(rates: Sequence[float], utility: Sequence[float], threshold: float) -> float:
    """Like :func:`availability` on mean utility: the highest rate up to which utility stays >= threshold."""
    return availability(rates, utility, threshold)


def hardware_utility(u_policy: Sequence[float], gpus_policy: int, u_base: Sequence[float], gpus_base: int,
                     size: int = WINDOW) -> dict[str, float]:
    """Sec. 4.6 / Fig. 11: utility per GPU over sliding windows of both systems on the same requests; the
    ratio of the mean windowed hardware utilities and the share of windows where the policy's is higher."""
    wp = window_means(u_policy, size) / gpus_policy
    wb = window_means(u_base, size) / gpus_base
    n = min(len(wp), len(wb))
    wp, wb = wp[:n], wb[:n]
    mp, mb = (float(wp.mean()), float(wb.mean())) if n else (math.nan, math.nan)
    return {"policy_per_gpu": mp, "base_per_gpu": mb, "ratio": ratio(mp, mb),
            "higher_frac": float(np.mean(wp > wb + _EPS)) if n else math.nan,
            "overall_ratio": ratio(float(np.mean(u_policy)) / gpus_policy, float(np.mean(u_base)) / gpus_base)}


def model_shares(models: Sequence[str], names: Sequence[str]) -> dict[str, float]:
    """Share of requests served by each model size (unserved requests count in the denominator)."""
    m = np.asarray(models, dtype=object)
    n = max(len(m), 1)
    return {k: float(np.sum(m == k)) / n for k in names}


def riemann_usage(rates: Sequence[float], shares: Sequence[float]) -> float:
    """Table 2: area under a selection-share curve over the arrival-rate axis (trapezoids on the grid)."""
    r, s = np.asarray(rates, float), np.asarray(shares, float)
    order = np.argsort(r)
    r, s = r[order], s[order]
    return float(np.sum((r[1:] - r[:-1]) * (s[1:] + s[:-1]) / 2.0)) if len(r) > 1 else 0.0


def verdict_more_often(measured: float, paper: float, tolerance: float = 1.5) -> str:
    """For "x times more often / higher" claims: reproduced within ``tolerance`` x of the paper's factor (or
    above it), partly when the direction holds (> 1), else not."""
    if math.isnan(measured):
        return "not"
    if measured >= paper / tolerance:
        return "reproduced"
    return "partly" if measured > 1.0 else "not"
