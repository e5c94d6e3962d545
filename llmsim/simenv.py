"""SimPy environment with absolute-time, phase-ordered callbacks.

Events at the same instant run in phase order, so that the fast path (which skips per-iteration
events) and iteration-by-iteration stepping see the world in exactly the same order:

* ``ARRIVAL`` (0) - requests arrive and are routed,
* ``ENGINE`` (1)  - iteration boundaries of the serving engines,
* ``ROUTE`` (2)   - deferred routing (central queue retries, decision ticks),
* ``OBSERVE`` (3) - metrics scrapes and timeline samples.

Scheduling at an absolute time (rather than ``now + delay``) keeps boundary times bit-identical
however many events a run is split into.

Termination is a property of the loop, not of each input: events scheduled with
:meth:`SimEnv.call_bookkeeping_at` (scrapes, stale-view refreshes) only record or publish state, and
:meth:`SimEnv.run_active` stops as soon as nothing but such events is left, so a periodic chain can
never keep a finished run alive. ``run_active`` also turns a loop that makes no progress (millions of
events at one simulated instant) into an :class:`LLMSimError` naming what looped, instead of a hang.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

import simpy
from simpy.core import EmptySchedule

from llmsim.errors import LLMSimError

ARRIVAL = 0
ENGINE = 1
ROUTE = 2
OBSERVE = 3
PHASES = ("ARRIVAL", "ENGINE", "ROUTE", "OBSERVE")

MAX_EVENTS_PER_INSTANT = 10_000_000  # far above any real burst (a million arrivals at t=0 is ~4M events)


class SimEnv(simpy.Environment):
    """Also records the phase of the event being processed, so observers know what they may see."""

    def __init__(self, initial_time: float = 0.0) -> None:
        super().__init__(initial_time)
        self.phase = ARRIVAL
        self.bookkeeping = 0  # pending events scheduled by call_bookkeeping_at

    def step(self) -> None:
        try:
            self._now, self.phase, _, event = heappop(self._queue)
        except IndexError:
            raise EmptySchedule from None
        callbacks, event.callbacks = event.callbacks, None
        for callback in callbacks:
            callback(event)
        if not event._ok and not hasattr(event, "_defused"):
            exc = type(event._value)(*event._value.args)
            exc.__cause__ = event._value
            raise exc

    def call_at(self, when: float, phase: int, fn: Callable[..., Any], *args: Any) -> simpy.Event:
        """Run ``fn(*args)`` at absolute time ``when`` in ``phase``; returns the underlying event."""
        ev = simpy.Event(self)
        ev._ok = True
        ev._value = None
        ev.callbacks.append(lambda _ev: fn(*args))
        heappush(self._queue, (when, phase, next(self._eid), ev))
        return ev

    def call_bookkeeping_at(self, when: float, fn: Callable[[], Any]) -> simpy.Event:
        """Like ``call_at(when, OBSERVE, fn)`` for an event that only records or publishes state.

        :meth:`run_active` does not wait for these: a run whose other events are all done is over.
        """

        def run(_ev: simpy.Event) -> None:
            self.bookkeeping -= 1
            fn()

        ev = simpy.Event(self)
        ev._ok = True
        ev._value = None
        ev.callbacks.append(run)
        self.bookkeeping += 1
        heappush(self._queue, (when, OBSERVE, next(self._eid), ev))
        return ev

    def run_active(self, max_events_per_instant: int = MAX_EVENTS_PER_INSTANT) -> None:
        """Process events until only bookkeeping events are left (or none).

        Progress guard: time is checked every ``max_events_per_instant / 8`` events (never per event,
        so it costs nothing measurable); if it has not advanced over 8 consecutive checks, at least
        ``max_events_per_instant`` events ran at one instant and an :class:`LLMSimError` says what looped.
        """
        if max_events_per_instant < 8:
            raise LLMSimError(f"max_events_per_instant must be >= 8, got {max_events_per_instant}")
        queue = self._queue
        step = self.step
        chunk = -(-max_events_per_instant // 8)
        last = None
        same = 0
        while True:
            for _ in range(chunk):
                if len(queue) <= self.bookkeeping:
                    return
                step()
            if self._now == last:
                same += 1
                if same >= 8:
                    raise LLMSimError(self._stall_message(8 * chunk))
            else:
                last, same = self._now, 0

    def _stall_message(self, n: int) -> str:
        """Name the phases and callbacks of the next events (they are what loops)."""
        seen: Counter[tuple[str, str]] = Counter()
        for _ in range(1000):
            if not self._queue or self._queue[0][0] != self._now:
                break
            _, phase, _, ev = self._queue[0]
            seen[(PHASES[phase] if 0 <= phase < len(PHASES) else str(phase), _callback_name(ev))] += 1
            self.step()
        what = ", ".join(f"{cb} in phase {ph} (x{k})" for (ph, cb), k in seen.most_common(3)) or "nothing pending"
        return (f"simulation stalled: {n:,} events ran at t={self._now!r} s without time advancing (limit "
                f"max_events_per_instant); looping: {what}. This is a bug in a router, batch policy or engine "
                "that reschedules itself at the same instant")


def _callback_name(ev: simpy.Event) -> str:
    """Qualified name of the function an event will call (looks inside call_at's closure)."""
    for cb in ev.callbacks or ():
        for cell in getattr(cb, "__closure__", None) or ():
            obj = cell.cell_contents
            if callable(obj) and not isinstance(obj, SimEnv):
                return getattr(obj, "__qualname__", repr(obj))
        return getattr(cb, "__qualname__", repr(cb))
    return "?"
