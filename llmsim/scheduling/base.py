"""Batch-formation policies: which requests run in the next iteration, and with how many tokens.

A policy's ``schedule(inst, now)`` reads and mutates the instance's queues and KV cache through the
instance's helpers (``admit``, ``preempt_last``, ``try_swap_in``, ``blocks_needed``) and returns a
:class:`Scheduled`. New policies (priority, EDF, shortest-predicted-job) subclass an existing one
and override :meth:`BatchPolicy.admission_order` or ``schedule`` itself, then register with
:func:`register_batch_policy`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmsim.instance import Instance
    from llmsim.request import Request


@dataclass(slots=True)
class Scheduled:
    """One iteration's batch. ``stable`` means a decode-only batch of every running request formed
    without admissions, preemptions or swaps: repeating it until the next event is what stepping
    would do, so the engine may take the fast path."""

    batch: list[Request] = field(default_factory=list)
    transfer_blocks: int = 0
    stable: bool = False
    # filled by Instance.decode_all (the common all-decode case), so the engine need not rescan the batch
    res: list[int] | None = None  # requests per (computed % block_size)
    decode_ctx: int = 0
    k_min: int = 0  # iterations until the first request finishes


class BatchPolicy:
    name = "base"
    uses_watermark = False

    def schedule(self, inst: Instance, now: float) -> Scheduled:
        raise NotImplementedError

    def admission_order(self, inst: Instance) -> Iterable[Request]:
        """Waiting requests in the order they may be admitted (FCFS by default)."""
        return inst.waiting


BATCH_POLICIES: dict[str, type[BatchPolicy]] = {}


def register_batch_policy(cls: type[BatchPolicy]) -> type[BatchPolicy]:
    BATCH_POLICIES[cls.name] = cls
    return cls
