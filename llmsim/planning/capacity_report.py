"""The capacity search's outputs: capacity.json, capacity.csv, capacity.png and the terminal table."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from rich.console import Console
from rich.table import Table


def write_outputs(rows: list[dict[str, Any]], out: Path) -> None:
    """The three files, in ``out`` (created here: a run that fails before this leaves no folder)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "capacity.json").write_text(json.dumps(rows, indent=2, default=_json_num) + "\n")
    flat = [{"cluster": r["cluster"], "policy": r["policy"], "rate": p["rate"], "attainment": p["attainment"],
             "met": p["attainment"] >= r["target"], "min_seed": min(p["per_seed"]), "max_seed": max(p["per_seed"]),
             "per_seed": ";".join(f"{v:.4f}" for v in p["per_seed"]), "goodput": p["goodput"],
             "throughput": p["throughput"], "p99_ttft_ms": p["p99_ttft_ms"], "p99_tpot_ms": p["p99_tpot_ms"],
             "capacity_rps": r["capacity_rps"]} for r in rows for p in r["curve"]]
    pd.DataFrame(flat).to_csv(out / "capacity.csv", index=False)
    plot_capacity(rows, out / "capacity.png")


def _json_num(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else str(v)


def plot_capacity(rows: list[dict[str, Any]], path: Path) -> None:
    """Attainment vs rate per cluster (one panel each), one line per policy, the capacity starred."""
    clusters = list(dict.fromkeys(r["cluster"] for r in rows))
    n = len(clusters)
    fig = Figure(figsize=(6.4 * n, 4.2))
    axes = fig.subplots(1, n, squeeze=False, sharey=True)
    target = rows[0]["target"] if rows else 0.9
    for ax, name in zip(axes[0], clusters):
        for k, row in enumerate(r for r in rows if r["cluster"] == name):
            flag = "" if row["monotone"] else " (non-monotone)"
            ax.plot([p["rate"] for p in row["curve"]], [p["attainment"] for p in row["curve"]], "o-", color=f"C{k}",
                    ms=4, label=f"{row['policy']}: {row['capacity_rps']:.3g} req/s{flag}")
            if row["capacity_rps"] > 0:
                y = next((p["attainment"] for p in row["curve"] if p["rate"] == row["capacity_rps"]), target)
                ax.axvline(row["capacity_rps"], color=f"C{k}", ls=":", lw=1)
                ax.plot([row["capacity_rps"]], [y], "*", color=f"C{k}", ms=14, mec="black", zorder=5)
        ax.axhline(target, color="gray", ls="--", lw=1, label=f"target {target:.0%}")
        ax.set_xscale("log")
        ax.set_xlabel("arrival rate (req/s)")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{name}: capacity at {target:.0%} SLO attainment", fontsize=10)
        ax.legend(fontsize=8, loc="lower left")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel(f"{rows[0]['metric'] if rows else 'slo_attainment'} (share of requests)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def goodput_note(row: dict[str, Any]) -> str:
    """Why "goodput at capacity" reads below the capacity, with this row's numbers (empty if it has none).

    Capacity is an arrival rate; goodput (as ``vllm bench serve`` reports it) divides the requests that met every
    SLO by the whole run, first arrival to last answer (drops included), and a run outlasts its arrivals by the time
    its longest responses take to finish."""
    good, run_s, cap = row.get("goodput_at_capacity"), row.get("run_s_at_capacity"), row["capacity_rps"]
    if good is None or run_s is None or not (math.isfinite(run_s) and run_s > 0 and cap > 0):
        return ""
    n = row.get("requests_per_run") or row["num_requests"]
    met = next((p["attainment"] for p in row["curve"] if p["rate"] == cap), row["target"])
    return (f"goodput @cap is requests meeting every SLO per second of the whole run (first arrival to last "
            f"completion, as vllm bench serve counts): at {cap:.3g} req/s the {n:,} requests of a run arrive over "
            f"~{n / cap:.0f} s but the run lasts {run_s:.0f} s until its longest responses finish, so goodput is "
            f"about {met:.2f} x {n:,} / {run_s:.0f} s ({good:.3g} req/s, the mean over seeds). Capacity is the "
            f"arrival rate; more requests per run (capacity.num_requests) bring goodput closer to it.")


def print_table(rows: list[dict[str, Any]], runner: Any, wall_s: float) -> None:
    """``runner`` is the search's :class:`llmsim.planning.runner.Runner` (its ``runs`` and ``workers``). The
    goodput column gets its explanation printed under the table (:func:`goodput_note`)."""
    seeds = rows[0]["seeds"]
    t = Table(title=f"Capacity at {rows[0]['target']:.0%} {rows[0]['metric']} ({seeds} seed{'s' * (seeds > 1)} x "
                    f"{rows[0]['num_requests']} requests, tolerance {rows[0]['tolerance']:.0%})")
    for col in ("cluster", "policy", "capacity (req/s)", "bracket", "goodput @cap", "run @cap (s)", "evals", "note"):
        t.add_column(col, overflow="fold")
    for r in rows:
        lo, hi = r["bracket"]
        bracket = f"[{'-' if lo is None else f'{lo:.4g}'}, {'-' if hi is None else f'{hi:.4g}'}]"
        good, run_s = r["goodput_at_capacity"], r.get("run_s_at_capacity")
        t.add_row(r["cluster"], r["policy"], f"{r['capacity_rps']:.4g}" + ("" if r["monotone"] else " !"), bracket,
                  "-" if good is None else f"{good:.3g}",
                  "-" if run_s is None or not math.isfinite(run_s) else f"{run_s:.0f}", str(r["evaluations"]),
                  r["note"])
    console = Console(width=max(120, Console().width))
    console.print(t)
    note = next((r["goodput_note"] for r in rows if r.get("goodput_note")), "")
    if note:
        console.print(note, markup=False, highlight=False)
    print(f"{runner.runs} simulations in {wall_s:.1f} s on {runner.workers} worker(s) "
          f"({runner.runs / max(wall_s, 1e-9) * 60:.0f} runs/min)")
