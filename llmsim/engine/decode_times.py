"""The times an engine's iterations sampled decode tokens, so that a dropped request's inter-token gaps can leave
the ITL histogram.

``vllm bench serve`` computes its ITL statistics over the gaps of completed requests only. The engine records each
gap as its token comes out (decode runs and cohorts without touching a request per iteration), before anyone knows
whether the request will complete. So each engine keeps :class:`DecodeTimes`: the end of every iteration in which
some request decoded, sampling a token after its first (a stepped iteration's ``now``, a decode run's boundaries),
in order.
When one of its requests is dropped after its second token, its gaps are recovered from it and taken back from the
histogram (:meth:`llmsim.metrics.recorder.Recorder.forget_itl`): no bookkeeping per request or per token.

Every token after the first of a request never preempted nor moved (its prompt re-prefilled) is a decode on its
engine, between its first and its last token time. So when the times logged in (first token, last token] are exactly
as many as its tokens after the first, they are its token times, and their differences are its gaps, bit for bit as
they were recorded. Otherwise (it was preempted before, or skipped while others decoded, it moved between engines, or
the log no longer reaches back to its first token) its gaps stay in the histogram, and the summary's
``itl_gaps_of_dropped`` counts them.

The log forgets what no request on the engine can need: past a size, the times up to the earliest first token of
the requests it holds (running, waiting or swapped).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmsim.request import Request

MIN_KEPT = 1 << 16  # times kept before the log looks for ones it can forget (~32 bytes each)
PREEMPTION_DROP = "exceeds_kv_capacity"  # the drop of a request preempted once too often (llmsim.engine.preemption)


class DecodeTimes:
    """One engine's decode iteration end times (module docstring): the iterations in which some request decoded
    (computed one token and sampled its next), a stepped one or a decode run's."""

    __slots__ = ("engine", "times", "since", "limit", "taken_back")

    def __init__(self, engine: Any) -> None:
        self.engine = engine  # llmsim.engine.instance.Instance (untyped: that module imports this one)
        self.times: list[float] = []  # (a list: an array("d") costs a conversion per time, ~2 % of a run)
        self.since = float("-inf")  # the log holds every time after this one
        self.limit = MIN_KEPT
        self.taken_back = 0  # gaps of dropped requests taken back from the ITL histogram
        subscribe = getattr(engine.recorder, "subscribe", None)
        if subscribe is not None:
            subscribe(on_drop=self.on_drop)

    def add(self, t: float) -> None:
        """A stepped iteration that ended at ``t`` decoded some request (a decode run adds its boundaries to
        ``times`` itself, then calls :meth:`forget` past ``limit``: ``DecodeRun._account``)."""
        times = self.times
        times.append(t)
        if len(times) > self.limit:
            self.forget()

    def forget(self) -> None:
        """Drop the times no request held by the engine can need (up to the earliest first token among them)."""
        e = self.engine
        cut = self.times[-1]
        for queue in (e.running, e.waiting, e.swapped):
            for r in queue:
                t = r.first_token
                if 0 <= t < cut:
                    cut = t
        k = bisect_right(self.times, cut)
        del self.times[:k]
        self.since = max(self.since, cut)
        self.limit = max(MIN_KEPT, 2 * len(self.times))

    def gaps_of(self, r: Request) -> list[float] | None:
        """``r``'s inter-token gaps if the log proves them (module docstring), else None. ``r``'s counts must be
        settled (not lagging in a decode cohort)."""
        first, last, n = r.first_token, r.last_token_time, r.generated - 1
        # every token after its first a decode here: not moved, never preempted (but by the drop itself)
        if n < 1 or first < self.since or r.evictions or r.preemptions > (r.dropped == PREEMPTION_DROP):
            return None
        times = self.times
        lo = bisect_right(times, first)
        hi = bisect_right(times, last)
        if hi - lo != n or times[hi - 1] != last:
            return None
        prev = first
        gaps = []
        for t in times[lo:hi]:
            gaps.append(t - prev)
            prev = t
        return gaps

    def on_drop(self, r: Request, reason: str, now: float) -> None:
        """A request of this engine dropped after its second token: its gaps leave the ITL histogram if proved."""
        e = self.engine
        if r.instance != e.idx or r.generated < 2 and r.lazy_mark is None:
            return
        if r.lazy_mark is not None:
            e.settle_running()  # (a decode cohort member: its counts as of the iterations applied)
        gaps = self.gaps_of(r)
        if gaps:
            e.recorder.forget_itl(gaps)
            self.taken_back += len(gaps)
