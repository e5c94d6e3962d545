"""Per-request records and summaries named and measured like ``vllm bench serve``.

Records go into typed ``array`` columns (8 bytes a value, not a Python object each), so a million
finished requests cost about 100 MB. Inter-token latencies are far too many to keep one by one;
they go into a log-spaced histogram with 0.01 % relative bin width. The mean ITL is exact (a
request's ITLs telescope to finish - first token); ITL percentiles are exact to within half a bin (0.005 %;
0.01 % for a gap within 0.01 % of 1 s, whose bin is twice as wide).

The timeline (``Recorder.timeline``) has one row per instance per metrics scrape. Scrapes run on the grid
``k * metrics_interval`` while some engine is busy; an idle stretch gets one row at its start and no rows
for the idle intervals after it (nothing changes while no engine works; a request parked in or leaving
the central queue adds one), so its size grows with activity, not with the simulated span (see
:mod:`llmsim.cluster.clock`).

The instance table (``instances.csv``) is :mod:`llmsim.metrics.instances`'s.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from itertools import compress
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from llmsim.metrics.table import RecordedRows, column_values
from llmsim.schema import SLO

if TYPE_CHECKING:
    from llmsim.request import Request

_ITL_STEP = 1e-4
_ITL_INV = 1.0 / math.log1p(_ITL_STEP)
_ITL_MIN = 1e-7  # seconds; bin 0 holds everything below
_ITL_OFFSET = -int(math.log(_ITL_MIN) * _ITL_INV)
_ITL_MAX = 1e12  # seconds: a gap as long as a simulated run can be (its times stay below ~1e12 s)
_ITL_BINS = _ITL_OFFSET + int(math.log(_ITL_MAX) * _ITL_INV) + 2
_ITL_CHUNK = 2048  # bins per chunk when looking for the non-empty ones (Recorder._itl_nonzero)

PERCENTILES = (50, 90, 99)


_FLOAT_COLS = ("arrival", "routed_time", "first_scheduled", "first_token", "finish")
_INT_COLS = ("id", "prompt_tokens", "output_tokens", "requested_output_tokens", "instance", "preemptions",
             "swaps", "truncated", "cached_tokens")
# each int column's array typecode: the id in 8 bytes, counts below MAX_TOKENS (1e8) in 4, the flag in 1 (a million
# requests: 77 MB instead of 112); the tables read them as int64 (column_values)
_INT_TYPES = {"id": "q", "prompt_tokens": "i", "output_tokens": "i", "requested_output_tokens": "i", "instance": "i",
              "preemptions": "i", "swaps": "i", "truncated": "b", "cached_tokens": "i"}



class Recorder:
    """Collects what the engines report; the cluster turns it into tables and a summary.

    Every outcome of a request passes here once: :meth:`finish` (it completed) or :meth:`drop` (it was given up, with
    the reason). Whoever must react to outcomes subscribes (:meth:`subscribe`: the cluster's routing retries, an
    env's reward, a progress bar) and is called after the outcome is recorded, in subscription order."""

    ITL_INV, ITL_MIN, ITL_OFFSET = _ITL_INV, _ITL_MIN, _ITL_OFFSET  # the binning of itl (inlined by engine.fastpath)

    def __init__(self) -> None:
        cols = {c: array("d") for c in _FLOAT_COLS}
        cols.update({c: array(_INT_TYPES[c]) for c in _INT_COLS})
        self.cols = cols
        self.tasks: list[str | None] | None = None
        self.slo_classes: list[str | None] | None = None  # kept once a request has a class (SLO per class)
        self.dropped_classes: dict[int, str] = {}
        self.itl_hist = [0] * _ITL_BINS
        self.itl_count = 0
        self._itl_memo: tuple[int, list[tuple[int, int]]] | None = None
        self.dropped: list[tuple[int, float, int, int, str, float, int]] = []
        # preemptions of dropped requests (one outgrowing the cache is preempted first): in the summary's totals
        self.dropped_preemptions = 0
        self.dropped_preempted = 0
        self.timeline: dict[str, array] = {
            "time": array("d"), "instance": array("q"), "waiting": array("q"), "running": array("q"),
            "swapped": array("q"), "kv_used_blocks": array("q"), "kv_total_blocks": array("q"),
            "tokens_out": array("q"), "central_queue": array("q"), "prefix_cache_queries": array("q"),
            "prefix_cache_hits": array("q"),
        }
        self.finish_observers: list[Callable[[Request], None]] = []
        self.drop_observers: list[Callable[[Request, str, float], None]] = []

    def subscribe(self, on_finish: Callable[[Request], None] | None = None,
                  on_drop: Callable[[Request, str, float], None] | None = None) -> None:
        """Call ``on_finish(request)`` after each completion and ``on_drop(request, reason, now)`` after each drop."""
        if on_finish is not None:
            self.finish_observers.append(on_finish)
        if on_drop is not None:
            self.drop_observers.append(on_drop)

    def unsubscribe(self, on_finish: Callable[[Request], None] | None = None,
                    on_drop: Callable[[Request, str, float], None] | None = None) -> None:
        if on_finish is not None:
            self.finish_observers.remove(on_finish)
        if on_drop is not None:
            self.drop_observers.remove(on_drop)

    def itl(self, value: float, weight: int, _log=math.log, _inv=_ITL_INV, _off=_ITL_OFFSET) -> None:
        self.itl_hist[int(_log(value) * _inv) + _off if value > _ITL_MIN else 0] += weight
        self.itl_count += weight

    def forget_itl(self, gaps: list[float], _log=math.log, _inv=_ITL_INV, _off=_ITL_OFFSET) -> None:
        """Take back gaps :meth:`itl` recorded (a dropped request's: vLLM's ITLs are of completed requests only)."""
        hist = self.itl_hist
        for value in gaps:
            hist[int(_log(value) * _inv) + _off if value > _ITL_MIN else 0] -= 1
        self.itl_count -= len(gaps)

    @property
    def cols(self) -> dict[str, array]:
        """The finished requests' columns, by name (a streamed recorder replaces them after each row group)."""
        return self._cols

    @cols.setter
    def cols(self, cols: dict[str, array]) -> None:
        self._cols = cols
        # each column's bound ``append`` in the order :meth:`finish` fills them (one call per value, no lookups)
        self._float_appends = tuple(cols[k].append for k in _FLOAT_COLS)
        self._int_appends = tuple(cols[k].append for k in _INT_COLS)

    def __getstate__(self) -> dict[str, Any]:
        """Without the columns' bound appends: a builtin's bound method copies as itself, so a deep copy (a planner's
        what-if) would append to the original's columns. The ITL histogram goes as its non-empty bins: copying its
        ~440k slots one by one made a copy of the whole env cost half a second."""
        state = dict(self.__dict__)
        del state["_float_appends"], state["_int_appends"], state["_itl_memo"]
        state["itl_hist"] = tuple(self._itl_nonzero())
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        hist = [0] * _ITL_BINS
        for b, n in state["itl_hist"]:
            hist[b] = n
        state["itl_hist"], state["_itl_memo"] = hist, None
        self.__dict__.update(state)
        self.cols = state["_cols"]

    def finish(self, r: Request) -> None:
        a_arrival, a_routed, a_scheduled, a_first, a_finish = self._float_appends
        a_arrival(r.arrival)
        a_routed(r.routed_time)
        a_scheduled(r.first_scheduled)
        a_first(r.first_token)
        a_finish(r.finish)
        a_id, a_prompt, a_out, a_req, a_inst, a_pre, a_swaps, a_trunc, a_cached = self._int_appends
        a_id(r.id)
        a_prompt(r.prompt_tokens)
        a_out(r.generated)
        a_req(r.output_tokens)
        a_inst(r.instance)
        a_pre(r.preemptions)
        a_swaps(r.swaps)
        a_trunc(1 if r.truncated else 0)
        a_cached(r.cached_tokens)
        tasks, classes = self.tasks, self.slo_classes
        if tasks is not None:
            tasks.append(r.task)
        elif r.task is not None:  # the first request with a task: the ones before it had none
            self.tasks = [None] * (len(self._cols["id"]) - 1) + [r.task]
        if classes is not None:
            classes.append(r.slo_class)
        elif r.slo_class is not None:
            self.slo_classes = [None] * (len(self._cols["id"]) - 1) + [r.slo_class]
        for f in self.finish_observers:
            f(r)

    def drop(self, r: Request, reason: str, now: float) -> None:
        r.dropped = reason
        self.dropped.append((r.id, r.arrival, r.prompt_tokens, r.output_tokens, reason, now, r.instance))
        if r.preemptions:
            self.dropped_preemptions += r.preemptions
            self.dropped_preempted += 1
        if r.slo_class is not None:
            self.dropped_classes[r.id] = r.slo_class
        for f in self.drop_observers:
            f(r, reason, now)

    # ------------------------------------------------------------------ tables
    def requests_frame(self) -> pd.DataFrame:
        """The requests table in id order (as a stable sort by id orders it)."""
        return self.rows().frame()

    def rows(self) -> RecordedRows:
        """The requests finished so far, to build their table from when it is read (rows recorded later are not
        in it): a run's result holds these instead of the table, which costs about twice the columns' memory."""
        return RecordedRows(self.cols, len(self.cols["id"]), self.tasks, self.slo_classes)

    def dropped_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.dropped, columns=["id", "arrival", "prompt_tokens", "output_tokens", "reason",
                                                   "time", "instance"])

    def timeline_frame(self) -> pd.DataFrame:
        return pd.DataFrame({k: column_values(v)
                             for k, v in self.timeline.items()})

    def itl_percentile(self, p: float) -> float:
        """ITL (seconds) at percentile ``p``, to within one histogram bin, by numpy's default (linear) method as
        ``vllm bench serve`` computes it: between the values of ranks floor(h) and floor(h) + 1, h = (n - 1) p / 100."""
        if self.itl_count == 0:
            return float("nan")
        h = (self.itl_count - 1) * p / 100.0
        lo = min(int(math.floor(h)), self.itl_count - 1)
        hi = min(lo + 1, self.itl_count - 1)
        a, b = self._itl_at(lo), self._itl_at(hi)
        return a + (h - lo) * (b - a)

    def itl_std(self) -> float:
        """Population standard deviation (seconds) of every ITL, numpy's ``std`` as ``vllm bench serve``'s
        ``std_itl_ms``, from the bins' centres: to within a bin."""
        if self.itl_count == 0:
            return float("nan")
        bins = self._itl_nonzero()
        x = np.array([_bin_centre(b) for b, _ in bins])
        w = np.array([n for _, n in bins], dtype=float)
        mean = float(x @ w) / self.itl_count
        return math.sqrt(float(((x - mean) ** 2) @ w) / self.itl_count)

    def _itl_at(self, k: int) -> float:
        """The ITL (seconds) of 0-based rank ``k`` in sorted order: its bin's centre."""
        seen = 0
        for b, n in self._itl_nonzero():
            seen += n
            if seen > k:
                return _bin_centre(b)
        return float("nan")

    def _itl_nonzero(self) -> list[tuple[int, int]]:
        """(bin, count) of the non-empty histogram bins, in order; one pass over the ~276k bins per ITL count
        (a summary asks for several percentiles of the same histogram). The pass skips empty chunks of bins with
        ``list.count`` (an identity test per bin, ~8x faster than testing each bin's truth): an env summarises
        every episode, and the few hundred used bins lie close together."""
        memo = self._itl_memo
        if memo is None or memo[0] != self.itl_count:
            hist = self.itl_hist
            nonzero: list[tuple[int, int]] = []
            for lo in range(0, len(hist), _ITL_CHUNK):
                chunk = hist[lo:lo + _ITL_CHUNK]
                if chunk.count(0) != len(chunk):
                    nonzero += [(b, hist[b]) for b in compress(range(lo, lo + len(chunk)), chunk)]
            memo = self._itl_memo = (self.itl_count, nonzero)
        return memo[1]


def _bin_centre(b: int) -> float:
    """The ITL (seconds) a histogram bin stands for: its geometric centre (bin 0, everything below ``_ITL_MIN``: that
    bound). A gap v goes to bin ``int(log(v) * inv) + offset``, and ``int`` truncates toward zero: bin k = b - offset
    holds log(v) * inv in [k, k + 1) for k > 0, in (k - 1, k] for k < 0 (every gap under 1 s), in (-1, 1) for k = 0."""
    if b == 0:
        return _ITL_MIN
    k = b - _ITL_OFFSET
    return math.exp((k + 0.5 if k > 0 else k - 0.5 if k < 0 else 0.0) / _ITL_INV)


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


@dataclass
class Latencies:
    """What the summary needs of the completed requests, in id order: from the requests table
    (:func:`latencies_of`) or from a run streamed to Parquet (:mod:`llmsim.metrics.stream`), same numbers."""

    n_done: int
    start: float  # first arrival of a completed request (inf when none)
    end: float  # last completion (-inf when none)
    input_tokens: int
    output_tokens: int
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray  # NaN for one-token outputs
    e2el_ms: np.ndarray
    itl_sum_s: float  # sum of finish - first_token over the requests with more than one output token
    n_itl: int
    preemptions: int
    preempted: int
    truncated: int
    slo_class: np.ndarray | None  # object array, None when no request has a class


def latencies_of(df: pd.DataFrame) -> Latencies:
    """The summary's inputs from a requests table (:meth:`Recorder.requests_frame`)."""
    n = len(df)
    out = df["output_tokens"]
    mask = out > 1  # the requests with more than one output token (a mask: no copy of the table)
    return Latencies(
        n_done=n, start=float(df["arrival"].min()) if n else math.inf,
        end=float(df["finish"].max()) if n else -math.inf,
        input_tokens=int(df["prompt_tokens"].sum()) if n else 0,
        output_tokens=int(df["output_tokens"].sum()) if n else 0,
        ttft_ms=df["ttft_ms"].to_numpy(), tpot_ms=df["tpot_ms"].to_numpy(), e2el_ms=df["e2el_ms"].to_numpy(),
        itl_sum_s=float((df["finish"] - df["first_token"])[mask].sum()), n_itl=int((out[mask] - 1).sum()),
        preemptions=int(df["preemptions"].sum()) if n else 0, preempted=int((df["preemptions"] > 0).sum()) if n else 0,
        truncated=int(df["truncated"].sum()) if n else 0,
        slo_class=df["slo_class"].to_numpy(object) if "slo_class" in df.columns else None)


def summarise(
    df: pd.DataFrame | Latencies, recorder: Recorder, num_requests: int, slo: SLO, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Summary dict: throughput, ttft/tpot/itl/e2el statistics in ms, SLO attainment and goodput."""
    lat = df if isinstance(df, Latencies) else latencies_of(df)
    n_done = lat.n_done
    s: dict[str, Any] = {"num_requests": num_requests, "completed": n_done, "dropped": len(recorder.dropped)}
    s["duration"] = duration = run_duration(lat, recorder)
    s["total_input_tokens"] = lat.input_tokens
    s["total_output_tokens"] = lat.output_tokens
    s["request_throughput"] = per_second(n_done, duration)
    s["output_throughput"] = per_second(s["total_output_tokens"], duration)
    s["total_token_throughput"] = per_second(s["total_input_tokens"] + s["total_output_tokens"], duration)
    s.update(_stats("ttft", lat.ttft_ms))
    tpot = lat.tpot_ms
    s.update(_stats("tpot", tpot[~np.isnan(tpot)]))
    # ITL: exact mean (telescoping sums), std and percentiles from the histogram; no completed request with a gap
    # means no sample, whatever gaps dropped requests left in the histogram
    nan = float("nan")
    s["mean_itl_ms"] = lat.itl_sum_s * 1e3 / lat.n_itl if lat.n_itl else nan
    s["median_itl_ms"] = recorder.itl_percentile(50) * 1e3 if lat.n_itl else nan
    s["std_itl_ms"] = recorder.itl_std() * 1e3 if lat.n_itl else nan
    for p in PERCENTILES:
        if p != 50:
            s[f"p{p}_itl_ms"] = recorder.itl_percentile(p) * 1e3 if lat.n_itl else nan
    dropped_gaps = recorder.itl_count - lat.n_itl  # (the engines take back the gaps of dropped requests they can)
    if dropped_gaps > 0:  # (vLLM's ITLs are of successful requests: say how many of these are not, in the numbers)
        s["itl_gaps_of_dropped"] = dropped_gaps
    s.update(_stats("e2el", lat.e2el_ms))
    s["preemptions"] = lat.preemptions + recorder.dropped_preemptions  # every preemption, as the instances count
    s["preempted_requests"] = lat.preempted + recorder.dropped_preempted
    s["truncated"] = lat.truncated
    # SLOs: dropped requests count as misses
    if slo.any():
        s.update(slo_summary(lat, recorder, num_requests, slo, duration))
    if extra:
        s.update(extra)
    return s


def slo_summary(lat: Latencies, recorder: Recorder, num_requests: int, slo: SLO,
                duration: float) -> dict[str, float]:
    """Attainment of each target and of all (``slo_attainment``, dropped requests count as misses), goodput,
    and with ``slo.classes`` the same per request class (``slo_attainment_<class>``, ``request_goodput_<class>``)."""
    out: dict[str, float] = {}
    n = lat.n_done
    classes = lat.slo_class if lat.slo_class is not None else np.full(n, None, dtype=object)
    ok = np.ones(n, dtype=bool)
    for k, key in enumerate(("ttft_ms", "tpot_ms", "e2el_ms")):
        target = np.array([slo.targets(c)[k] for c in classes] if slo.classes else [getattr(slo, key)] * n,
                          dtype=float)
        if np.isnan(target).all() and getattr(slo, key) is None:
            continue
        vals = getattr(lat, key)
        met = np.where(np.isnan(vals) | np.isnan(target), True, vals <= target)
        out[f"slo_{key.removesuffix('_ms')}_attainment"] = float(met.sum() / num_requests) if num_requests else 0.0
        ok &= met
    out["slo_attainment"] = float(ok.sum() / num_requests) if num_requests else 0.0
    out["request_goodput"] = per_second(float(ok.sum()), duration)
    for name in sorted(slo.classes or {}):
        mine = classes == name
        total = int(mine.sum()) + sum(1 for c in recorder.dropped_classes.values() if c == name)
        met = int((ok & mine).sum())
        out[f"slo_attainment_{name}"] = met / total if total else float("nan")
        out[f"request_goodput_{name}"] = per_second(met, duration)
    return out


def run_duration(df: pd.DataFrame | Latencies, recorder: Recorder) -> float:
    """First arrival to last outcome (a completion or a drop), in simulated seconds; 0 with no request at all.

    ``vllm bench serve``'s benchmark duration: it starts before the first request is sent and ends when every request
    has answered, failed ones included (``asyncio.gather`` over all of them), so a drop after the last completion
    (a request given up at the end of the run) lengthens it. The throughputs and goodput divide by it, and so does
    ``busy_fraction``, so that an engine busy from the first to the last request reads 1.
    """
    lat = df if isinstance(df, Latencies) else latencies_of(df)
    drops = recorder.dropped
    start = min(lat.start, min((d[1] for d in drops), default=math.inf))
    end = max(lat.end, max((d[5] for d in drops), default=-math.inf))
    return float(end - start) if end >= start else 0.0


def per_second(count: float, duration: float) -> float:
    """``count`` a second of the run: 0 when nothing was counted (a run with no completion, whatever its length),
    NaN only for a count over no time (which no run produces: a completion takes time)."""
    if duration > 0:
        return count / duration
    return 0.0 if count == 0 else float("nan")

