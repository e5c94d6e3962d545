"""Lazy stream transforms: rate scaling, time windows, prompt caps and request limits.

Each wraps another workload and is itself a workload; its ``stats`` merge the inner counters
with its own, so a row dropped by a window is counted like a row dropped by a reader.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from llmsim.errors import ConfigError
from llmsim.request import MAX_SIM_TIME, Request
from llmsim.workload.base import Workload, WorkloadStats, check_float, check_int


def _check_inner(inner: Any) -> Workload:
    if not isinstance(inner, Workload):
        raise ConfigError(f"workload: expected an llmsim Workload to transform, got {type(inner).__name__}")
    return inner


class _Wrapper(Workload):
    """A workload over ``inner``; ``stats`` = inner's reading counters + this layer's."""

    def __init__(self, inner: Workload) -> None:
        super().__init__()
        self.inner = _check_inner(inner)

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
            sessions_forgotten=inner.sessions_forgotten,
        )


class RateScaled(_Wrapper):
    """Multiplies the arrival rate by ``factor`` (arrival times are divided by it)."""

    def __init__(self, inner: Workload, factor: float) -> None:
        super().__init__(inner)
        self.factor = check_float("rate_scale", factor, gt=0.0)
        if not math.isfinite(1.0 / self.factor):
            raise ConfigError(f"rate_scale: expected a factor whose inverse is finite (>= 1e-300), got {factor!r}")

    def _iter(self, stats: WorkloadStats) -> Iterator[Request]:
        inv = 1.0 / self.factor
        for r in self.inner:
            source = r.arrival
            r.arrival *= inv
            if r.arrival == math.inf:
                raise ConfigError(f"rate_scale: {self.factor!r} puts request {r.id}'s arrival at inf; expected a "
                                  f"factor that keeps arrival times finite")
            if r.arrival > MAX_SIM_TIME >= source:  # the factor's doing: name it, not the request
                raise ConfigError(f"rate_scale: {self.factor!r} puts request {r.id}'s arrival at {r.arrival:g} s, "
                                  f"past the simulated horizon of {MAX_SIM_TIME:g} s; expected a larger factor "
                                  f"(at least {source / MAX_SIM_TIME:.3g} for this request)")
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
        self.start = check_float("window.start", start, ge=0.0)
        self.end = None if end is None else check_float("window.end", end, gt=self.start)

    def _iter(self, stats: WorkloadStats) -> Iterator[Request]:
        seen = {"n": 0, "last": None}
        yield from self._cut(stats, seen)
        if stats.yielded == 0:  # only after a complete pass: an empty window is never a silent empty run
            end = "end" if self.end is None else f"{self.end:g}"
            last = "" if seen["last"] is None else f", the last at {seen['last']:g} s"
            raise ConfigError(f"window: expected at least one request in [{self.start:g}, {end}) s of the source, "
                              f"got none ({seen['n']} requests read{last})")

    def _cut(self, stats: WorkloadStats, seen: dict[str, Any]) -> Iterator[Request]:
        start, end = self.start, self.end
        next_id = 0
        it = iter(self.inner)
        try:
            for r in it:
                seen["n"] += 1
                seen["last"] = r.arrival
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


PROMPT_OVER_MAX = "prompt_over_max_prompt"


class PromptCapped(_Wrapper):
    """Skips requests whose prompt is longer than ``max_prompt`` tokens (counted as ``prompt_over_max_prompt``);
    ids renumbered. A trace preset carries the default model's context this way (Llama-2-7B serves prompts of at
    most 4,095 tokens), so a replay runs on the default cluster and says how many rows it left out."""

    def __init__(self, inner: Workload, max_prompt: int) -> None:
        super().__init__(inner)
        self.max_prompt = check_int("max_prompt", max_prompt, ge=1)

    def _iter(self, stats: WorkloadStats) -> Iterator[Request]:
        yield from self._cut(stats)
        if stats.yielded == 0:  # only after a complete pass: a cap that leaves nothing is never a silent empty run
            raise ConfigError(f"max_prompt: every request of the source has a prompt longer than {self.max_prompt} "
                              f"tokens ({stats.skipped.get(PROMPT_OVER_MAX, 0)} skipped); raise max_prompt (and use "
                              f"a model with a longer context) or set it to null")

    def _cut(self, stats: WorkloadStats) -> Iterator[Request]:
        cap = self.max_prompt
        next_id = 0
        it = iter(self.inner)
        try:
            for r in it:
                if r.prompt_tokens > cap:
                    stats.skip(PROMPT_OVER_MAX)
                    continue
                r.id = next_id
                next_id += 1
                stats.yielded += 1
                yield r
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    def describe(self) -> dict[str, Any]:
        return {"kind": "prompt_cap", "max_prompt": self.max_prompt, "source": self.inner.describe()}


class Limited(_Wrapper):
    """The first ``max_requests`` requests; stops reading the source there."""

    def __init__(self, inner: Workload, max_requests: int) -> None:
        super().__init__(inner)
        self.max_requests = check_int("max_requests", max_requests, ge=1)

    def _iter(self, stats: WorkloadStats) -> Iterator[Request]:
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
