"""SimPy environment with absolute-time, phase-ordered callbacks, sharing SimPy's queue and clock.

Events at the same instant run in phase order, so that the fast path (which skips per-iteration
events) and iteration-by-iteration stepping see the world in exactly the same order:

* ``ARRIVAL`` (0) - requests arrive and are routed,
* ``ENGINE`` (1)  - iteration boundaries of the serving engines,
* ``ROUTE`` (2)   - deferred routing (central queue retries, decision ticks),
* ``OBSERVE`` (3) - metrics scrapes and timeline samples.

How this maps onto SimPy:

* the phase is the event's SimPy **priority** (as in ``Environment.schedule(event, priority, delay)``):
  SimPy orders its queue by (time, priority, insertion order), which is exactly (time, phase, FIFO);
* llmsim's own events (``call_at``) are plain heap entries ``(time, phase, id, fn, args, bookkeeping)``, not
  SimPy ``Event`` objects: building an event object, its callback list and SimPy's callback dispatch cost more than
  the work of a typical engine boundary, and the simulator schedules ~4 of them per request. :meth:`SimEnv.step`
  and :meth:`SimEnv.run_active` pop such an entry and call ``fn(*args)`` directly; an entry SimPy pushed itself
  (``run(until=...)``'s stop event, any SimPy event) is handed to SimPy's own ``step()``. The entries share one
  heap and one id counter with SimPy's, so ``peek()`` and ``run(until=...)`` work unchanged and the order is
  still (time, phase, FIFO);
* ``now`` is a plain attribute kept equal to SimPy's ``_now`` (read on every boundary; a property costs a call);
* times are **absolute**: ``call_at(when, ...)`` puts the event at exactly ``when``. Scheduling at
  ``now + delay`` would differ by rounding between a run planned in one piece and the same run stepped
  (the fast path schedules a boundary computed long before, from whatever ``now`` is current).

SimPy's public API cannot express the last point: ``Environment.schedule(event, priority, delay)`` adds
``delay`` to ``now``, and many absolute times are unreachable that way (from ``now = 0.551`` no float
delay lands on ``1.643000000000001``, a boundary the fast path really schedules; the neighbouring
floats are skipped by rounding). So the entries are pushed on SimPy's queue directly, with the same
``(time, priority, id)`` ordering key SimPy itself uses.

Termination is a property of the loop, not of each input: events scheduled with
:meth:`SimEnv.call_bookkeeping_at` (scrapes, stale-view refreshes) only record or publish state, and
:meth:`SimEnv.run_active` stops as soon as nothing but such events is left, so a periodic chain can
never keep a finished run alive. ``run_active`` also turns a loop that makes no progress (millions of
events at one simulated instant) into an :class:`LLMSimError` naming what looped, instead of a hang.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from heapq import heapify, heappop, heappush
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


FN = 3  # the position of the function in an llmsim heap entry (time, phase, id, fn, args, bookkeeping)


class SimEnv(simpy.Environment):
    """SimPy's environment with llmsim's absolute-time, phase-ordered calls (module docstring); also records the
    phase of the call being processed, so observers know what they may see."""

    now: float = 0.0  # (a plain attribute, shadowing SimPy's property; kept equal to ``_now``)

    def __init__(self, initial_time: float = 0.0) -> None:
        super().__init__(initial_time)
        self.now = initial_time
        self.phase = ARRIVAL
        self.active = 0  # pending events scheduled by call_at
        self.bookkeeping = 0  # pending events scheduled by call_bookkeeping_at

    @property
    def num_pending(self) -> int:
        """Events scheduled through this class and not processed yet (bookkeeping included)."""
        return self.active + self.bookkeeping

    def call_at(self, when: float, phase: int, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` at absolute time ``when`` in ``phase``."""
        heappush(self._queue, (when, phase, next(self._eid), fn, args, False))  # type: ignore[misc]  # (6 fields)
        self.active += 1

    def cancel_calls(self, fn: Callable[..., Any]) -> int:
        """Remove the pending calls of ``fn`` (a what-if that replaces what was scheduled); returns how many."""
        queue: list[Any] = self._queue
        keep = [e for e in queue if len(e) == 4 or e[FN] != fn or e[5]]
        n = len(queue) - len(keep)
        if n:
            queue[:] = keep
            heapify(queue)
            self.active -= n
        return n

    def call_bookkeeping_at(self, when: float, fn: Callable[[], Any]) -> None:
        """Like ``call_at(when, OBSERVE, fn)`` for an event that only records or publishes state.

        :meth:`run_active` does not wait for these: a run whose other events are all done is over.
        """
        heappush(self._queue, (when, OBSERVE, next(self._eid), fn, (), True))  # type: ignore[misc]
        self.bookkeeping += 1

    def step(self) -> None:
        """Process the next event: an llmsim call directly, anything else by SimPy's own ``step``."""
        queue: list[Any] = self._queue
        if not queue:
            raise EmptySchedule
        entry = heappop(queue)
        if len(entry) == 4:  # a SimPy event: SimPy processes it (it is the first entry again)
            heappush(queue, entry)
            try:
                super().step()
            finally:  # (run(until=...)'s stop event raises StopSimulation after the clock moved)
                self.now = self._now
            return
        when, phase, _, fn, args, bookkeeping = entry
        self._now = self.now = when
        self.phase = phase
        if bookkeeping:
            self.bookkeeping -= 1
        else:
            self.active -= 1
        fn(*args)

    def run_active(self, max_events_per_instant: int = MAX_EVENTS_PER_INSTANT) -> None:
        """Process events until only bookkeeping events are left (or none).

        Progress guard: time is checked every ``max_events_per_instant / 8`` events (never per event,
        so it costs nothing measurable); if it has not advanced over 8 consecutive checks, at least
        ``max_events_per_instant`` events ran at one instant and an :class:`LLMSimError` says what looped.
        """
        if max_events_per_instant < 8:
            raise LLMSimError(f"max_events_per_instant must be >= 8, got {max_events_per_instant}")
        chunk = -(-max_events_per_instant // 8)
        last = None
        same = 0
        while True:
            if self._run_chunk(chunk):
                return
            if self.now == last:
                same += 1
                if same >= 8:
                    raise LLMSimError(self._stall_message(8 * chunk))
            else:
                last, same = self.now, 0

    def _run_chunk(self, n: int) -> bool:
        """Process up to ``n`` events (``step`` inlined: this loop is the simulator's innermost); True when only
        bookkeeping is left."""
        queue: list[Any] = self._queue
        step = self.step
        for _ in range(n):
            if self.active <= 0:
                return True
            entry = queue[0]
            if len(entry) == 4:
                step()
                continue
            heappop(queue)
            when, phase, _, fn, args, bookkeeping = entry
            self._now = self.now = when
            self.phase = phase
            if bookkeeping:
                self.bookkeeping -= 1
            else:
                self.active -= 1
            fn(*args)
        return False

    def _stall_message(self, n: int) -> str:
        """Name the phases and callbacks of the next events (they are what loops)."""
        seen: Counter[tuple[str, str]] = Counter()
        now = self.now
        queue: list[Any] = self._queue
        for _ in range(1000):
            if self.num_pending == 0 or self.peek() != now:
                break
            entry = queue[0]
            self.step()
            if len(entry) == 6:
                phase = entry[1]
                seen[(PHASES[phase] if 0 <= phase < len(PHASES) else str(phase), _callback_name(entry[FN]))] += 1
        what = ", ".join(f"{cb} in phase {ph} (x{k})" for (ph, cb), k in seen.most_common(3)) or "nothing pending"
        return (f"simulation stalled: {n:,} events ran at t={now!r} s without time advancing (limit "
                f"max_events_per_instant); looping: {what}. This is a bug in a router, batch policy or engine "
                "that reschedules itself at the same instant")


def _callback_name(fn: Callable[..., Any]) -> str:
    """Qualified name of the function an event calls."""
    return getattr(fn, "__qualname__", None) or repr(fn)
