"""Batch-formation policies: which requests run in the next iteration, and with how many tokens.

A policy's ``schedule(inst, now)`` reads and mutates the instance's queues and KV cache through the
instance's helpers (``cached_prefix``, ``admit``, ``preempt_last``, ``swap_in``, ``decode_all``) and its
:class:`~llmsim.engine.kv.KVCache` ``inst.kv`` (``needed``, ``allocate``, ``free``), and returns a
:class:`Scheduled`. New policies (priority, EDF, shortest-predicted-job) subclass an existing one and override
:meth:`BatchPolicy.admission_order` or ``schedule`` itself, then register with :func:`register_batch_policy`.

A policy declares the engine defaults it implies (the engine reads them from the class, never by name):
whether admission keeps a watermark of free blocks, its default token budget, and whether it prefills
whole prompts in one iteration (then the budget must cover ``max_model_len``). Subclasses inherit them.

The engine relies on a policy to make progress: while requests run, ``schedule`` returns a non-empty batch
(or preempts them all); on an idle instance it starts any request that fits the engine's limits.
Otherwise the engine raises :class:`~llmsim.errors.LLMSimError` (see ``llmsim.engine.instance``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from llmsim.registry import Registry

if TYPE_CHECKING:
    from llmsim.engine.kv import KVCache
    from llmsim.perf.hardware import GpuSpec
    from llmsim.request import Request


class Engine(Protocol):
    """What a batch policy uses of the engine it schedules (``llmsim.engine.instance.Instance`` implements it; the
    protocol keeps this package from importing the instance module, which imports it)."""

    waiting: deque[Request]
    running: list[Request]
    swapped: deque[Request]
    kv: KVCache
    max_seqs: int
    max_batched: int

    def admit(self, r: Request, n_new: int, need: int, now: float, cached: int = 0) -> None: ...

    def cached_prefix(self, r: Request) -> tuple[int, int]: ...

    def preempt_last(self) -> int: ...

    def swap_in(self, r: Request, need: int) -> int: ...

    def decode_all(self, out: Scheduled, check: bool = True) -> bool: ...

    def settle_running(self) -> None: ...


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
    first_gaps: list[tuple[float, int]] | None = None  # (last-token time, requests) of the first iteration's gaps
    decode_max: int = 0  # the longest decode context, from a decode cohort that tracks it (0: read the requests)


class BatchPolicy:
    name: ClassVar[str] = "base"
    uses_watermark: ClassVar[bool] = False  # admission keeps engine.watermark of the cache free
    prefills_whole_prompts: ClassVar[bool] = False  # a prompt is prefilled in one iteration (needs budget >= len)
    # the engine may keep running requests' counts lazily between decode runs (llmsim.engine.cohort): the policy
    # reads running requests' counts only after ``inst.settle_running()`` (or through ``decode_all``)
    lazy_running: ClassVar[bool] = False
    # with nothing waiting or swapped, ``schedule`` is exactly ``inst.decode_all(out, check=False)`` (or nothing when
    # that fails and nothing runs): the engine then plans the decode run itself, without a Scheduled per boundary.
    # A subclass that overrides ``schedule`` (or vLLM V0's ``_decode``) loses the declaration unless it repeats it.
    decodes_all_when_idle_queues: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__
        if ("schedule" in own or "_decode" in own) and "decodes_all_when_idle_queues" not in own:
            cls.decodes_all_when_idle_queues = False

    @classmethod
    def default_max_num_batched_tokens(cls, max_model_len: int) -> int:
        """The token budget when ``engine.max_num_batched_tokens`` is not set."""
        return max(max_model_len, 2048) if cls.prefills_whole_prompts else 2048

    @classmethod
    def batch_limits(cls, max_model_len: int, gpu: GpuSpec | None, budget: int | None,
                     seats: int | None) -> tuple[int, int]:
        """(token budget, seats) from the user's values, None where not set: the default budget above and 256
        seats (vLLM V0's ``max_num_seqs``), on any GPU."""
        return (cls.default_max_num_batched_tokens(max_model_len) if budget is None else budget,
                256 if seats is None else seats)

    def schedule(self, inst: Engine, now: float) -> Scheduled:
        raise NotImplementedError

    def admission_order(self, inst: Engine) -> Iterable[Request]:
        """Waiting requests in the order they may be admitted (FCFS by default)."""
        return inst.waiting

    def admissible(self, inst: Engine) -> Iterable[Request]:
        """The waiting requests this iteration may admit, in order: with nothing swapped out, every one in
        :meth:`admission_order`; while requests are swapped out (they come back before new prompts), only those
        whose KV landed here from a prefill instance. Those hold their blocks, the next token's included, so they
        take no room a swapped-out request waits for; refusing them too would lock an engine whose landed copies
        hold the room a swapped-out request needs (``llmsim.engine.handoff``)."""
        if not inst.swapped:
            return self.admission_order(inst)
        return landed(inst.waiting)


def landed(waiting: Iterable[Request]) -> list[Request]:
    """The waiting requests whose KV landed here from a prefill instance: they hold blocks, and wait at the head of
    the queue (``HandOff.queue_behind_landed``)."""
    out = []
    for r in waiting:
        if not r.blocks:
            break
        out.append(r)
    return out


BATCH_POLICIES: Registry[type[BatchPolicy]] = Registry("batch policy")
register_batch_policy = BATCH_POLICIES.register  # the README's extension recipe: @register_batch_policy
