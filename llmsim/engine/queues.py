"""What an engine keeps about the requests in its waiting and swapped queues, for observers.

A queued request's rows (prompt, generated, computed and predicted tokens) do not change while it waits, so the
engine updates these totals as requests join and leave the queues, and an observer's sums over a loaded
instance's requests (most of them queued) cost a pass over the running ones only (``llmsim.cluster.live_requests``):

* ``context`` / ``prefill``: the queued requests' terms of ``sum_context`` / ``sum_pending_prefill`` (integers:
  their sum in any order is the same sum);
* ``version``: bumped whenever a request joins or leaves a queue (float sums over the queued requests, whose
  order matters, are kept until it moves);
* ``waiting_started`` / ``swapped_started``: the queued requests that have generated tokens (preempted ones), in
  queue order: the only ones with a ``sum_progress`` term; ``started_version`` is bumped when they change.

The engine (``Instance.queued``) and its components call :meth:`QueueTotals.joined` after a request joins the
waiting or swapped queue (its rows final) and :meth:`QueueTotals.left` when it leaves (before its rows change),
saying which queue and where; ``Instance.submit`` and ``Instance.admit``, the hot paths, inline the fresh-request
case.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmsim.request import Request


class QueueTotals:
    """Totals over one engine's waiting and swapped requests (module docstring)."""

    __slots__ = ("version", "started_version", "context", "prefill", "waiting_started", "swapped_started")

    def __init__(self) -> None:
        self.version = self.started_version = 0
        self.context = self.prefill = 0
        # the queued requests that have generated tokens, in queue order (a subsequence of each queue)
        self.waiting_started: deque[Request] = deque()
        self.swapped_started: deque[Request] = deque()

    def joined(self, r: Request, swapped: bool = False, front: bool = False) -> None:
        """``r`` joined the waiting (or swapped) queue at its back (or ``front``)."""
        self.version += 1
        g = r.generated
        self.context += r.prompt_tokens + g
        left = r.prompt_tokens + g - r.computed
        if left > 1 or not g:
            self.prefill += left
        if g:
            self.started_version += 1
            started = self.swapped_started if swapped else self.waiting_started
            started.appendleft(r) if front else started.append(r)

    def left(self, r: Request, swapped: bool = False) -> None:
        """``r`` left the waiting (or swapped) queue."""
        self.version += 1
        g = r.generated
        self.context -= r.prompt_tokens + g
        left = r.prompt_tokens + g - r.computed
        if left > 1 or not g:
            self.prefill -= left
        if g:
            self.started_version += 1
            started = self.swapped_started if swapped else self.waiting_started
            started.popleft() if started[0] is r else started.remove(r)

    def joined_behind(self, r: Request, k: int) -> None:
        """``r`` joined the waiting queue at position ``k``, behind the first ``k`` requests, which have all started
        (a request whose KV landed on a decode instance goes behind the others that landed: llmsim.engine.handoff)."""
        self.joined(r, front=True)
        if r.generated and k:
            started = self.waiting_started
            started.popleft()
            started.insert(k, r)

    def cleared(self) -> None:
        """Both queues were emptied at once (the end of a run)."""
        self.version += 1
        self.started_version += 1
        self.context = self.prefill = 0
        self.waiting_started.clear()
        self.swapped_started.clear()
