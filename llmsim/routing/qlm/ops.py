"""QLM's operations that act on engines (the QLM paper's "LLM serving operations", §5): request eviction, GPU-CPU
state swapping and model warm start, as a mixin of :class:`llmsim.routing.qlm.router.QLMRouter` (pulling and
load balancing live there).

* **Eviction / state swapping** (paper section 5, "at the end of each iteration ... removes current requests from
  the running batch to make room for the requests at the VQ head"): when the head group of an instance's virtual
  queue cannot be pulled because the instance has no room (or must first swap to the group's model), running
  requests of looser-SLO groups on that instance make room: one per head-group request, latest arrival first.
  With state swapping they are *parked* in CPU memory (``view.swap_out(..., park=True)``; restored when the
  engine's waiting queue empties); where the swap space is full or absent, or with state swapping off, they are
  evicted back to the central queue (``view.evict``; one recompute prefill later, wherever QLM puts them).
  The paper gives no rule for choosing between the two (its Insight #2 reports only the outcome); this one
  follows that outcome: swap while CPU memory allows (Mistral-7B's small KV fits many requests), else evict
  (Vicuna-13B's fills it 8x sooner). At most one round per instance per ``replan_interval_s`` of simulated
  time, so the requests it removes are not removed again at once.
* **Model warm start** (paper section 5): the models of the next groups in an instance's VQ are prefetched from
  storage into its host-memory model cache (``view.prefetch_model``), so the swap to them copies from CPU memory.

Everything here reads the public view and state only; the SLO of a request QLM routed is its own bookkeeping.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from llmsim.errors import LLMSimError
from llmsim.routing.qlm.estimator import OutputLengthModel

if TYPE_CHECKING:
    from llmsim.state.cluster_state import ClusterState
    from llmsim.state.model_host import ModelHostState
    from llmsim.state.view import SimulatorView

PREFETCH_AHEAD = 2  # distinct upcoming models per instance to warm
_PRUNE_EVERY = 4096  # admissions between prunes of the SLO bookkeeping


class QLMOperations:
    """Eviction, state swapping and warm start for the QLM router (module docstring)."""

    ops: dict[str, bool]
    replan_interval_s: float
    stats: dict[str, Any]
    _vq: list[list[str]]
    _groups: dict[str, Any]
    _held: dict[int, str]

    def _clear_ops(self) -> None:
        self._slo_of: dict[int, float] = {}  # request id -> SLO (s) of the group QLM admitted it to
        self._last_room: dict[int, float] = {}  # instance -> last time it made room
        self._admits = 0
        self.stats.update({"evicted": 0, "parked": 0, "prefetched": 0})

    def _note_slo(self, rid: int, slo_s: float, st: ClusterState) -> None:
        self._slo_of[rid] = slo_s
        self._admits += 1
        if self._admits % _PRUNE_EVERY == 0:  # forget requests that left (the dict would grow with the run)
            live = {r.id for inst in st.instances for r in inst.requests} | set(self._held)
            self._slo_of = {k: v for k, v in self._slo_of.items() if k in live}

    def _make_room(self, view: SimulatorView, st: ClusterState, q: int, head: Any, now: float, swap: bool) -> None:
        """Remove looser-SLO running requests from instance ``q`` for the VQ head group ``head`` (all of them when
        ``swap``: the instance must drain before it loads the head group's model)."""
        if not (self.ops["eviction"] or self.ops["state_swapping"]) or not hasattr(view, "evict"):
            return  # (a view that cannot operate on engines, e.g. a read-only one, gets pulling only)
        if now - self._last_room.get(q, -float("inf")) < self.replan_interval_s:
            return
        inst = st.instances[q]
        victims = [r for r in inst.running if self._slo_of.get(r.id, 0.0) > head.slo_s]
        if not victims or not self._head_at_risk(st, q, head, now, swap):
            return
        self._last_room[q] = now
        victims.sort(key=lambda r: (-r.arrival, -r.id))
        for r in victims if swap else victims[:len(head.members)]:
            self._remove(view, q, r.id)

    def _head_at_risk(self, st: ClusterState, q: int, head: Any, now: float, swap: bool) -> bool:
        """Whether the head group's first request would miss its SLO if it waited for the running batch to drain
        (the mean remaining output of its longest-running request at the current per-token time, plus the model
        swap): preempting costs the victims a recompute or a transfer, and in multi-model clusters a swap back,
        so it is done only when waiting would cost the head its SLO."""
        inst = st.instances[q]
        rates = self._rates_of(inst)  # type: ignore[attr-defined]
        per_token = inst.step_time if inst.step_time > 0 else rates.d
        running = OutputLengthModel(prior_mean=self.output_prior[0], prior_std=self.output_prior[1])  # type: ignore[attr-defined]
        z = self._z  # type: ignore[attr-defined]  # the plan generator's chance level: Phi^-1(1 - alpha)
        if inst.running:
            mean, var = running.remaining([r.generated for r in inst.running])
            wait = float((mean + z * np.sqrt(var)).max()) * per_token
        else:
            wait = 0.0
        prior = self._output(head)  # type: ignore[attr-defined]
        if swap:
            h = self._hosts[q] if self._hosts else None  # type: ignore[attr-defined]
            if h is not None and head.model in h.catalog:
                wait += h.swap_s[h.catalog.index(head.model)]
        serve = rates.prefill_time(head.members[0][2]) + (prior.mean + z * prior.std) * rates.d * rates.epsilon
        return head.members[0][1] + head.slo_s - now < wait + serve

    def _remove(self, view: SimulatorView, q: int, rid: int) -> None:
        if self.ops["state_swapping"]:
            try:
                view.swap_out(q, rid, park=True)  # type: ignore[attr-defined]
                self.stats["parked"] += 1
                return
            except LLMSimError:
                pass  # no (or no more) CPU swap space on this instance: evict instead, if allowed
        if self.ops["eviction"]:
            try:
                view.evict(q, rid)  # type: ignore[attr-defined]
                self.stats["evicted"] += 1
            except LLMSimError:
                self.stats["ops_refused"] = self.stats.get("ops_refused", 0) + 1  # e.g. an operation pending

    def _warm(self, view: SimulatorView, hosts: tuple[ModelHostState | None, ...]) -> None:
        """Prefetch the next models of each multi-model instance's VQ into its host-memory cache."""
        if not self.ops["warm_start"]:
            return
        for q, h in enumerate(hosts):
            if h is None or not h.host_cache_bytes:
                continue
            now_model = h.swapping_to or h.loaded
            upcoming: list[str] = []
            for gid in self._vq[q]:
                m = self._groups[gid].model
                if m != now_model and m not in upcoming and m in h.catalog:
                    upcoming.append(m)
                if len(upcoming) == PREFETCH_AHEAD:
                    break
            for m in upcoming:
                if view.prefetch_model(q, m):  # type: ignore[attr-defined]
                    self.stats["prefetched"] += 1
