"""The engine's progress guards: what happens when a batch policy schedules nothing, and iterations that make no
progress (a mixin of :class:`llmsim.engine.instance.Instance`; see that module's "Termination").

An idle instance whose policy starts nothing drops the head request when the engine's limits explain it and
raises :class:`LLMSimError` when they do not; iterations that compute and sample nothing, or schedule() calls that
only preempt, raise past a bound instead of looping.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmsim.errors import LLMSimError

if TYPE_CHECKING:
    from llmsim.engine.scheduling import Scheduled
    from llmsim.request import Request

MAX_STALLED_ITERATIONS = 1000  # consecutive iterations that compute and sample nothing before it is an error
MAX_RESCHEDULES = 100  # schedule() calls in a row that only preempt (emptying the batch) before it is an error


class GuardsProgress:
    """Needs the engine's queues, KV cache, policy, recorder and counters (``llmsim.engine.instance.Instance``)."""

    name: str
    policy: Any
    running: list
    waiting: Any
    swapped: Any
    kv: Any
    copies: int
    iterations: int
    recorder: Any
    max_batched: int
    _changes: int
    _stalls: int
    _stall_at: int

    def _schedule_after_empty(self, now: float, changes: int) -> Scheduled | None:
        """The policy scheduled nothing: its next non-empty batch, or None when there is nothing to do.

        On an idle instance (nothing running, the whole cache free) a request the policy still does not
        start is dropped as ``cannot_be_scheduled`` when the engine's limits explain it, else it is the
        policy's fault and an error. Each pass drops a request or follows a preemption (bounded), so this
        loop ends.
        """
        policy = self.policy
        reschedules = 0
        while True:
            if self.copies and not self.running:
                return None  # KV copies hold blocks here (llmsim.cluster.disagg): their landing wakes the engine
            if self.running:
                raise LLMSimError(
                    f"instance {self.name}: batch policy {policy.name!r} scheduled nothing at t={now!r} while "
                    f"{len(self.running)} request(s) are running: they would never finish (a policy must run or "
                    "preempt its running requests)"
                )
            if not (self.waiting or self.swapped):
                return None
            if self._changes != changes:
                # a preemption or drop emptied the batch: the freed room may admit someone now
                changes = self._changes
                reschedules += 1
                if reschedules > MAX_RESCHEDULES:
                    raise LLMSimError(
                        f"instance {self.name}: no progress after {reschedules} schedule() calls at t={now!r}: batch "
                        f"policy {policy.name!r} keeps preempting without scheduling anything"
                    )
            else:
                self._drop_unschedulable(now)
            sched = policy.schedule(self, now)
            if sched.batch:
                return sched

    def _drop_unschedulable(self, now: float) -> None:
        """Drop the head of the swapped (else waiting) queue, which the policy did not start on an idle instance."""
        queue = self.swapped or self.waiting
        r = queue[0]
        context = r.prompt_tokens + r.generated
        if not (self.can_ever_serve(r) or self.kv.blocks_for(context) > self.max_prompt_blocks()
                or (self.policy.prefills_whole_prompts and context - r.computed > self.max_batched)):
            raise LLMSimError(
                f"instance {self.name}: batch policy {self.policy.name!r} scheduled nothing at t={now!r} on an idle "
                f"instance (nothing running, the whole KV cache free) although request {r.id} ({r.prompt_tokens} "
                f"prompt tokens, {context - r.computed} to compute) fits: it would never be served"
            )
        queue.popleft()
        self._dequeued(r, swapped=queue is self.swapped)
        if queue is self.swapped:
            r.swapped = False
            self.kv.drop_swapped(r)
        elif r.blocks:  # its KV came from a prefill instance (llmsim.cluster.disagg)
            self.kv.outside -= r.blocks
            self.kv.release(r)
        self.recorder.drop(r, "cannot_be_scheduled", now)

    def _count_stall(self, batch: list[Request], now: float) -> None:
        """Count an iteration that computes no token; raise past a bound if such iterations also sample none."""
        for r in batch:
            if r.computed + r.n_new == r.prompt_tokens + r.generated:
                return  # someone samples a token (e.g. a zero-length prompt): progress
        it = self.iterations
        self._stalls = self._stalls + 1 if self._stall_at == it - 1 else 1
        self._stall_at = it
        if self._stalls >= MAX_STALLED_ITERATIONS:
            r = batch[0]
            raise LLMSimError(
                f"instance {self.name}: no progress after {self._stalls} iterations at t={now!r}: batch policy "
                f"{self.policy.name!r} keeps scheduling {len(batch)} request(s) with no token to compute or sample "
                f"(request {r.id}: {r.computed} of {r.prompt_tokens + r.generated} computed, n_new {r.n_new})"
            )
