"""What routers may observe of a cluster: :class:`ClusterView` (live, or the last stale snapshot).

Two faces of one view:

* :meth:`ClusterView.state` returns the public, versioned :class:`~llmsim.state.ClusterState` (the type
  env observations, rewards and a live router share); with ``view_staleness`` its instance part is the
  last scrape's. :meth:`ClusterView.live_state` is the exact current state (for rewards, tests).
* the list helpers (``queue_lengths``, ``kv_demand_fractions``, ``work_left``, ...) are what the heuristic
  routers read on the hot path of million-request runs; they read the same scrape under staleness.

This module reads the engines' queues (it is inside llmsim); nothing outside llmsim needs to. It does
not import the cluster or instance modules (they import it), so the view stays below them in the layers.
"""

from __future__ import annotations

from itertools import islice
from typing import TYPE_CHECKING, Any

from llmsim.state import (
    LAYOUT_VERSION,
    ClusterState,
    InstanceRequests,
    InstanceState,
    RequestState,
    StaleStateError,
    sum_progress,
)

if TYPE_CHECKING:
    from llmsim.request import Request

_new = tuple.__new__  # builds a NamedTuple without its Python-level __new__ (a fifth of the cost)


def _records(queue: Any) -> tuple[RequestState, ...]:
    """RequestStates of an engine queue (the engine's requests have RequestState's attribute names)."""
    return tuple([_new(RequestState, (r.id, r.prompt_tokens, r.generated, r.computed, r.predicted_output, r.task,
                                      r.arrival)) for r in queue])


def _engine_key(inst: Any) -> tuple[int, int, int, int]:
    """Changes whenever anything a RequestState or an InstanceState holds can have changed on ``inst``: an
    iteration (slow path, or fast-path iterations materialised by a sync) or a queue's membership."""
    return inst.iterations, len(inst.running), len(inst.waiting), len(inst.swapped)


class _LiveRequests(InstanceRequests):
    """An instance's requests, read from its engine when first asked for: valid while that engine has not
    changed since the state was built (:func:`_engine_key`), else StaleStateError.

    Most decisions read a few sums or a handful of requests; copying every request of every instance at
    every decision would cost more than the rest of an env step. And an unchanged engine's state (with
    its sums) is reused by the next ClusterState as it is."""

    __slots__ = ("_inst", "_key")

    def __init__(self, inst: Any, key: tuple[int, int, int, int]) -> None:
        self._inst = inst
        self._key = key
        self._running = self._waiting = self._swapped = None
        self._memo = {}

    def _rows(self) -> tuple[Any, Any, Any]:
        inst = self._inst
        if _engine_key(inst) != self._key:
            raise StaleStateError(
                f"the requests of instance {inst.name} in a ClusterState were read after that instance changed "
                "(the simulation moved on); read them while the state is current, or keep a copy "
                "(ClusterState.to_dict)")
        return inst.running, inst.waiting, inst.swapped

    def progress(self) -> float:  # the per-tick hot path of spec 001's reward: no memo round trip
        v = self._memo.get("progress")
        if v is None:
            inst = self._inst
            if _engine_key(inst) != self._key:
                self._rows()  # raises
            v = self._memo["progress"] = sum_progress(inst.running, inst.waiting, inst.swapped)
        return v

    @property
    def running(self) -> tuple[RequestState, ...]:
        if self._running is None:
            self._running = _records(self._rows()[0])
        return self._running

    @property
    def waiting(self) -> tuple[RequestState, ...]:
        if self._waiting is None:
            self._waiting = _records(self._rows()[1])
        return self._waiting

    @property
    def swapped(self) -> tuple[RequestState, ...]:
        if self._swapped is None:
            self._swapped = _records(self._rows()[2])
        return self._swapped

    def head(self, queue: str, n: int) -> tuple[RequestState, ...]:
        q = self._rows()[("running", "waiting", "swapped").index(queue)]
        return _records(q if len(q) <= n else list(islice(q, n)))


class ClusterView:
    """What a router may observe. Live by default; with staleness, the last scrape's snapshot.

    ``cluster`` is the :class:`llmsim.cluster.Cluster` that owns this view (typed loosely: that module
    imports this one)."""

    def __init__(self, cluster: Any) -> None:
        self._c = cluster
        self.num_instances = len(cluster.instances)
        self._all = list(range(self.num_instances))
        self._snapshot: dict[str, list] | None = None
        self._snap_instances: tuple[InstanceState, ...] = ()
        self._snap_at = 0.0
        self._cand_cache: dict[tuple[int, int], list[int]] = {}
        self.mean_output_estimate = 128.0
        # per instance, the fields of InstanceState that never change (and the engine)
        self._static = [(i.idx, i.name, i.profile.model.name, i.profile.gpu.name, i.block_size, i.max_seqs,
                         i.max_model_len, i.max_servable_prompt, i) for i in cluster.instances]
        self._cache: list[tuple[tuple[int, int, int, int], InstanceState] | None] = [None] * self.num_instances

    @property
    def now(self) -> float:
        return self._c.env.now

    @property
    def stale(self) -> bool:
        return self._snapshot is not None

    def candidates(self, req: Request) -> list[int]:
        """Instances that can ever serve ``req`` (prompt fits max_model_len and the KV cache)."""
        if self._c.homogeneous_limits:
            return self._all
        key = (req.prompt_tokens, 0)
        c = self._cand_cache.get(key)
        if c is None:
            c = [i for i, inst in enumerate(self._c.instances) if not inst.can_ever_serve(req)] or self._all
            if len(self._cand_cache) < 65536:
                self._cand_cache[key] = c
        return c

    # ------------------------------------------------------------------ the public snapshot
    def state(self) -> ClusterState:
        """What a router observes now: the live state, or (with ``view_staleness``) the last scrape's
        instances with the current cluster-level fields (the router's own queue is never stale)."""
        if self._snapshot is None:
            return self.live_state()
        return self._cluster_state(self._snap_instances, self._snap_at)

    def live_state(self) -> ClusterState:
        """The exact current state, whatever the staleness (rewards judge by it; routers should not)."""
        self._c.sync_all()
        return self._cluster_state(self._instance_states(), self._c.env.now)

    def _cluster_state(self, instances: tuple[InstanceState, ...], taken_at: float) -> ClusterState:
        c = self._c
        return _new(ClusterState, (c.env.now, taken_at, len(c.central) + len(c.deferred), c.arrivals_done,
                                   c.num_arrived, self.mean_output_estimate, instances, LAYOUT_VERSION))

    def _instance_states(self, eager: bool = False) -> tuple[InstanceState, ...]:
        """Every instance's state (engines synced by the caller); per-request detail read on demand (an
        unchanged engine's previous state is reused), or copied now (``eager``: stale snapshots)."""
        thr = self.throughput()
        cache = self._cache
        out = []
        for k, (idx, name, model, gpu, bs, ms, mml, mpt, inst) in enumerate(self._static):
            key = (inst.iterations, len(inst.running), len(inst.waiting), len(inst.swapped))  # = _engine_key(inst)
            hit = cache[k]
            if eager:
                detail = InstanceRequests(_records(inst.running), _records(inst.waiting), _records(inst.swapped))
            elif hit is not None and hit[0] == key:
                if hit[1].throughput == thr[k]:
                    out.append(hit[1])
                    continue
                detail = hit[1].detail  # only the throughput moved: the requests (and their memo) are unchanged
            else:
                detail = _LiveRequests(inst, key)
            total = inst.kv_total
            st = _new(InstanceState, (idx, name, model, gpu, True, key[1], key[2], key[3], total - inst.kv.free,
                                      total, bs, ms, mml, mpt, inst.step_time, thr[k], detail))
            if not eager:
                cache[k] = (key, st)
            out.append(st)
        return tuple(out)

    # ------------------------------------------------------------------ list helpers of the heuristic routers
    def queue_lengths(self) -> list[int]:
        if self._snapshot is not None:
            return self._snapshot["queue"]
        return [len(i.waiting) + len(i.running) + len(i.swapped) for i in self._c.instances]

    def num_waiting(self) -> list[int]:
        if self._snapshot is not None:
            return self._snapshot["waiting"]
        return [len(i.waiting) for i in self._c.instances]

    def num_running(self) -> list[int]:
        if self._snapshot is not None:
            return self._snapshot["running"]
        return [len(i.running) for i in self._c.instances]

    def kv_used_fractions(self) -> list[float]:
        if self._snapshot is not None:
            return self._snapshot["kv"]
        self._c.sync_all()
        return [i.kv_used / i.kv_total for i in self._c.instances]

    def kv_demand_fractions(self) -> list[float]:
        """KV in use plus the prompt blocks of waiting requests, as a fraction of capacity."""
        if self._snapshot is not None:
            return self._snapshot["kv_demand"]
        self._c.sync_all()
        return [_kv_demand(i) for i in self._c.instances]

    def work_left(self) -> list[float]:
        if self._snapshot is not None:
            return self._snapshot["work"]
        self._c.sync_all()
        est = self.mean_output_estimate
        return [_work_left(i, est) for i in self._c.instances]

    def throughput(self) -> list[float]:
        """Output tokens/s of each instance over the last completed scrape interval.

        Scrapes pause while the cluster is idle (see :mod:`llmsim.cluster`); once a skipped scrape would
        have completed an interval without tokens, this reads zero, as an unpaused scrape would have set.
        """
        c = self._c
        if c.scrape_paused and c.env.now > c.last_scrape + c.metrics_interval:
            return [0.0] * self.num_instances
        return list(c.recent_throughput)

    def requests(self, i: int) -> list[tuple[int, int, int, float | None, str]]:
        """(id, prompt_tokens, generated, predicted_output, state) of every request on instance ``i`` (live;
        :meth:`state` has the same per request, honouring staleness)."""
        self._c.sync_all()
        inst = self._c.instances[i]
        out = [(r.id, r.prompt_tokens, r.generated, r.predicted_output, "running") for r in inst.running]
        out += [(r.id, r.prompt_tokens, r.generated, r.predicted_output, "waiting") for r in inst.waiting]
        out += [(r.id, r.prompt_tokens, r.generated, r.predicted_output, "swapped") for r in inst.swapped]
        return out

    @property
    def central_queue_length(self) -> int:
        return len(self._c.central)

    def take_snapshot(self) -> None:
        """Record what the metrics endpoints show now (called by the stale-view refresh)."""
        c = self._c
        c.sync_all()
        est = self.mean_output_estimate
        insts = c.instances
        self._snapshot = {
            "queue": [len(i.waiting) + len(i.running) + len(i.swapped) for i in insts],
            "waiting": [len(i.waiting) for i in insts],
            "running": [len(i.running) for i in insts],
            "kv": [i.kv_used / i.kv_total for i in insts],
            "kv_demand": [_kv_demand(i) for i in insts],
            "work": [_work_left(i, est) for i in insts],
        }
        self._snap_instances = self._instance_states(eager=True)
        self._snap_at = c.env.now


def _kv_demand(inst: Any) -> float:
    bs = inst.block_size
    pending = sum(-(-(r.prompt_tokens + r.generated) // bs) for r in inst.waiting)
    return (inst.kv_used + pending) / inst.kv_total


def _work_left(inst: Any, est: float) -> float:
    w = 0.0
    for q in (inst.running, inst.waiting, inst.swapped):
        for r in q:
            pred = r.predicted_output if r.predicted_output is not None else est
            w += (r.prompt_tokens + r.generated - r.computed) + max(pred - r.generated, 1.0)
    return w
