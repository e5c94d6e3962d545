"""The engine's progress guards: what happens when a batch policy schedules nothing, and iterations that make no
progress (see ``llmsim.engine.instance``'s "Termination").

An idle instance whose policy starts nothing drops the head request when the engine's limits explain it and
raises :class:`LLMSimError` when they do not; iterations that compute and sample nothing, or schedule() calls that
only preempt, raise past a bound instead of looping.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.errors import LLMSimError

if TYPE_CHECKING:
    from llmsim.engine.components import ComponentEngine
    from llmsim.engine.scheduling import Scheduled
    from llmsim.request import Request

MAX_STALLED_ITERATIONS = 1000  # consecutive iterations that compute and sample nothing before it is an error
MAX_RESCHEDULES = 100  # schedule() calls in a row that only preempt (emptying the batch) before it is an error


class ProgressGuard:
    """One engine's guard (``Instance.guard``): the engine calls :meth:`after_empty` when its policy schedules
    nothing and :meth:`count_stall` for an iteration that computes no token."""

    __slots__ = ("engine", "stalls", "stall_at")

    def __init__(self, engine: ComponentEngine) -> None:
        self.engine = engine
        self.stalls = 0  # consecutive iterations without progress, ending at iteration ``stall_at``
        self.stall_at = -2

    def after_empty(self, now: float, changes: int) -> Scheduled | None:
        """The policy scheduled nothing: its next non-empty batch, or None when there is nothing to do.

        On an idle instance (nothing running, the whole cache free) a request the policy still does not start is
        dropped as ``cannot_be_scheduled`` when the engine's limits explain it, else it is the policy's fault and an
        error. Each pass drops a request or follows a preemption (bounded), so this loop ends. ``changes``: the
        engine's ``room_freed`` before the policy was asked.
        """
        e = self.engine
        policy = e.policy
        reschedules = 0
        while True:
            if e.handoff is not None and e.handoff.copies and not e.running:
                return None  # KV copies hold blocks here (llmsim.engine.handoff): their landing wakes the engine
            if e.running:
                raise LLMSimError(
                    f"instance {e.name}: batch policy {policy.name!r} scheduled nothing at t={now!r} while "
                    f"{len(e.running)} request(s) are running: they would never finish (a policy must run or "
                    "preempt its running requests)"
                )
            if not (e.waiting or e.swapped):
                return None
            if e.room_freed != changes:
                # a preemption or drop emptied the batch: the freed room may admit someone now
                changes = e.room_freed
                reschedules += 1
                if reschedules > MAX_RESCHEDULES:
                    raise LLMSimError(
                        f"instance {e.name}: no progress after {reschedules} schedule() calls at t={now!r}: batch "
                        f"policy {policy.name!r} keeps preempting without scheduling anything"
                    )
            else:
                self.drop_unschedulable(now)
            sched = policy.schedule(e, now)
            if sched.batch:
                return sched

    def drop_unschedulable(self, now: float) -> None:
        """Drop the head of the swapped (else waiting) queue, which the policy did not start on an idle instance."""
        e = self.engine
        queue = e.swapped or e.waiting
        r = queue[0]
        context = r.prompt_tokens + r.generated
        if not (e.can_ever_serve(r) or e.kv.blocks_for(context) > e.limits.max_prompt_blocks()
                or (e.policy.prefills_whole_prompts and context - r.computed > e.max_batched)):
            raise LLMSimError(
                f"instance {e.name}: batch policy {e.policy.name!r} scheduled nothing at t={now!r} on an idle "
                f"instance (nothing running, the whole KV cache free) although request {r.id} ({r.prompt_tokens} "
                f"prompt tokens, {context - r.computed} to compute) fits: it would never be served"
            )
        queue.popleft()
        e.queued.left(r, swapped=queue is e.swapped)
        if queue is e.swapped:
            r.swapped = False
            e.kv.drop_swapped(r)
        elif r.blocks:  # its KV came from a prefill instance (llmsim.engine.handoff)
            e.kv.outside -= r.blocks
            e.kv.release(r)
        e.recorder.drop(r, "cannot_be_scheduled", now)

    def count_stall(self, batch: list[Request], now: float) -> None:
        """Count an iteration that computes no token; raise past a bound if such iterations also sample none."""
        for r in batch:
            if r.computed + r.n_new == r.prompt_tokens + r.generated:
                return  # someone samples a token (e.g. a zero-length prompt): progress
        it = self.engine.iterations
        self.stalls = self.stalls + 1 if self.stall_at == it - 1 else 1
        self.stall_at = it
        if self.stalls >= MAX_STALLED_ITERATIONS:
            r = batch[0]
            raise LLMSimError(
                f"instance {self.engine.name}: no progress after {self.stalls} iterations at t={now!r}: batch "
                f"policy {self.engine.policy.name!r} keeps scheduling {len(batch)} request(s) with no token to "
                f"compute or sample (request {r.id}: {r.computed} of {r.prompt_tokens + r.generated} computed, "
                f"n_new {r.n_new})"
            )
