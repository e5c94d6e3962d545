"""What an engine keeps about the requests in its waiting and swapped queues, for observers.

A queued request's rows (prompt, generated, computed and predicted tokens) do not change while it waits, so
the engine updates these as requests join and leave the queues (:class:`QueuedTotals`, mixed into
``llmsim.engine.instance.Instance``), and an observer's sums over a loaded instance's requests (most of them queued)
cost a pass over the running ones only (``llmsim.cluster.live_requests``):

* ``queued_context`` / ``queued_prefill``: the queued requests' terms of ``sum_context`` /
  ``sum_pending_prefill`` (integers: their sum in any order is the same sum);
* ``queue_version``: bumped whenever a request joins or leaves a queue (float sums over the queued requests,
  whose order matters, are kept until it moves);
* ``waiting_started`` / ``swapped_started``: the queued requests that have generated tokens (preempted ones),
  in queue order: the only ones with a ``sum_progress`` term; ``started_version`` is bumped when they change.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmsim.request import Request


class QueuedTotals:
    """Mixin: call :meth:`_enqueued` after a request joins the waiting or swapped queue (its rows final), and
    :meth:`_dequeued` when it leaves (before its rows change), saying which queue and where (``Instance.submit``
    and ``Instance.admit``, the hot paths, inline them)."""

    queue_version: int
    started_version: int
    queued_context: int
    queued_prefill: int
    waiting_started: deque[Request]
    swapped_started: deque[Request]

    def _init_queued(self) -> None:
        self.queue_version = self.started_version = 0
        self.queued_context = self.queued_prefill = 0
        # the queued requests that have generated tokens, in queue order (a subsequence of each queue)
        self.waiting_started = deque()
        self.swapped_started = deque()

    def _enqueued(self, r: Request, swapped: bool = False, front: bool = False) -> None:
        self.queue_version += 1
        g = r.generated
        self.queued_context += r.prompt_tokens + g
        left = r.prompt_tokens + g - r.computed
        if left > 1 or not g:
            self.queued_prefill += left
        if g:
            self.started_version += 1
            started = self.swapped_started if swapped else self.waiting_started
            started.appendleft(r) if front else started.append(r)

    def _dequeued(self, r: Request, swapped: bool = False) -> None:
        self.queue_version += 1
        g = r.generated
        self.queued_context -= r.prompt_tokens + g
        left = r.prompt_tokens + g - r.computed
        if left > 1 or not g:
            self.queued_prefill -= left
        if g:
            self.started_version += 1
            started = self.swapped_started if swapped else self.waiting_started
            started.popleft() if started[0] is r else started.remove(r)

    def _queues_cleared(self) -> None:
        self.queue_version += 1
        self.started_version += 1
        self.queued_context = self.queued_prefill = 0
        self.waiting_started.clear()
        self.swapped_started.clear()
