"""A sweep's figure and files: ``sweep.png`` (latencies, throughput, SLO attainment and load against one swept
key, one curve per combination of the others) and ``sweep.csv``.

The notebooks call :func:`plot_sweep` on frames they build in memory, so a plot means the same thing wherever it
was made. Imports matplotlib, hence stays off ``import llmsim``'s path.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import LogFormatter, PercentFormatter

from llmsim.cli.sweep import Sweep, choose_x, curves, sort_rows
from llmsim.metrics.plots import new_figure

# what a swept key means, for axis labels
KEY_LABELS = {
    "workload.rate": "arrival rate (req/s)",
    "workload.rate_scale": "rate scale (x the trace's rate)",
    "workload.arrival.cv": "coefficient of variation of inter-arrival times",
    "sim.view_staleness": "router view staleness (s)",
    "sim.central_queue_tick": "central-queue retry tick (s)",
    "slo.ttft_ms": "TTFT target (ms)",
    "slo.tpot_ms": "TPOT target (ms)",
    "engine.max_num_seqs": "max sequences per batch",
    "engine.max_num_batched_tokens": "token budget per iteration (tokens)",
    "engine.gpu_memory_utilization": "GPU memory fraction for the engine",
    "seed": "seed",
}

# per panel: title, y label, (summary key, line style, legend text) per series, log y axis
_PANELS: tuple[tuple[str, str, tuple[tuple[str, str, str], ...], bool], ...] = (
    ("Time to first token", "TTFT (ms, log scale)",
     (("median_ttft_ms", "-", "median"), ("p99_ttft_ms", "--", "p99")), True),
    ("Time per output token", "TPOT (ms, log scale)",
     (("median_tpot_ms", "-", "median"), ("p99_tpot_ms", "--", "p99")), True),
    ("End-to-end latency", "E2EL (ms, log scale)",
     (("median_e2el_ms", "-", "median"), ("p99_e2el_ms", "--", "p99")), True),
    ("Throughput", "requests/s",
     (("request_throughput", "-", "completed req/s"), ("request_goodput", "--", "goodput (req/s meeting every SLO)")),
     False),
    ("SLO attainment", "of all requests, meeting every SLO (%; drops miss)",
     (("slo_attainment", "-", "all targets"),), False),
    ("Instance load (mean over instances)", "share (%)",
     (("mean_token_throughput_vs_peak", "-", "token throughput vs peak"),
      ("mean_busy_fraction", "--", "busy fraction")), False),
)
_FRACTION_PANELS = ("SLO attainment", "Instance load (mean over instances)")


def _x_label(x: str) -> str:
    return f"{x}: {KEY_LABELS[x]}" if x in KEY_LABELS else x


def plot_sweep(frame: pd.DataFrame, x: str, by: list[str] | None = None, title: str | None = None) -> Figure:
    """Median / p99 latencies, throughput, SLO attainment and load against ``x``, one colour per curve.

    ``by`` lists the columns that tell curves apart (none: a single curve); :func:`save_sweep` passes every
    swept key but ``x``. Rows are expected to hold the summary keys (missing panels are left out).
    """
    by = list(by or [])
    groups = curves(frame, x, by)
    panels = [p for p in _PANELS if any(k in frame and frame[k].notna().any() for k, _, _ in p[2])]
    ncols = 3
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = new_figure(nrows, ncols, (15, 4.2 * nrows), squeeze=False)
    for ax, (ptitle, ylabel, series, log) in zip(axes.flat, panels):
        for i, (_, g) in enumerate(groups):
            for key, style, _ in series:
                if key in g and g[key].notna().any():
                    ax.plot(g[x], g[key], ls=style, marker="o" if style == "-" else "x", color=f"C{i % 10}")
        if log and any((frame[k] > 0).any() for k, _, _ in series if k in frame):
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(LogFormatter())  # 200, not 2x10^2
            ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1.5, 0.6)))
        elif ptitle in _FRACTION_PANELS:
            ax.set_ylim(0, 1.05)
            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_title(ptitle)
        ax.set_xlabel(_x_label(x))
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if len(series) > 1:  # line styles: what solid and dashed mean in this panel
            ax.legend(handles=[Line2D([], [], color="0.3", ls=s, marker="o" if s == "-" else "x", label=t)
                               for _, s, t in series], fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    if by:  # colours: one per curve, once for the figure
        handles = [Line2D([], [], color=f"C{i % 10}", marker="o", label=label) for i, (label, _) in enumerate(groups)]
        fig.legend(handles=handles, loc="upper right", fontsize=9, title=", ".join(by))
    fig.suptitle(title or f"Sweep over {x}" + (f", one curve per {', '.join(by)}" if by else ""))
    fig.tight_layout(rect=(0, 0, 0.88 if by else 1, 0.96))
    return fig


def sweep_figure(sweep: Sweep, x: str | None = None, title: str | None = None) -> Figure | None:
    """The sweep plot of a collected multirun: ``x`` (default :func:`default_x`) against the metrics, one curve
    per combination of the other swept keys; None when nothing was swept."""
    x = choose_x(sweep, x)
    if x is None:
        return None
    by = [k for k in sweep.swept if k != x]
    return plot_sweep(sweep.frame, x, by, title=title)


def save_sweep(sweep: Sweep, out_dir: str | Path, x: str | None = None) -> tuple[Path, Path | None, str | None]:
    """Write ``sweep.csv`` (jobs ordered by curve, then x) and ``sweep.png``; returns the paths and the x used."""
    x = choose_x(sweep, x)
    out = Path(out_dir)
    by = [k for k in sweep.swept if k != x]
    frame = sort_rows(sweep.frame, [*by, x]) if x is not None else sweep.frame
    csv = out / "sweep.csv"
    frame.to_csv(csv, index=False)
    where = "/".join(out.resolve().parts[-2:])
    fig = sweep_figure(sweep, x, title=f"Sweep {where}: " + (f"one curve per {', '.join(by)}" if by else str(x)))
    png = None
    if fig is not None:
        png = out / "sweep.png"
        fig.savefig(png, dpi=110)
    return csv, png, x
