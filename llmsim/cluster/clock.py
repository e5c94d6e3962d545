"""The cluster's periodic work: metrics scrapes, stale-view refreshes and central-queue ticks.

Each chain fires on a fixed grid ``start + k * interval`` (never ``previous + interval``), so where a
chain resumes after a pause does not depend on how long the pause was, and its times carry no
accumulated rounding.

The cost of a run grows with its events, not with the simulated span: while no engine is busy nothing
a chain would record or publish can change, so

* the **scrape** (every ``metrics_interval``) records its row and pauses at the first grid point that
  finds every engine idle; it resumes at the first grid point at or after the next activity (an arrival
  parked in the central queue, a request submitted, the central queue shrinking). The timeline therefore
  has one row at the start of each idle stretch and **no rows for the idle intervals after it**; a busy
  cluster gets a row every interval. ``ClusterView.throughput()`` reads zero once a skipped scrape would
  have closed an interval without tokens, exactly as the unpaused scrape would have set it;
* the **view refresh** (every ``view_staleness``) pauses the same way (an idle cluster's snapshot does
  not change) and resumes with the next submission;
* the **tick** (every ``central_queue_tick``) retries the central queue. It sleeps while the central
  queue (and the deferred list) is empty, and after ``wait_patience`` consecutive idle passes (see
  :mod:`llmsim.cluster.cluster`); a parked request, an arrival or a submission wakes it.

Scrapes and refreshes are bookkeeping events (:meth:`SimEnv.call_bookkeeping_at`): :meth:`Cluster.run`
stops when only they are left, then runs each pending one once (:meth:`ClusterClock.flush`) so the final
state is recorded, exactly as the last scrape of an uninterrupted chain would.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

from llmsim.event_loop import OBSERVE, ROUTE, SimEnv

if TYPE_CHECKING:
    from llmsim.engine.instance import Instance
    from llmsim.request import Request


class ClockedCluster(Protocol):
    """What the clock uses of its cluster (``llmsim.cluster.cluster.Cluster``)."""

    env: SimEnv
    instances: list[Instance]
    recorder: Any
    view: Any
    central: deque[Request]
    deferred: deque[Request]

    def retry(self) -> None: ...


def next_on_grid(t0: float, step: float, now: float, k_min: int) -> tuple[int, float]:
    """Smallest grid index k >= k_min with ``t0 + k * step >= now``, and that time (never before ``now``)."""
    k = k_min
    q = (now - t0) / step
    if q > k_min and math.isfinite(q):
        k = math.ceil(q)
        if k - 1 >= k_min and t0 + (k - 1) * step >= now:
            k -= 1  # the quotient rounded up past an exact grid point
    t = t0 + k * step
    if t < now:
        k += 1
        t = max(t0 + k * step, now)
    return k, t


class ClusterClock:
    """The periodic chains of one :class:`llmsim.cluster.cluster.Cluster` (``Cluster.clock``; module docstring).

    The cluster tells it about activity (:meth:`wake`, :meth:`wake_bookkeeping`, :meth:`wake_ticks`); observers read
    ``recent_throughput`` (output tokens/s per instance over the last scrape interval), ``last_scrape`` and
    ``scrape_paused``."""

    def __init__(self, cluster: ClockedCluster, metrics_interval: float, view_staleness: float,
                 central_queue_tick: float | None, wait_patience: int) -> None:
        self.cluster = cluster
        self.env = cluster.env
        self.metrics_interval = metrics_interval
        self.view_staleness = view_staleness
        self.central_queue_tick = central_queue_tick
        self.wait_patience = wait_patience
        n = len(cluster.instances)
        self.recent_throughput = [0.0] * n
        self.last_tokens = [0] * n
        self.t0 = 0.0
        self.scrape_k = 0
        self.scrape_paused = False
        self.last_scrape = -math.inf
        self.refresh_k = 0
        self.refresh_paused = False
        self.tick_k = 0
        self.tick_asleep = False
        self.idle_passes = 0
        self.last_tick = -math.inf
        self.quiet = False  # some chain sleeps and waits for activity (checked on every submission)
        self.finishing = False

    def start(self) -> None:
        env = self.env
        self.t0 = t0 = env.now
        self.scrape_k = 0
        self.scrape_paused = False
        env.call_bookkeeping_at(t0, self._scrape)
        if self.view_staleness > 0:
            self.cluster.view.take_snapshot()  # what the metrics endpoint showed before the first arrival
            self.refresh_k = 1
            self.refresh_paused = False
            env.call_bookkeeping_at(t0 + self.view_staleness, self._refresh_view)
        self.tick_asleep = self.central_queue_tick is not None  # woken when a request is parked
        self.tick_k = 0
        self.quiet = False

    def _any_busy(self) -> bool:
        return any(inst.busy for inst in self.cluster.instances)

    def _update_quiet(self) -> None:
        c = self.cluster
        self.quiet = self.scrape_paused or self.refresh_paused or (
            self.tick_asleep and bool(c.central or c.deferred))

    # ------------------------------------------------------------------ waking up
    def wake(self) -> None:
        """Activity after a quiet stretch: resume every sleeping chain at its next grid point."""
        self.wake_bookkeeping()
        c = self.cluster
        if self.tick_asleep and (c.central or c.deferred):
            self.wake_ticks()

    def wake_bookkeeping(self) -> None:
        env = self.env
        now = env.now
        if self.scrape_paused:
            self.scrape_paused = False
            self.scrape_k, t = next_on_grid(self.t0, self.metrics_interval, now, self.scrape_k + 1)
            env.call_bookkeeping_at(t, self._scrape)
        if self.refresh_paused:
            self.refresh_paused = False
            self.refresh_k, t = next_on_grid(self.t0, self.view_staleness, now, self.refresh_k + 1)
            env.call_bookkeeping_at(t, self._refresh_view)
        self._update_quiet()

    def wake_ticks(self) -> None:
        tick = self.central_queue_tick
        assert tick is not None
        self.tick_asleep = False
        self.idle_passes = 0
        self.tick_k, t = next_on_grid(self.t0, tick, self.env.now, self.tick_k + 1)
        self.env.call_at(t, ROUTE, self._tick)
        self._update_quiet()

    # ------------------------------------------------------------------ the chains
    def _scrape(self) -> None:
        env = self.env
        now = env.now
        c = self.cluster
        tl = c.recorder.timeline
        dt = self.metrics_interval
        central = len(c.central)
        thr, last = self.recent_throughput, self.last_tokens
        insts = c.instances
        for inst in insts:
            if inst.decode_run is not None:
                inst.sync(now, OBSERVE)  # (a mid-run sync completes no request: the order of the syncs is free)
        # one extend per column (the rows are the instances, in order), not one append per value
        n = len(insts)
        tl["time"].extend([now] * n)
        tl["instance"].extend(range(n))
        tl["waiting"].extend([len(inst.waiting) for inst in insts])
        tl["running"].extend([len(inst.running) for inst in insts])
        tl["swapped"].extend([len(inst.swapped) for inst in insts])
        tl["kv_used_blocks"].extend([inst.kv_total - inst.kv.free for inst in insts])
        tl["kv_total_blocks"].extend([inst.kv_total for inst in insts])
        tokens = [inst.tokens_out for inst in insts]
        tl["tokens_out"].extend(tokens)
        tl["prefix_cache_queries"].extend([inst.prefix_queries for inst in insts])
        tl["prefix_cache_hits"].extend([inst.prefix_hits for inst in insts])
        tl["central_queue"].extend([central] * n)
        for k, out in enumerate(tokens):
            thr[k] = (out - last[k]) / dt
            last[k] = out
        self.last_scrape = now
        if self.finishing:
            return
        if self._any_busy():
            self.scrape_k += 1
            env.call_bookkeeping_at(max(self.t0 + self.scrape_k * dt, now), self._scrape)
        else:
            self.scrape_paused = self.quiet = True

    def _refresh_view(self) -> None:
        self.cluster.view.take_snapshot()
        if self.finishing:
            return
        env = self.env
        if self._any_busy():
            self.refresh_k += 1
            env.call_bookkeeping_at(max(self.t0 + self.refresh_k * self.view_staleness, env.now),
                                    self._refresh_view)
        else:
            self.refresh_paused = self.quiet = True

    def view_settled(self) -> bool:
        """Nothing a router observes changes until new activity: the stale snapshot and the throughput
        window already show the idle cluster."""
        return (self.scrape_paused and self.env.now > self.last_scrape + self.metrics_interval
                and (self.view_staleness == 0 or self.refresh_paused))

    def _tick(self) -> None:
        """Retry the central queue; sleep when there is nothing to retry or after ``wait_patience`` idle passes."""
        c = self.cluster
        self.last_tick = self.env.now
        n = len(c.central)
        if n:
            c.retry()
        if not (c.central or c.deferred):
            self.tick_asleep = True
            self.idle_passes = 0
            return
        tick = self.central_queue_tick
        assert tick is not None
        now = self.env.now
        t_next = self.t0 + (self.tick_k + 1) * tick
        # a tick lost in float rounding (t ~ 1e17+ s) cannot let the view change: the pass counts as idle
        if len(c.central) == n and not self._any_busy() and (t_next <= now or self.view_settled()):
            self.idle_passes += 1
            if self.idle_passes >= self.wait_patience:
                self.tick_asleep = self.quiet = True  # until an arrival or a submission
                return
        else:
            self.idle_passes = 0
        self.tick_k += 1
        self.env.call_at(max(t_next, now), ROUTE, self._tick)

    def flush(self) -> None:
        """Run the pending scrapes / refreshes once each (the final state), rescheduling nothing."""
        self.finishing = True
        env = self.env
        for _ in range(env.num_pending):
            env.step()
