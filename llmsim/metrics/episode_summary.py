"""A run's summary numbers without its tables: what an env reports at the end of every episode.

``collect`` (``llmsim.simulation.run``) builds the requests, dropped, timeline and instance tables with pandas and
then summarises them; an env needs only the summary, once an episode, and the tables cost more than the numbers.
:func:`summary_of` reads the recorder's columns and the instances' counters with numpy into the same
:class:`~llmsim.metrics.recorder.Latencies` and the same extra keys, in the same order, and hands them to the same
``summarise``: every number is the one ``collect(cluster, slo).summary`` holds, bit for bit (the same arrays, in
id order, go through the same numpy reductions that pandas calls).
"""

from __future__ import annotations

import math
from array import array
from typing import Any, Protocol

import numpy as np
import pandas as pd

from llmsim.metrics.instances import peak_token_throughput
from llmsim.metrics.recorder import Latencies, Recorder, column_values, run_duration, summarise
from llmsim.metrics.sources import MeasuredCluster
from llmsim.metrics.stream import StreamedRecorder
from llmsim.schema import SLO


class SummarisedCluster(MeasuredCluster, Protocol):
    """What the summary reads of a cluster (a Cluster): its engines, recorder, and the cluster-level counters."""

    @property
    def recorder(self) -> Recorder: ...

    @property
    def evictions(self) -> int: ...

    @property
    def model_swap_stats(self) -> dict[str, Any]: ...

    @property
    def transfers(self) -> Any: ...


def summary_of(cluster: SummarisedCluster, slo: SLO) -> dict[str, Any]:
    """``collect(cluster, slo).summary`` without building the tables."""
    rec = cluster.recorder
    lat = rec.latencies() if isinstance(rec, StreamedRecorder) else latencies_of_columns(rec)
    num = lat.n_done + len(rec.dropped)
    instances = cluster.instances
    extra: dict[str, Any] = {
        "iterations": sum(int(inst.iterations) for inst in instances),
        "evictions": cluster.evictions,
        "dropped_by_reason": rec.dropped_frame()["reason"].value_counts().to_dict() if rec.dropped else {},
        **cluster.model_swap_stats,
        **(cluster.transfers.summary() if cluster.transfers is not None else {}),
        **instance_means_of(cluster, run_duration(lat, rec)),
    }
    return summarise(lat, rec, num, slo, extra)


def latencies_of_columns(rec: Recorder) -> Latencies:
    """``latencies_of(rec.requests_frame())`` from the recorded columns: the latencies and the ITL sum (float sums,
    whose rounding depends on the order) in id order (a stable sort, as the table's), computed as the table computes
    them; the counts, integer sums, first arrival and last finish from the columns as recorded (the same numbers in
    any order). Each column is let go once used: on a million requests this holds about half of what reading every
    column in id order at once would."""
    cols = rec.cols
    n = len(cols["id"])
    order = np.argsort(np.frombuffer(cols["id"], np.int64), kind="stable")
    arrival, first_token = column_values(cols["arrival"], order), column_values(cols["first_token"], order)
    ttft = (first_token - arrival) * 1e3
    finish = column_values(cols["finish"], order)
    e2el = (finish - arrival) * 1e3
    del arrival
    decode = finish - first_token
    del finish, first_token
    out = column_values(cols["output_tokens"], order)
    multi = out > 1
    tpot = np.where(multi, decode * 1e3 / np.clip(out - 1, 1, None), np.nan)
    itl_sum_s = float(decode[multi].sum())
    del decode, out, multi
    # (the table's column, as pandas infers it: a missing class reads NaN there, not None)
    classes = None if rec.slo_classes is None else pd.Series(rec.slo_classes).to_numpy(object)[order]
    del order
    return Latencies(n_done=n, ttft_ms=ttft, tpot_ms=tpot, e2el_ms=e2el, itl_sum_s=itl_sum_s, slo_class=classes,
                     **recorded_totals(rec.cols, n))


def recorded_totals(cols: dict[str, array], n: int) -> dict[str, Any]:
    """The summary's order-free inputs, read from the recorded columns in place (integer sums and counts are exact,
    a minimum and a maximum are the same numbers in any order)."""
    if not n:
        return {"start": math.inf, "end": -math.inf, "input_tokens": 0, "output_tokens": 0, "n_itl": 0,
                "preemptions": 0, "preempted": 0, "truncated": 0}

    def view(name: str) -> np.ndarray:  # (a view of the buffer: used at once, never kept)
        col = cols[name]
        return np.frombuffer(col, dtype=col.typecode)

    out, pre = view("output_tokens"), view("preemptions")
    multi = out > 1
    return {"start": float(view("arrival").min()), "end": float(view("finish").max()),
            "input_tokens": int(view("prompt_tokens").sum(dtype=np.int64)),
            "output_tokens": int(out.sum(dtype=np.int64)),
            "n_itl": int(out[multi].sum(dtype=np.int64)) - int(multi.sum()),  # the sum of (output tokens - 1)
            "preemptions": int(pre.sum(dtype=np.int64)), "preempted": int((pre > 0).sum()),
            "truncated": int(np.count_nonzero(view("truncated")))}


def instance_means_of(cluster: MeasuredCluster, duration: float) -> dict[str, float]:
    """``instance_means(instance_table(cluster, duration))`` without the table (pandas' means skip NaN)."""
    instances = cluster.instances
    if not instances:
        return {"mean_busy_fraction": 0.0, "mean_token_throughput_vs_peak": 0.0}
    busy, vs_peak = [], []
    q = h = 0
    for inst in instances:
        busy.append(inst.busy_time / duration if duration > 0 else 0.0)
        peak = peak_token_throughput(inst.profile, inst.config)
        tokens = inst.prefill_tokens + inst.tokens_out
        vs_peak.append((tokens / duration if duration > 0 else 0.0) / peak if peak > 0 else math.nan)
        q += int(inst.prefix_queries)
        h += int(inst.prefix_hits)
    return {"mean_busy_fraction": nan_mean(busy), "mean_token_throughput_vs_peak": nan_mean(vs_peak),
            "prefix_cache_queries": q, "prefix_cache_hits": h, "prefix_cache_hit_rate": h / q if q else 0.0}


def nan_mean(values: list[float]) -> float:
    """The mean of the non-NaN values, summed as pandas sums them (NaN set to 0, one numpy sum, / count)."""
    a = np.array(values, dtype=np.float64)
    mask = np.isnan(a)
    count = a.size - int(mask.sum())
    if count == 0:
        return math.nan
    if count != a.size:
        a[mask] = 0.0
    return float(a.sum() / np.float64(count))
