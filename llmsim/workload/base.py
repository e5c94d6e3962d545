"""The workload protocol: a lazy, re-iterable stream of requests plus counters of what it read.

A workload never materialises its requests: ``iter(workload)`` starts a fresh generator that
reads the trace (or draws the synthetic stream) in chunks, so a million requests never exist at
once. Every row that is read but not yielded is counted by reason in :class:`WorkloadStats`, so
nothing is silently dropped.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any

from llmsim.errors import ConfigError
from llmsim.request import Request
from llmsim.schema import MAX_TOKENS  # no prompt or output is longer: a 1e30 in a trace is an error, not a request

MAX_ERROR_MESSAGES = 20
ON_ERROR_CHOICES = ("raise", "skip")
__all__ = ["MAX_TOKENS", "Workload", "WorkloadStats", "check_float", "check_int", "check_on_error"]


@dataclass
class WorkloadStats:
    """Counters filled while a workload is iterated (reset at the start of every iteration).

    After a complete iteration ``rows_read == yielded + sum(skipped.values())``; when the consumer
    stops early, rows already parsed in the current chunk are read but neither yielded nor skipped.
    """

    rows_read: int = 0
    yielded: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    stopped: str | None = None
    sessions_forgotten: int = 0  # conversations a cap of open sessions forgot: their later turns start afresh

    def skip(self, reason: str, n: int = 1) -> None:
        """Count ``n`` rows dropped for ``reason``."""
        if n:
            self.skipped[reason] = self.skipped.get(reason, 0) + n

    def note_error(self, message: str) -> None:
        """Keep the first few messages of rows skipped as malformed (``on_error="skip"``)."""
        if len(self.errors) < MAX_ERROR_MESSAGES:
            self.errors.append(message)

    @property
    def total_skipped(self) -> int:
        """Rows read but dropped, over all reasons."""
        return sum(self.skipped.values())

    def describe_skips(self) -> str:
        """``"3 zero_output_tokens, 1 malformed"``, or ``"none"``: for the one-line empty-stream errors."""
        if not self.skipped:
            return "none"
        return ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items()))

    def as_dict(self) -> dict[str, Any]:
        """Plain-dict copy, e.g. for a run's report."""
        return {
            "rows_read": self.rows_read,
            "yielded": self.yielded,
            "skipped": dict(self.skipped),
            "errors": list(self.errors),
            "stopped": self.stopped,
            "sessions_forgotten": self.sessions_forgotten,
        }


class Workload(ABC):
    """A re-iterable stream of :class:`Request` in non-decreasing arrival order, ids 0, 1, 2, ...

    Subclasses implement :meth:`_iter`; :meth:`__iter__` resets :attr:`stats` first so the counters
    always describe the latest iteration.
    """

    def __init__(self) -> None:
        self._stats = WorkloadStats()

    @property
    def stats(self) -> WorkloadStats:
        """Counters of the latest (or ongoing) iteration."""
        return self._stats

    def __iter__(self) -> Iterator[Request]:
        self._stats = WorkloadStats()
        return self._iter(self._stats)

    @abstractmethod
    def _iter(self, stats: WorkloadStats) -> Iterator[Request]:
        """Yield the requests, updating ``stats``."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Parameters that define this stream (for logs and reports)."""


def check_on_error(on_error: str) -> str:
    """Validate the ``on_error`` option early, at construction rather than mid-stream."""
    if on_error not in ON_ERROR_CHOICES:
        raise ConfigError(f"on_error: expected one of {list(ON_ERROR_CHOICES)}, got {on_error!r}")
    return on_error


def _range_text(gt: float | None, ge: float | None, lt: float | None, le: float | None) -> str:
    def num(x: float) -> str:
        return str(x) if isinstance(x, int) else f"{x:g}"

    parts = [f"{op} {num(x)}" for op, x in (("> ", gt), (">= ", ge), ("< ", lt), ("<= ", le)) if x is not None]
    return " and ".join(p.replace("  ", " ") for p in parts)


def check_float(
    name: str, value: Any, *, gt: float | None = None, ge: float | None = None, lt: float | None = None,
    le: float | None = None,
) -> float:
    """``value`` as a finite float within the bounds, else one ConfigError line naming ``name``.

    Booleans and strings are refused (``True`` is not a rate), and so are NaN and +-inf: every number a
    workload is built from ends up in an arrival time or a token count, where they would hang or overflow.
    """
    bounds = _range_text(gt, ge, lt, le)
    expected = f"a finite number {bounds}".rstrip()
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ConfigError(f"{name}: expected {expected}, got {value!r}")
    try:
        v = float(value)
    except OverflowError:
        raise ConfigError(f"{name}: expected {expected}, got {value!r}") from None
    if not math.isfinite(v) or (gt is not None and not v > gt) or (ge is not None and not v >= ge) \
            or (lt is not None and not v < lt) or (le is not None and not v <= le):
        raise ConfigError(f"{name}: expected {expected}, got {value!r}")
    return v


def check_int(name: str, value: Any, *, ge: int | None = 1, le: int | None = None) -> int:
    """``value`` as an int within the bounds (``2.0`` is 2, ``1.5`` and ``True`` are errors naming ``name``)."""
    bounds = _range_text(None, ge, None, le)
    expected = f"an integer {bounds}".rstrip()
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ConfigError(f"{name}: expected {expected}, got {value!r}")
    if not isinstance(value, Integral):
        f = float(value)
        if not (math.isfinite(f) and f == math.floor(f)):
            raise ConfigError(f"{name}: expected {expected}, got {value!r}")
    v = int(value)
    if (ge is not None and v < ge) or (le is not None and v > le):
        raise ConfigError(f"{name}: expected {expected}, got {value!r}")
    return v
