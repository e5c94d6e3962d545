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
from typing import Any, Protocol

import numpy as np
import pandas as pd

from llmsim.metrics.recorder import Latencies, Recorder, column_values, peak_token_throughput, run_duration, summarise
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
    """``latencies_of(rec.requests_frame())`` from the recorded columns: each column in id order (a stable sort,
    as the table's), the derived latencies computed as the table computes them."""
    cols = rec.cols
    ids = np.frombuffer(cols["id"], np.int64)
    n = len(ids)
    order = np.argsort(ids, kind="stable")

    def col(name: str) -> np.ndarray:
        return column_values(cols[name], order)

    arrival, first_token, finish = col("arrival"), col("first_token"), col("finish")
    out, prompt, pre = col("output_tokens"), col("prompt_tokens"), col("preemptions")
    decode = finish - first_token
    multi = out > 1
    tpot = np.where(multi, decode * 1e3 / np.clip(out - 1, 1, None), np.nan)
    # (the table's column, as pandas infers it: a missing class reads NaN there, not None)
    classes = None if rec.slo_classes is None else pd.Series(rec.slo_classes).to_numpy(object)[order]
    return Latencies(
        n_done=n, start=float(arrival.min()) if n else math.inf, end=float(finish.max()) if n else -math.inf,
        input_tokens=int(prompt.sum()) if n else 0, output_tokens=int(out.sum()) if n else 0,
        ttft_ms=(first_token - arrival) * 1e3, tpot_ms=tpot, e2el_ms=(finish - arrival) * 1e3,
        itl_sum_s=float(decode[multi].sum()), n_itl=int((out[multi] - 1).sum()),
        preemptions=int(pre.sum()) if n else 0, preempted=int((pre > 0).sum()) if n else 0,
        truncated=int(column_values(cols["truncated"]).astype(bool).sum()) if n else 0,
        slo_class=classes)


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
