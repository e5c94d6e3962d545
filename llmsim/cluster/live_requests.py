"""The per-request part of the simulator's ClusterState, read from the engines lazily (see ``ClusterView``).

A :class:`LiveRequests` describes one instance at one instant ``(t, phase)`` without copying anything when
it is built. Its sums and rows are what a full copy of the engine's queues, synced to that instant, would
give, bit for bit, at a fraction of the cost:

* **lazy sync**: mid decode run, the engine's running rows may be behind the instant (a run is materialised
  only at its end or when something syncs it). The state then reads them with ``shift`` = the run's
  iterations seen by ``(t, phase)`` but not materialised added to ``generated`` and ``computed``: exactly the
  values a sync would write (``DecodeRun.materialise``), so the engine is never synced by an observer here;
* **queued parts**: sums run over the running requests only; what the waiting and swapped requests (most of a
  loaded instance's requests, unchanged while queued) contribute comes from the engine's totals
  (:mod:`llmsim.engine.queues`, integer sums) or from terms kept per instance until those queues change, added after
  the running part in the same order as a full pass, so float sums are the same sums.

It stays valid while the engine has not changed since the state was built (:func:`engine_key` at the state's
instant); reading it afterwards raises :class:`~llmsim.state.cluster_state.StaleStateError`.
"""

from __future__ import annotations

from typing import Any

from llmsim.state.cluster_state import InstanceRequests, RequestState, StaleStateError
from llmsim.state.request_sums import (
    decode_terms,
    phase_summary_of,
    progress_terms,
    sum_context,
    sum_pending_decode,
    sum_pending_prefill,
    sum_progress,
)

new_tuple = tuple.__new__  # builds a NamedTuple without its Python-level __new__ (a fifth of the cost)
QUEUES = ("running", "waiting", "swapped")


def records(queue: Any, shift: int = 0) -> tuple[RequestState, ...]:
    """RequestStates of an engine queue (the engine's requests have RequestState's attribute names), each with
    ``shift`` more tokens generated and computed (running requests behind the instant described)."""
    return tuple([new_tuple(RequestState, (r.id, r.prompt_tokens, r.generated + shift, r.computed + shift,
                                           r.predicted_output, r.task, r.arrival)) for r in queue])


def engine_key(inst: Any, now: float, phase: int) -> tuple[int, int, int, int, int]:
    """Changes whenever anything a RequestState or an InstanceState holds can have changed on ``inst`` as seen
    at ``(now, phase)``: an iteration (materialised, or seen mid decode run), a queue's length or membership."""
    return (inst.seen_iterations(now, phase), len(inst.running), len(inst.waiting), len(inst.swapped),
            inst.queued.version)


def new_queued() -> list[Any]:
    """An instance's kept terms of its queued requests: [queue_version, decode terms, started_version, progress
    terms] (shared by its states and ``ClusterView.live_progress``)."""
    return [-1, None, -1, None]


def queued_progress_terms(inst: Any, queued: list[Any]) -> list[float]:
    """The ``sum_progress`` terms of ``inst``'s waiting then swapped requests, kept in ``queued``."""
    if queued[2] != inst.queued.started_version or queued[3] is None:
        queued[2] = inst.queued.started_version
        queued[3] = progress_terms(inst.queued.waiting_started, inst.queued.swapped_started)  # (the others add nothing)
    return queued[3]


def queued_decode_terms(inst: Any, queued: list[Any]) -> list[float]:
    """The ``sum_pending_decode`` terms of ``inst``'s waiting then swapped requests, kept in ``queued``."""
    if queued[0] != inst.queued.version or queued[1] is None:
        queued[0] = inst.queued.version
        queued[1] = decode_terms(inst.waiting, inst.swapped)
    return queued[1]


class LiveRequests(InstanceRequests):
    """An instance's requests at ``at = (t, phase)``, read from its engine when first asked for (module
    docstring). ``queued``: the instance's kept terms (:func:`new_queued`)."""

    __slots__ = ("_inst", "_key", "_at", "_queued", "_changes")

    def __init__(self, inst: Any, key: tuple[int, ...], at: tuple[float, int], queued: list[Any]) -> None:
        self._inst = inst
        self._key = key
        self._at = at
        self._queued = queued
        self._changes = inst.changes  # the engine matched ``key`` at this count of its changes
        self._running = self._waiting = self._swapped = None
        self._memo = {}

    def _shift(self) -> int:
        """Iterations the engine's running rows are behind this state; raises once the engine has changed."""
        inst = self._inst
        key = self._key
        # unchanged since the last check, and not materialised past ``at``: the rows give the state (a cheap test)
        if inst.changes != self._changes or inst.iterations > key[0]:
            if engine_key(inst, *self._at) != key:
                raise StaleStateError(
                    f"the requests of instance {inst.name} in a ClusterState were read after that instance "
                    "changed (the simulation moved on); read them while the state is current, or keep a copy "
                    "(ClusterState.to_dict)")
            self._changes = inst.changes
        inst.settle_running()  # (a decode cohort writes its requests' counts lazily: llmsim.engine.cohort)
        return key[0] - inst.iterations

    def _rows(self) -> tuple[Any, Any, Any]:
        s = self._shift()
        inst = self._inst
        return records(inst.running, s), inst.waiting, inst.swapped

    def pending_prefill_tokens(self) -> int:
        v = self._memo.get("prefill")
        if v is None:
            inst = self._inst
            v = self._memo["prefill"] = sum_pending_prefill(inst.running, shift=self._shift()) + inst.queued.prefill
        return v

    def pending_decode_tokens(self) -> float:
        v = self._memo.get("decode")
        if v is None:
            s = self._shift()
            inst = self._inst
            v = sum_pending_decode(inst.running, shift=s)
            for t in queued_decode_terms(inst, self._queued):
                v += t
            self._memo["decode"] = v
        return v

    def context_tokens(self) -> int:
        v = self._memo.get("context")
        if v is None:
            inst = self._inst
            v = self._memo["context"] = sum_context(inst.running, shift=self._shift()) + inst.queued.context
        return v

    def progress(self) -> float:
        v = self._memo.get("progress")
        if v is None:
            s = self._shift()
            inst = self._inst
            v = sum_progress(inst.running, shift=s)
            for t in queued_progress_terms(inst, self._queued):
                v += t
            self._memo["progress"] = v
        return v

    def phase_summary(self, edges: tuple[float, ...], default_prediction: float) -> tuple[int, list[int], float, int]:
        s = self._shift()
        inst = self._inst
        return phase_summary_of(inst.running, inst.waiting, inst.swapped, edges, default_prediction, shift=s)

    @property
    def running(self) -> tuple[RequestState, ...]:
        if self._running is None:
            self._running = records(self._inst.running, self._shift())
        return self._running

    @property
    def waiting(self) -> tuple[RequestState, ...]:
        if self._waiting is None:
            self._shift()
            self._waiting = records(self._inst.waiting)
        return self._waiting

    @property
    def swapped(self) -> tuple[RequestState, ...]:
        if self._swapped is None:
            self._shift()
            self._swapped = records(self._inst.swapped)
        return self._swapped

    def head(self, queue: str, n: int) -> tuple[RequestState, ...]:
        s = self._shift()
        q = getattr(self._inst, queue) if queue in QUEUES else None
        if q is None:
            raise ValueError(f"queue {queue!r}: expected one of {QUEUES}")
        rows = q if len(q) <= n else [r for _, r in zip(range(n), q)]
        return records(rows, s if queue == "running" else 0)
