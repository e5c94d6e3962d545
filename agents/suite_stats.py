"""The suite's statistics: per scenario the best heuristic, every policy's gain over it paired by seed with a
bootstrap interval, and whether the must-hold bars hold. Pure functions over evaluation rows (no simulation).

Gains are in per cent of the reference's mean, positive = better: ``(ref - x) / ref`` for a metric where lower is
better (latencies, makespan), ``(x - ref) / |ref|`` where higher is better (QoS, utility, attainment). The seeds
pair the two policies (the same requests), so the interval resamples seeds, the same ones for both: a 95 %
percentile bootstrap of the gain of the means (numpy, seeded per scenario and policy: a rerun gives the same
interval). With one seed there is no interval.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# row keys where higher is better; every other compared key is lower-is-better
HIGHER_IS_BETTER = frozenset({"avg_qos", "utility", "slo_attainment", "within_l", "deadline_met", "return",
                              "completed"})
# what the suite reports per scenario and policy: means over the paired seeds
STAT_KEYS = ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms",
             "completed_mean_e2el_ms", "makespan_s", "router_wait_s", "dropped", "cut_off", "timeouts",
             "num_requests", "avg_qos", "within_l", "utility", "deadline_met", "slo_attainment")
GAIN_KEYS = ("mean_e2el_ms", "p99_e2el_ms", "mean_ttft_ms", "p99_ttft_ms")


def higher_is_better(metric: str) -> bool:
    return metric in HIGHER_IS_BETTER


def gain_pct(x: float, ref: float, metric: str) -> float | None:
    """The gain of ``x`` over ``ref`` in per cent of ``ref`` (positive = better); None when undefined."""
    if ref == 0 or not math.isfinite(x) or not math.isfinite(ref):
        return None
    return (x - ref) / abs(ref) * 100.0 if higher_is_better(metric) else (ref - x) / ref * 100.0


def by_seed(rows: Sequence[Mapping[str, Any]], policy: str, metric: str) -> dict[int, float]:
    """seed -> the metric of ``policy``'s episode (episode 0), where measured."""
    return {int(r["seed"]): float(r[metric]) for r in rows
            if r["policy"] == policy and r.get(metric) is not None and not _nan(r[metric])}


def _nan(x: Any) -> bool:
    return isinstance(x, float) and math.isnan(x)


def paired_gain(x: Mapping[int, float], ref: Mapping[int, float], metric: str, n_boot: int,
                seed: int) -> dict[str, Any]:
    """Gain of the means over the seeds both measured, its 95 % bootstrap interval (None with one seed), the
    number of seeds and how many of them the policy won (strictly better)."""
    seeds = sorted(set(x) & set(ref))
    if not seeds:
        return {"gain_pct": None, "ci_low": None, "ci_high": None, "seeds": 0, "wins": 0}
    a = np.array([x[s] for s in seeds])
    b = np.array([ref[s] for s in seeds])
    g = gain_pct(float(a.mean()), float(b.mean()), metric)
    wins = int(np.sum(a > b) if higher_is_better(metric) else np.sum(a < b))
    lo = hi = None
    if len(seeds) > 1 and g is not None:
        idx = np.random.default_rng(seed).integers(0, len(seeds), size=(n_boot, len(seeds)))
        ma, mb = a[idx].mean(axis=1), b[idx].mean(axis=1)
        boot = (ma - mb) / np.abs(mb) if higher_is_better(metric) else (mb - ma) / mb
        boot = boot[np.isfinite(boot)] * 100.0
        if len(boot):
            lo, hi = float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))
    return {"gain_pct": g, "ci_low": lo, "ci_high": hi, "seeds": len(seeds), "wins": wins}


def policy_stats(rows: Sequence[Mapping[str, Any]], policy: str) -> dict[str, Any]:
    """Means over seeds of STAT_KEYS for one policy (None where never measured)."""
    mine = [r for r in rows if r["policy"] == policy]
    out: dict[str, Any] = {"episodes": len(mine)}
    for k in STAT_KEYS:
        v = [float(r[k]) for r in mine if r.get(k) is not None and not _nan(r[k])]
        out[k] = float(np.mean(v)) if v else None
    return out


def best_of(rows: Sequence[Mapping[str, Any]], labels: Sequence[str], metric: str) -> str | None:
    """The label with the best mean ``metric`` over its seeds (the first in ``labels`` on a tie); None if none ran."""
    scored = [(np.mean(list(v.values())), i, lab) for i, lab in enumerate(labels)
              if (v := by_seed(rows, lab, metric))]
    if not scored:
        return None
    sign = -1.0 if higher_is_better(metric) else 1.0
    return min(scored, key=lambda t: (sign * t[0], t[1]))[2]


def stream_seed(base: int, *names: str) -> int:
    """A stable bootstrap seed per (scenario, policy, metric): independent of the order things run in."""
    return int(base) * 1_000_003 + zlib.crc32("/".join(names).encode())


def scenario_result(rows: Sequence[Mapping[str, Any]], heuristics: Sequence[str], policies: Sequence[str],
                    primary: str, n_boot: int, boot_seed: int, scenario: str) -> dict[str, Any]:
    """One scenario: the best heuristic (by ``primary``), every policy's stats, and its gains over the reference on
    the primary metric and on GAIN_KEYS."""
    ref = best_of(rows, heuristics, primary)
    out: dict[str, Any] = {"reference": ref, "stats": {}, "gains": {}}
    for p in policies:
        if not any(r["policy"] == p for r in rows):
            continue
        out["stats"][p] = policy_stats(rows, p)
        if ref is None:
            continue
        out["gains"][p] = {m: paired_gain(by_seed(rows, p, m), by_seed(rows, ref, m), m, n_boot,
                                          stream_seed(boot_seed, scenario, p, m))
                           for m in dict.fromkeys((primary, *GAIN_KEYS))}
    return out


def bar_verdict(bar: Mapping[str, Any], per_scenario: Mapping[str, float | None]) -> dict[str, Any]:
    """Whether a bar holds given the policy's gain on each scenario (None: it could not run there, a miss)."""
    ok = {s: g is not None and g >= bar["at_least_pct"] for s, g in per_scenario.items()}
    n, met = len(ok), sum(ok.values())
    holds = (met == n) if bar.get("scope", "every") == "every" else (2 * met >= n)
    return {"name": bar["name"], "holds": bool(holds and n > 0), "met": met, "scenarios": n,
            "missed": sorted(s for s, v in ok.items() if not v)}


def bar_gains(rows_by_scenario: Mapping[str, Sequence[Mapping[str, Any]]], policy: str, bar: Mapping[str, Any],
              heuristics: Sequence[str], references: Mapping[str, str | None]) -> dict[str, float | None]:
    """Per scenario, the policy's gain on the bar's metric over the bar's reference: the scenario's best heuristic,
    or the best of the bar's own ``reference`` labels (e.g. the best static model size) by the bar's metric."""
    out: dict[str, float | None] = {}
    for scen, rows in rows_by_scenario.items():
        own = bar.get("reference")
        ref = best_of(rows, [x for x in own if x in heuristics] if own else heuristics, bar["metric"]) if own \
            else references.get(scen)
        x, r = by_seed(rows, policy, bar["metric"]), by_seed(rows, ref, bar["metric"]) if ref else {}
        seeds = sorted(set(x) & set(r))
        out[scen] = gain_pct(float(np.mean([x[s] for s in seeds])), float(np.mean([r[s] for s in seeds])),
                             bar["metric"]) if seeds else None
    return out
