"""The contract between the engine loop and its features.

A feature of the engine is a component: an object the engine owns, calls at fixed points of its loop, and that
acts on the engine only through the public names below. None of them edits the engine's private state.

======================  ==================================  ======================================================
component               engine attribute                    where the engine calls it
======================  ==================================  ======================================================
``PromptLimits``        ``limits`` (always)                 ``can_ever_serve``, preemption, submissions
``EngineOps``           ``ops`` (always)                    each boundary (``apply``), iteration start
                                                            (``transfer``: blocks to pay for), going idle (``idle``)
``ProgressGuard``       ``guard`` (always)                  the policy scheduled nothing (``after_empty``), an
                                                            iteration without tokens (``count_stall``)
``ModelHost``           ``host`` (multi-model instances)    submissions (``admits`` / ``hold``), going idle
                                                            (``begin_swap``: the engine pauses for the swap)
``HandOff``             ``handoff`` (disaggregated          each boundary (``start_ready``), iteration start
                        clusters)                           (``sends_in_flight``), iteration end (``hand_off``),
                                                            preemption (``queue_behind_landed``)
``GpuShare``            ``gpu_share`` (co-located           busy-state changes (``busy_changed``), iteration start
                        instances)                          (``slowdown``)
======================  ==================================  ======================================================

What a component may use of the engine is :class:`ComponentEngine`: the queues and the KV cache (as batch policies
do), the totals over the queues (``queued``), and five calls that move the engine's events:
``wake`` (an idle engine has news), ``stop_run_at`` (a decode run ends at the boundary that sees a change),
``pause`` (no iteration until a time, then a callback), ``resume`` (start the next iteration now) and
``queued_news`` (a request joined the waiting queue). Only the engine schedules its own events.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from llmsim.engine.config import EngineConfig
    from llmsim.engine.kv import KVCache
    from llmsim.engine.queues import QueueTotals
    from llmsim.request import Request


class ComponentEngine(Protocol):
    """The engine as its components see it (``llmsim.engine.instance.Instance`` implements it)."""

    idx: int
    name: str
    role: str
    config: EngineConfig
    policy: Any
    recorder: Any
    kv: KVCache
    kv_total: int
    watermark_blocks: int
    block_size: int
    max_model_len: int
    max_batched: int
    waiting: deque[Request]
    running: list[Request]
    swapped: deque[Request]
    queued: QueueTotals
    busy: bool
    decode_run: Any
    cohort: Any  # llmsim.engine.cohort.DecodeCohort or None: running requests leave it when they leave ``running``
    batch: list[Request]
    changes: int
    room_freed: int
    iterations: int
    ops: Any
    limits: Any
    host: Any
    handoff: Any
    gpu_share: Any
    profile: Any

    def can_ever_serve(self, r: Request) -> str: ...

    def sync(self, now: float, phase: int) -> None: ...

    def settle_running(self) -> None: ...

    def accept(self, r: Request, now: float, phase: int) -> None: ...

    def install_profile(self, profile: Any) -> None: ...

    def queued_news(self, now: float, phase: int) -> None: ...

    def wake(self, now: float, phase: int) -> None: ...

    def stop_run_at(self, t: float, strict: bool) -> None: ...

    def pause(self, until: float, then: Callable[[float], None]) -> None: ...

    def resume(self, now: float) -> None: ...
