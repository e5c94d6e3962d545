"""The engine's side of prefill/decode disaggregation (the cluster's side, the KV copies, is
``llmsim.cluster.disagg``).

Roles: ``mixed`` (both phases; every engine of a non-disaggregated cluster), ``prefill`` (prompts only) and
``decode`` (prefilled requests only). In a disaggregated cluster every engine has a :class:`HandOff`
(``Instance.handoff``):

* on a prefill engine, a request whose prefill just ended leaves the engine (:meth:`HandOff.hand_off`) and the
  cluster's ``KVTransfers`` copies its KV to a decode engine; a *blocking* transfer mode holds the prefill engine
  until its copies land (``sends_in_flight``);
* on a decode engine, copies wait for room (``pending``, FCFS, started at the engine's boundaries or while it is
  idle: :meth:`HandOff.start_ready`), and a request whose KV landed joins the waiting queue behind the other landed
  ones (:meth:`HandOff.take_landed`), ahead of requests that still need blocks, so it can always start;
* ``copies`` counts copies holding blocks on this engine (sent from here, or reserved for one coming in): an
  engine whose blocks are held by copies waits for them rather than dropping a request it cannot admit.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from llmsim.event_loop import ENGINE

if TYPE_CHECKING:
    from llmsim.engine.components import ComponentEngine
    from llmsim.request import Request

MIXED, PREFILL, DECODE = "mixed", "prefill", "decode"
ROLES = (MIXED, PREFILL, DECODE)


class HandOff:
    """One engine's part in the KV copies of a disaggregated cluster (module docstring)."""

    __slots__ = ("engine", "transfers", "hands_off", "pending", "sends_in_flight", "copies")

    def __init__(self, engine: ComponentEngine, transfers: Any) -> None:
        self.engine = engine
        self.transfers = transfers  # the cluster's llmsim.cluster.disagg.KVTransfers
        self.hands_off = engine.role == PREFILL  # a prefill engine: prefilled requests leave it
        self.pending: deque[Any] = deque()  # KV copies waiting for room here (a decode engine), FCFS
        self.sends_in_flight = 0  # copies a blocking prefill engine started and that have not landed
        self.copies = 0  # copies holding blocks here (sent from here, or reserved for one coming in)

    def hand_off(self, batch: list[Request], now: float) -> None:
        """Requests of the iteration that just ended whose prefill is done leave this prefill engine."""
        out = [r for r in batch if r.generated == 1 and r.generated < r.target_tokens and r.first_token == now]
        if not out:
            return
        gone = set(map(id, out))
        e = self.engine
        e.running = [r for r in e.running if id(r) not in gone]
        for r in out:
            if e.cohort is not None:
                e.cohort.leave(r)
            self.transfers.send(r, e, now)

    def start_ready(self, now: float) -> None:
        """Start the copies waiting here for which there is room now (at a boundary of the engine, or while it is
        idle: a decode run's planned blocks are never taken from under it)."""
        self.transfers.start_ready(self.engine, now)

    def take_landed(self, r: Request, now: float, phase: int) -> None:
        """A request whose KV just landed joins the waiting queue, prompt computed, behind the other landed ones but
        ahead of requests that still need blocks (as vLLM V0 resumes swapped-in requests first): it holds its
        blocks, including the one for its next token, so it can always start, and a preempted request at the head
        that waits for room cannot lock it out."""
        e = self.engine
        r.instance = e.idx
        r.truncated = False
        e.limits.set_target(r)  # its output as this instance's context window cuts it (as vLLM's decode instance)
        if r.generated >= r.target_tokens:  # no room for a second token here: the first was the whole output
            e.kv.outside -= r.blocks  # (reserved for the copy: KVTransfers.start_ready)
            e.kv.release(r)
            r.finish = now
            e.finished += 1
            e.changes += 1
            e.recorder.finish(r)
            if not e.busy and self.pending:
                self.start_ready(now)  # the room it held may start a waiting copy (a busy engine's boundary does)
            return
        self.queue_behind_landed(r)
        e.queued_news(now, phase)

    def queue_behind_landed(self, r: Request) -> None:
        """Put ``r`` right behind the waiting requests that hold blocks (whose KV landed here: they stay first)."""
        w = self.engine.waiting
        k = 0
        for q in w:
            if not q.blocks:
                break
            k += 1
        w.insert(k, r)
        self.engine.queued.joined_behind(r, k)

    def sent_landed(self, now: float) -> None:
        """A copy sent from this engine landed: a blocking prefill engine whose last copy landed starts its next
        iteration; an idle engine with queued requests wakes (the freed blocks may admit a prompt)."""
        e = self.engine
        e.changes += 1
        if self.transfers.blocking:
            self.sends_in_flight -= 1
            if not self.sends_in_flight and e.busy and e.decode_run is None and not e.batch:
                e.resume(now)
        elif not e.busy and (e.waiting or e.swapped):
            e.wake(now, ENGINE)
