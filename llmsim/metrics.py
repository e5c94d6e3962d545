"""Per-request records and summaries named and measured like ``vllm bench serve``.

Records go into typed ``array`` columns (8 bytes a value, not a Python object each), so a million
finished requests cost about 100 MB. Inter-token latencies are far too many to keep one by one;
they go into a log-spaced histogram with 0.01 % relative bin width. The mean ITL is exact (a
request's ITLs telescope to finish - first token); ITL percentiles are exact to within a bin.

The timeline (``Recorder.timeline``) has one row per instance per metrics scrape. Scrapes run on the grid
``k * metrics_interval`` while some engine is busy; an idle stretch gets one row at its start and no rows
for the idle intervals after it (nothing changes while no engine works; a request parked in or leaving
the central queue adds one), so its size grows with activity, not with the simulated span (see
:mod:`llmsim.cluster_clock`).
"""

from __future__ import annotations

import math
from array import array
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsim.schema import SLO  # noqa: F401  (the slo group's schema; re-exported for old imports)

if TYPE_CHECKING:
    import pandas as pd

    from llmsim.request import Request

_ITL_STEP = 1e-4
_ITL_INV = 1.0 / math.log1p(_ITL_STEP)
_ITL_MIN = 1e-7  # seconds; bin 0 holds everything below
_ITL_OFFSET = -int(math.log(_ITL_MIN) * _ITL_INV)
_ITL_BINS = _ITL_OFFSET + int(math.log(1e5) * _ITL_INV) + 2

PERCENTILES = (50, 90, 99)


_FLOAT_COLS = ("arrival", "routed_time", "first_scheduled", "first_token", "finish")
_INT_COLS = ("id", "prompt_tokens", "output_tokens", "requested_output_tokens", "instance", "preemptions",
             "swaps", "truncated")


class Recorder:
    """Collects what the engines report; the cluster turns it into tables and a summary."""

    def __init__(self) -> None:
        self.cols: dict[str, array] = {c: array("d") for c in _FLOAT_COLS}
        self.cols.update({c: array("q") for c in _INT_COLS})
        self.tasks: list[str | None] | None = None
        self.itl_hist = [0] * _ITL_BINS
        self.itl_count = 0
        self.dropped: list[tuple[int, float, int, int, str, float, int]] = []
        self.timeline: dict[str, array] = {
            "time": array("d"), "instance": array("q"), "waiting": array("q"), "running": array("q"),
            "swapped": array("q"), "kv_used_blocks": array("q"), "kv_total_blocks": array("q"),
            "tokens_out": array("q"), "central_queue": array("q"),
        }

    def itl(self, value: float, weight: int, _log=math.log, _inv=_ITL_INV, _off=_ITL_OFFSET) -> None:
        self.itl_hist[int(_log(value) * _inv) + _off if value > _ITL_MIN else 0] += weight
        self.itl_count += weight

    def finish(self, r: Request) -> None:
        c = self.cols
        c["arrival"].append(r.arrival)
        c["routed_time"].append(r.routed_time)
        c["first_scheduled"].append(r.first_scheduled)
        c["first_token"].append(r.first_token)
        c["finish"].append(r.finish)
        c["id"].append(r.id)
        c["prompt_tokens"].append(r.prompt_tokens)
        c["output_tokens"].append(r.generated)
        c["requested_output_tokens"].append(r.output_tokens)
        c["instance"].append(r.instance)
        c["preemptions"].append(r.preemptions)
        c["swaps"].append(r.swaps)
        c["truncated"].append(1 if r.truncated else 0)
        if r.task is not None and self.tasks is None:
            self.tasks = [None] * (len(c["id"]) - 1)
        if self.tasks is not None:
            self.tasks.append(r.task)

    def drop(self, r: Request, reason: str, now: float) -> None:
        r.dropped = reason
        self.dropped.append((r.id, r.arrival, r.prompt_tokens, r.output_tokens, reason, now, r.instance))

    # ------------------------------------------------------------------ tables
    def requests_frame(self) -> pd.DataFrame:
        import pandas as pd

        data: dict[str, Any] = {k: np.frombuffer(v, dtype=np.float64 if v.typecode == "d" else np.int64).copy()
                                for k, v in self.cols.items()}
        df = pd.DataFrame(data)
        df = df[["id", "arrival", "prompt_tokens", "output_tokens", "requested_output_tokens", "instance",
                 "routed_time", "first_scheduled", "first_token", "finish", "preemptions", "swaps", "truncated"]]
        if self.tasks is not None:
            df["task"] = self.tasks
        df["truncated"] = df["truncated"].astype(bool)
        df["ttft_ms"] = (df["first_token"] - df["arrival"]) * 1e3
        df["e2el_ms"] = (df["finish"] - df["arrival"]) * 1e3
        out = df["output_tokens"]
        df["tpot_ms"] = np.where(out > 1, (df["finish"] - df["first_token"]) * 1e3 / (out - 1).clip(lower=1),
                                 np.nan)
        df["queue_ms"] = (df["first_scheduled"] - df["arrival"]) * 1e3
        return df.sort_values("id", kind="stable").reset_index(drop=True)

    def dropped_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.dropped, columns=["id", "arrival", "prompt_tokens", "output_tokens", "reason",
                                                   "time", "instance"])

    def timeline_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame({k: np.frombuffer(v, dtype=np.float64 if v.typecode == "d" else np.int64).copy()
                             for k, v in self.timeline.items()})

    def itl_percentile(self, p: float) -> float:
        """ITL (seconds) at percentile ``p`` (nearest rank), to within one histogram bin."""
        if self.itl_count == 0:
            return float("nan")
        rank = max(1, math.ceil(p / 100.0 * self.itl_count))
        seen = 0
        hist = self.itl_hist
        for b, n in enumerate(hist):
            if n:
                seen += n
                if seen >= rank:
                    if b == 0:
                        return _ITL_MIN
                    lo = math.exp((b - _ITL_OFFSET) / _ITL_INV)
                    return lo * (1 + 0.5 * _ITL_STEP)
        return float("nan")


def _stats(prefix: str, values: np.ndarray) -> dict[str, float]:
    out: dict[str, float] = {}
    if values.size == 0:
        for k in ("mean", "median", "std", *(f"p{p}" for p in PERCENTILES if p != 50)):
            out[f"{k}_{prefix}_ms"] = float("nan")
        return out
    out[f"mean_{prefix}_ms"] = float(values.mean())
    out[f"median_{prefix}_ms"] = float(np.median(values))
    out[f"std_{prefix}_ms"] = float(values.std())
    for p in PERCENTILES:
        if p != 50:
            out[f"p{p}_{prefix}_ms"] = float(np.percentile(values, p))
    return out


def summarise(
    df: pd.DataFrame, recorder: Recorder, num_requests: int, slo: SLO, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Summary dict: throughput, ttft/tpot/itl/e2el statistics in ms, SLO attainment and goodput."""
    n_done = len(df)
    s: dict[str, Any] = {"num_requests": num_requests, "completed": n_done, "dropped": len(recorder.dropped)}
    if n_done:
        start = float(min(df["arrival"].min(), min((d[1] for d in recorder.dropped), default=np.inf)))
        duration = float(df["finish"].max() - start)
    else:
        duration = 0.0
    s["duration"] = duration
    s["total_input_tokens"] = int(df["prompt_tokens"].sum()) if n_done else 0
    s["total_output_tokens"] = int(df["output_tokens"].sum()) if n_done else 0
    s["request_throughput"] = n_done / duration if duration > 0 else float("nan")
    s["output_throughput"] = s["total_output_tokens"] / duration if duration > 0 else float("nan")
    s["total_token_throughput"] = (
        (s["total_input_tokens"] + s["total_output_tokens"]) / duration if duration > 0 else float("nan")
    )
    s.update(_stats("ttft", df["ttft_ms"].to_numpy()))
    tpot = df["tpot_ms"].to_numpy()
    s.update(_stats("tpot", tpot[~np.isnan(tpot)]))
    # ITL: exact mean (telescoping sums), percentiles from the histogram
    multi = df[df["output_tokens"] > 1]
    n_itl = int((multi["output_tokens"] - 1).sum())
    s["mean_itl_ms"] = float((multi["finish"] - multi["first_token"]).sum() * 1e3 / n_itl) if n_itl else float("nan")
    s["median_itl_ms"] = recorder.itl_percentile(50) * 1e3
    for p in PERCENTILES:
        if p != 50:
            s[f"p{p}_itl_ms"] = recorder.itl_percentile(p) * 1e3
    s.update(_stats("e2el", df["e2el_ms"].to_numpy()))
    s["preemptions"] = int(df["preemptions"].sum()) if n_done else 0
    s["truncated"] = int(df["truncated"].sum()) if n_done else 0
    # SLOs: dropped requests count as misses
    if slo.any():
        ok = np.ones(n_done, dtype=bool)
        for key, col in (("ttft_ms", "ttft_ms"), ("tpot_ms", "tpot_ms"), ("e2el_ms", "e2el_ms")):
            target = getattr(slo, key)
            if target is None:
                continue
            vals = df[col].to_numpy()
            met = np.where(np.isnan(vals), True, vals <= target)
            s[f"slo_{key.removesuffix('_ms')}_attainment"] = float(met.sum() / num_requests) if num_requests else 0.0
            ok &= met
        s["slo_attainment"] = float(ok.sum() / num_requests) if num_requests else 0.0
        s["request_goodput"] = float(ok.sum() / duration) if duration > 0 else float("nan")
    if extra:
        s.update(extra)
    return s
