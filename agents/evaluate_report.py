"""What ``llmsim-evaluate`` writes: per-policy means over seeds, the markdown table and the bar chart.

Per policy, every numeric column of the rows is summarised as mean and sample standard deviation over its
episodes (0 with one episode). Gains are against the reference policy (round robin by default), on the
means: ``(reference - policy) / reference`` in per cent, so a positive gain is a lower mean E2E latency or an
earlier finish. The latency columns count every request (a drop or cut-off at the time it was given up;
llmsim.agents.accounting), and the table shows the requests the env's wait fallback placed (``timeouts``) and the
ones its time limit cut off. Nothing here runs a simulation; it reads the rows of
:func:`llmsim.agents.evaluate.evaluate`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llmsim.agents.seeds import split_note
from llmsim.metrics.plots import new_figure

# (row key, markdown header, scale to the shown unit, decimals); OPTIONAL ones are shown only when measured
TABLE_COLUMNS: tuple[tuple[str, str, float, int], ...] = (
    ("avg_qos", "avg QoS", 1.0, 4),
    ("utility", "utility", 1.0, 4),
    ("latency_per_token_ms", "latency/token (ms)", 1.0, 2),
    ("within_l", "within L", 1.0, 3),
    ("mean_e2el_ms", "mean E2E (s)", 1e-3, 2),
    ("p99_e2el_ms", "p99 E2E (s)", 1e-3, 2),
    ("mean_ttft_ms", "mean TTFT (s)", 1e-3, 2),
    ("makespan_s", "makespan (s)", 1.0, 1),
    ("router_wait_s", "router wait (s)", 1.0, 2),
    ("slo_attainment", "SLO attainment", 1.0, 3),
    ("return", "return", 1.0, 1),
    ("dropped", "dropped", 1.0, 1),
    ("cut_off", "cut off", 1.0, 1),
    ("timeouts", "timeouts", 1.0, 1),
    ("unseen_decisions", "guide decided (unseen)", 1.0, 1),
    ("preempted_frac", "preempted", 1.0, 3),
)
OPTIONAL = ("slo_attainment", "avg_qos", "utility", "latency_per_token_ms", "within_l", "cut_off", "timeouts",
            "unseen_decisions")
NOT_SUMMARISED = ("policy", "seed", "episode", "workload_seed", "workload_digest", "truncated", "workload_skipped")


def _stats(values: Sequence[float]) -> tuple[float | None, float | None]:
    v = [float(x) for x in values if x is not None and not (isinstance(x, float) and math.isnan(x))]
    if not v:
        return None, None
    # one episode has no spread: std None (null, no "± 0.00" that would claim a measured zero spread)
    return float(np.mean(v)), float(np.std(v, ddof=1)) if len(v) > 1 else None


def _gain(ref: float | None, x: float | None) -> float | None:
    if ref is None or x is None or ref == 0:
        return None
    return (ref - x) / ref * 100.0


def summarise(rows: Sequence[Mapping[str, Any]], reference: str = "round_robin") -> list[dict[str, Any]]:
    """One entry per policy, sorted by mean E2E latency (best first, unmeasured last): ``episodes``,
    ``<key>_mean`` / ``<key>_std`` for every numeric row key, ``e2e_gain_pct`` and ``makespan_gain_pct``."""
    by_policy: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        by_policy.setdefault(str(r["policy"]), []).append(r)
    out = []
    for label, rs in by_policy.items():
        entry: dict[str, Any] = {"policy": label, "episodes": len(rs), "seeds": sorted({int(r["seed"]) for r in rs}),
                                 "truncated": sum(bool(r.get("truncated")) for r in rs)}
        keys = [k for k in rs[0] if k not in NOT_SUMMARISED]
        for k in keys:
            if all(isinstance(r.get(k), int | float | type(None)) for r in rs):
                entry[f"{k}_mean"], entry[f"{k}_std"] = _stats([r.get(k) for r in rs])
        out.append(entry)
    ref = next((e for e in out if e["policy"] == reference), None)
    for e in out:
        e["e2e_gain_pct"] = _gain(ref and ref.get("mean_e2el_ms_mean"), e.get("mean_e2el_ms_mean"))
        e["makespan_gain_pct"] = _gain(ref and ref.get("makespan_s_mean"), e.get("makespan_s_mean"))
        q_ref, q = ref and ref.get("avg_qos_mean"), e.get("avg_qos_mean")
        e["qos_gain_pct"] = (q - q_ref) / q_ref * 100.0 if q is not None and q_ref else None
    for higher in ("avg_qos", "utility"):  # the QoS-aware edge router's and the best-effort paper's: higher first
        if any(e.get(f"{higher}_mean") is not None for e in out):
            out.sort(key=lambda e: (e.get(f"{higher}_mean") is None, -(e.get(f"{higher}_mean") or 0.0), e["policy"]))
            break
    else:
        out.sort(key=lambda e: (e.get("mean_e2el_ms_mean") is None, e.get("mean_e2el_ms_mean") or 0.0, e["policy"]))
    return out


def _cell(mean: float | None, std: float | None, scale: float, decimals: int) -> str:
    if mean is None:
        return "n/a"
    s = f"{mean * scale:.{decimals}f}"
    return s if std is None else f"{s} ± {std * scale:.{decimals}f}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.2f} %"


def markdown(summary: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> str:
    """The table of evaluation.md: mean ± std over seeds per policy, gains vs the reference, sorted by mean E2E."""
    ref = meta.get("reference", "round_robin")
    cols = [c for c in TABLE_COLUMNS if c[0] not in OPTIONAL or any(e.get(f"{c[0]}_mean") is not None
                                                                     for e in summary)]
    short = "RR" if ref == "round_robin" else ref
    qos = any(e.get("qos_gain_pct") is not None for e in summary)
    head = ["policy", "episodes", *(c[1] for c in cols), f"E2E vs {short}", f"makespan vs {short}"]
    head += [f"QoS vs {short}"] if qos else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for e in summary:
        cells = [str(e["policy"]), str(e["episodes"])]
        cells += [_cell(e.get(f"{k}_mean"), e.get(f"{k}_std"), scale, d) for k, _, scale, d in cols]
        cells += [_pct(e.get("e2e_gain_pct")), _pct(e.get("makespan_gain_pct"))]
        cells += [_pct(e.get("qos_gain_pct"))] if qos else []
        lines.append("| " + " | ".join(cells) + " |")
    seeds = meta.get("seeds", [])
    title = (f"**{meta.get('env_id', 'env')}**: {len(summary)} policies x {len(seeds)} seeds "
             f"({', '.join(map(str, seeds))}) x {meta.get('episodes_per_seed', 1)} episode(s), "
             f"{_requests(meta)} requests per episode")
    notes = [f"Values are mean ± sample std over episodes (one episode: the value alone); gains are ({ref} - "
             f"policy) / {ref} on the means (positive = lower mean E2E latency / earlier finish). Latencies count "
             "every request: a dropped or cut-off one at the time it was given up (completed-only figures: "
             "evaluation.json, completed_*)."]
    if seeds:
        notes.append(split_note(seeds) + ".")
    if not any(e["policy"] == ref for e in summary):
        notes.append(f"The reference {ref!r} was not evaluated: no gains.")
    if any(e.get("unseen_decisions_mean") is not None for e in summary):
        notes.append("guide decided (unseen): decisions per episode outside the states a network with a seen range "
                     "was fitted on, where its guide heuristic decided (agents/seen_range.py).")
    skipped = meta.get("workload_skipped")
    if skipped:
        notes.append(f"Trace rows skipped by the workload (counted, not simulated), by reason, summed over the "
                     f"episodes of one policy: {skipped}.")
    cut = sum(int(e.get("truncated", 0)) for e in summary)
    if cut:
        notes.append(f"{cut} episode(s) hit the env's time limit (unfinished requests count as dropped, and as "
                     "cut off at the limit).")
    return "\n".join([title, "", *lines, "", *notes]) + "\n"


def _requests(meta: Mapping[str, Any]) -> str:
    n = (meta.get("env") or {}).get("num_requests")
    return f"{n:,}" if isinstance(n, int) else "?"


def plot(summary: Sequence[Mapping[str, Any]], meta: Mapping[str, Any], path: Path) -> Path:
    """Bar chart of mean E2E latency per policy (s) with std error bars, in the table's order."""
    kinds = {p.get("label"): p.get("kind") for p in meta.get("policies", [])}
    ref = meta.get("reference", "round_robin")
    labels = [str(e["policy"]) for e in summary]
    means = [(e.get("mean_e2el_ms_mean") or math.nan) / 1e3 for e in summary]
    stds = [(e.get("mean_e2el_ms_std") or 0.0) / 1e3 for e in summary]
    colors = ["C3" if kinds.get(x) in ("checkpoint", "object") else "C1" if x == ref else "C0" for x in labels]
    fig, ax = new_figure(1, 1, (max(6.0, 0.9 * len(labels) + 2.0), 4.5))
    x = np.arange(len(labels))
    ax.bar(x, means, yerr=stds, color=colors, capsize=4, edgecolor="black", linewidth=0.5)
    ax.set_xticks(x, labels, rotation=30, ha="right")
    ax.set_ylabel("mean end-to-end latency (s)")
    seeds = meta.get("seeds", [])
    ax.set_title(f"{meta.get('env_id', 'env')}: mean E2E latency, mean ± std over {len(seeds)} seed(s) "
                 f"x {meta.get('episodes_per_seed', 1)} episode(s)\nred: learned, orange: reference ({ref}), "
                 "blue: baselines", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def rows_skipped(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """The trace rows the episodes' workloads left out, by reason, over the episodes of one policy (every policy
    runs the same workloads, so the first one's rows count each episode once)."""
    first = rows[0]["policy"] if rows else None
    total: dict[str, int] = {}
    for r in rows:
        if r["policy"] == first:
            for reason, n in (r.get("workload_skipped") or {}).items():
                total[reason] = total.get(reason, 0) + int(n)
    return {k: v for k, v in total.items() if v}


def jsonable(x: Any) -> Any:
    """Plain JSON values (numpy scalars as numbers, NaN as null, paths as strings)."""
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, Path):
        return str(x)
    return x


def write_outputs(rows: Sequence[Mapping[str, Any]], meta: Mapping[str, Any], out_dir: Path,
                  plots: bool = True) -> str:
    """evaluation.json (config, policies, rows, per-policy summary), evaluation.md and evaluation.png; returns
    the markdown."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarise(rows, meta.get("reference", "round_robin"))
    skipped = rows_skipped(rows)
    meta = {**meta, "workload_skipped": skipped} if skipped else meta
    body = {**{k: v for k, v in meta.items() if k != "config"}, "config": meta.get("config", {}),
            "rows": list(rows), "summary": summary}
    (out_dir / "evaluation.json").write_text(json.dumps(jsonable(body), indent=1) + "\n")
    md = markdown(summary, meta)
    (out_dir / "evaluation.md").write_text(md)
    if plots:
        plot(summary, meta, out_dir / "evaluation.png")
    return md
