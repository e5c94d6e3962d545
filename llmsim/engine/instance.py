"""One serving instance: the engine loop of continuous batching, driven by SimPy callbacks.

Iteration semantics (vLLM's ``num_computed_tokens`` model): a scheduled request processes ``n_new``
tokens; when its computed tokens reach prompt + generated, the iteration samples one token. The
first token appears at the end of the iteration that completes the prompt; a preempted request
(recompute) re-prefills prompt + generated tokens and then samples its next token.

The parts live apart: the batch policy (``llmsim.engine.scheduling``) picks each iteration's batch, the KV
cache (``llmsim.engine.kv``) owns the block accounting, and a stable decode-only batch runs on the fast path
(``llmsim.engine.fastpath``), planned as one run of iterations with one event at its end.

Submission visibility: a request submitted at (t, phase) is seen by the first boundary b with
(b, ENGINE) > (t, phase), i.e. b >= t for arrivals and b > t for deferred routing.

Termination: every engine event either ends an iteration that took time (> 0, checked: a NaN,
infinite, zero or negative step time is an error naming the instance and the batch) or makes the
instance idle with nothing left to do. A policy that schedules nothing while requests run, refuses a
request that fits an idle instance, or repeats iterations that compute and sample nothing raises
:class:`LLMSimError` instead of hanging or losing requests.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from math import log as _log
from typing import TYPE_CHECKING

from llmsim.cluster.disagg import PREFILL, HandsOff
from llmsim.engine.colocation import SharesGpu
from llmsim.engine.config import EngineConfig
from llmsim.engine.fastpath import NEVER, DecodeRun, bad_step, decode_step_fn, residues
from llmsim.engine.guards import GuardsProgress
from llmsim.engine.kv import build_kv_cache
from llmsim.engine.limits import PromptLimits
from llmsim.engine.model_host import SwapsModels
from llmsim.engine.ops import EVICT, PARK, SWAP_OUT, EngineOps, stepped_decode
from llmsim.engine.prefix_cache import CachesPrefixes
from llmsim.engine.queues import QueuedTotals
from llmsim.engine.scheduling import BATCH_POLICIES, Scheduled
from llmsim.errors import LLMSimError
from llmsim.event_loop import ARRIVAL, ENGINE, SimEnv

if TYPE_CHECKING:
    from llmsim.engine.model_host import ModelHost
    from llmsim.metrics.recorder import Recorder
    from llmsim.perf.profile import Profile
    from llmsim.request import Request



class Instance(QueuedTotals, PromptLimits, SwapsModels, SharesGpu, CachesPrefixes, HandsOff, GuardsProgress):
    def __init__(
        self,
        idx: int,
        env: SimEnv,
        profile: Profile,
        config: EngineConfig,
        recorder: Recorder,
        on_finish: Callable[[Request, Instance], None] | None = None,
        name: str = "",
    ) -> None:
        self.idx = idx
        self.env = env
        self.profile = profile
        self.config = cfg = config.resolved(profile.model.max_position, profile.model.name)
        self.name = name or f"{idx}:{profile.name}"
        self.policy = BATCH_POLICIES[cfg.policy]()
        self.recorder = recorder
        self.on_finish = on_finish
        self.block_size = bs = cfg.block_size
        self.max_seqs = cfg.max_num_seqs
        self.max_batched = cfg.max_num_batched_tokens
        self.max_model_len = cfg.max_model_len
        self.kv = build_kv_cache(self.name, profile, cfg)
        self.kv_total = self.kv.total
        self.watermark_blocks = self.kv.watermark
        self.block_bytes = bs * profile.model.kv_bytes_per_token // profile.tp
        self.host_bw = profile.gpu.host_link_bw
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.swapped: deque[Request] = deque()
        self.fast = cfg.fast_path
        self._busy = False
        # co-location: instances sharing this one's GPU, and what they see of its busy state
        self.mates: list[Instance] = []
        self.interference = 0.0
        self._busy_instant = -1.0  # time of the last busy-state change
        self._busy_before = False  # busy state at the start of that instant
        self._arrival_busy_t = -1.0  # last time an arrival-phase submission made it busy
        self._gen = 0
        self._batch: list[Request] = []
        self._iter_start = 0.0
        self._iter_end = 0.0  # end of the slow-path iteration in progress (for ``step_time``)
        self._run: DecodeRun | None = None
        self._admit_counter = 0
        self._changes = 0  # preemptions, to tell an engine that just freed room from a stuck one
        self._stalls = 0  # consecutive iterations without progress, ending at iteration _stall_at
        self._stall_at = -2
        self.ops = EngineOps(self)  # evictions and swap-outs a policy asked for (llmsim.engine.ops)
        self.host: ModelHost | None = None  # the model catalog of a multi-model instance (llmsim.engine.model_host)
        self.kv_pending: deque = deque()  # KV copies waiting for room here (a decode instance; llmsim.cluster.disagg)
        self._init_queued()  # totals over the waiting and swapped requests (llmsim.engine.queues)
        self.changes = 0  # events run + submissions: in between, only a decode run moves what observers see
        # statistics
        self.iterations = 0
        self.busy_time = 0.0
        self.preemptions = 0
        self.swap_outs = 0
        self.prefix_queries = 0  # tokens looked up in the prefix cache at admission (vLLM prefix_cache_queries)
        self.prefix_hits = 0  # of which found cached (vLLM prefix_cache_hits)
        self.prefix_evicted = 0  # cached blocks evicted by earlier KV caches of this instance (model swaps)
        self.tokens_out = 0
        self.prefill_tokens = 0
        self.finished = 0

    # ------------------------------------------------------------------ public API
    def submit(self, r: Request, now: float, phase: int) -> None:
        """Queue ``r``; the engine sees it at its next boundary (see module docstring). On a multi-model instance a
        request for another model is held until the engine drains and swaps (llmsim.engine.model_host)."""
        host = self.host
        if host is not None and not host.admits(r):
            host.hold(r)
            r.instance = self.idx
            self.changes += 1
            self.queue_version += 1
            if not self._busy:
                self._wake(now, phase)  # an idle engine drains at once and starts the swap
            return
        self._accept(r, now, phase)

    def _accept(self, r: Request, now: float, phase: int) -> None:
        p = r.prompt_tokens
        if p.__class__ is not int or p < 0:
            self._check_prompt(r)
        limit = self.max_model_len - p
        target = r.output_tokens if r.outputs_by_model is None else r.output_for(self.profile.model.name)
        cap = r.max_tokens if r.token_cap is None else r.output_cap()  # (a router's cap for this run: token_cap)
        if cap is not None and target > cap:
            target = cap  # finishes by length, as vLLM does at max_tokens (not a truncation by the context)
        if target > limit:
            target = limit
            r.truncated = True
        r.target_tokens = target if target > 0 else 1
        r.instance = self.idx
        self.waiting.append(r)
        if r.generated or r.computed:
            self._enqueued(r)
        else:  # a fresh request (QueuedTotals._enqueued, inlined on this hot path)
            self.queue_version += 1
            self.queued_context += p
            self.queued_prefill += p
        self._queued_news(now, phase)

    def _queued_news(self, now: float, phase: int) -> None:
        """A request joined the waiting queue: an idle engine wakes, a decode run ends at the boundary that sees it."""
        self.changes += 1
        if not self._busy:
            self._wake(now, phase)
        elif self._run is not None:
            self._request_stop(self._run, now, phase == ARRIVAL)

    def _wake(self, now: float, phase: int) -> None:
        """An idle engine has news: a boundary at ``now`` (seen after ``phase``) looks at it."""
        self._set_busy(True, now, phase)
        self._gen += 1
        self.env.call_at(now, ENGINE, self._on_boundary, self._gen)

    def sync(self, now: float, phase: int) -> None:
        """Bring request and KV state up to the last boundary an observer at (now, phase) has seen."""
        run = self._run
        if run is None:
            return
        j = run.seen(now, phase)
        if j > run.applied:
            run.materialise(self, j)

    def evict(self, request_id: int, now: float, phase: int | None = None) -> None:
        """Send a request back to the cluster's central queue at the next boundary, keeping its tokens (engine_ops)."""
        self.ops.request(EVICT, request_id, now, self.env.phase if phase is None else phase)

    def swap_out(self, request_id: int, now: float, phase: int | None = None, park: bool = False) -> None:
        """Move a running request's KV blocks to CPU swap space at the next boundary (``park``: keep it out while
        requests wait; llmsim.engine.ops)."""
        self.ops.request(PARK if park else SWAP_OUT, request_id, now, self.env.phase if phase is None else phase)

    def seen_iterations(self, now: float, phase: int) -> int:
        """``iterations`` as ``sync(now, phase)`` would leave it (without materialising a decode run)."""
        run = self._run
        if run is None:
            return self.iterations
        return self.iterations + run.seen(now, phase) - run.applied

    # snapshot helpers used by ClusterView
    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def kv_free(self) -> int:
        return self.kv.free

    @property
    def kv_used(self) -> int:
        return self.kv_total - self.kv.free

    @property
    def cpu_total(self) -> int:
        return self.kv.cpu_total

    @property
    def cpu_free(self) -> int:
        return self.kv.cpu_free

    @property
    def busy(self) -> bool:
        """Whether the engine has work: an iteration in progress, or one starting at this instant."""
        return self._busy

    @property
    def step_time(self) -> float:
        """Duration (s) of the iteration in progress as of the last sync (0.0 when none is): what a router
        measures as the time per output token. Observers call ``Cluster.sync_all`` first."""
        run = self._run
        if run is not None:
            j = run.applied  # iterations completed; iteration j + 1 is in progress
            b = run.bounds
            return b[j] - (b[j - 1] if j else run.start) if j < len(b) else 0.0
        if self._batch:
            return self._iter_end - self._iter_start
        return 0.0

    # ------------------------------------------------------------------ helpers for batch policies
    def blocks_needed(self, r: Request, n_new: int) -> int:
        """New blocks ``r`` needs for ``n_new`` more tokens (``KVCache.needed``; kept for custom policies)."""
        return self.kv.needed(r, n_new)

    def decode_all(self, out: Scheduled, check: bool = True) -> bool:
        """Schedule one decode token for every running request if all are decoding and the new
        blocks fit, filling ``out`` in a single pass; False (nothing changed) otherwise.

        ``check=False`` skips the all-decoding test for policies where it always holds (vLLM V0
        prefills whole prompts, so its running requests are always decoding at a boundary).
        """
        running = self.running
        if not running:
            return False
        bs = self.block_size
        res = [0] * bs
        ctx = 0
        k_min = 1 << 62
        if check:
            for r in running:
                c = r.computed
                g = r.generated
                if g == 0 or c + 1 != r.prompt_tokens + g:
                    return False
                res[c % bs] += 1
                ctx += c
                left = r.target_tokens - g
                if left < k_min:
                    k_min = left
        else:
            for r in running:
                c = r.computed
                res[c % bs] += 1
                ctx += c
                left = r.target_tokens - r.generated
                if left < k_min:
                    k_min = left
        kv = self.kv
        need = res[0]  # one new block for each request at a block boundary
        if need > kv.free:
            return False
        kv.free = free = kv.free - need  # (KVCache.take, inlined on this hot path: checked just above)
        if kv.cached > free:
            kv.cached = free  # the new blocks evict cached ones (llmsim.engine.prefix_cache)
        if not self.fast:
            # stepping applies each iteration per request, so the request state must be exact now
            for r in running:
                if r.computed % bs == 0:
                    r.blocks += 1
                r.n_new = 1
        # (on the fast path r.blocks of the res[0] requests lags by one until the run materialises)
        out.batch = list(running)
        out.stable = True
        out.res = res
        out.decode_ctx = ctx + len(running)
        out.k_min = k_min
        return True

    def admit(self, r: Request, n_new: int, need: int, now: float, cached: int = 0) -> None:
        """Move waiting ``r`` to running with ``need`` new blocks and ``n_new`` tokens this iteration, reusing
        ``cached`` blocks of its prompt from the prefix cache (:meth:`cached_prefix`)."""
        self.waiting.remove(r) if self.waiting[0] is not r else self.waiting.popleft()
        if r.generated or r.computed:
            self._dequeued(r)
        else:  # a fresh request (QueuedTotals._dequeued, inlined on this hot path)
            self.queue_version += 1
            self.queued_context -= r.prompt_tokens
            self.queued_prefill -= r.prompt_tokens
        if r.blocks:  # its KV came from a prefill instance (llmsim.cluster.disagg): now held by a running request
            self.kv.outside -= r.blocks
        if self.kv.prefix is not None and not r.computed:
            self.prefix_queries += r.prompt_tokens + r.generated
            if cached:
                self.kv.acquire_prefix(r, cached)
                self.prefix_hits += r.computed
            r.cached_tokens = r.computed
        self.kv.allocate(r, need)
        r.n_new = n_new
        if r.first_scheduled < 0:
            r.first_scheduled = now
        self._admit_counter += 1
        r.admit_seq = self._admit_counter
        self.running.append(r)

    def preempt_last(self) -> int:
        """Preempt the most recently admitted running request; returns blocks swapped out."""
        r = self.running.pop()
        self._changes += 1
        self.preemptions += 1
        r.preemptions += 1
        kv = self.kv
        if kv.blocks_for(r.prompt_tokens + r.generated + 1) > self.max_prompt_blocks():
            # it has grown past what the whole cache can hold: it would preempt itself forever
            kv.release(r)
            self.recorder.drop(r, "exceeds_kv_capacity", self.env.now)
            return 0
        if kv.swap_out(r):
            r.swapped = True
            r.swaps += 1
            self.swap_outs += 1
            self.swapped.append(r)
            self._enqueued(r, swapped=True)
            return r.blocks
        kv.release(r)
        r.computed = 0
        if self.transfers is not None:
            return self._queue_behind_landed(r)  # (llmsim.cluster.disagg: requests whose KV landed here stay first)
        self.waiting.appendleft(r)
        self._enqueued(r, front=True)
        return 0

    def swap_in(self, r: Request, need: int) -> int:
        """Move the head of the swapped queue to running holding ``need`` GPU blocks; returns blocks moved."""
        self.swapped.popleft()
        self._dequeued(r, swapped=True)
        moved = self.kv.swap_in(r, need)
        r.swapped = False
        self.running.append(r)
        return moved

    # ------------------------------------------------------------------ the engine loop
    def _on_boundary(self, gen: int) -> None:
        if gen != self._gen:
            return
        self.changes += 1
        now = self.env.now
        run = self._run
        if run is not None:
            if run.end < run.k_final and not run.stops_at(run.end):
                run.plan(self.block_size)  # a planning checkpoint: extend the run if it can go on
                if len(run.bounds) > run.end:
                    self._schedule_run_end(run)
                    return
            done = run.materialise(self, run.end)
            self._run = None
            if done:
                self._complete(done, now)
        elif self._batch:
            self._apply(now)
        if self.ops.pending or self.ops.parked:
            self.ops.apply(now)
        if self.kv_pending:
            self.transfers.start_ready(self, now)  # type: ignore[union-attr]  # blocks freed: KV copies may start
        self._start_next(now)

    def _start_next(self, now: float) -> None:
        if self.sends_in_flight:  # a blocking prefill engine waits for its KV copies (llmsim.cluster.disagg)
            self._batch = []
            return
        changes = self._changes
        sched = self.policy.schedule(self, now)
        batch = sched.batch
        if not batch:
            sched = self._schedule_after_empty(now, changes)
            if sched is None:
                if self.host is not None and self._begin_model_swap(now):
                    return
                self.ops.idle()
                self._set_busy(False, now, ENGINE)
                self._batch = []
                return
            batch = sched.batch
        factor = self.slowdown(now)
        xfer = self.ops.transfer  # blocks a swap-out operation moved: this iteration is stepped and pays for them
        if xfer:
            self.ops.transfer = 0
            if sched.res is not None and self.fast:
                stepped_decode(batch, self.block_size)
        elif sched.res is not None and self.fast:
            n = len(batch)
            dt = self.profile.step_time(n, n, 0, 0, n, sched.decode_ctx)
            if factor != 1.0:
                dt *= factor
            end = now + dt
            if not now < end < NEVER:
                raise bad_step(self.name, now, dt, f"a decode batch of {n} request(s), context {sched.decode_ctx}")
            run = DecodeRun(self.name, now, list(batch), end, sched.decode_ctx, self.kv.free, sched.res, sched.k_min,
                            factor, decode_step_fn(self.profile, n))
            self._start_run(run)
            return
        n_tokens = n_decode = decode_ctx = c2 = cp = 0
        for r in batch:
            n = r.n_new
            n_tokens += n
            if n == 1 and r.generated > 0 and r.computed + 1 == r.prompt_tokens + r.generated:
                n_decode += 1
                decode_ctx += r.computed + 1
            else:
                if n < 0 or r.computed + n > r.prompt_tokens + r.generated:
                    raise LLMSimError(
                        f"instance {self.name}: batch policy {self.policy.name!r} scheduled request {r.id} for "
                        f"{n} token(s) with {r.computed} of {r.prompt_tokens + r.generated} computed; expected "
                        "0 <= n_new <= the tokens left"
                    )
                c2 += n * n
                cp += n * r.computed
        if n_tokens == 0:
            self._count_stall(batch, now)
        self.prefill_tokens += n_tokens - n_decode
        dt = self.profile.step_time(n_tokens, len(batch), c2, cp, n_decode, decode_ctx)
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
            self._start_run(DecodeRun(self.name, now, list(batch), end, decode_ctx, self.kv.free, res, k_final,
                                      factor, decode_step_fn(self.profile, len(batch))))
            return
        self._batch = batch
        self._iter_start = now
        self._iter_end = end
        self._gen += 1
        self.env.call_at(end, ENGINE, self._on_boundary, self._gen)

    def _apply(self, now: float) -> None:
        """Apply the effects of the iteration that just ended (slow path)."""
        batch = self._batch
        self._batch = []
        self.iterations += 1
        self.busy_time += now - self._iter_start
        rec = self.recorder
        hist, inv, off, lo = rec.itl_hist, rec.ITL_INV, rec.ITL_OFFSET, rec.ITL_MIN  # Recorder.itl, inlined
        done = []
        out = gaps = 0
        pv, pb = -1.0, 0  # the last gap and its bin: a batch's decoders mostly share their last token's time
        for r in batch:
            r.computed += r.n_new
            if r.computed == r.prompt_tokens + r.generated:
                r.generated += 1
                out += 1
                if r.first_token < 0:
                    r.first_token = now
                else:
                    v = now - r.last_token_time
                    if v != pv:
                        pv, pb = v, int(_log(v) * inv) + off if v > lo else 0
                    hist[pb] += 1
                    gaps += 1
                r.last_token_time = now
                if r.generated >= r.target_tokens:
                    done.append(r)
        rec.itl_count += gaps
        self.tokens_out += out
        if self.kv.prefix is not None:
            self.kv.prefix.computed(batch)  # the prompt blocks computed so far become cached
        if self.role == PREFILL:
            self._hand_off(batch, now)  # prefilled requests leave for a decode instance (llmsim.cluster.disagg)
        if done:
            self._complete(done, now)

    def _complete(self, finished: list[Request], now: float) -> None:
        self.running = [r for r in self.running if r.generated < r.target_tokens]
        kv = self.kv
        for r in finished:
            kv.release(r)
            r.prefix_state = None  # (its block keys: memory a finished request no longer needs)
            r.finish = now
            self.finished += 1
            self.recorder.finish(r)
            if self.on_finish is not None:
                self.on_finish(r, self)

    # ------------------------------------------------------------------ fast-path events
    def _start_run(self, run: DecodeRun) -> None:
        self._run = run
        self._batch = []
        run.plan(self.block_size)
        self._schedule_run_end(run)

    def _schedule_run_end(self, run: DecodeRun) -> None:
        """Fire at the first boundary where the run must stop, or at the end of what is planned."""
        j = run.end = run.next_end()
        self._gen += 1
        self.env.call_at(run.bounds[j - 1], ENGINE, self._on_boundary, self._gen)

    def _request_stop(self, run: DecodeRun, t: float, strict: bool) -> None:
        """End the run at its first boundary b >= t (strict) or b > t: move the pending event earlier if needed."""
        if run.request_stop(t, strict):
            j = run.truncated_end()
            if j < run.end:
                run.end = j
                self._gen += 1
                self.env.call_at(run.bounds[j - 1], ENGINE, self._on_boundary, self._gen)
