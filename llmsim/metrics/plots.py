"""The plots saved with each run: ``latency_cdf.png`` and ``timeline.png``.

Imports matplotlib (its object API: no pyplot, no backend switch), so it stays off ``import llmsim``'s path: the
simulation never draws; the ``llmsim`` command and the notebooks do.

Each figure is meant to be read without the code: every panel has a title, axis labels with units, and a
legend; SLO targets are drawn where they apply, with the share of requests that met them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter, NullFormatter, PercentFormatter

if TYPE_CHECKING:
    from llmsim.metrics.result import SimResult
    from llmsim.schema import SLO

# (column, summary key of the SLO attainment, panel title, x label)
CDF_PANELS = (
    ("ttft_ms", "ttft", "Time to first token (TTFT)", "TTFT (ms, log scale)"),
    ("tpot_ms", "tpot", "Time per output token (TPOT)", "TPOT (ms, log scale; requests with > 1 output token)"),
    ("e2el_ms", "e2el", "End-to-end latency (E2EL)", "E2EL (ms, log scale)"),
)


def new_figure(nrows: int, ncols: int, figsize: tuple[float, float], **kw: Any) -> tuple[Figure, Any]:
    """A figure outside pyplot: no backend is switched (a notebook keeps its inline display) and nothing
    global is left open; ``fig.savefig`` writes PNGs, Jupyter shows a returned figure."""
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **kw)


def _run_title(result: SimResult, label: str | None) -> str:
    s = result.summary
    n_inst = len(result.instances)
    what = label or f"{n_inst} instance{'s' if n_inst != 1 else ''}"
    return f"{what}: {s.get('completed', 0):,} requests completed, {s.get('dropped', 0):,} dropped"


def latency_cdf_figure(result: SimResult, slo: SLO | None = None, label: str | None = None) -> Figure:
    """CDFs of TTFT, TPOT and E2EL (ms, log x) with a dashed line at each SLO target that is set."""
    df = result.requests
    if result.requests_path is not None:  # streamed: the three latency columns from the file
        df = pd.read_parquet(result.requests_path, columns=[panel[0] for panel in CDF_PANELS])
    fig, axes = new_figure(1, 3, (14, 4.2))
    for ax, (col, key, title, xlabel) in zip(axes, CDF_PANELS):
        v = np.sort(df[col].dropna().to_numpy()) if col in df else np.array([])
        v = v[v > 0]
        if v.size:
            ax.plot(v, np.arange(1, v.size + 1) / v.size, color="C0", lw=1.4, label=f"{v.size:,} requests")
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(LogFormatter())  # 100, 1000 (ms), not 10^2, 10^3
            ax.xaxis.set_minor_formatter(NullFormatter())  # decade labels only: minor ones overlap
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        target = getattr(slo, col, None) if slo is not None else None
        if target is not None:
            met = result.summary.get(f"slo_{key}_attainment")
            slo_text = f"SLO {target:g} ms"
            if met is not None:
                slo_text += f" (met by {100 * met:.1f} % of all requests)"
            ax.axvline(target, color="C3", ls="--", lw=1.2, label=slo_text)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("share of completed requests ≤ x")
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("Latency CDFs — " + _run_title(result, label))
    fig.tight_layout()
    return fig


def timeline_figure(result: SimResult, label: str | None = None) -> Figure | None:
    """Per-instance requests in the engine, KV-cache use (% of blocks) and the router's central queue over time."""
    tl = result.timeline
    if not len(tl):
        return None
    fig, axes = new_figure(3, 1, (12, 8), sharex=True)
    many = tl["instance"].nunique() > 16
    names = dict(zip(result.instances["instance"], result.instances["name"])) if len(result.instances) else {}
    for inst, g in tl.groupby("instance"):
        line = None if many else f"{inst}: {names.get(inst, 'instance')}"
        axes[0].plot(g["time"], g["waiting"] + g["running"] + g["swapped"], label=line, lw=0.9)
        axes[1].plot(g["time"], 100.0 * g["kv_used_blocks"] / g["kv_total_blocks"].clip(lower=1), label=line, lw=0.9)
    central = tl.groupby("time", sort=True)["central_queue"].max()
    peak = int(central.max()) if len(central) else 0
    axes[2].step(central.index, central.to_numpy(), where="post", color="C3", lw=1.0,
                 label="central queue" + ("" if peak else " (empty throughout: no request was held back)"))
    axes[2].set_ylim(0, max(1.0, 1.1 * peak))
    axes[0].set_title("Requests in each engine (waiting + running + swapped)")
    axes[0].set_ylabel("requests")
    axes[0].set_ylim(bottom=0)
    axes[1].set_title("KV-cache use per instance")
    axes[1].set_ylabel("KV cache used (% of blocks)")
    axes[1].yaxis.set_major_formatter(PercentFormatter(100.0))
    axes[1].set_ylim(0, 105)
    axes[2].set_title("Central queue: requests the router holds back (policy answered WAIT)")
    axes[2].set_ylabel("requests")
    axes[2].set_xlabel("simulated time (s)")
    for ax in axes:
        ax.grid(alpha=0.3)
    if not many:
        axes[0].legend(fontsize=7, ncol=4, loc="upper right")
        axes[1].legend(fontsize=7, ncol=4, loc="upper right")
    axes[2].legend(fontsize=7, loc="upper right")
    fig.suptitle("Timeline — " + _run_title(result, label))
    fig.tight_layout()
    return fig


def save_plots(result: SimResult, out_dir: str | Path, slo: SLO | None = None, label: str | None = None) -> list[Path]:
    """Write ``latency_cdf.png`` and (when the timeline has rows) ``timeline.png`` into ``out_dir``.

    ``slo`` draws the targets on the CDFs; ``label`` (e.g. "jsq on 4 instances") heads both figures.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    figures = {"latency_cdf.png": latency_cdf_figure(result, slo, label),
               "timeline.png": timeline_figure(result, label)}
    for name, fig in figures.items():
        if fig is None:
            continue
        p = out / name
        fig.savefig(p, dpi=110)
        paths.append(p)
    return paths
