"""Lazy stream transforms: rate scaling, time windows and request limits.

Each wraps another workload and is itself a workload; its ``stats`` merge the inner counters
with its own, so a row dropped by a window is counted like a row dropped by a reader.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from llmsim.errors import ConfigError
from llmsim.request import Request
from llmsim.workload.base import Workload, WorkloadStats


class _Wrapper(Workload):
    """A workload over ``inner``; ``stats`` = inner's reading counters + this layer's."""

    def __init__(self, inner: Workload) -> None:
        super().__init__()
        self.inner = inner

    @property
    def stats(self) -> WorkloadStats:
        own, inner = self._stats, self.inner.stats
        skipped = dict(inner.skipped)
        for k, v in own.skipped.items():
            skipped[k] = skipped.get(k, 0) + v
        return WorkloadStats(
            rows_read=inner.rows_read,
            yielded=own.yielded,
            skipped=skipped,
            errors=list(inner.errors),
            stopped=own.stopped or inner.stopped,
        )


class RateScaled(_Wrapper):
    """Multiplies the arrival rate by ``factor`` (arrival times are divided by it)."""

    def __init__(self, inner: Workload, factor: float) -> None:
        super().__init__(inner)
        if not (np.isfinite(factor) and factor > 0):
            raise ConfigError(f"rate_scale: expected a positive number, got {factor!r}")
        self.factor = float(factor)

    def _iter(self, stats: WorkloadStats) -> Iterator[Request]:
        inv = 1.0 / self.factor
        for r in self.inner:
            r.arrival *= inv
            stats.yielded += 1
            yield r

    def describe(self) -> dict[str, Any]:
        return {"kind": "rate_scale", "factor": self.factor, "source": self.inner.describe()}


class Windowed(_Wrapper):
    """Keeps arrivals in ``[start, end)`` seconds, shifted so the window starts at 0; ids renumbered.

    Stops reading at the first arrival at or past ``end`` (streams are sorted), so a short window
    of a week-long trace reads only what it needs; ``stats.stopped`` is then ``"window_end"``.
    """

    def __init__(self, inner: Workload, start: float = 0.0, end: float | None = None) -> None:
        super().__init__(inner)
        if not (np.isfinite(start) and start >= 0):
            raise ConfigError(f"window: expected a start >= 0 seconds, got {start!r}")
        if end is not None and not end > start:
            raise ConfigError(f"window: expected end > start ({start}), got {end!r}")
        self.start = float(start)
        self.end = None if end is None else float(end)

    def _iter(self, stats: WorkloadStats) -> Iterator[Request]:
        start, end = self.start, self.end
        next_id = 0
        it = iter(self.inner)
        try:
            for r in it:
                if r.arrival < start:
                    stats.skip("outside_window")
                    continue
                if end is not None and r.arrival >= end:
                    stats.skip("outside_window")
                    stats.stopped = "window_end"
                    return
                r.arrival -= start
                r.id = next_id
                next_id += 1
                stats.yielded += 1
                yield r
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    def describe(self) -> dict[str, Any]:
        return {"kind": "window", "start": self.start, "end": self.end, "source": self.inner.describe()}


class Limited(_Wrapper):
    """The first ``max_requests`` requests; stops reading the source there."""

    def __init__(self, inner: Workload, max_requests: int) -> None:
        super().__init__(inner)
        if isinstance(max_requests, bool) or int(max_requests) != max_requests or max_requests < 0:
            raise ConfigError(f"max_requests: expected a non-negative integer, got {max_requests!r}")
        self.max_requests = int(max_requests)

    def _iter(self, stats: WorkloadStats) -> Iterator[Request]:
        if self.max_requests == 0:
            stats.stopped = "max_requests"
            return
        it = iter(self.inner)
        try:
            for r in it:
                stats.yielded += 1
                yield r
                if stats.yielded >= self.max_requests:
                    stats.stopped = "max_requests"
                    return
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    def describe(self) -> dict[str, Any]:
        return {"kind": "limit", "max_requests": self.max_requests, "source": self.inner.describe()}
