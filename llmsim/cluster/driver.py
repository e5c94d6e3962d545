"""The driver API: how an outside stepper (a Gymnasium env) advances a cluster and decides for it.

A cluster run by :meth:`Cluster.run` drives itself. An env instead starts it (:meth:`ClusterDriver.start`), steps its
events one at a time up to each decision point, and decides what its router handed over: a new request its router
answered ``DEFER`` for, a request the router keeps ``WAIT``-ing in the central queue, or (in a disaggregated
cluster) the decode instance of a prefilled request. Everything the driver changes goes through these calls, so the
cluster's own bookkeeping (its clock's wake-ups, its drop records) stays in one place:

* time: ``now`` / ``phase``, :meth:`next_event_time`, :meth:`step`, :meth:`advance_to`, ``only_bookkeeping_left``,
  :meth:`call_at` (the driver's own events, e.g. decision ticks, in the ROUTE phase);
* what-ifs on a copy: :meth:`replace_upcoming` (the requests still to arrive);
* decisions: ``held`` / ``deferred`` (read them; do not change them), :meth:`take_held`, :meth:`take_deferred`,
  :meth:`hold`, :meth:`decide`, :meth:`give_up`; the decode stage: :meth:`pending_decode`, :meth:`decide_decode`;
* outcomes: ``drops`` (every drop so far, in order), :meth:`cut_off` (the driver's time limit), :meth:`finish`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from llmsim.event_loop import ROUTE
from llmsim.routing.base import default_decode_choice

if TYPE_CHECKING:
    from llmsim.cluster.cluster import Cluster
    from llmsim.request import Request


class ClusterDriver:
    """Advances ``cluster`` from outside and carries out an outside decider's choices (module docstring)."""

    __slots__ = ("cluster", "env")

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.env = cluster.env

    def start(self, workload: Iterable[Request]) -> None:
        """Feed ``workload``; nothing runs until the driver steps."""
        self.cluster.start(workload)

    # ------------------------------------------------------------------ time
    @property
    def now(self) -> float:
        return self.env.now

    @property
    def phase(self) -> int:
        return self.env.phase

    def next_event_time(self) -> float:
        """When the next pending event fires (inf with none)."""
        return self.env.peek()

    def step(self) -> None:
        """Run the next event."""
        self.env.step()

    def replace_upcoming(self, workload: Iterable[Request]) -> None:
        """The requests still to arrive come from ``workload`` instead (a planner's what-if on a copy: a sampled
        future; each arrives at or after now)."""
        self.cluster.feed(workload)

    @property
    def only_bookkeeping_left(self) -> bool:
        """Only scrapes and view refreshes are pending: nothing can change any more."""
        return not self.env.active

    @property
    def pending_events(self) -> int:
        return self.env.num_pending

    def advance_to(self, t: float) -> None:
        """Move the clock to ``t``; the caller knows that no event is pending before it."""
        self.env.run(until=t)

    def call_at(self, t: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` at ``t`` in the ROUTE phase (after arrivals and engine boundaries of that instant)."""
        self.env.call_at(t, ROUTE, fn)

    # ------------------------------------------------------------------ decisions
    @property
    def held(self) -> Sequence[Request]:
        """The central queue: requests the router keeps waiting, in arrival order (read it, change it through the
        driver)."""
        return self.cluster.central

    @property
    def deferred(self) -> Sequence[Request]:
        """New requests whose routing the router handed to the driver (``DEFER``), in arrival order."""
        return self.cluster.deferred

    def take_held(self) -> Request:
        """The head of the central queue, taken off it (the driver decides for it)."""
        return self.cluster.central.popleft()

    def take_deferred(self) -> Request:
        return self.cluster.deferred.popleft()

    def hold(self, r: Request) -> None:
        """Put ``r`` back at the end of the central queue (a retried request the driver keeps waiting)."""
        self.cluster.central.append(r)

    def decide(self, r: Request, d: int, phase: int | None = None) -> bool:
        """Carry out routing decision ``d`` (instance, WAIT or DROP) for ``r``; False when ``r`` stays waiting."""
        return self.cluster.apply_decision(r, d, self.env.phase if phase is None else phase)

    def give_up(self, r: Request, reason: str) -> None:
        """Drop ``r`` now, counted with ``reason``."""
        self.cluster.recorder.drop(r, reason, self.env.now)

    def pending_decode(self) -> Request | None:
        """The prefilled request of a disaggregated cluster whose decode instance the driver chooses, if any (the
        view then routes the decode stage)."""
        tr = self.cluster.transfers
        if tr is None or not tr.deferred:
            return None
        self.cluster.view.stage = "decode"
        return tr.deferred[0].r

    def decide_decode(self, d: int) -> bool:
        """Send the pending prefilled request's KV to decode instance ``d``; a ``d`` that is not a decode candidate is
        replaced by the default choice (False then)."""
        tr = self.cluster.transfers
        assert tr is not None
        t = tr.deferred.popleft()
        view = self.cluster.view
        ok = d in view.candidates(t.r)
        if not ok:
            d = default_decode_choice(t.r, view)
        view.stage = "prefill"
        tr.dispatch(t, d)
        return ok

    # ------------------------------------------------------------------ outcomes
    @property
    def drops(self) -> Sequence[tuple[Any, ...]]:
        """Every drop so far, in order: (request id, arrival, prompt, output, reason, time, instance)."""
        return self.cluster.recorder.dropped

    def cut_off(self, requests: Iterable[Request], reason: str) -> None:
        """The driver's time limit: requests still waiting leave the queues, and every one of ``requests`` that has
        neither finished nor been dropped is dropped now with ``reason``."""
        c = self.cluster
        now = self.env.now
        c.central.clear()
        c.deferred.clear()
        for r in requests:
            if r.finish < 0 and not r.dropped:
                c.recorder.drop(r, reason, now)

    def finish(self) -> None:
        """Count whatever is still undecided as ``never_routed`` (nothing is silently lost)."""
        self.cluster.finish()
