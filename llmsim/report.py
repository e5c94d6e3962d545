"""Human-facing output: the summary table on the terminal and the plots saved with each run."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmsim.sim import SimResult

_ORDER = [
    ("Successful requests", "completed", "{:d}"),
    ("Dropped requests", "dropped", "{:d}"),
    ("Benchmark duration (s)", "duration", "{:.2f}"),
    ("Total input tokens", "total_input_tokens", "{:d}"),
    ("Total generated tokens", "total_output_tokens", "{:d}"),
    ("Request throughput (req/s)", "request_throughput", "{:.2f}"),
    ("Output token throughput (tok/s)", "output_throughput", "{:.2f}"),
    ("Total token throughput (tok/s)", "total_token_throughput", "{:.2f}"),
    ("Request goodput (req/s)", "request_goodput", "{:.2f}"),
    ("SLO attainment", "slo_attainment", "{:.3f}"),
    ("Preemptions", "preemptions", "{:d}"),
    ("Mean utilisation", "mean_utilisation", "{:.3f}"),
]


def summary_rows(summary: dict) -> list[tuple[str, str]]:
    rows = []
    for label, key, fmt in _ORDER:
        if key in summary and summary[key] is not None:
            v = summary[key]
            rows.append((label, "nan" if isinstance(v, float) and math.isnan(v) else fmt.format(v)))
    for metric, name in (("ttft", "Time to First Token"), ("tpot", "Time per Output Token (excl. 1st token)"),
                         ("itl", "Inter-token Latency"), ("e2el", "End-to-end Latency")):
        rows.append((f"-- {name} --", ""))
        for stat in ("mean", "median", "p90", "p99"):
            key = f"{stat}_{metric}_ms"
            if key in summary:
                rows.append((f"{stat.capitalize() if stat in ('mean', 'median') else stat.upper()} "
                             f"{metric.upper()} (ms)", f"{summary[key]:.2f}"))
    return rows


def print_summary(result: SimResult, title: str = "llmsim result") -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k, v in summary_rows(result.summary):
        table.add_row(k, v)
    console = Console()
    console.print(table)
    for note in result.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
    if result.summary.get("dropped"):
        console.print(f"[yellow]dropped by reason:[/yellow] {result.summary.get('dropped_by_reason')}")


def save_plots(result: SimResult, out_dir: str | Path) -> list[Path]:
    """Latency CDFs and queue / KV timelines as PNGs in ``out_dir``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import NullFormatter

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    df = result.requests
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, col, label in zip(axes, ("ttft_ms", "tpot_ms", "e2el_ms"), ("TTFT (ms)", "TPOT (ms)", "E2E latency (ms)")):
        v = np.sort(df[col].dropna().to_numpy())
        if v.size:
            ax.plot(v, np.arange(1, v.size + 1) / v.size)
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())  # decade labels only: minor ones overlap
        ax.set_xlabel(label)
        ax.set_ylabel("CDF")
        ax.grid(alpha=0.3)
    fig.suptitle("Latency CDFs")
    fig.tight_layout()
    p = out / "latency_cdf.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)

    tl = result.timeline
    if len(tl):
        fig, axes = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True)
        for inst, g in tl.groupby("instance"):
            axes[0].plot(g["time"], g["waiting"] + g["running"] + g["swapped"], label=f"instance {inst}", lw=0.9)
            axes[1].plot(g["time"], g["kv_used_blocks"] / g["kv_total_blocks"], label=f"instance {inst}", lw=0.9)
        axes[0].set_ylabel("requests queued + running")
        axes[1].set_ylabel("KV cache used")
        axes[1].set_xlabel("simulated time (s)")
        if tl["instance"].nunique() <= 16:
            axes[0].legend(fontsize=7, ncol=4)
        for ax in axes:
            ax.grid(alpha=0.3)
        fig.tight_layout()
        p = out / "timeline.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths


def save_sweep_plot(rows: list[dict], x: str, out: str | Path) -> Path:
    """Latency percentiles against a swept parameter (e.g. arrival rate)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(rows, key=lambda r: r[x])
    xs = [r[x] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, m in zip(axes, ("ttft", "tpot", "e2el")):
        for stat in ("median", "p90", "p99"):
            ax.plot(xs, [r.get(f"{stat}_{m}_ms") for r in rows], marker="o", label=stat)
        ax.set_xlabel(x)
        ax.set_ylabel(f"{m} (ms)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return Path(out)


def collect_sweep(sweep_dir: str | Path) -> list[dict]:
    """Rows of (overrides..., summary...) from every job of a Hydra multirun directory."""
    import json

    import yaml

    rows = []
    for summary in sorted(Path(sweep_dir).glob("*/summary.json")):
        row: dict = {}
        overrides = summary.parent / ".hydra" / "overrides.yaml"
        if overrides.exists():
            for item in yaml.safe_load(overrides.read_text()) or []:
                key, _, value = str(item).partition("=")
                try:
                    row[key] = float(value)
                except ValueError:
                    row[key] = value
        row.update(json.loads(summary.read_text()))
        row["job_dir"] = str(summary.parent)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> None:
    """``python -m llmsim.report SWEEP_DIR [--x workload.rate]``: sweep table (CSV) and curves (PNG)."""
    import argparse

    import pandas as pd

    ap = argparse.ArgumentParser(prog="python -m llmsim.report")
    ap.add_argument("sweep_dir")
    ap.add_argument("--x", default="workload.rate", help="swept override to put on the x axis")
    args = ap.parse_args(argv)
    rows = collect_sweep(args.sweep_dir)
    if not rows:
        raise SystemExit(f"no */summary.json under {args.sweep_dir}: is it a Hydra multirun directory?")
    df = pd.DataFrame(rows)
    out_csv = Path(args.sweep_dir) / "sweep.csv"
    df.to_csv(out_csv, index=False)
    cols = [c for c in (args.x, "request_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
                        "p99_e2el_ms", "slo_attainment") if c in df.columns]
    print(df[cols].sort_values(cols[0]).to_string(index=False))
    if args.x in df.columns:
        p = save_sweep_plot(rows, args.x, Path(args.sweep_dir) / "sweep.png")
        print(f"wrote {out_csv} and {p}")


if __name__ == "__main__":
    main()
