"""SimPy environment with absolute-time, phase-ordered callbacks.

Events at the same instant run in phase order, so that the fast path (which skips per-iteration
events) and iteration-by-iteration stepping see the world in exactly the same order:

* ``ARRIVAL`` (0) - requests arrive and are routed,
* ``ENGINE`` (1)  - iteration boundaries of the serving engines,
* ``ROUTE`` (2)   - deferred routing (central queue retries, decision ticks),
* ``OBSERVE`` (3) - metrics scrapes and timeline samples.

Scheduling at an absolute time (rather than ``now + delay``) keeps boundary times bit-identical
however many events a run is split into.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

import simpy
from simpy.core import EmptySchedule

ARRIVAL = 0
ENGINE = 1
ROUTE = 2
OBSERVE = 3


class SimEnv(simpy.Environment):
    """Also records the phase of the event being processed, so observers know what they may see."""

    def __init__(self, initial_time: float = 0.0) -> None:
        super().__init__(initial_time)
        self.phase = ARRIVAL

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
