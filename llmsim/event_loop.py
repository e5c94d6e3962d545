"""SimPy environment with absolute-time, phase-ordered callbacks, driven through SimPy's public API.

Events at the same instant run in phase order, so that the fast path (which skips per-iteration
events) and iteration-by-iteration stepping see the world in exactly the same order:

* ``ARRIVAL`` (0) - requests arrive and are routed,
* ``ENGINE`` (1)  - iteration boundaries of the serving engines,
* ``ROUTE`` (2)   - deferred routing (central queue retries, decision ticks),
* ``OBSERVE`` (3) - metrics scrapes and timeline samples.

How this maps onto SimPy:

* the phase is the event's SimPy **priority** (as in ``Environment.schedule(event, priority, delay)``):
  SimPy orders its queue by (time, priority, insertion order), which is exactly (time, phase, FIFO);
* events are processed by SimPy's own ``step()`` / ``peek()``; each event knows its phase and records it
  (with itself) on the environment when it fires, so observers know what they may see;
* times are **absolute**: ``call_at(when, ...)`` puts the event at exactly ``when``. Scheduling at
  ``now + delay`` would differ by rounding between a run planned in one piece and the same run stepped
  (the fast path schedules a boundary computed long before, from whatever ``now`` is current).

SimPy's public API cannot express the last point: ``Environment.schedule(event, priority, delay)`` adds
``delay`` to ``now``, and many absolute times are unreachable that way (from ``now = 0.551`` no float
delay lands on ``1.643000000000001``, a boundary the fast path really schedules; the neighbouring
floats are skipped by rounding). So one thing is overridden, minimally: :meth:`SimEnv._schedule_at` is
``schedule`` with an absolute time (one ``heappush`` of the same ``(time, priority, id, event)`` entry
SimPy itself pushes). Everything else is SimPy's: ``step()``, ``peek()`` and ``run()`` process the queue,
and :class:`_Call` is born triggered (``_ok`` and ``_value`` as class attributes), exactly as SimPy's own
``Timeout`` is.

Termination is a property of the loop, not of each input: events scheduled with
:meth:`SimEnv.call_bookkeeping_at` (scrapes, stale-view refreshes) only record or publish state, and
:meth:`SimEnv.run_active` stops as soon as nothing but such events is left, so a periodic chain can
never keep a finished run alive. ``run_active`` also turns a loop that makes no progress (millions of
events at one simulated instant) into an :class:`LLMSimError` naming what looped, instead of a hang.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from heapq import heappush
from typing import Any

import simpy

from llmsim.errors import LLMSimError

ARRIVAL = 0
ENGINE = 1
ROUTE = 2
OBSERVE = 3
PHASES = ("ARRIVAL", "ENGINE", "ROUTE", "OBSERVE")

MAX_EVENTS_PER_INSTANT = 10_000_000  # far above any real burst (a million arrivals at t=0 is ~4M events)


def _fire(ev: _Call) -> None:
    """The callback of every :class:`_Call`: publish its phase, keep the pending counts, run its function."""
    env = ev.env
    env.phase = ev.phase
    env.current = ev
    if ev.bookkeeping:
        env.bookkeeping -= 1
    else:
        env.active -= 1
    ev.fn(*ev.args)


class _Call(simpy.Event):
    """An event that runs ``fn(*args)`` in ``phase``; born triggered with value None, like SimPy's Timeout."""

    _ok = True
    _value = None

    def __init__(self, env: SimEnv, phase: int, fn: Callable[..., Any], args: tuple, bookkeeping: bool) -> None:
        self.env = env
        self.callbacks = [_fire]
        self.phase = phase
        self.fn = fn
        self.args = args
        self.bookkeeping = bookkeeping


class SimEnv(simpy.Environment):
    """Also records the phase of the event being processed, so observers know what they may see."""

    def __init__(self, initial_time: float = 0.0) -> None:
        super().__init__(initial_time)
        self.phase = ARRIVAL
        self.current: _Call | None = None  # the event being processed (or last processed)
        self.active = 0  # pending events scheduled by call_at
        self.bookkeeping = 0  # pending events scheduled by call_bookkeeping_at

    @property
    def num_pending(self) -> int:
        """Events scheduled through this class and not processed yet (bookkeeping included)."""
        return self.active + self.bookkeeping

    def call_at(self, when: float, phase: int, fn: Callable[..., Any], *args: Any) -> simpy.Event:
        """Run ``fn(*args)`` at absolute time ``when`` in ``phase``; returns the underlying event."""
        ev = _Call(self, phase, fn, args, False)
        heappush(self._queue, (when, phase, next(self._eid), ev))  # = self._schedule_at(ev, when, phase), inlined
        self.active += 1
        return ev

    def call_bookkeeping_at(self, when: float, fn: Callable[[], Any]) -> simpy.Event:
        """Like ``call_at(when, OBSERVE, fn)`` for an event that only records or publishes state.

        :meth:`run_active` does not wait for these: a run whose other events are all done is over.
        """
        ev = _Call(self, OBSERVE, fn, (), True)
        self._schedule_at(ev, when, OBSERVE)
        self.bookkeeping += 1
        return ev

    def _schedule_at(self, event: simpy.Event, when: float, priority: int) -> None:
        """``Environment.schedule(event, priority, delay)`` at the absolute time ``when`` (module docstring:
        the one place that touches SimPy's queue; the same entry ``schedule`` pushes, with time ``when``
        instead of ``now + delay``)."""
        heappush(self._queue, (when, priority, next(self._eid), event))

    def run_active(self, max_events_per_instant: int = MAX_EVENTS_PER_INSTANT) -> None:
        """Process events until only bookkeeping events are left (or none).

        Progress guard: time is checked every ``max_events_per_instant / 8`` events (never per event,
        so it costs nothing measurable); if it has not advanced over 8 consecutive checks, at least
        ``max_events_per_instant`` events ran at one instant and an :class:`LLMSimError` says what looped.
        """
        if max_events_per_instant < 8:
            raise LLMSimError(f"max_events_per_instant must be >= 8, got {max_events_per_instant}")
        step = self.step
        chunk = -(-max_events_per_instant // 8)
        last = None
        same = 0
        while True:
            for _ in range(chunk):
                if self.active <= 0:
                    return
                step()
            if self.now == last:
                same += 1
                if same >= 8:
                    raise LLMSimError(self._stall_message(8 * chunk))
            else:
                last, same = self.now, 0

    def _stall_message(self, n: int) -> str:
        """Name the phases and callbacks of the next events (they are what loops)."""
        seen: Counter[tuple[str, str]] = Counter()
        now = self.now
        for _ in range(1000):
            if self.num_pending == 0 or self.peek() != now:
                break
            self.step()
            ev = self.current
            if ev is not None:
                phase = ev.phase
                seen[(PHASES[phase] if 0 <= phase < len(PHASES) else str(phase), _callback_name(ev.fn))] += 1
        what = ", ".join(f"{cb} in phase {ph} (x{k})" for (ph, cb), k in seen.most_common(3)) or "nothing pending"
        return (f"simulation stalled: {n:,} events ran at t={now!r} s without time advancing (limit "
                f"max_events_per_instant); looping: {what}. This is a bug in a router, batch policy or engine "
                "that reschedules itself at the same instant")


def _callback_name(fn: Callable[..., Any]) -> str:
    """Qualified name of the function an event calls."""
    return getattr(fn, "__qualname__", None) or repr(fn)
