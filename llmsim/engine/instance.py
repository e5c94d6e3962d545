"""One serving instance: the engine loop of continuous batching, driven by event-loop callbacks.

Iteration semantics (vLLM's ``num_computed_tokens`` model): a scheduled request processes ``n_new`` tokens; when its
computed tokens reach prompt + generated, the iteration samples one token. The first token appears at the end of
the iteration that completes the prompt; a preempted request (recompute) re-prefills prompt + generated tokens and
then samples its next token.

The parts live apart: the batch policy (``llmsim.engine.scheduling``) picks each iteration's batch, the KV cache
(``llmsim.engine.kv``) owns the block accounting, preemption (``llmsim.engine.preemption``) pushes a running request
out to swap space or back to the waiting queue, and a stable decode-only batch runs on the fast path
(``llmsim.engine.fastpath``), planned as one run of iterations with one event at its end; its requests' counts are
kept lazily by a decode cohort (``llmsim.engine.cohort``) under a policy that allows it. The engine's features
are components it calls at fixed points of its loop (``llmsim.engine.components`` documents the contract):
engine operations (``ops``), progress guards (``guard``), a multi-model catalog (``host``), the P/D hand-off
(``handoff``) and a GPU shared with other instances (``gpu_share``).

Submission visibility: a request submitted at (t, phase) is seen by the first boundary b with (b, ENGINE) > (t,
phase), i.e. b >= t for arrivals and b > t for deferred routing.

Termination: every engine event either ends an iteration that took time (> 0, checked: a NaN, infinite, zero or
negative step time is an error naming the instance and the batch) or makes the instance idle with nothing left to
do. A policy that schedules nothing while requests run, refuses a request that fits an idle instance, or repeats
iterations that compute and sample nothing raises :class:`LLMSimError` instead of hanging or losing requests.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from llmsim.engine.cohort import DecodeCohort
from llmsim.engine.config import EngineConfig
from llmsim.engine.fastpath import NEVER, DecodeRun, bad_step, residues, run_for, run_step_fn, stable_decode_batch
from llmsim.engine.guards import ProgressGuard
from llmsim.engine.handoff import MIXED
from llmsim.engine.iteration import DecodeTimes, sample_tokens, stepped_cost, stepped_time
from llmsim.engine.kv import build_kv_cache
from llmsim.engine.limits import PromptLimits
from llmsim.engine.ops import EVICT, PARK, SWAP_OUT, EngineOps, stepped_decode
from llmsim.engine.preemption import leave_aborted, preempt_last, prefilling, swap_in
from llmsim.engine.queues import QueueTotals
from llmsim.engine.scheduling import BATCH_POLICIES, BatchPolicy, Scheduled
from llmsim.engine.window_cohort import WindowedCohort
from llmsim.engine.window_run import WindowFrees
from llmsim.event_loop import ARRIVAL, ENGINE, SimEnv

if TYPE_CHECKING:
    from llmsim.engine.colocation import GpuShare
    from llmsim.engine.handoff import HandOff
    from llmsim.engine.model_host import ModelHost
    from llmsim.metrics.recorder import Recorder
    from llmsim.perf.profile import Profile
    from llmsim.request import Request


class Instance:
    """One engine. Its public attributes are read by observers and components; only the engine writes them, except
    where a component's contract says otherwise (``llmsim.engine.components``)."""

    def __init__(self, idx: int, env: SimEnv, profile: Profile, config: EngineConfig, recorder: Recorder,
                 name: str = "") -> None:
        self.idx = idx
        self.env = env
        self.config = cfg = config.resolved(profile.model.max_position, profile.model.name, profile.gpu)
        self.name = name or f"{idx}:{profile.name}"
        self.recorder = recorder  # where every outcome is reported (and observed: Recorder.subscribe)
        self.block_size = cfg.block_size
        self.max_seqs: int = cfg.max_num_seqs  # type: ignore[assignment]  # (resolved: set)
        self.max_batched: int = cfg.max_num_batched_tokens  # type: ignore[assignment]  # (resolved: set)
        self.max_model_len: int = cfg.max_model_len  # type: ignore[assignment]
        self._size_for(profile)  # (sets ``fast``, which the policy's decode cohort follows)
        self.policy = BATCH_POLICIES[cfg.policy]()
        self._init_statistics()
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.swapped: deque[Request] = deque()
        self.queued = QueueTotals()  # totals over the waiting and swapped requests, for observers
        self.busy = False  # an iteration in progress, or one starting at this instant
        self.decode_run: DecodeRun | None = None  # the fast-path run in progress
        self.batch: list[Request] = []  # the stepped iteration in progress
        self.iter_start = self.iter_end = 0.0  # that iteration's start and end (``step_time``)
        self.changes = 0  # events run + submissions: in between, only a decode run moves what observers see
        self.next_arrival = NEVER  # when the next arrival comes, if every arrival comes here (set by the cluster)
        self.room_freed = 0  # preemptions and drops: tells the guard an engine that freed room from a stuck one
        self.aborted: list[Request] = []  # running requests whose client left: they leave at the next boundary
        self._gen = self._admitted = 0  # the pending engine event's generation (a superseded one is ignored); admits
        # components (llmsim.engine.components): always there, then the optional features
        self.limits = PromptLimits(self)
        self.ops = EngineOps(self)
        self.guard = ProgressGuard(self)
        self.host: ModelHost | None = None
        self.handoff: HandOff | None = None
        self.gpu_share: GpuShare | None = None
        self.role = MIXED

    def _init_statistics(self) -> None:
        self.iterations = self.preemptions = self.swap_outs = self.tokens_out = self.prefill_tokens = self.finished = 0
        self.busy_time, self.decode_times = 0.0, DecodeTimes(self)  # (decode_times: a dropped request's ITL gaps)
        self.prefix_queries = 0  # tokens looked up in the prefix cache at admission (vLLM prefix_cache_queries)
        self.prefix_hits = 0  # of which found cached (vLLM prefix_cache_hits)
        self.prefix_evicted = 0  # cached blocks evicted by earlier KV caches of this instance (model swaps)

    @property
    def policy(self) -> BatchPolicy:
        return self._policy

    @policy.setter
    def policy(self, policy: BatchPolicy) -> None:
        """A fast-path engine whose policy allows it keeps its running requests' counts in a decode cohort."""
        self._policy = policy
        kv = self.kv
        self.cohort = None
        if self.fast and policy.lazy_running:  # (on a sliding-window cache, one that keeps the window frees too)
            self.cohort = (WindowedCohort(self.block_size, self.profile, kv)  # type: ignore[arg-type]  # (windowed)
                           if kv.windowed else DecodeCohort(self.block_size, self.profile))
        self._direct_decode = self.cohort is not None and policy.decodes_all_when_idle_queues  # (_start_next)

    def install_profile(self, profile: Profile) -> None:
        """Serve another model (a model swap ended, ``llmsim.engine.model_host``): its timing, and a new KV cache
        sized for its weights. Only on a drained engine, where no request holds a block."""
        assert not (self.running or self.waiting or self.swapped), "model swap on an engine that holds requests"
        if self.kv.prefix is not None:
            self.prefix_evicted += self.kv.prefix.evicted  # the new model's cache starts empty
        fast, windowed = self.fast, self.kv.windowed
        self._size_for(profile)
        if self.fast != fast or self.kv.windowed != windowed or self.cohort is not None:
            self.policy = self._policy  # (a new decode cohort for the new profile, or none)
        self.queued.version += 1

    def _size_for(self, profile: Profile) -> None:
        self.profile = profile
        self.step_fns: dict[int, Callable[[int], float]] = {}  # decode step time per batch size (fastpath.run_for)
        self.kv = build_kv_cache(self.name, profile, self.config)
        self.fast = self.config.fast_path
        self.kv_total = self.kv.total
        self.watermark_blocks = self.kv.watermark
        self.block_bytes = self.block_size * profile.model.kv_bytes_per_token // profile.model.kv_shards(profile.tp)
        self.host_bw = profile.gpu.host_link_bw

    # ------------------------------------------------------------------ submissions
    def submit(self, r: Request, now: float, phase: int) -> None:
        """Queue ``r``; the engine sees it at its next boundary (see module docstring). On a multi-model instance a
        request for another model is held until the engine drains and swaps (llmsim.engine.model_host)."""
        host = self.host
        if host is not None and not host.admits(r):
            host.hold(r, now, phase)
            return
        self.accept(r, now, phase)

    def accept(self, r: Request, now: float, phase: int) -> None:
        """Queue ``r`` past any gate: its target length (``PromptLimits.set_target``), then the waiting queue."""
        self.limits.set_target(r)  # (checks the prompt's length first)
        p = r.prompt_tokens
        r.instance = self.idx
        self.waiting.append(r)
        if r.generated or r.computed:
            self.queued.joined(r)
        else:  # a fresh request (QueueTotals.joined, inlined on this hot path)
            q = self.queued
            q.version += 1
            q.context += p
            q.prefill += p
        self.queued_news(now, phase)

    def queued_news(self, now: float, phase: int) -> None:
        """A request joined the waiting queue: an idle engine wakes, a decode run ends at the boundary that sees it."""
        self.changes += 1
        if not self.busy:
            self.wake(now, phase)
        elif self.decode_run is not None:
            self.stop_run_at(now, phase == ARRIVAL)

    def cancel(self, r: Request, now: float) -> bool:
        """The client left, as vLLM's ``Scheduler.finish_requests`` takes it: a waiting request (a preempted one too)
        leaves now, and so does a running one still prefilling after the iteration in flight, its blocks freed at the
        next boundary (True); one that samples a token at the end of that iteration, or decodes, finishes at its next
        sampled token (False). Either way it computes at most one token after the iteration in flight."""
        if r in self.waiting and not r.blocks:  # (a request whose KV landed from a prefill instance: below)
            self.waiting.remove(r)
            self.queued.left(r)
            self.changes += 1
            return True
        if self.cohort is None and r in self.running and prefilling(self, r):
            self.aborted.append(r)
            self.changes += 1
            return True
        if self.cohort is None:
            r.target_tokens = r.generated + 1
        else:
            self.cohort.cancel(r)
        run = self.decode_run
        if run is not None and r in run.reqs:
            self.stop_run_at(now, False)
        return False

    # ------------------------------------------------------------------ observers and operations
    def sync(self, now: float, phase: int) -> None:
        """Bring request and KV state up to the last boundary an observer at (now, phase) has seen."""
        run = self.decode_run
        if run is not None:
            j = run.seen(now, phase)
            if j > run.applied:
                run.materialise(self, j)
        self.settle_running()

    def settle_running(self) -> None:
        """Write the running requests' true counts into them (a decode cohort keeps them lazily)."""
        if self.cohort is not None:
            self.cohort.settle(self.running)

    def seen_iterations(self, now: float, phase: int) -> int:
        """``iterations`` as ``sync(now, phase)`` would leave it (without materialising a decode run)."""
        run = self.decode_run
        if run is None:
            return self.iterations
        return self.iterations + run.seen(now, phase) - run.applied

    def evict(self, request_id: int, now: float, phase: int | None = None) -> None:
        """Send a request back to the cluster's central queue at the next boundary, keeping its tokens (engine ops)."""
        self.ops.request(EVICT, request_id, now, self.env.phase if phase is None else phase)

    def swap_out(self, request_id: int, now: float, phase: int | None = None, park: bool = False) -> None:
        """Move a running request's KV blocks to CPU swap space at the next boundary (``park``: keep it out while
        requests wait; llmsim.engine.ops)."""
        self.ops.request(PARK if park else SWAP_OUT, request_id, now, self.env.phase if phase is None else phase)

    @property
    def prefix_evictions(self) -> int:
        """Cached prefix blocks evicted to make room, over the run (and over earlier models' caches)."""
        pc = self.kv.prefix
        return self.prefix_evicted + (pc.evicted if pc is not None else 0)

    @property
    def step_time(self) -> float:
        """Duration (s) of the iteration in progress as of the last sync (0.0 when none is): what a router measures
        as the time per output token. Observers call ``Cluster.sync_all`` first."""
        run = self.decode_run
        if run is not None:
            return run.step_time(run.applied)
        if self.batch:
            return self.iter_end - self.iter_start
        return 0.0

    def can_ever_serve(self, r: Request) -> str:
        """'' if this instance can serve ``r``; otherwise the reason it never could (``limits``)."""
        return self.limits.reason_unservable(r)

    # ------------------------------------------------------------------ what batch policies call
    def cached_prefix(self, r: Request) -> tuple[int, int]:
        """(blocks of ``r``'s prompt found in the prefix cache, how many of them are free now) for a waiting request
        with nothing computed; (0, 0) without prefix caching or ids. Policies pass the first to :meth:`admit`."""
        return self.kv.cached_prefix(r)

    def decode_all(self, out: Scheduled, check: bool = True) -> bool:
        """Schedule one decode token for every running request if all are decoding and the new blocks fit, filling
        ``out``; False (nothing changed) otherwise (``llmsim.engine.fastpath.stable_decode_batch``; with a decode
        cohort, ``DecodeCohort.plan``)."""
        if self.cohort is not None:
            return self.cohort.plan(self.running, self.kv, out)
        return stable_decode_batch(self.running, self.kv, self.block_size, self.fast, out, check)

    def admit(self, r: Request, n_new: int, need: int, now: float, cached: int = 0) -> None:
        """Move waiting ``r`` to running with ``need`` new blocks and ``n_new`` tokens this iteration, reusing
        ``cached`` blocks of its prompt from the prefix cache (:meth:`cached_prefix`)."""
        self.waiting.remove(r) if self.waiting[0] is not r else self.waiting.popleft()
        if r.generated or r.computed:
            self.queued.left(r)
        else:  # a fresh request (QueueTotals.left, inlined on this hot path)
            q = self.queued
            q.version += 1
            q.context -= r.prompt_tokens
            q.prefill -= r.prompt_tokens
        kv = self.kv
        if r.blocks:  # its KV came from a prefill instance (llmsim.engine.handoff): now held by a running request
            kv.outside -= r.blocks
        if kv.prefix is not None and not r.computed:
            self.prefix_queries += r.prompt_tokens + r.generated
            if cached:
                kv.acquire_prefix(r, cached)
                self.prefix_hits += r.computed
            r.cached_tokens = r.computed
        kv.allocate(r, need)
        r.n_new = n_new
        if r.first_scheduled < 0:
            r.first_scheduled = now
        self._admitted += 1
        r.admit_seq = self._admitted
        self.running.append(r)
        if self.cohort is not None:
            self.cohort.join(r)

    def preempt_last(self) -> int:
        """Preempt the most recently admitted running request; returns blocks swapped out (``preemption``)."""
        return preempt_last(self)

    def swap_in(self, r: Request, need: int) -> int:
        """Move the head of the swapped queue to running holding ``need`` GPU blocks; returns blocks moved."""
        return swap_in(self, r, need)

    # ------------------------------------------------------------------ what components call
    def set_busy(self, busy: bool, now: float, phase: int) -> None:
        was = self.busy
        self.busy = busy
        if self.gpu_share is not None:
            self.gpu_share.busy_changed(was, busy, now, phase)

    def wake(self, now: float, phase: int) -> None:
        """An idle engine has news: a boundary at ``now`` (seen after ``phase``) looks at it."""
        self.set_busy(True, now, phase)
        self._gen += 1
        self.env.call_at(now, ENGINE, self._on_boundary, self._gen)

    def stop_run_at(self, t: float, strict: bool) -> None:
        """End the decode run in progress (if any) at its first boundary b >= t (strict) or b > t: the pending event
        moves earlier if needed."""
        run = self.decode_run
        if run is not None and run.request_stop(t, strict):
            j = run.truncated_end()
            if j < run.end:
                run.end = j
                self._gen += 1
                self.env.call_at(run.bounds[j - 1], ENGINE, self._on_boundary, self._gen)

    def pause(self, until: float, then: Callable[[float], None]) -> None:
        """No iteration until ``until`` (a drained engine swapping models), then ``then(now)`` and the next one."""
        self.batch = []
        self._gen += 1
        self.env.call_at(until, ENGINE, self._end_pause, (self._gen, then))

    def resume(self, now: float) -> None:
        """An engine held busy without an iteration (a blocking prefill engine whose copies landed) starts the next."""
        self._gen += 1
        self.env.call_at(now, ENGINE, self._on_boundary, self._gen)

    # ------------------------------------------------------------------ the engine loop
    def _end_pause(self, token: tuple[int, Callable[[float], None]]) -> None:
        gen, then = token
        if gen != self._gen:
            return
        self.changes += 1
        now = self.env.now
        then(now)
        self._start_next(now)

    def _on_boundary(self, gen: int) -> None:
        if gen != self._gen:
            return
        self.changes += 1
        now = self.env.now
        run = self.decode_run
        if run is not None:
            j = run.end  # (below: not run.stops_at(j), inlined on this hot path)
            if j < run.k_final and not ((b := run.bounds[j - 1]) > run.stop_t or b == run.stop_t and run.stop_strict):
                run.plan(self.block_size, self.next_arrival)  # a planning checkpoint: extend the run if it can
                if len(run.bounds) > run.end:
                    j = run.end = run.next_end()  # the first boundary where the run must stop, or the last planned
                    self._gen += 1
                    self.env.call_at(run.bounds[j - 1], ENGINE, self._on_boundary, self._gen)
                    return
            done = run.materialise(self, run.end)
            self.decode_run = None
            if done:
                self._complete(done, now)
        elif self.batch:
            self._apply(now)
        if self.aborted:
            leave_aborted(self)
        ops = self.ops
        if ops.pending or ops.parked:
            ops.apply(now)
        handoff = self.handoff
        if handoff is not None and handoff.pending:
            handoff.start_ready(now)  # blocks freed: KV copies may start
        self._start_next(now)

    def _start_next(self, now: float) -> None:
        handoff = self.handoff
        if handoff is not None and handoff.sends_in_flight:
            self.batch = []  # a blocking prefill engine waits for its KV copies (llmsim.engine.handoff)
            return
        if self._direct_decode and not (self.waiting or self.swapped or self.ops.transfer):
            run = self.cohort.plan_run(self, now)  # type: ignore[union-attr]  # (what the policy would schedule now)
            if run is not None:
                self._start_run(run)
                return
        changes = self.room_freed
        sched = self._policy.schedule(self, now)
        if not sched.batch:
            retry = self.guard.after_empty(now, changes)
            if retry is None:
                self._go_idle(now)
                return
            sched = retry
        share = self.gpu_share
        factor = self.config.step_time_scale if share is None else share.slowdown(now)
        xfer = self.ops.transfer  # blocks a swap-out operation moved: this iteration is stepped and pays for them
        if xfer:
            self.ops.transfer = 0
            if sched.res is not None and self.fast:
                self.settle_running()
                stepped_decode(sched.batch, self.block_size)
        elif sched.res is not None and self.fast:  # a stable decode batch: the fast path plans it as one run
            self._start_run(run_for(self.name, self.profile, sched, now, self.kv.free, factor, self.step_fns))
            return
        self._start_stepped(sched, now, factor, xfer)

    def _go_idle(self, now: float) -> None:
        """Nothing to schedule: a multi-model engine may start a model swap; else the engine idles."""
        host = self.host
        if host is not None and host.begin_swap(now):
            return
        self.ops.idle()
        self.set_busy(False, now, ENGINE)
        self.batch = []
        handoff = self.handoff
        if handoff is not None and handoff.pending:
            handoff.start_ready(now)  # room a drop freed after this boundary's start_ready: waiting copies start

    def _start_stepped(self, sched: Scheduled, now: float, factor: float, xfer: int) -> None:
        batch = sched.batch
        cohort = self.cohort
        if cohort is not None:
            cohort.stepping(self.running, batch)  # (before the batch's counts are read)
        n_tokens, n_decode, decode_ctx, c2, cp = stepped_cost(batch, self.name, self.policy.name)
        if n_tokens == 0:
            self.guard.count_stall(batch, now)
        self.prefill_tokens += n_tokens - n_decode
        dt = stepped_time(self.profile, batch, n_tokens, c2, cp, n_decode, decode_ctx)
        if factor != 1.0:
            dt *= factor
        if sched.transfer_blocks or xfer:
            dt += (sched.transfer_blocks + xfer) * self.block_bytes / self.host_bw
        end = now + dt
        if not now < end < NEVER:
            raise bad_step(self.name, now, dt, f"a batch of {len(batch)} request(s) ({n_tokens} tokens, "
                                               f"{n_decode} decodes, {sched.transfer_blocks} blocks swapped in)")
        if self.fast and sched.stable and not xfer:
            res, k_final = residues(batch, self.block_size)
            run = DecodeRun(self.name, now, list(batch), end, decode_ctx, self.kv.free, res, k_final, factor,
                            run_step_fn(self.profile, batch, decode_ctx))
            if cohort is not None:  # (a stable batch is every running request: the cohort carries the run)
                run.first_gaps = cohort.carry(self.running)
            self._start_run(run, 1)
            return
        self.batch = batch
        self.iter_start = now
        self.iter_end = end
        self._gen += 1
        self.env.call_at(end, ENGINE, self._on_boundary, self._gen)

    def _apply(self, now: float) -> None:
        """Apply the effects of the iteration that just ended (slow path)."""
        batch = self.batch
        self.batch = []
        self.iterations += 1
        self.busy_time += now - self.iter_start
        out, done = sample_tokens(batch, now, self.recorder, self.decode_times)
        self.tokens_out += out
        self.kv.computed(batch)  # prompt blocks computed become cached; blocks out of a sliding window are freed
        if self.handoff is not None and self.handoff.hands_off:
            self.handoff.hand_off(batch, now)  # prefilled requests leave for a decode instance
        if done:
            self._complete(done, now)

    def _complete(self, finished: list[Request], now: float) -> None:
        cohort = self.cohort
        if cohort is None:
            self.running = [r for r in self.running if r.generated < r.target_tokens]
        else:
            cohort.drop(self.running, finished)
        kv = self.kv
        for r in finished:
            kv.release(r)
            r.prefix_state = None  # (its block keys: memory a finished request no longer needs)
            r.finish = now
            self.finished += 1
            self.recorder.finish(r)

    # ------------------------------------------------------------------ fast-path events
    def _start_run(self, run: DecodeRun, held: int = 0) -> None:
        """Start ``run`` (its requests' blocks count iteration 1's new block if ``held``)."""
        self.decode_run, self.batch = run, []
        kv = self.kv
        if kv.windowed:  # the blocks its requests free as their windows move (llmsim.engine.window_run)
            waits = self.waiting or self.swapped or self.ops.parked or self.handoff is not None and self.handoff.pending
            args = (kv, held, kv.free, run.res[0], bool(waits))
            cohort = self.cohort  # (a WindowedCohort: llmsim.engine.window_cohort)
            run.window = (WindowFrees(run.reqs, *args) if cohort is None  # type: ignore[arg-type]  # (windowed: kv)
                          else WindowFrees.of_cohort(cohort, *args))  # type: ignore[arg-type]
        else:  # the run's requests hold every GPU block in use (llmsim.engine.kv.settle), iteration 1's included
            run.full0 = kv.total - kv.free - kv.outside + kv.shared - run.n
        run.plan(self.block_size, self.next_arrival)
        run.end = j = max(1, min(len(run.bounds), run.k_final))  # (next_end() of a run that starts: nothing applied)
        self._gen += 1
        self.env.call_at(run.bounds[j - 1], ENGINE, self._on_boundary, self._gen)
