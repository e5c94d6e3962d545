"""Sweeps: ``python -m llmsim.metrics.report MULTIRUN_DIR [--x KEY]`` writes ``sweep.csv`` and ``sweep.png``.

A Hydra multirun (``llmsim -m workload.rate=2,4,8 policy=jsq,round_robin``) leaves one job directory per
combination, each with ``summary.json`` and ``.hydra/overrides.yaml``. The overrides are parsed with Hydra's
own parser, so ``sweep.csv`` has one typed column per override key (``policy``, ``workload.rate``, ...)
followed by the summary's metrics. The *swept* keys are those whose value differs between jobs: one is the
x axis, and every combination of the others is its own curve (one curve per policy, not one zig-zag line
through all of them). The notebooks call the same functions (:func:`plot_sweep`) on frames they build
in memory, so a plot means the same thing wherever it was made.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmsim.errors import LLMSimError

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

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
TABLE_METRICS = ("request_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms",
                 "p99_e2el_ms", "slo_attainment", "request_goodput", "dropped")


class ReportError(LLMSimError):
    """A sweep directory or option the report cannot use (message: one line naming the path or key)."""


@dataclass
class Sweep:
    """A multirun's jobs as one table: ``frame`` has the override columns ``keys`` first, then the metrics."""

    frame: pd.DataFrame
    keys: list[str]

    @property
    def swept(self) -> list[str]:
        return swept_keys(self.frame, self.keys)


def _job_order(path: Path) -> tuple[int, str]:
    """Hydra numbers jobs ``0_...``, ``1_...``, ``10_...``: sort by the number, not the text."""
    head = path.name.partition("_")[0]
    return (int(head), path.name) if head.isdigit() else (sys.maxsize, path.name)


def parse_overrides(items: list[Any], where: str = "overrides.yaml") -> dict[str, Any]:
    """``["policy=jsq", "workload.rate=4"]`` -> ``{"policy": "jsq", "workload.rate": 4}`` (Hydra's grammar:
    numbers stay numbers, ``+`` / ``++`` prefixes are dropped, lists and dicts keep their override text)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides([str(i) for i in items])
    except HydraException as e:
        raise ReportError(f"{where}: cannot parse the overrides: {' '.join(str(e).split())}") from None
    out: dict[str, Any] = {}
    for o in parsed:
        key = o.key_or_group + (f"@{o.package}" if o.package else "")
        if o.is_delete():
            out[key] = None
            continue
        v = o.value()
        out[key] = o.get_value_element_as_str() if isinstance(v, list | dict) else v
    return out


def collect_sweep(sweep_dir: str | Path) -> Sweep:
    """Every job of a Hydra multirun directory: its overrides (typed) and its ``summary.json``."""
    import pandas as pd

    root = Path(sweep_dir)
    if not root.is_dir():
        raise ReportError(f"{root}: no such directory (expected a Hydra multirun directory, multirun/<date>/<time>)")
    jobs = sorted((p.parent for p in root.glob("*/summary.json")), key=_job_order)
    if not jobs:
        raise ReportError(f"{root}: no */summary.json in it; is it a Hydra multirun directory of `llmsim -m ...`?")
    rows, keys = [], []
    for job in jobs:
        overrides = job_overrides(job)
        keys += [k for k in overrides if k not in keys]
        rows.append(job_row(job, overrides, read_json(job / "summary.json")))
    frame = pd.DataFrame(rows)
    metric_cols = [c for c in frame.columns if c not in keys and c != "job_dir"]
    return Sweep(frame[[*keys, *metric_cols, "job_dir"]], keys)


def job_overrides(job: Path) -> dict[str, Any]:
    """A job's typed overrides from its ``.hydra/overrides.yaml`` ({} without one); shared with llmsim.metrics.collect."""
    overrides_file = job / ".hydra" / "overrides.yaml"
    return _read_overrides(overrides_file) if overrides_file.exists() else {}


def read_json(path: Path) -> Any:
    """A job's ``summary.json`` (or another json it wrote); ReportError naming the file when unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ReportError(f"{path}: unreadable ({' '.join(str(e).split())})") from None


def job_row(job: Path, overrides: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """One table row: the overrides, then the summary's scalar metrics (an override wins a name clash), then
    ``job_dir``; nested values (``dropped_by_reason``, ...) are left out of the table."""
    row = dict(overrides)
    row.update({k: v for k, v in summary.items() if k not in overrides and not isinstance(v, dict | list)})
    row["job_dir"] = str(job)
    return row


def _read_overrides(path: Path) -> dict[str, Any]:
    import yaml

    try:
        items = yaml.safe_load(path.read_text()) or []
    except (OSError, yaml.YAMLError) as e:
        raise ReportError(f"{path}: unreadable ({' '.join(str(e).split())})") from None
    if not isinstance(items, list):
        raise ReportError(f"{path}: expected a list of key=value overrides, got {type(items).__name__}")
    return parse_overrides(items, str(path))


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and not (isinstance(v, float) and math.isnan(v))


def swept_keys(frame: pd.DataFrame, keys: list[str]) -> list[str]:
    """The override keys whose value differs between jobs (the others were fixed for the whole sweep)."""
    return [k for k in keys if k in frame and frame[k].astype(str).nunique(dropna=False) > 1]


def default_x(frame: pd.DataFrame, swept: list[str]) -> str | None:
    """The x axis when ``--x`` is not given: ``workload.rate`` if swept, else the first numeric swept key,
    else the first swept key (a categorical axis); None when nothing was swept."""
    numeric = [k for k in swept if all(_is_number(v) for v in frame[k])]
    if "workload.rate" in numeric:
        return "workload.rate"
    return numeric[0] if numeric else (swept[0] if swept else None)


def choose_x(sweep: Sweep, x: str | None) -> str | None:
    """Validate ``--x``: it must be a swept key (the error lists them)."""
    swept = sweep.swept
    if x is None:
        return default_x(sweep.frame, swept)
    if x not in swept:
        listed = ", ".join(swept) if swept else "none (every job has the same overrides)"
        what = "is not a swept key" if x not in sweep.keys else "has one value in every job"
        raise ReportError(f"--x {x!r} {what}; swept keys: {listed}")
    return x


def sort_rows(frame: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Rows ordered by ``cols``: numbers numerically, anything else (names, null, lists) by its text."""

    def key(col: pd.Series) -> pd.Series:
        return col if all(_is_number(v) for v in col) else col.astype(str)

    return frame.sort_values(cols, kind="stable", key=key) if cols else frame


def curves(frame: pd.DataFrame, x: str, by: list[str]) -> list[tuple[str | None, pd.DataFrame]]:
    """(label, rows sorted by x) per combination of the ``by`` keys, in first-seen order."""
    if not by:
        return [(None, sort_rows(frame, [x]))]
    out = []
    for values, g in frame.groupby(by, sort=False, dropna=False):
        vals = values if isinstance(values, tuple) else (values,)
        label = str(vals[0]) if len(by) == 1 else ", ".join(f"{k}={v}" for k, v in zip(by, vals))
        out.append((label, sort_rows(g, [x])))
    return out


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
    ("SLO attainment", "requests meeting every SLO (%)", (("slo_attainment", "-", "all targets"),), False),
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
    from matplotlib.lines import Line2D
    from matplotlib.ticker import LogFormatter, PercentFormatter

    from llmsim.metrics.plots import new_figure

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


def sweep_table(sweep: Sweep, x: str | None) -> str:
    """The swept keys and the headline metrics of each job, as text for the terminal."""
    swept = sweep.swept
    cols = [*swept, *(c for c in TABLE_METRICS if c in sweep.frame)]
    frame = sweep.frame[cols]
    if x is not None:
        frame = sort_rows(frame, [*(k for k in swept if k != x), x])
    return frame.to_string(index=False, float_format=lambda v: f"{v:.3g}" if abs(v) < 1 else f"{v:,.1f}")


def main(argv: list[str] | None = None) -> int:
    """``python -m llmsim.metrics.report SWEEP_DIR [--x KEY]``; errors are one line on stderr, exit status 2."""
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m llmsim.metrics.report",
        description="Collect a Hydra multirun of llmsim (llmsim -m ...) into sweep.csv (one column per override "
                    "key, then the summary metrics) and sweep.png (one curve per value of each swept key but x).")
    ap.add_argument("sweep_dir", help="the multirun directory, e.g. multirun/2025-01-31/12-00-00")
    ap.add_argument("--x", default=None, help="swept key for the x axis (default: workload.rate if swept, else the "
                                              "first numeric swept key)")
    args = ap.parse_args(argv)
    try:
        sweep = collect_sweep(args.sweep_dir)
        csv, png, x = save_sweep(sweep, args.sweep_dir, args.x)
    except LLMSimError as e:
        print(f"llmsim.metrics.report: error: {e}", file=sys.stderr)
        return 2
    print(sweep_table(sweep, x))
    swept = sweep.swept
    if x is None:
        print("nothing was swept (every job has the same overrides): no plot")
    else:
        by = [k for k in swept if k != x]
        print(f"x axis: {x}; curves: {', '.join(by) if by else 'one'}")
    print(f"wrote {csv}" + (f" and {png}" if png else ""))
    return 0
