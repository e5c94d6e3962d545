"""A router's view built from a :class:`~llmsim.state.cluster_state.ClusterState` alone (what a live router hands one).

Every llmsim router reads a :class:`~llmsim.cluster.view.ClusterView`: ``state()`` (the public snapshot) and
the list helpers of the heuristics (``queue_lengths``, ``kv_demand_fractions``, ``work_left``, ...). In the
simulator those read the engines; in front of real backends there are no engines, only the ClusterState a
live router assembles from each backend's ``/metrics`` and its own in-flight bookkeeping. :class:`StateView`
answers the same questions from that state, with the same formulas, so a heuristic (or an exported policy)
makes the same decision on the same state whichever side of the wire it runs on (tested against
``ClusterView`` on simulated clusters).

Two live-only knobs: instances that are not ``up`` are never candidates (unless none is), and ``allowed``
restricts the candidates further (a client that names one backend model).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from llmsim.state.cluster_state import ClusterState
from llmsim.state.request_sums import request_rows

if TYPE_CHECKING:
    from llmsim.request import Request


class StateView:
    """ClusterView's read API over a fixed ClusterState (see the module docstring)."""

    def __init__(self, state: ClusterState, allowed: Collection[int] | None = None) -> None:
        self._state = state
        self.num_instances = len(state.instances)
        self.mean_output_estimate = state.mean_output
        self.allowed = None if allowed is None else frozenset(allowed)
        self._memo: dict[str, list] = {}

    @property
    def now(self) -> float:
        return self._state.now

    @property
    def stale(self) -> bool:
        return self._state.taken_at < self._state.now

    def state(self) -> ClusterState:
        return self._state

    def candidates(self, req: Request) -> list[int]:
        """Up (and allowed) instances whose KV cache and context window can ever hold the prompt; if none can,
        the up (allowed) ones, as the simulator's view falls back to every instance."""
        insts = self._state.instances
        pool = [i.idx for i in insts if i.up and (self.allowed is None or i.idx in self.allowed)]
        if not pool:
            pool = [i.idx for i in insts if self.allowed is None or i.idx in self.allowed] or list(
                range(self.num_instances))
        fits = [k for k in pool if req.prompt_tokens <= insts[k].max_prompt_tokens]
        return fits or pool

    def queue_lengths(self) -> list[int]:
        return [i.num_running + i.num_waiting + i.num_swapped for i in self._state.instances]

    def num_waiting(self) -> list[int]:
        return [i.num_waiting for i in self._state.instances]

    def num_running(self) -> list[int]:
        return [i.num_running for i in self._state.instances]

    def kv_used_fractions(self) -> list[float]:
        return [i.kv_blocks_used / i.kv_blocks_total if i.kv_blocks_total else 1.0 for i in self._state.instances]

    def kv_demand_fractions(self) -> list[float]:
        """KV in use plus the prompt blocks of waiting requests, as a fraction of capacity."""
        out = self._memo.get("kv_demand")
        if out is None:
            out = []
            for i in self._state.instances:
                bs = i.block_size
                pending = sum(-(-(r.prompt_tokens + r.generated) // bs) for r in i.waiting)
                out.append((i.kv_blocks_used + pending) / i.kv_blocks_total if i.kv_blocks_total else 1.0)
            self._memo["kv_demand"] = out
        return out

    def work_left(self) -> list[float]:
        """Prompt tokens still to prefill plus predicted output tokens still to decode (the mean output
        length stands in for a missing prediction), per instance."""
        out = self._memo.get("work")
        if out is None:
            est = self.mean_output_estimate
            out = []
            for i in self._state.instances:
                w = 0.0
                for r in i.requests:
                    pred = r.predicted_output if r.predicted_output is not None else est
                    w += (r.prompt_tokens + r.generated - r.computed) + max(pred - r.generated, 1.0)
                out.append(w)
            self._memo["work"] = out
        return out

    def throughput(self, now: float | None = None) -> list[float]:
        return [i.throughput for i in self._state.instances]

    def requests(self, i: int) -> list[tuple[int, int, int, float | None, str]]:
        """(id, prompt_tokens, generated, predicted_output, state) of every request on instance ``i``."""
        inst = self._state.instances[i]
        return request_rows(inst.running, inst.waiting, inst.swapped)

    @property
    def central_queue_length(self) -> int:
        return self._state.central_queue
