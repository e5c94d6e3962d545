"""Engine operations a policy can trigger: evict a request, or swap its KV blocks out to CPU memory.

Both are asked for at any time (``Instance.evict`` / ``Instance.swap_out``, or ``Cluster.evict`` /
``Cluster.swap_out`` and the same methods of the router's view) and take effect at the engine's next
iteration boundary that sees them, by the rule submissions follow: a call at (t, phase) is applied at the
first boundary b with (b, ENGINE) > (t, phase). An iteration in progress cannot drop a request half-way
(neither can vLLM), and this rule is what keeps the decode fast path exact: a call mid decode run first
materialises the run up to what the caller has seen (``Instance.sync``, as observers do) and asks the run
to stop at that boundary (as a submission does), so the outcome is bit-identical to stepping.

* **evict**: the request leaves the engine (running, waiting or swapped), its GPU (or CPU) KV blocks are
  freed, it keeps its generated tokens and goes back to the cluster's central queue, where the router is
  asked again at once (ROUTE phase of the same instant) and later as for any WAITing request. Re-admitted
  anywhere, it needs one prefill of prompt + generated tokens (``computed`` is reset, as recompute
  preemption does), then samples its next token: its output is never regenerated.
* **swap_out**: a running request's blocks move to the CPU swap space (``engine.preemption=swap`` sizes it
  from ``engine.swap_space_gb``) and it joins the swapped queue; the batch policy swaps it back in by its
  normal rules (vLLM: swapped requests come back before any waiting one is admitted, when blocks allow, so
  on an engine with room it comes back at once). The transfer costs what swap preemption costs:
  blocks * block_bytes / host_link_bw seconds (``Instance.block_bytes``: block_size * kv_bytes_per_token / KV shards;
  the GPU's host-link bandwidth from the hardware table), added to the next iteration's step time.
* **park** (``swap_out(..., park=True)``): a swap-out whose request is *parked*: it stays in CPU memory while the
  engine has waiting requests, so the room it freed goes to them (a plain swap-out comes straight back, since
  vLLM swaps in before admitting), and joins the swapped queue at the first boundary with an empty waiting queue
  (then the batch policy swaps it back in as usual). This is QLM's "GPU-CPU state swapping": make room for the
  virtual queue's head, restore later. Parked requests are not in the engine's queues, so the public state does
  not list them (``Instance.ops.parked``); they keep the engine busy until restored.

A call is checked when made (the request must be in the engine, running for a swap, with room for its
blocks in the swap space net of pending swaps; one pending operation per request) and refused with an
:class:`LLMSimError` naming the request and the reason. An operation whose request has finished or left by
the time it is applied lapses (counted in ``lapsed``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llmsim.errors import LLMSimError
from llmsim.event_loop import ARRIVAL, ENGINE

if TYPE_CHECKING:
    from llmsim.engine.components import ComponentEngine

EVICT = "evict"
SWAP_OUT = "swap_out"
PARK = "park"  # a swap-out whose request stays out while the engine has waiting requests (QLM's state swapping)


class EngineOps:
    """The pending operations of one instance (``Instance.ops``) and their counts.

    ``engine`` is the :class:`llmsim.engine.instance.Instance` it belongs to."""

    __slots__ = ("engine", "pending", "transfer", "on_evict", "evictions", "swap_outs", "lapsed", "parked")

    def __init__(self, engine: ComponentEngine) -> None:
        self.engine = engine
        self.pending: list[tuple[str, int, float, int]] = []  # (kind, request id, time, phase) in call order
        self.transfer = 0  # blocks moved by swap-outs, charged to the next iteration's step time
        self.on_evict: Callable[[Any, Any], None] | None = None  # set by the cluster: (request, instance)
        self.evictions = 0
        self.swap_outs = 0
        self.lapsed = 0
        self.parked: list[Any] = []  # parked swap-outs, in the order they left (restored in that order)

    def request(self, kind: str, rid: int, now: float, phase: int) -> None:
        """Check an operation against the state the caller sees, then queue it for the next boundary."""
        inst = self.engine
        inst.sync(now, phase)  # materialise a decode run up to what the caller has seen
        where, r = self._find(rid)
        what = f"instance {inst.name}: cannot {kind.replace('_', ' ')} request {rid!r}"
        if r is None:
            raise LLMSimError(f"{what}: it is not running, waiting or swapped on this instance")
        if any(op[1] == rid for op in self.pending):
            raise LLMSimError(f"{what}: an operation on it is already pending (applied at the next boundary)")
        if kind == EVICT:
            if self.on_evict is None:
                raise LLMSimError(f"{what}: the instance is not part of a cluster (no central queue to return it to)")
        elif kind in (SWAP_OUT, PARK):
            if where != "running":
                raise LLMSimError(f"{what}: it is {where}, not running (only a running request's KV state is on the "
                                  "GPU to swap out)")
            kv = inst.kv
            if not kv.cpu_total:
                raise LLMSimError(f"{what}: the instance has no CPU swap space (set engine.preemption=swap and "
                                  "engine.swap_space_gb > 0)")
            room = kv.cpu_free - sum(self._blocks(x) for k, i, _, _ in self.pending if k != EVICT
                                     for _w, x in [self._find(i)] if x is not None)
            need = self._blocks(r)
            if need > room:
                raise LLMSimError(f"{what}: the CPU swap space is full ({need} block(s) needed, {room} of "
                                  f"{kv.cpu_total} free net of pending swaps)")
        else:
            raise LLMSimError(f"unknown engine operation {kind!r}; expected {EVICT!r}, {SWAP_OUT!r} or {PARK!r}")
        self.pending.append((kind, rid, now, phase))
        inst.stop_run_at(now, phase == ARRIVAL)  # a decode run ends at the boundary that sees the call

    def _blocks(self, r: Any) -> int:
        """GPU blocks ``r`` holds at the end of the iteration in progress (exact after ``sync``: mid decode run,
        the run's requests' ``blocks`` may lag by one, while iteration applied + 1 computes token computed + 1)."""
        inst = self.engine
        if inst.decode_run is None or inst.kv.windowed:  # (a windowed run writes its requests' blocks: window_run)
            return r.blocks
        return inst.kv.blocks_for(r.computed + 1)

    def _find(self, rid: int) -> tuple[str, Any]:
        inst = self.engine
        for where, queue in (("running", inst.running), ("waiting", inst.waiting), ("swapped", inst.swapped),
                             ("parked", self.parked)):
            for r in queue:
                if r.id == rid:
                    return where, r
        return "", None

    def apply(self, now: float) -> None:
        """At a boundary, before scheduling: carry out the pending operations this boundary sees, in call order."""
        self.engine.settle_running()  # (the operations read the running requests' blocks and counts)
        keep = []
        for op in self.pending:
            kind, rid, t, phase = op
            if not (now > t or (now == t and phase < ENGINE)):
                keep.append(op)  # called at this instant after this boundary: the next one sees it
                continue
            where, r = self._find(rid)
            if r is None:
                self.lapsed += 1  # it finished (or was dropped) in the iteration that just ended
            elif kind == EVICT:
                self._evict(where, r)
            elif where == "running" and self.engine.kv.swap_out(r):
                self._swapped_out(r, kind == PARK)
            else:
                self.lapsed += 1
        self.pending = keep
        if self.parked and not self.engine.waiting:
            self._restore()

    def _restore(self) -> None:
        """Parked requests join the swapped queue (the waiting queue has emptied): swapped back in as usual."""
        inst = self.engine
        for r in self.parked:
            inst.swapped.append(r)
            inst.queued.joined(r, swapped=True)
        self.parked = []

    def _evict(self, where: str, r: Any) -> None:
        inst = self.engine
        kv = inst.kv
        if where == "running":
            inst.running.remove(r)
            if inst.cohort is not None:
                inst.cohort.leave(r)
            kv.release(r)
        elif where == "waiting":
            inst.waiting.remove(r)
            inst.queued.left(r)
            kv.outside -= r.blocks  # (a request whose KV came from a prefill instance holds some: engine.handoff)
            kv.release(r)
        elif where == "swapped":
            inst.swapped.remove(r)
            inst.queued.left(r, swapped=True)
            kv.drop_swapped(r)
            r.swapped = False
        else:  # parked: its blocks are in CPU memory, outside the engine's queues
            self.parked.remove(r)
            kv.drop_swapped(r)
            r.swapped = False
        r.computed = 0  # re-admitted, it prefills prompt + generated once (as recompute preemption does)
        r.n_new = 0
        r.evictions += 1
        self.evictions += 1
        assert self.on_evict is not None  # checked when the eviction was asked for
        self.on_evict(r, inst)

    def _swapped_out(self, r: Any, park: bool) -> None:
        inst = self.engine
        inst.running.remove(r)
        if inst.cohort is not None:
            inst.cohort.leave(r)
        r.swapped = True
        r.swaps += 1
        self.swap_outs += 1
        self.transfer += r.blocks
        if park:
            self.parked.append(r)
            return
        inst.swapped.append(r)
        inst.queued.joined(r, swapped=True)

    def idle(self) -> None:
        """The engine went idle: nothing is left to operate on or to charge a transfer to."""
        assert not self.parked, "an engine went idle with parked requests"
        self.lapsed += len(self.pending)
        self.pending = []
        self.transfer = 0


def stepped_decode(batch: list[Any], block_size: int) -> None:
    """Make a fast-path ``decode_all`` batch exact for stepping (one iteration that also carries a transfer):
    give each request the block ``decode_all`` took for it and its one new token."""
    for r in batch:
        if r.computed % block_size == 0:
            r.blocks += 1
        r.n_new = 1
