"""Preemption: what happens to a running request the batch policy pushes out to make room, how a swapped-out
one comes back, and how a running request whose client left goes.

vLLM V0 preempts the most recently admitted running request. With swap preemption (``engine.preemption=swap``) its
KV blocks move to CPU swap space if there is room, and it waits in the swapped queue, resumed ahead of new
requests; otherwise (recompute) its blocks are freed and it waits at the head of the waiting queue, re-prefilling
its prompt and the tokens it generated. A request grown past what the whole cache can hold would preempt itself
forever, so it is dropped instead. The engine (``llmsim.engine.instance.Instance``, untyped here since that module
imports this one) calls these for its batch policy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmsim.request import Request


def preempt_last(inst: Any) -> int:
    """Preempt the most recently admitted running request of ``inst``; returns the blocks swapped out."""
    r = inst.running.pop()
    if inst.cohort is not None:
        inst.cohort.leave(r)
    inst.room_freed += 1
    inst.preemptions += 1
    r.preemptions += 1
    kv = inst.kv
    if kv.blocks_for(r.prompt_tokens + r.generated + 1) > inst.limits.max_prompt_blocks():
        # it has grown past what the whole cache can hold: it would preempt itself forever
        kv.release(r)
        inst.recorder.drop(r, "exceeds_kv_capacity", inst.env.now)
        return 0
    if kv.swap_out(r):
        r.swapped = True
        r.swaps += 1
        inst.swap_outs += 1
        inst.swapped.append(r)
        inst.queued.joined(r, swapped=True)
        return r.blocks
    kv.release(r)
    r.computed = 0
    if inst.handoff is not None:
        inst.handoff.queue_behind_landed(r)  # requests whose KV landed here stay first
        return 0
    inst.waiting.appendleft(r)
    inst.queued.joined(r, front=True)
    return 0


def swap_in(inst: Any, r: Request, need: int) -> int:
    """Move the head of ``inst``'s swapped queue to running holding ``need`` GPU blocks; returns blocks moved."""
    inst.swapped.popleft()
    inst.queued.left(r, swapped=True)
    moved = inst.kv.swap_in(r, need)
    r.swapped = False
    inst.running.append(r)
    if inst.cohort is not None:
        inst.cohort.join(r)
    return moved


def prefilling(inst: Any, r: Request) -> bool:
    """Whether running ``r`` has more than one token left to compute once the iteration in flight ends (a prefill
    chunk short of its prompt, or a prefill not scheduled in it); a decoder, or one whose prompt that iteration
    completes, samples its next token within one more iteration."""
    run = inst.decode_run
    if run is not None and r in run.reqs:
        return False
    left = r.prompt_tokens + r.generated - r.computed - (r.n_new if r in inst.batch else 0)
    return left > 1


def leave_aborted(inst: Any) -> None:
    """The running requests of ``inst`` whose client left (``Instance.cancel``) leave at this boundary, their blocks
    freed (their computed prompt blocks stay cached, as a finished request's do), as vLLM frees an aborted request
    before its next step."""
    kv = inst.kv
    for r in inst.aborted:
        if r in inst.running:
            inst.running.remove(r)
            kv.release(r)
            r.prefix_state = None
    inst.aborted.clear()
