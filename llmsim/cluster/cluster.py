"""A cluster of heterogeneous serving instances behind a routing hook.

Arrivals are fed lazily from the workload (one pending arrival event at a time; :meth:`Cluster.run` with a router
whose next choices are known in advance reads as many requests ahead as there are instances, so that each engine
knows when its own next arrival comes), checked (see :func:`llmsim.request.check_request`), routed at their arrival
instant, and either submitted to an instance, held in a central queue (WAIT, decided again whenever a request
finishes and at the optional ``central_queue_tick``) or dropped (DROP, counted). Periodic work - the metrics scrape
every ``metrics_interval``, the stale-view refresh every ``view_staleness``, the central-queue tick - lives in
:mod:`llmsim.cluster.clock`.

When a run ends (:meth:`Cluster.run`): the event loop stops as soon as only bookkeeping events
(scrapes, view refreshes) are pending - they run once more to record the final state, then the run
is over. So a run ends when nothing can change any more: no arrival left, every engine idle, and no
routing retry pending that could succeed. Requests the router still holds are counted ``never_routed``:

* without a tick, WAITing requests are retried only at completions, so with an idle cluster and no
  arrivals left they can never move;
* with a tick, the router is asked again at every tick; a pass in which it answers WAIT for every
  queued request while no engine is busy and its view has settled (the stale snapshot and the
  throughput window already show the idle cluster) is an *idle pass*. After ``wait_patience``
  (default 100) consecutive idle passes the tick sleeps until the next arrival (or until an engine
  is used again); with no arrival left, the run ends. A router that waits for time alone to pass
  (a batching timeout) therefore gets 100 ticks of an idle cluster, never an unbounded number.

``DEFER`` (``-3``) hands a decision to an outside driver (the Gymnasium envs, which call :meth:`Cluster.start` and
step the clock themselves; :meth:`Cluster.feed` lets a planner replace the requests to come); under
:meth:`Cluster.run` nothing could ever decide it, so it is a :class:`ConfigError`. A driver that stops with
requests still deferred gets them counted ``never_routed`` by :meth:`Cluster.finish`.

Any other router answer that is not an ``int`` (numpy integers are accepted) or that names no
instance is a :class:`ConfigError` naming the router and the value.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from numbers import Integral
from typing import Any

from llmsim.cluster.assemble import build_engines, disaggregate, link_colocated
from llmsim.cluster.clock import ClusterClock
from llmsim.cluster.config import InstanceConfig, check_instance_configs
from llmsim.cluster.view import ClusterOpsView
from llmsim.engine.handoff import DECODE
from llmsim.engine.instance import Instance
from llmsim.errors import ConfigError, LLMSimError
from llmsim.event_loop import ARRIVAL, MAX_EVENTS_PER_INSTANT, ROUTE, SimEnv
from llmsim.metrics.recorder import Recorder
from llmsim.request import MAX_SIM_TIME, MAX_TOKENS, NOT_SET, Request, SeenIds, check_request, iter_workload
from llmsim.routing.base import DEFER, DROP, WAIT, Router, default_decode_choice
from llmsim.schema import SimConfig

__all__ = ["Cluster"]

_INF = math.inf
WAIT_PATIENCE = 100  # consecutive idle tick passes before the tick sleeps (module docstring)


def _check_int(name: str, v: Any, low: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ConfigError(f"{name}: expected an integer >= {low}, got {v!r}")
    return v


class Cluster:
    """Instances behind a router, fed by a workload (module docstring). Its periodic work is ``clock``
    (:class:`llmsim.cluster.clock.ClusterClock`); what routers see is ``view``; ``central`` holds the requests the
    router keeps waiting and ``deferred`` those handed to an outside driver (read them; outside drivers change them
    only through :class:`llmsim.cluster.driver.ClusterDriver`)."""

    def __init__(
        self,
        instances: Sequence[InstanceConfig],  # checked below (a list annotation would be a compiled build's TypeError)
        router: Router,
        *,
        view_staleness: float = 0.0,
        metrics_interval: float = 1.0,
        central_queue_tick: float | None = None,
        on_unservable: str = "error",
        unservable_key: str = "sim.on_unservable",  # the key its error tells to set: the caller's name for it
        colocation_interference: float = 1.0,
        kv_link: str = "infiniband",
        kv_transfer: str = "overlap",
        wait_patience: int = WAIT_PATIENCE,
        max_events_per_instant: int = MAX_EVENTS_PER_INSTANT,
        recorder: Recorder | None = None,
    ) -> None:
        instances = check_instance_configs(instances)
        # the sim group's schema (the CLI and the envs check the same one): finite, in range, named sim.<key>
        sim = SimConfig.parse({"view_staleness": view_staleness, "metrics_interval": metrics_interval,
                               "central_queue_tick": central_queue_tick, "on_unservable": on_unservable,
                               "colocation_interference": colocation_interference, "kv_link": kv_link,
                               "kv_transfer": kv_transfer})
        _check_int("wait_patience", wait_patience, 1)
        self.max_events_per_instant = _check_int("max_events_per_instant", max_events_per_instant, 8)
        self.env = SimEnv()
        self.recorder = recorder if recorder is not None else Recorder()  # a StreamedRecorder writes as it goes
        self.recorder.subscribe(self._on_finish)
        self.router: Any = router  # (Any: its answers are checked here, whatever its annotations say)
        self.on_unservable, self.unservable_key = on_unservable, unservable_key
        self.instance_configs = instances
        self.instances: list[Instance] = build_engines(instances, self.env, self.recorder,
                                                       lambda i: self.view.refresh_instance(i.idx))
        self._sole = self.instances[0] if len(self.instances) == 1 else None  # it learns when arrivals come
        link_colocated(instances, self.instances, float(sim.colocation_interference))
        self.transfers = disaggregate(instances, self, str(sim.kv_link), str(sim.kv_transfer))
        self._summarise_limits()
        self.view = ClusterOpsView(self)
        for inst in self.instances:
            inst.ops.on_evict = self._on_evict
        self.central: deque[Request] = deque()
        self.deferred: deque[Request] = deque()
        self.clock = ClusterClock(self, float(sim.metrics_interval), float(sim.view_staleness),
                                  None if sim.central_queue_tick is None else float(sim.central_queue_tick),
                                  wait_patience)
        self._retry_at = -1.0
        self._source: Iterator[Request] | None = None
        self._arrivals_done = True
        self._arrived = SeenIds()  # the arrivals' count and ids: a second request with one of them is refused
        self._last_arrival = -_INF
        self._first_arrival = True
        self._out_sum = 0
        self._out_n = 0
        self._depth = 0  # requests pulled ahead of their arrival (run(): _pull_ahead)
        self._ahead: deque[Request] = deque()
        self._ahead_started = False
        self._self_driven = False  # run() drives the clock: no outside driver can take DEFERred requests

    def _summarise_limits(self) -> None:
        """What routing checks on every arrival, computed once: models served, the longest servable prompt."""
        hosted = [set(i.host.profiles) if i.host else {i.profile.model.name} for i in self.instances]
        self.served_models = set().union(*hosted)
        self.models_everywhere = set.intersection(*hosted)  # requests needing these fit any instance's model
        self._max_servable_prompt = max(i.limits.max_servable_prompt() for i in self.instances if i.role != DECODE)
        limits = {(i.max_model_len, i.limits.max_prompt_blocks() * i.block_size) for i in self.instances}
        self.homogeneous_limits = len(limits) == 1
        # every instance can serve any request for no particular model up to the longest servable prompt: one limit,
        # fixed for the run (a multi-model instance's cache changes with its model, a decode instance takes none)
        self._fits_anywhere = self._max_servable_prompt if self.homogeneous_limits and all(
            i.host is None and i.role != DECODE for i in self.instances) else -1

    def route_decode(self, r: Request, src: Instance) -> int:
        """The decode instance of ``r``, prefilled on ``src`` (the router's second stage; llmsim.cluster.disagg)."""
        view = self.view
        view.stage = "decode"
        try:
            route = getattr(self.router, "route_decode", None)
            d = route(r, view) if route is not None else default_decode_choice(r, view)
            cands = view.candidates(r)
        finally:
            view.stage = "prefill"
        if type(d) is not int and not isinstance(d, bool) and isinstance(d, Integral):
            d = int(d)
        if d == DEFER and not self._self_driven:
            return d  # an outside driver (a Gymnasium env) chooses: KVTransfers.dispatch
        if d not in cands:
            name = getattr(self.router, "name", type(self.router).__name__)
            raise ConfigError(f"router {name!r} chose {d!r} as the decode instance of request {r.id}; expected one "
                              f"of the decode-stage candidates {cands} (decode or mixed instances of "
                              f"{src.profile.model.name} that can hold it)")
        return d

    # ------------------------------------------------------------------ driving
    def start(self, workload: Iterable[Request]) -> None:
        """Feed ``workload`` and start the periodic chains; a driver then steps ``self.env``."""
        self._first_arrival = True
        self.feed(workload)
        self.clock.start()

    def feed(self, workload: Iterable[Request]) -> None:
        """Take the requests to arrive from ``workload``, from now on, instead of any not arrived yet (a planner's
        what-if on a copy of a driven cluster: a sampled future)."""
        if self._depth and self._ahead_started:
            raise LLMSimError("Cluster.feed: a cluster run by Cluster.run reads its workload ahead; feed a driven one")
        self.env.cancel_calls(self._on_arrival)
        self._source = iter_workload(workload)
        self._arrivals_done = False
        self._last_arrival = self.env.now
        self._schedule_next_arrival()

    def run(self, workload: Iterable[Request]) -> None:
        """Simulate ``workload`` to the end: until nothing but bookkeeping is left (module docstring). Progress is
        observed through the recorder (``llmsim.metrics.progress``)."""
        self._self_driven = True
        self._depth = self._lookahead_depth()  # (only here: an outside driver may read the workload as it goes)
        self.start(workload)
        self.env.run_active(self.max_events_per_instant)
        self.clock.flush()
        end = self.end_time()
        self._report_stalled(end)
        self.finish(end)

    def end_time(self) -> float:
        """When the run was over: the last arrival, the last tick, or the scrape that recorded the final idle
        state, whichever is latest. Not ``env.now``: a superseded engine event left in the queue (the fast path
        leaves some, stepping does not) may run later and change nothing."""
        return max(self.clock.last_scrape, self._last_arrival, self.clock.last_tick)

    def finish(self, at: float | None = None) -> None:
        """Report whatever is still undecided (nothing is silently lost), at time ``at`` (default: now)."""
        now = self.env.now if at is None else at
        while self.central:
            self.recorder.drop(self.central.popleft(), "never_routed", now)
        while self.deferred:
            self.recorder.drop(self.deferred.popleft(), "never_routed", now)

    def _report_stalled(self, now: float) -> None:
        """After run(): an engine still busy is a bug; requests an idle engine keeps are counted, not lost."""
        for inst in self.instances:
            if inst.busy or inst.handoff is not None and inst.handoff.pending:  # (a waiting copy: a lost request)
                raise LLMSimError(f"simulation ended with instance {inst.idx} ({inst.name or inst.profile.name}) busy "
                                  f"or with KV copies waiting, no event pending, at t={now} s; a bug in its engine")
            inst.settle_running()
            for q in (inst.running, inst.waiting, inst.swapped):
                for r in q:  # a batch policy that idles with requests on purpose: they can never finish
                    self.recorder.drop(r, "stalled_in_engine", now)
                q.clear()
            inst.queued.cleared()
            inst.changes += 1

    @property
    def arrivals_done(self) -> bool:
        """No request will arrive any more (the workload is exhausted)."""
        return self._arrivals_done

    @property
    def num_arrived(self) -> int:
        """Requests that have arrived so far (routed, held, deferred or dropped)."""
        return self._arrived.count

    @property
    def done(self) -> bool:
        return self._arrivals_done and not self.central and not self.deferred and all(
            not i.busy for i in self.instances
        ) and not (self.transfers is not None and self.transfers.in_flight)

    def sync_all(self) -> None:
        env = self.env
        now = env.now
        phase = env.phase
        for inst in self.instances:
            if inst.decode_run is not None or inst.cohort is not None:
                inst.sync(now, phase)  # (a decode cohort's requests may lag without a run: llmsim.engine.cohort)

    # ------------------------------------------------------------------ arrivals and routing
    def _pull(self) -> Request | None:
        """The workload's next request, checked (None when it is exhausted)."""
        r: Any
        try:
            r = next(self._source)  # type: ignore[arg-type]
        except StopIteration:
            return None
        # the per-request check: one expression on the hot path, the slow path only explains or converts. (r is Any and
        # its type is tested through a local: narrowed to Request, a compiled build would read its fields as their
        # annotated types and refuse a float or numpy length before the check could convert or explain it)
        kind = type(r)
        if not (kind is Request and type(a := r.arrival) is float and self._last_arrival <= a <= MAX_SIM_TIME
                and type(r.id) is int and type(p := r.prompt_tokens) is int and 0 < p <= MAX_TOKENS
                and type(o := r.output_tokens) is int and 0 < o <= MAX_TOKENS
                and (r.max_tokens is None or type(r.max_tokens) is int and r.max_tokens > 0)
                and (r.hash_ids is None or type(r.hash_block) is int and r.hash_block > 0)):
            r = check_request(r, self._last_arrival, self._first_arrival)
            a = r.arrival
        self._first_arrival = False
        self._last_arrival = a
        return r

    def _schedule_next_arrival(self) -> None:
        r = self._pull_ahead() if self._depth else self._pull()
        if r is None:
            self._arrivals_done = True
            if self._sole is not None:
                self._sole.next_arrival = _INF
            return
        if self._sole is not None:
            self._sole.next_arrival = r.arrival  # its decode runs plan no further than this (Instance.next_arrival)
        self.env.call_at(r.arrival, ARRIVAL, self._on_arrival, r)

    # (a router whose choices are known in advance: each engine learns when its own next arrival comes)
    def _lookahead_depth(self) -> int:
        """Requests to pull ahead of their arrival so that every engine knows its next one: the number of instances
        when the router's next choices are fixed in advance (round robin), else 0."""
        upcoming = getattr(self.router, "upcoming", None)
        n = len(self.instances)
        return n if n > 1 and upcoming is not None and upcoming(self.view, 0) is not None else 0

    def _pull_ahead(self) -> Request | None:
        """The next request to arrive, with the ``_depth - 1`` after it pulled too (``_ahead`` holds them all, the
        next one first); the first call tells each engine the arrival time of the first one the router will send
        it, later calls drop the request that just arrived and pull one more."""
        ahead = self._ahead
        if self._ahead_started:
            ahead.popleft()
            if (r := self._pull()) is not None:
                ahead.append(r)
        else:
            self._ahead_started = True
            while len(ahead) < self._depth and (r := self._pull()) is not None:
                ahead.append(r)
            self._hint_all()
        return ahead[0] if ahead else None

    def _hint(self, k: int, t: float) -> None:
        """Hint the engine the ``k``-th next request goes to that it arrives at ``t`` (``Instance.next_arrival``)."""
        d = self.router.upcoming(self.view, k)  # type: ignore[attr-defined]
        if d is not None and 0 <= d < len(self.instances):
            self.instances[d].next_arrival = t

    def _hint_all(self) -> None:
        """Every engine's next arrival among the requests pulled ahead (after an arrival the router did not see)."""
        for inst in self.instances:
            inst.next_arrival = _INF
        ahead = self._ahead
        for k in reversed(range(len(ahead))):  # (the first request for an engine is the one it learns)
            self._hint(k, ahead[k].arrival)

    def _hint_last(self) -> None:
        """After routing an arrival: the last request pulled is the next arrival of the engine the router will send
        it to (no more arrivals for that engine when the workload is exhausted)."""
        ahead, depth = self._ahead, self._depth
        d = self.router.upcoming(self.view, depth - 1)  # type: ignore[attr-defined]  # (_hint, inlined: per arrival)
        if d is not None and 0 <= d < depth:  # (depth: the number of instances)
            self.instances[d].next_arrival = ahead[-1].arrival if len(ahead) == depth else _INF

    def _on_arrival(self, r: Request) -> None:
        if r.routed_time != NOT_SET or r.dropped or r.token_cap is not None:
            r.reset_lifecycle()  # a request object replayed in a second simulation starts afresh
        # (one that never was routed, dropped or capped is as its constructor left it: routing, a drop or a router's
        # cap comes before anything else writes into a request)
        self._arrived.add(r.id)
        self._schedule_next_arrival()
        clock = self.clock
        if clock.tick_asleep and self.central:
            clock.wake_ticks()  # news for the router: queued requests are worth asking about again
        if self._unservable(r):
            if self._depth:
                self._hint_all()  # (the router did not see it)
            return
        self.apply_decision(r, self.router.route(r, self.view), ARRIVAL)  # (_route, inlined on this hot path)
        if self._depth:
            self._hint_last()

    def _unservable(self, r: Request) -> bool:
        m = r.model
        if m is not None and m not in self.models_everywhere:
            if m not in self.served_models:
                return self._no_model(r)
        elif r.prompt_tokens <= self._max_servable_prompt:
            return False  # some instance can take it (the common case: one comparison)
        reasons = [inst.can_ever_serve(r) for inst in self.instances if inst.role != DECODE]
        if all(reasons):
            if self.on_unservable == "error":
                raise ConfigError(
                    f"request {r.id} (prompt {r.prompt_tokens} tokens) can never be served: {reasons[0]} on "
                    f"every instance (max_model_len {[i.max_model_len for i in self.instances]}); fix the "
                    f"workload, raise engine.max_model_len, or set {self.unservable_key}=drop to count it")
            self.recorder.drop(r, reasons[0], self.env.now)
            return True
        return False

    def _route(self, r: Request, phase: int) -> bool:
        """Ask the router; returns False when the request stays in the central queue."""
        d = self.router.route(r, self.view)
        return self.apply_decision(r, d, phase)

    def apply_decision(self, r: Request, d: Any, phase: int = ARRIVAL) -> bool:
        """Carry out a routing decision (instance index, WAIT, DROP or, for outside drivers, DEFER)."""
        if type(d) is not int:
            d = self._bad_decision(r, d)
        now = self.env.now
        if d >= 0:
            if d >= len(self.instances):
                self._bad_decision(r, d)
            inst = self.instances[d]
            if r.prompt_tokens <= self._fits_anywhere and r.model is None:
                why = ""  # (what the two checks below give then, without asking the instance)
            else:
                why = inst.can_ever_serve(r) or ("decode_only_instance" if inst.role == DECODE else "")
            if why:
                self.recorder.drop(r, f"routed_to_unfit_instance:{why}", now)
                return True
            r.routed_time = now
            inst.submit(r, now, phase)
            if self.clock.quiet:
                self.clock.wake()  # an engine works again: resume what paused while the cluster was idle
            return True
        if d == WAIT:
            clock = self.clock
            if phase == ARRIVAL:
                self.central.append(r)
                if clock.scrape_paused:
                    clock.wake_bookkeeping()  # the central queue grew: the timeline records it
            if clock.tick_asleep:
                clock.wake_ticks()
            return False
        if d == DROP:
            self.recorder.drop(r, "router", now)
            return True
        if d == DEFER and not self._self_driven:
            self.deferred.append(r)
            return True
        self._bad_decision(r, d)  # raises: an int that is no instance, WAIT, DROP or DEFER
        return False

    def _no_model(self, r: Request) -> bool:
        if self.on_unservable == "error":
            raise ConfigError(f"request {r.id} needs model {r.model!r}, which no instance serves (models: "
                              f"{sorted(self.served_models)}); add it to an instance's model or models, or set "
                              f"{self.unservable_key}=drop to count it")
        self.recorder.drop(r, "model_not_served", self.env.now)
        return True

    def _bad_decision(self, r: Request, d: Any) -> int:
        """A router answer that is a numpy integer becomes an int; anything else is a ConfigError."""
        name = getattr(self.router, "name", type(self.router).__name__)
        n = len(self.instances)
        if d == DEFER and type(d) is int:
            raise ConfigError(f"router {name!r} returned DEFER ({DEFER}) for request {r.id}, but no outside driver "
                              "(a Gymnasium env) is deciding for this cluster; return an instance index in "
                              f"[0, {n - 1}], WAIT ({WAIT}) or DROP ({DROP})")
        if type(d) is not int and not isinstance(d, bool) and isinstance(d, Integral):
            return int(d)  # a numpy integer
        raise ConfigError(f"router {name!r} returned {d!r} ({type(d).__name__}) for request {r.id}; expected an "
                          f"int: an instance index in [0, {n - 1}], WAIT ({WAIT}) or DROP ({DROP})")

    def _on_finish(self, r: Request) -> None:
        self._out_sum += r.generated
        self._out_n += 1
        self.view.mean_output_estimate = self._out_sum / self._out_n
        if self.central and self._retry_at != self.env.now:
            self._retry_at = self.env.now
            self.env.call_at(self.env.now, ROUTE, self.retry)

    # ------------------------------------------------------------------ engine operations a policy triggers
    def evict(self, instance: int, request_id: int) -> None:
        """Evict a request from ``instance`` at its next boundary: it frees its KV blocks, keeps its tokens and is
        routed again from the central queue (``llmsim.engine.ops``). Raises LLMSimError if it is not there."""
        self._engine(instance).evict(request_id, self.env.now, self.env.phase)

    def swap_out(self, instance: int, request_id: int, park: bool = False) -> None:
        """Swap a running request's KV blocks on ``instance`` out to its CPU swap space at the next boundary
        (``llmsim.engine.ops``; ``park``: it stays out while requests wait there). Raises LLMSimError if it is not
        running or the swap space is full."""
        self._engine(instance).swap_out(request_id, self.env.now, self.env.phase, park)

    def prefetch_model(self, instance: int, model: str) -> bool:
        """Copy ``model`` into ``instance``'s host-memory model cache in the background (llmsim.engine.model_host): the
        next swap to it is warm. False when there is nothing to do or no room; an error on a single-model one."""
        inst = self._engine(instance)
        if inst.host is None:
            raise LLMSimError(f"instance {instance} ({inst.name}) has no model catalog to prefetch into; give it "
                              "models: [...] and host_cache_gb")
        return inst.host.prefetch(model, self.env.now)

    @property
    def model_swap_stats(self) -> dict[str, float]:
        """Model swaps over all multi-model instances (empty when there are none)."""
        hosts = [i.host for i in self.instances if i.host is not None]
        if not hosts:
            return {}
        return {k: sum(h.stats()[k] for h in hosts) for k in ("model_swaps", "warm_swaps", "swap_seconds")}

    @property
    def evictions(self) -> int:
        """Evictions carried out so far, over all instances."""
        return sum(i.ops.evictions for i in self.instances)

    def _engine(self, instance: int) -> Instance:
        if isinstance(instance, bool) or not isinstance(instance, Integral) or not 0 <= instance < len(self.instances):
            raise LLMSimError(f"no instance {instance!r}: expected an index in [0, {len(self.instances) - 1}]")
        return self.instances[int(instance)]

    def _on_evict(self, r: Request, inst: Instance) -> None:
        """An evicted request joins the central queue; the router is asked about it at this instant (ROUTE)."""
        self.central.append(r)
        now = self.env.now
        if self._retry_at != now:
            self._retry_at = now
            self.env.call_at(now, ROUTE, self.retry)
        clock = self.clock
        if clock.scrape_paused:
            clock.wake_bookkeeping()
        if clock.tick_asleep:
            clock.wake_ticks()

    def retry(self) -> None:
        """Ask the router again about every request in the central queue (at completions, evictions and ticks)."""
        still: deque[Request] = deque()
        central = self.central
        n = len(central)
        while central:
            r = central.popleft()
            if not self._route(r, ROUTE):
                still.append(r)
        self.central = still
        if len(still) != n and self.clock.scrape_paused:
            self.clock.wake_bookkeeping()  # the central queue shrank: the timeline records it

