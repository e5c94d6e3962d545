"""The report people read of a run: its summary on the terminal.

The summary mirrors ``vllm bench serve`` (same names, ms) so numbers can be compared side by side with a
real benchmark; what vllm does not print (drops, truncation, preemption, instance load) is a second table
beside it rather than mixed into it. The figures of a run (:mod:`llmsim.metrics.plots`) and its progress are
importable from here too, so a notebook needs this one import; a sweep's table and figure are
:mod:`llmsim.cli.report`'s. Loads matplotlib and rich, so it is never on ``import llmsim``'s path.
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any

from rich.columns import Columns
from rich.console import Console
from rich.table import Table

from llmsim.metrics.plots import latency_cdf_figure, save_plots, timeline_figure
from llmsim.metrics.progress import SimProgress

if TYPE_CHECKING:
    from llmsim.metrics.result import SimResult

__all__ = ["SimProgress", "empty_result_reason", "latency_cdf_figure", "outcome_rows", "print_summary", "save_plots",
           "summary_rows", "timeline_figure"]

_ORDER = [
    ("Successful requests", "completed", "{:,d}"),
    ("Benchmark duration (s)", "duration", "{:.2f}"),
    ("Total input tokens", "total_input_tokens", "{:,d}"),
    ("Total generated tokens", "total_output_tokens", "{:,d}"),
    ("Request throughput (req/s)", "request_throughput", "{:.2f}"),
    ("Output token throughput (tok/s)", "output_throughput", "{:.2f}"),
    ("Total token throughput (tok/s)", "total_token_throughput", "{:.2f}"),
    ("Request goodput (req/s)", "request_goodput", "{:.2f}"),
    ("SLO attainment (all requests; drops miss)", "slo_attainment", "{:.3f}"),
]
_LATENCIES = (("ttft", "Time to First Token"), ("tpot", "Time per Output Token (excl. 1st token)"),
              ("itl", "Inter-token Latency"), ("e2el", "End-to-end Latency"))


def _fmt(v: Any, fmt: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return fmt.format(v)


def summary_rows(summary: dict) -> list[tuple[str, str]]:
    """The ``vllm bench serve`` table: throughput, SLO, and ttft / tpot / itl / e2el statistics (ms)."""
    rows = [(label, _fmt(summary[key], fmt)) for label, key, fmt in _ORDER if summary.get(key) is not None]
    rows += [(f"  SLO attainment, class {k.removeprefix('slo_attainment_')}", _fmt(v, "{:.3f}"))
             for k, v in sorted(summary.items()) if k.startswith("slo_attainment_")]
    for metric, name in _LATENCIES:
        rows.append((f"-- {name} --", ""))
        for stat in ("mean", "median", "p90", "p99"):
            key = f"{stat}_{metric}_ms"
            if key in summary:
                label = stat.capitalize() if stat in ("mean", "median") else stat.upper()
                rows.append((f"{label} {metric.upper()} (ms)", _fmt(summary[key], "{:.2f}")))
    return rows


def outcome_rows(summary: dict) -> list[tuple[str, str]]:
    """What happened to the requests and how loaded the instances were: the table beside the latencies."""
    n = summary.get("num_requests", 0) or 0

    def count(key: str) -> str:
        v = int(summary.get(key) or 0)
        return f"{v:,d}" + (f" ({100 * v / n:.1f} %)" if n and v else "")

    rows = [("Requests", f"{n:,d}"), ("Completed", count("completed")),
            ("Truncated at max_model_len", count("truncated")),
            ("Preempted (requests)", count("preempted_requests")),
            ("Preemptions (total)", f"{int(summary.get('preemptions') or 0):,d}"), ("Dropped", count("dropped"))]
    for reason, k in sorted((summary.get("dropped_by_reason") or {}).items()):
        rows.append((f"  dropped: {reason}", f"{int(k):,d}"))
    if summary.get("evictions"):
        rows.append(("Evictions (by the policy)", f"{int(summary['evictions']):,d}"))
    if "model_swaps" in summary:  # a cluster with multi-model instances (llmsim.engine.model_host)
        rows.append(("Model swaps (warm)", f"{int(summary['model_swaps']):,d} ({int(summary['warm_swaps']):,d})"))
        rows.append(("Time swapping models (s)", f"{float(summary['swap_seconds']):,.1f}"))
    if summary.get("prefix_cache_hits"):  # llmsim.engine.prefix_cache (requests with block ids reused some)
        rows.append(("Prefix cache hit rate (tokens)", f"{100 * float(summary['prefix_cache_hit_rate']):.1f} %"))
    if summary.get("kv_transfers"):  # prefill/decode disaggregation (llmsim.cluster.disagg)
        rows.append(("KV transfers (GB)", f"{int(summary['kv_transfers']):,d} ({summary['kv_transfer_gb']:,.2f})"))
        rows.append(("KV transfer mean / p99 (ms)",
                     f"{summary['mean_kv_transfer_ms']:.2f} / {summary['p99_kv_transfer_ms']:.2f}"))
        rows.append(("KV transfer wait for room (ms)", f"{summary['mean_kv_transfer_wait_ms']:.2f}"))
    rows.append(("-- Instances (mean) --", ""))
    if "mean_busy_fraction" in summary:
        rows.append(("Busy fraction", _fmt(summary["mean_busy_fraction"], "{:.3f}")))
    if "mean_token_throughput_vs_peak" in summary:
        rows.append(("Token throughput vs peak", _fmt(summary["mean_token_throughput_vs_peak"], "{:.3f}")))
    return rows


def empty_result_reason(summary: dict) -> str | None:
    """Why a run has nothing to report (no request completed), in one line; None when it has."""
    if summary.get("completed", 0):
        return None
    n = int(summary.get("num_requests") or 0)
    if n == 0:
        skipped = {k: v for k, v in (summary.get("workload_skipped") or {}).items() if v}
        detail = f" (rows skipped: {_counts(skipped)})" if skipped else ""
        return (f"no request to simulate: the workload yielded none{detail}; check the workload's filters, "
                "window and limits")
    reasons = summary.get("dropped_by_reason") or {}
    return f"no request completed: all {n:,} were dropped ({_counts(reasons)}); see dropped.csv"


def _counts(d: dict) -> str:
    return ", ".join(f"{k}: {v:,}" for k, v in sorted(d.items())) or "no reason recorded"


def print_summary(result: SimResult, title: str = "llmsim result") -> None:
    """The two tables side by side (stacked on a narrow terminal), then the run's notes."""
    main = Table(title=title, show_header=False)
    main.add_column("metric")
    main.add_column("value", justify="right")
    for k, v in summary_rows(result.summary):
        main.add_row(k, v)
    side = Table(title="Requests and load", show_header=False)
    side.add_column("what")
    side.add_column("count", justify="right")
    for k, v in outcome_rows(result.summary):
        side.add_row(k, v)
    console = Console()
    console.print(Columns([main, side], padding=(0, 2)))
    for note in result.notes:
        console.print(f"[yellow]note:[/yellow] {note}")


if __name__ == "__main__":  # the sweep report's old command: say where it went rather than exit silently
    print("python -m llmsim.metrics.report: error: a sweep's report is `python -m llmsim.cli.report MULTIRUN_DIR`",
          file=sys.stderr)
    raise SystemExit(2)
