"""What routers may observe of a cluster: :class:`ClusterView` (live, or the last stale snapshot).

Two faces of one view:

* :meth:`ClusterView.state` returns the public, versioned :class:`~llmsim.state.cluster_state.ClusterState` (the type
  env observations, rewards and a live router share); with ``view_staleness`` its instance part is the
  last scrape's. :meth:`ClusterView.live_state` is the exact current state (for rewards, tests).
* the list helpers (``queue_lengths``, ``kv_demand_fractions``, ``work_left``, ...) are what the heuristic
  routers read on the hot path of million-request runs; they read the same scrape under staleness.

This module reads the engines' queues (it is inside llmsim); nothing outside llmsim needs to. It does
not import the cluster or instance modules (they import it), so the view stays below them in the layers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmsim.cluster.live_requests import LiveRequests, new_queued, new_tuple, queued_progress_terms, records
from llmsim.event_loop import ARRIVAL
from llmsim.state.cluster_state import LAYOUT_VERSION, ClusterState, InstanceRequests, InstanceState
from llmsim.state.request_sums import request_rows, sum_progress

if TYPE_CHECKING:
    from llmsim.request import Request
    from llmsim.state.model_host import ModelHostState

_INF = float("inf")

class ClusterView:
    """What a router may observe. Live by default; with staleness, the last scrape's snapshot.

    ``cluster`` is the :class:`llmsim.cluster.cluster.Cluster` that owns this view (typed loosely: that module
    imports this one)."""

    def __init__(self, cluster: Any) -> None:
        self._c = cluster
        self.num_instances = len(cluster.instances)
        self._all = list(range(self.num_instances))
        self._snapshot: dict[str, list] | None = None
        self._snap_instances: tuple[InstanceState, ...] = ()
        self._snap_at = 0.0
        self._cand_cache: dict[tuple[Any, ...], list[int]] = {}
        self.mean_output_estimate = 128.0
        # disaggregated clusters (llmsim.cluster.disagg): which stage is being routed, and each instance's role
        self.stage = "prefill"
        self._roles = None if cluster.transfers is None else [i.role for i in cluster.instances]
        # per instance, the fields of InstanceState that never change (and the engine, and the model as loaded)
        self._static = [(i.idx, i.name, i.profile.model.name, i.profile.gpu.name, i.block_size, i.max_seqs,
                         i.max_model_len, i.limits.max_servable_prompt(), i, i.profile.model)
                        for i in cluster.instances]
        self._cache: list[tuple[tuple[int, ...], InstanceState] | None] = [None] * self.num_instances
        self._queued: list[list[Any]] = [new_queued() for _ in range(self.num_instances)]  # see LiveRequests
        # per instance, the Instance.changes its cached state was checked at, and until when it holds
        self._tokens = [-1] * self.num_instances
        self._until = [0.0] * self.num_instances
        self._order: tuple[float, bool] = (-_INF, False)  # the latest instant asked about
        # the same for live_progress, with its (num_requests, progress) pairs and their keys
        self._p_tokens = [-1] * self.num_instances
        self._p_until = [0.0] * self.num_instances
        self._p_order: tuple[float, bool] = (-_INF, False)
        self._p_keys: list[tuple[int, ...] | None] = [None] * self.num_instances
        self._p_pairs: list[tuple[int, float]] = [(0, 0.0)] * self.num_instances

    @property
    def now(self) -> float:
        return self._c.env.now

    def refresh_instance(self, k: int) -> None:
        """Instance ``k`` now serves another model (a model swap ended): its fixed fields change."""
        i = self._c.instances[k]
        self._static[k] = (i.idx, i.name, i.profile.model.name, i.profile.gpu.name, i.block_size, i.max_seqs,
                           i.max_model_len, i.limits.max_servable_prompt(), i, i.profile.model)
        self._cache[k] = None
        self._tokens[k] = -1

    def model_hosts(self) -> tuple[ModelHostState | None, ...]:
        """Per instance, its models as a router may know them (``llmsim.engine.model_host.ModelHostState``: loaded,
        catalog, host-memory cache, swap in progress, held requests); None for a single-model instance. Kept
        apart from ClusterState so that saved policies' observation layout stays valid; always current."""
        now = self._c.env.now
        return tuple(None if i.host is None else i.host.state(now) for i in self._c.instances)

    @property
    def stale(self) -> bool:
        return self._snapshot is not None

    def candidates(self, req: Request) -> list[int]:
        """Instances that can ever serve ``req`` (prompt fits max_model_len and the KV cache); in a disaggregated
        cluster, of the stage being routed (``stage``): prefill and mixed instances for a new request, decode and
        single-model mixed instances of its model and KV cache dtype (:func:`takes_copies_of`) for a prefilled one."""
        if self._roles is not None:
            return self._stage_candidates(req)
        model = req.model
        if self._c.homogeneous_limits and (model is None or model in self._c.models_everywhere):
            return self._all
        key = (req.prompt_tokens, model)
        c = self._cand_cache.get(key)
        if c is None:
            c = [i for i, inst in enumerate(self._c.instances) if not inst.can_ever_serve(req)] or self._all
            if len(self._cand_cache) < 65536:
                self._cand_cache[key] = c
        return c

    def prefix_hit_tokens(self, i: int, req: Request) -> int:
        """Prompt tokens of ``req`` instance ``i`` would find in its prefix cache now (0 with caching off or no
        block ids): what a router fed by the engines' KV events knows (llm-d's precise prefix scorer). Always
        current, like :meth:`model_hosts`; O(blocks of the request)."""
        inst = self._c.instances[i]
        inst.sync(self._c.env.now, self._c.env.phase)
        return inst.kv.prefix_hit_tokens(req)

    def block_size(self, i: int) -> int:
        """The KV block size (tokens) of instance ``i``: the unit of its prefix cache."""
        return self._static[i][4]

    def prefix_caching(self, i: int) -> bool:
        """Whether instance ``i`` caches prefixes (``engine.enable_prefix_caching``)."""
        return self._c.instances[i].kv.prefix is not None

    def _stage_candidates(self, req: Request) -> list[int]:
        insts = self._c.instances
        decode = self.stage == "decode"
        fmt = kv_format(insts[req.instance]) if decode else None  # the copy's format (decode stage only)
        key = (req.prompt_tokens, fmt if decode else req.model, decode)
        c = self._cand_cache.get(key)
        if c is None:
            skip = "prefill" if decode else "decode"
            mine = [i for i, role in enumerate(self._roles or ()) if role != skip
                    and (fmt is None or takes_copies_of(insts[i], fmt))]
            c = [i for i in mine if not insts[i].can_ever_serve(req)] or mine
            if len(self._cand_cache) < 65536:
                self._cand_cache[key] = c
        return c

    def roles(self) -> tuple[str, ...]:
        """Each instance's role: mixed, prefill or decode (all mixed unless the cluster is disaggregated)."""
        return tuple(self._roles) if self._roles is not None else ("mixed",) * self.num_instances

    # ------------------------------------------------------------------ the public snapshot
    def state(self, at: tuple[float, int] | None = None) -> ClusterState:
        """What a router observes now: the live state, or (with ``view_staleness``) the last scrape's
        instances with the current cluster-level fields (the router's own queue is never stale).
        ``at``: see :meth:`live_state`."""
        if self._snapshot is None:
            return self.live_state(sync=at is None, at=at)
        return self._cluster_state(self._snap_instances, self._snap_at, self._c.env.now if at is None else at[0])

    def live_state(self, sync: bool = True, at: tuple[float, int] | None = None) -> ClusterState:
        """The exact current state, whatever the staleness (rewards judge by it; routers should not).

        ``sync=False`` leaves the engines as they are: a decode run's iterations up to now are accounted in
        closed form (the KV blocks from its residues, ``DecodeRun.used_blocks``; the step time from its
        boundaries) and in the sums and rows (:mod:`llmsim.cluster.live_requests`), so the state (every field, sum and
        row) is the one ``sync=True`` gives, without materialising the run.
        ``at=(t, phase)``: the state at a later instant ``t`` (in ``phase``) for a driver that knows no event is
        pending before it (only decode runs move in between): what an event at ``(t, phase)`` would observe,
        without one. Implies ``sync=False``."""
        if at is None:
            if sync:
                self._c.sync_all()
            env = self._c.env
            at = (env.now, env.phase)
        return self._cluster_state(self._instance_states(at=at), at[0], at[0])

    def live_progress(self, at: tuple[float, int] | None = None) -> tuple[int, tuple[tuple[int, float], ...]]:
        """``(central_queue, ((num_requests, progress) of each instance))`` of ``live_state(sync=False, at=at)``,
        the same numbers without building the state: a reward that charges the backlog at every decision tick (the
        Intelligent Router's workload-aware reward) reads this tens of thousands of times per episode. An
        instance's pair is kept while no event of it has run, nothing was submitted to it (``Instance.changes``)
        and its decode run has not passed a boundary; a recomputed ``progress`` sums the running requests
        (shifted, :mod:`llmsim.cluster.live_requests`) and then the kept terms of the queued ones, as
        ``InstanceState.progress`` does."""
        c = self._c
        if at is None:
            env = c.env
            now, phase = env.now, env.phase
        else:
            now, phase = at
        order = (now, phase > ARRIVAL)
        if order < self._p_order:
            self._p_tokens = [-1] * self.num_instances  # asked about an earlier instant: recompute
        self._p_order = order
        tokens, until, pairs = self._p_tokens, self._p_until, self._p_pairs
        for k, inst in enumerate(c.instances):
            if tokens[k] == inst.changes and now < until[k]:
                continue
            run = inst.decode_run
            shift = 0
            nxt = _INF  # when the pair changes without an event: the run's next unseen boundary
            if run is not None:
                j = run.seen(now, phase)
                shift = j - run.applied
                if j < run.end - 1:
                    nxt = run.bounds[j]
            tokens[k] = inst.changes
            until[k] = nxt
            key = (inst.iterations + shift, inst.queued.version, inst.queued.started_version, len(inst.running))
            if self._p_keys[k] == key:
                continue  # e.g. an event that changed nothing here
            self._p_keys[k] = key
            terms = queued_progress_terms(inst, self._queued[k])
            inst.settle_running()  # (a decode cohort writes its requests' counts lazily: llmsim.engine.cohort)
            p = sum_progress(inst.running, shift=shift)
            for t in terms:
                p += t
            pairs[k] = (len(inst.running) + len(inst.waiting) + len(inst.swapped), p)
        return len(c.central) + len(c.deferred), tuple(pairs)

    def _cluster_state(self, instances: tuple[InstanceState, ...], taken_at: float, now: float) -> ClusterState:
        c = self._c
        return new_tuple(ClusterState, (now, taken_at, len(c.central) + len(c.deferred), c.arrivals_done,
                                        c.num_arrived, self.mean_output_estimate, instances, LAYOUT_VERSION))

    def _instance_states(self, at: tuple[float, int]) -> tuple[InstanceState, ...]:
        """Every instance's state at ``at`` (engines synced by the caller or not), per-request detail read on
        demand. An instance's previous state is reused while it is unchanged: up to its decode run's next
        boundary when no event of it has run and nothing was submitted to it (``Instance.changes``), which costs
        one comparison (an env's per-tick reward between events); else while its key is (same iterations and
        queues, e.g. an event that changed nothing)."""
        now, phase = at
        c = self._c
        clock = c.clock
        zero = clock.scrape_paused and now > clock.last_scrape + clock.metrics_interval  # see throughput()
        thr = [0.0] * self.num_instances if zero else clock.recent_throughput
        order = (now, phase > ARRIVAL)  # an arrival at t does not see a boundary at t; later phases do
        if order < self._order:
            self._tokens = [-1] * self.num_instances  # asked about an earlier instant: check every key
        self._order = order
        cache, tokens, until = self._cache, self._tokens, self._until
        out = []
        for k, (idx, name, model, gpu, bs, ms, mml, mpt, inst, spec) in enumerate(self._static):
            if tokens[k] == inst.changes and now < until[k]:
                st = cache[k][1]  # type: ignore[index]  # a matching token means a kept entry
                if st.throughput == thr[k]:
                    out.append(st)
                    continue
            run = inst.decode_run
            it = inst.iterations
            nxt = _INF  # when this instance's state changes without an event: its run's next unseen boundary
            if run is not None:
                j = run.seen(now, phase)
                it += j - run.applied
                b = run.bounds
                if j < run.end - 1:
                    nxt = b[j]
            tokens[k] = inst.changes
            until[k] = nxt
            key = (it, len(inst.running), len(inst.waiting), len(inst.swapped), inst.queued.version)
            # (= live_requests.engine_key(inst, now, phase))
            hit = cache[k]
            if hit is not None and hit[0] == key:
                if hit[1].throughput == thr[k]:
                    out.append(hit[1])
                    continue
                detail = hit[1].detail  # only the throughput moved: the requests (and their memo) are unchanged
            else:
                detail = LiveRequests(inst, key, at, self._queued[k])
            if run is None:
                used = inst.kv_total - inst.kv.free
                step = inst.step_time
            else:  # (what a sync at ``at`` would leave: Instance.step_time and the KV cache's use)
                step = b[j] - (b[j - 1] if j else run.start) if j < len(b) else 0.0
                used = (inst.kv_total - inst.kv.free if it == inst.iterations
                        else run.used_blocks(j, bs) - inst.kv.shared + inst.kv.outside)  # (llmsim.engine.kv.settle)
            st = new_tuple(InstanceState, (idx, name, model, gpu, True, key[1], key[2], key[3], used,
                                           inst.kv_total, bs, ms, mml, mpt, step, thr[k], detail, spec))
            cache[k] = (key, st)
            out.append(st)
        return tuple(out)

    def _snapshot_states(self) -> tuple[InstanceState, ...]:
        """Every instance's state now with its requests copied (stale snapshots; engines synced by the caller)."""
        thr = self.throughput()
        out = []
        for k, (idx, name, model, gpu, bs, ms, mml, mpt, inst, spec) in enumerate(self._static):
            detail = InstanceRequests(records(inst.running), records(inst.waiting), records(inst.swapped))
            out.append(new_tuple(InstanceState, (idx, name, model, gpu, True, len(inst.running), len(inst.waiting),
                                                 len(inst.swapped), inst.kv_total - inst.kv.free, inst.kv_total, bs,
                                                 ms, mml, mpt, inst.step_time, thr[k], detail, spec)))
        return tuple(out)

    # ------------------------------------------------------------------ list helpers of the heuristic routers
    def queue_lengths(self) -> list[int]:
        if self._snapshot is not None:
            return self._snapshot["queue"]
        return [len(i.waiting) + len(i.running) + len(i.swapped) + (len(i.host.held) if i.host else 0)
                for i in self._c.instances]

    def num_waiting(self) -> list[int]:
        if self._snapshot is not None:
            return self._snapshot["waiting"]
        return [len(i.waiting) + (len(i.host.held) if i.host else 0) for i in self._c.instances]

    def num_running(self) -> list[int]:
        if self._snapshot is not None:
            return self._snapshot["running"]
        return [len(i.running) for i in self._c.instances]

    def kv_used_fractions(self) -> list[float]:
        if self._snapshot is not None:
            return self._snapshot["kv"]
        self._c.sync_all()
        return [(i.kv_total - i.kv.free) / i.kv_total for i in self._c.instances]

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

    def throughput(self, now: float | None = None) -> list[float]:
        """Output tokens/s of each instance over the last completed scrape interval (as of ``now``, default now).

        Scrapes pause while the cluster is idle (see :mod:`llmsim.cluster.cluster`); once a skipped scrape would
        have completed an interval without tokens, this reads zero, as an unpaused scrape would have set.
        """
        clock = self._c.clock
        if clock.scrape_paused and (self._c.env.now if now is None else now) > clock.last_scrape + \
                clock.metrics_interval:
            return [0.0] * self.num_instances
        return list(clock.recent_throughput)

    def requests(self, i: int) -> list[tuple[int, int, int, float | None, str]]:
        """(id, prompt_tokens, generated, predicted_output, state) of every request on instance ``i`` (live;
        :meth:`state` has the same per request, honouring staleness)."""
        self._c.sync_all()
        inst = self._c.instances[i]
        return request_rows(inst.running, inst.waiting, inst.swapped)

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
            "kv": [(i.kv_total - i.kv.free) / i.kv_total for i in insts],
            "kv_demand": [_kv_demand(i) for i in insts],
            "work": [_work_left(i, est) for i in insts],
        }
        self._snap_instances = self._snapshot_states()
        self._snap_at = c.env.now


def kv_format(inst: Any) -> tuple[str, int]:
    """What a prefill instance's KV copy needs of its decode instance: the same model and the same KV bytes per
    token (the cache dtype; vLLM's KV connector refuses a peer whose model or cache dtype differs)."""
    m = inst.profile.model
    return m.name, m.kv_bytes_per_token


def takes_copies_of(inst: Any, fmt: tuple[str, int]) -> bool:
    """Whether ``inst`` may decode KV copies of format ``fmt``: a decode or mixed instance of one model (a
    multi-model instance could swap its model, and its KV cache, while a copy is reserved or on the way)."""
    return inst.role != "prefill" and inst.host is None and kv_format(inst) == fmt


def _kv_demand(inst: Any) -> float:
    bs = inst.block_size
    pending = sum(-(-(r.prompt_tokens + r.generated) // bs) for r in inst.waiting)
    return (inst.kv_total - inst.kv.free + pending) / inst.kv_total


def _work_left(inst: Any, est: float) -> float:
    w = 0.0
    for q in (inst.running, inst.waiting, inst.swapped):
        for r in q:
            pred = r.predicted_output if r.predicted_output is not None else est
            w += (r.prompt_tokens + r.generated - r.computed) + max(pred - r.generated, 1.0)
    return w


class ClusterOpsView(ClusterView):
    """The router's view, plus the engine operations a policy may trigger (they act on the live engines even
    when the view is stale; see ``llmsim.engine.ops`` for when they take effect and what they cost)."""

    def evict(self, instance: int, request_id: int) -> None:
        """``Cluster.evict``: send the request back to the central queue, keeping its generated tokens."""
        self._c.evict(instance, request_id)

    def swap_out(self, instance: int, request_id: int, park: bool = False) -> None:
        """``Cluster.swap_out``: move a running request's KV blocks to the instance's CPU swap space."""
        self._c.swap_out(instance, request_id, park)

    def prefetch_model(self, instance: int, model: str) -> bool:
        """``Cluster.prefetch_model``: warm a model in the instance's host-memory cache (QLM's warm start)."""
        return self._c.prefetch_model(instance, model)
