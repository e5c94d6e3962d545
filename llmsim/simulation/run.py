"""One-call simulation API: ``simulate(instances, requests, policy)`` -> :class:`SimResult`."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from llmsim.cluster import Cluster, InstanceConfig
from llmsim.metrics.episode_summary import latencies_of_columns
from llmsim.metrics.instances import instance_means, instance_table, profile_notes
from llmsim.metrics.progress import SimProgress
from llmsim.metrics.recorder import run_duration, summarise
from llmsim.metrics.result import SimResult
from llmsim.metrics.stream import StreamedRecorder
from llmsim.request import Request
from llmsim.routing import Router, make_router
from llmsim.schema import SLO, check_seed
from llmsim.workload.base import Workload, WorkloadStats
from llmsim.workload.lengths import table_rows_skipped

EMPTY_WORKLOAD = ("no request to simulate: the workload yielded none (num_requests 0: throughputs 0, latency "
                  "statistics NaN for want of a sample)")


def simulate(
    instances: list[InstanceConfig],
    requests: Iterable[Request],
    policy: str | Router = "round_robin",
    *,
    seed: int = 0,
    slo: SLO | None = None,
    view_staleness: float = 0.0,
    metrics_interval: float = 1.0,
    central_queue_tick: float | None = None,
    on_unservable: str = "error",
    colocation_interference: float = 1.0,
    kv_link: str = "infiniband",
    kv_transfer: str = "overlap",
    progress: bool | SimProgress = False,
    total: int | None = None,
    policy_kwargs: dict[str, Any] | None = None,
    stream_to: str | Path | None = None,
) -> SimResult:
    """Run ``requests`` through a cluster of ``instances`` routed by ``policy``.

    ``progress=True`` shows completed requests on stderr (a bar on a terminal, a line every 5 s elsewhere);
    pass a :class:`llmsim.metrics.progress.SimProgress` to choose the stream and intervals. ``total`` (the
    expected request count, when known) gives the bar its end. ``stream_to`` (a path ending ``.parquet``; another
    suffix is refused, the file is always Parquet) writes the
    completed requests there as they finish, in bounded memory (:mod:`llmsim.metrics.stream`); the result's
    ``requests`` table is then empty and ``requests_path`` names the file.
    """
    seed = check_seed(seed)
    slo = SLO.parse(slo)  # before the run: a bad target fails now, not after the simulation
    router = policy if isinstance(policy, Router) else make_router(policy, seed=seed, **(policy_kwargs or {}))
    cluster = Cluster(
        instances,
        router,
        view_staleness=view_staleness,
        metrics_interval=metrics_interval,
        central_queue_tick=central_queue_tick,
        on_unservable=on_unservable,
        colocation_interference=colocation_interference,
        kv_link=kv_link,
        kv_transfer=kv_transfer,
        recorder=StreamedRecorder(stream_to, key="stream_to") if stream_to is not None else None,
    )
    reporter = progress if isinstance(progress, SimProgress) else SimProgress() if progress else None
    if reporter is not None:
        reporter.attach(cluster, total)
    t0 = time.perf_counter()
    try:
        cluster.run(requests)
    finally:
        if reporter is not None:
            reporter.close()
    wall = time.perf_counter() - t0
    res = collect(cluster, slo, wall)
    if not res.summary["num_requests"]:
        res.notes.append(EMPTY_WORKLOAD)
    report_skipped(res, requests)
    return res


def report_skipped(res: SimResult, workload: object) -> None:
    """What a built workload left out, counted in the summary and said in the notes (nothing is dropped in
    silence): trace rows skipped (``workload_skipped``, by reason), empirical length-table rows skipped
    (``lengths_skipped``), those sampled at a bound (``lengths_clipped``) and conversations forgotten at a
    trace's ``max_sessions`` (``sessions_forgotten``: their later turns lose prefix reuse). A plain list of
    requests has none."""
    stats = getattr(workload, "stats", None)
    if isinstance(stats, WorkloadStats):
        skipped = dict(stats.skipped)
        res.summary["workload_skipped"] = skipped
        if skipped:
            res.notes.append(f"workload rows skipped (counted, not simulated): {skipped}")
        if stats.sessions_forgotten:
            res.summary["sessions_forgotten"] = stats.sessions_forgotten
            cap = workload.describe().get("max_sessions") if isinstance(workload, Workload) else None
            res.notes.append(f"conversations forgotten at the max_sessions{f'={cap}' if cap else ''} cap (a later "
                             f"turn of one starts afresh, without prefix reuse): {stats.sessions_forgotten}; raise "
                             "max_sessions to keep them")
    described = workload.describe() if isinstance(workload, Workload) else {}
    table_skipped = table_rows_skipped(described)
    if table_skipped:
        res.summary["lengths_skipped"] = table_skipped
        res.notes.append(f"length table rows skipped (counted, not sampled): {table_skipped}")
    table_clipped = table_rows_skipped(described, "clipped")
    if table_clipped:
        res.summary["lengths_clipped"] = table_clipped
        rows = table_rows_skipped(described, "rows").get("rows", 0)
        res.notes.append(f"length table rows beyond its bounds (sampled at the bound): {table_clipped} of {rows} rows")


def collect(cluster: Cluster, slo: SLO, wall_s: float = 0.0) -> SimResult:
    """Tables and summary of a finished (or stopped) cluster; the env reads the same numbers."""
    rec = cluster.recorder
    if isinstance(rec, StreamedRecorder):
        lat, rows = rec.latencies(), rec.empty_frame()
    else:  # the summary from the recorded columns; the table only when the result's ``requests`` is read
        lat, rows = latencies_of_columns(rec), rec.rows()
    dropped = rec.dropped_frame()
    num = lat.n_done + len(dropped)
    inst_df = instance_table(cluster, run_duration(lat, rec))
    extra: dict[str, Any] = {
        "iterations": int(inst_df["iterations"].sum()),
        "evictions": cluster.evictions,  # requests a policy sent back to the central queue (llmsim.engine.ops)
        "dropped_by_reason": dropped["reason"].value_counts().to_dict() if len(dropped) else {},
        **cluster.model_swap_stats,  # multi-model instances only (llmsim.engine.model_host)
        **(cluster.transfers.summary() if cluster.transfers is not None else {}),  # disaggregated (cluster.disagg)
        **instance_means(inst_df),
    }
    summary = summarise(lat, rec, num, slo, extra)
    path = rec.path if isinstance(rec, StreamedRecorder) else None
    notes = profile_notes(cluster) + itl_notes(lat.n_itl, rec.itl_count)
    return SimResult(rows, dropped, rec.timeline_frame(), inst_df, summary, wall_s, notes, path)


def itl_notes(completed_gaps: int, recorded_gaps: int) -> list[str]:
    """A note when the ITL histogram holds gaps of requests that never completed: the engines record each gap as
    the token comes out, before anyone knows whether the request will be dropped (cut off, or grown past the KV
    cache), and take a dropped request's gaps back only where their decode times prove which were its own
    (``llmsim.engine.decode_times``). vLLM's ITL statistics cover successful requests only."""
    extra = recorded_gaps - completed_gaps
    if extra <= 0:
        return []
    return [f"median/std/p90/p99 ITL include {extra:,} inter-token gaps of dropped requests (of {recorded_gaps:,}); "
            "mean_itl_ms and TPOT cover the completed requests only, as vllm bench serve's statistics do"]
