"""One serving instance: continuous batching over a paged KV cache, driven by SimPy callbacks.

Iteration semantics (vLLM's ``num_computed_tokens`` model): a scheduled request processes ``n_new``
tokens; when its computed tokens reach prompt + generated, the iteration samples one token. The
first token appears at the end of the iteration that completes the prompt; a preempted request
(recompute) re-prefills prompt + generated tokens and then samples its next token.

Fast path: a *stable* decode-only batch (see ``Scheduled.stable``) repeats identically until a
request finishes, a new block cannot be allocated, or a new request arrives. The instance then plans
the iteration boundaries b_1, b_2, ... of the whole run at once (each b_i = b_{i-1} + step time, as
stepping computes them) and schedules one event at its end. A request submitted mid-run truncates
the run at the first boundary where stepping would have seen it; an observer mid-run materialises
the completed iterations. Both give results bit-identical to stepping (tested).

Submission visibility: a request submitted at (t, phase) is seen by the first boundary b with
(b, ENGINE) > (t, phase), i.e. b >= t for arrivals and b > t for deferred routing.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING

from llmsim.engine import EngineConfig
from llmsim.errors import ConfigError
from llmsim.scheduling import BATCH_POLICIES, Scheduled
from llmsim.simenv import ARRIVAL, ENGINE, SimEnv

if TYPE_CHECKING:
    from llmsim.metrics import Recorder
    from llmsim.profile import Profile
    from llmsim.request import Request

_FIRST_CHUNK = 16  # iterations planned at once; doubles while a run goes on
_NEVER = float("inf")
_LAST_TOKEN_TIME = attrgetter("last_token_time")


class _Run:
    """A planned run of identical decode iterations (fast path)."""

    __slots__ = ("start", "reqs", "n", "bounds", "applied", "end", "k_final", "ctx1", "free", "res",
                 "stop_t", "stop_strict", "planned", "factor", "step")

    def __init__(
        self, start: float, reqs: list, bounds: list[float], ctx1: int, free: int, res: list[int], k_final: int
    ) -> None:
        self.start = start  # when iteration 1 began
        self.reqs = reqs
        self.n = len(reqs)
        self.bounds = bounds  # bounds[i-1] = end of iteration i
        self.applied = 0  # iterations materialised into request state
        self.end = 0  # iteration at which the scheduled event fires
        self.k_final = k_final  # last iteration the run may reach (first completion)
        self.ctx1 = ctx1  # decode context sum of iteration 1
        self.free = free  # KV blocks left after the planned allocations
        self.res = res  # count of requests per (computed % block_size) at run start
        self.stop_t = _NEVER  # a submission at this time ends the run at its first boundary
        self.stop_strict = False
        self.planned = 1
        self.factor = 1.0  # co-location slowdown, fixed for the run (a change of it ends the run)
        self.step = None  # decode step time as a function of the context sum (fixed batch size)


class Instance:
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
        self.config = cfg = config.resolved(profile.model.max_position)
        self.name = name or f"{idx}:{profile.name}"
        self.policy = BATCH_POLICIES[cfg.policy]()
        self.recorder = recorder
        self.on_finish = on_finish
        self.block_size = bs = cfg.block_size
        self.max_seqs = cfg.max_num_seqs
        self.max_batched = cfg.max_num_batched_tokens
        self.max_model_len = cfg.max_model_len
        if cfg.num_gpu_blocks is not None:
            self.kv_total = cfg.num_gpu_blocks
        else:
            self.kv_total = profile.kv_capacity_tokens(cfg.gpu_memory_utilization) // bs
        if self.kv_total < 1:
            raise ConfigError(f"instance {self.name}: KV cache has no room for a single block")
        self.kv_free = self.kv_total
        self.watermark_blocks = int(cfg.watermark * self.kv_total)
        self.block_bytes = bs * profile.model.kv_bytes_per_token // profile.tp
        self.cpu_total = int(cfg.swap_space_gb * 1e9) // self.block_bytes if cfg.preemption == "swap" else 0
        self.cpu_free = self.cpu_total
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
        self._run: _Run | None = None
        self._admit_counter = 0
        self._changes = 0  # preemptions, to tell an engine that just freed room from a stuck one
        # statistics
        self.iterations = 0
        self.busy_time = 0.0
        self.preemptions = 0
        self.swap_outs = 0
        self.tokens_out = 0
        self.prefill_tokens = 0
        self.finished = 0

    # ------------------------------------------------------------------ public API
    def max_prompt_blocks(self) -> int:
        """Largest number of blocks a prompt may take and still be admitted."""
        return self.kv_total - self.watermark_blocks

    @property
    def max_servable_prompt(self) -> int:
        """Longest prompt this instance can ever serve (context window and whole KV cache)."""
        return min(self.max_model_len - 1, self.max_prompt_blocks() * self.block_size - 1)

    def can_ever_serve(self, r: Request) -> str:
        """'' if this instance can serve ``r``; otherwise the reason it never could."""
        if r.prompt_tokens >= self.max_model_len:
            return "prompt_exceeds_max_model_len"
        if -(-(r.prompt_tokens + 1) // self.block_size) > self.max_prompt_blocks():
            return "prompt_exceeds_kv_capacity"
        return ""

    def submit(self, r: Request, now: float, phase: int) -> None:
        """Queue ``r``; the engine sees it at its next boundary (see module docstring)."""
        limit = self.max_model_len - r.prompt_tokens
        target = r.output_tokens if r.outputs_by_model is None else r.output_for(self.profile.model.name)
        if target > limit:
            target = limit
            r.truncated = True
        r.target_tokens = target if target > 0 else 1
        r.instance = self.idx
        self.waiting.append(r)
        if not self._busy:
            self._set_busy(True, now, phase)
            self._gen += 1
            self.env.call_at(now, ENGINE, self._on_boundary, self._gen)
            return
        if self._run is not None:
            self._request_stop(self._run, now, phase == ARRIVAL)

    def _request_stop(self, run: _Run, t: float, strict: bool) -> None:
        """End the run at its first boundary b >= t (strict) or b > t, unless it already ends sooner."""
        if t < run.stop_t or (t == run.stop_t and strict and not run.stop_strict):
            run.stop_t, run.stop_strict = t, strict
            self._truncate(run)

    # ------------------------------------------------------------------ co-location on one GPU
    def _set_busy(self, busy: bool, now: float, phase: int) -> None:
        if self._busy_instant != now:
            self._busy_instant = now
            self._busy_before = self._busy
        self._busy = busy
        arrival = busy and phase == ARRIVAL
        if arrival:
            self._arrival_busy_t = now
        for m in self.mates:
            if m._run is not None:
                # the mate's iterations that start after this change run at another speed
                m._request_stop(m._run, now, arrival)

    def _counts_as_busy(self, t: float) -> bool:
        """Busy for an iteration of a mate starting at ``t``: busy before the instant, or made busy by an
        arrival at it. Engine-phase changes at ``t`` count from the next instant, so the answer does
        not depend on the order in which same-instant boundaries run."""
        if self._busy_instant == t:
            return self._busy_before or self._arrival_busy_t == t
        return self._busy

    def slowdown(self, now: float) -> float:
        """Step-time factor when an iteration starts: (1 + interference * busy GPU mates) * step_time_scale.

        With interference 1 this is fair time slicing (two busy engines each run at half speed).
        """
        scale = self.config.step_time_scale
        if not self.mates:
            return scale
        busy = 0
        for m in self.mates:
            if m._counts_as_busy(now):
                busy += 1
        return (1.0 + self.interference * busy) * scale

    def sync(self, now: float, phase: int) -> None:
        """Bring request and KV state up to the last boundary an observer at (now, phase) has seen."""
        run = self._run
        if run is None:
            return
        bounds = run.bounds
        j = run.applied
        last = run.end - 1  # the boundary event itself materialises run.end
        if phase <= ARRIVAL:
            while j < last and bounds[j] < now:
                j += 1
        else:
            while j < last and bounds[j] <= now:
                j += 1
        if j > run.applied:
            self._materialise(run, j)

    # snapshot helpers used by ClusterView
    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def kv_used(self) -> int:
        return self.kv_total - self.kv_free

    # ------------------------------------------------------------------ KV helpers for policies
    def blocks_needed(self, r: Request, n_new: int) -> int:
        need = -(-(r.computed + n_new) // self.block_size) - r.blocks
        return need if need > 0 else 0

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
        if res[0] > self.kv_free:
            return False
        self.kv_free -= res[0]
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

    def admit(self, r: Request, n_new: int, need: int, now: float) -> None:
        self.waiting.remove(r) if self.waiting[0] is not r else self.waiting.popleft()
        self.kv_free -= need
        r.blocks += need
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
        self.kv_free += r.blocks
        if -(-(r.prompt_tokens + r.generated + 1) // self.block_size) > self.max_prompt_blocks():
            # it has grown past what the whole cache can hold: it would preempt itself forever
            r.blocks = 0
            self.recorder.drop(r, "exceeds_kv_capacity", self.env.now)
            return 0
        if self.cpu_total and r.blocks <= self.cpu_free:
            self.cpu_free -= r.blocks
            r.swapped = True
            r.swaps += 1
            self.swap_outs += 1
            self.swapped.append(r)
            return r.blocks
        r.blocks = 0
        r.computed = 0
        self.waiting.appendleft(r)
        return 0

    def swap_in(self, r: Request) -> int:
        """Take ``r`` off the swapped queue; the caller allocates its GPU blocks. Returns blocks moved."""
        self.swapped.popleft()
        self.cpu_free += r.blocks
        r.swapped = False
        self.running.append(r)
        return r.blocks

    # ------------------------------------------------------------------ the engine loop
    def _on_boundary(self, gen: int) -> None:
        if gen != self._gen:
            return
        now = self.env.now
        run = self._run
        if run is not None:
            if run.end < run.k_final and not self._run_stops_at(run, run.end):
                self._plan(run)  # a planning checkpoint: extend the run if it can go on
                if len(run.bounds) > run.end:
                    self._schedule_run_end(run)
                    return
            done = self._materialise(run, run.end)
            self._run = None
            if done:
                self._complete(done, now)
        elif self._batch:
            self._apply(now)
        self._start_next(now)

    def _start_next(self, now: float) -> None:
        changes = self._changes
        sched = self.policy.schedule(self, now)
        batch = sched.batch
        while not batch and (self.waiting or self.swapped):
            if self.running:
                break  # cannot happen with the built-in policies; a custom one may idle on purpose
            if self._changes != changes:
                # a preemption or drop emptied the batch: the freed room may admit someone now
                changes = self._changes
            elif self.swapped:
                self.recorder.drop(self.swapped.popleft(), "cannot_be_scheduled", now)
            else:
                # the whole cache is free and the head still cannot start: it never will
                self.recorder.drop(self.waiting.popleft(), "cannot_be_scheduled", now)
            sched = self.policy.schedule(self, now)
            batch = sched.batch
        if not batch:
            self._set_busy(False, now, ENGINE)
            self._batch = []
            return
        factor = self.slowdown(now)
        if sched.res is not None and self.fast:
            n = len(batch)
            dt = self.profile.step_time(n, n, 0, 0, n, sched.decode_ctx)
            if factor != 1.0:
                dt *= factor
            self._start_run(batch, now + dt, sched.decode_ctx, sched.res, sched.k_min, factor)
            return
        n_tokens = n_decode = decode_ctx = c2 = cp = 0
        for r in batch:
            n = r.n_new
            n_tokens += n
            if n == 1 and r.generated > 0 and r.computed + 1 == r.prompt_tokens + r.generated:
                n_decode += 1
                decode_ctx += r.computed + 1
            else:
                c2 += n * n
                cp += n * r.computed
        self.prefill_tokens += n_tokens - n_decode
        dt = self.profile.step_time(n_tokens, len(batch), c2, cp, n_decode, decode_ctx)
        if factor != 1.0:
            dt *= factor
        if sched.transfer_blocks:
            dt += sched.transfer_blocks * self.block_bytes / self.host_bw
        end = now + dt
        if self.fast and sched.stable:
            self._start_run(batch, end, decode_ctx, None, 0, factor)
            return
        self._batch = batch
        self._iter_start = now
        self._gen += 1
        self.env.call_at(end, ENGINE, self._on_boundary, self._gen)

    def _apply(self, now: float) -> None:
        """Apply the effects of the iteration that just ended (slow path)."""
        batch = self._batch
        self._batch = []
        self.iterations += 1
        self.busy_time += now - self._iter_start
        rec = self.recorder
        done = []
        out = 0
        for r in batch:
            r.computed += r.n_new
            if r.computed == r.prompt_tokens + r.generated:
                r.generated += 1
                out += 1
                if r.first_token < 0:
                    r.first_token = now
                else:
                    rec.itl(now - r.last_token_time, 1)
                r.last_token_time = now
                if r.generated >= r.target_tokens:
                    done.append(r)
        self.tokens_out += out
        if done:
            self._complete(done, now)

    def _complete(self, finished: list[Request], now: float) -> None:
        self.running = [r for r in self.running if r.generated < r.target_tokens]
        for r in finished:
            self.kv_free += r.blocks
            r.blocks = 0
            r.finish = now
            self.finished += 1
            self.recorder.finish(r)
            if self.on_finish is not None:
                self.on_finish(r, self)

    # ------------------------------------------------------------------ fast path
    def _decode_step_fn(self, n: int):
        """ctx -> step time of a decode-only batch of ``n``: the profile's own closure when it has one
        (bit-identical to step_time, cheaper), else a call of step_time."""
        fn = getattr(self.profile, "decode_step_fn", None)
        if fn is not None:
            return fn(n)
        step = self.profile.step_time
        return lambda ctx: step(n, n, 0, 0, n, ctx)

    def _start_run(
        self, reqs: list[Request], b1: float, ctx1: int, res: list[int] | None, k_final: int, factor: float
    ) -> None:
        if res is None:
            bs = self.block_size
            res = [0] * bs
            k_final = 1 << 62
            for r in reqs:
                res[r.computed % bs] += 1
                left = r.target_tokens - r.generated
                if left < k_final:
                    k_final = left
        run = _Run(self.env.now, list(reqs), [b1], ctx1, self.kv_free, res, k_final)
        run.factor = factor
        run.step = self._decode_step_fn(run.n)
        self._run = run
        self._batch = []
        run.planned = _FIRST_CHUNK
        self._plan(run)
        self._schedule_run_end(run)

    def _plan(self, run: _Run) -> None:
        """Extend the planned boundaries by up to ``run.planned`` iterations, doubling the next chunk."""
        bounds = run.bounds
        i = len(bounds) + 1  # next iteration index (1-based)
        limit = min(run.k_final, len(bounds) + run.planned)
        bs, res, step = self.block_size, run.res, run.step
        n = run.n
        factor = run.factor
        free = run.free
        ctx = run.ctx1 + n * (i - 1)
        last = bounds[-1]
        stop_t = run.stop_t
        while i <= limit:
            if last > stop_t or (last == stop_t and run.stop_strict):
                break
            need = res[(1 - i) % bs]
            if need > free:
                run.k_final = i - 1
                break
            free -= need
            dt = step(ctx)
            if factor != 1.0:
                dt *= factor
            last = last + dt
            bounds.append(last)
            ctx += n
            i += 1
        run.free = free
        run.planned *= 2

    def _run_stops_at(self, run: _Run, j: int) -> bool:
        b = run.bounds[j - 1]
        return b > run.stop_t or (b == run.stop_t and run.stop_strict)

    @staticmethod
    def _stop_index(run: _Run) -> int:
        """1-based index of the first planned boundary at which a submission is seen (len+1 if none)."""
        if run.stop_t == _NEVER:
            return len(run.bounds) + 1
        if run.stop_strict:
            return bisect_left(run.bounds, run.stop_t) + 1
        return bisect_right(run.bounds, run.stop_t) + 1

    def _schedule_run_end(self, run: _Run) -> None:
        """Fire at the first boundary where the run must stop, or at the end of what is planned."""
        bounds = run.bounds
        j = max(max(run.end, run.applied + 1), min(self._stop_index(run), len(bounds), run.k_final))
        run.end = j
        self._gen += 1
        self.env.call_at(bounds[j - 1], ENGINE, self._on_boundary, self._gen)

    def _truncate(self, run: _Run) -> None:
        """Move the pending event earlier if a boundary before it must see the new submission."""
        j = max(run.applied + 1, min(self._stop_index(run), run.end))
        if j < run.end:
            run.end = j
            self._gen += 1
            self.env.call_at(run.bounds[j - 1], ENGINE, self._on_boundary, self._gen)

    def _materialise(self, run: _Run, j: int) -> list[Request]:
        """Apply iterations ``run.applied+1 .. j`` to the requests, KV cache and statistics.

        Returns the requests that finished (possible only at the run's last iteration).
        """
        j0 = run.applied
        done: list[Request] = []
        if j <= j0:
            return done
        bounds, reqs, n = run.bounds, run.reqs, run.n
        d = j - j0
        last = bounds[j - 1]
        bs = self.block_size
        extra = 1 if j < run.end else 0  # mid-run, iteration j+1 has already been given its blocks
        used = 0
        # on the first iteration, count the requests' last-token times: each one's first gap (stalls
        # included) runs from its own last token, and they share a handful of values
        first_gaps: list[tuple[float, int]] | None = None
        if j0 == 0:
            # runs of requests sharing a last-token time (admission order keeps them together)
            first_gaps = []
            prev_t, cnt = -1.0, 0
            for t in map(_LAST_TOKEN_TIME, reqs):
                if t == prev_t:
                    cnt += 1
                else:
                    if cnt:
                        first_gaps.append((prev_t, cnt))
                    prev_t, cnt = t, 1
            first_gaps.append((prev_t, cnt))
        for r in reqs:
            c = r.computed + d
            r.computed = c
            g = r.generated + d
            r.generated = g
            r.last_token_time = last
            nb = -(-(c + extra) // bs)
            used += nb
            r.blocks = nb
            if g >= r.target_tokens:
                done.append(r)
        # during a run only its requests hold GPU blocks, so the free count follows from theirs
        self.kv_free = self.kv_total - used
        itl = self.recorder.itl
        if first_gaps is not None:
            b1 = bounds[0]
            for t, cnt in first_gaps:
                itl(b1 - t, cnt)
            self.busy_time += b1 - run.start
            start = 1
        else:
            start = j0
        prev = bounds[start - 1]
        busy = self.busy_time
        for i in range(start, j):
            b = bounds[i]
            delta = b - prev
            itl(delta, n)
            busy += delta
            prev = b
        self.busy_time = busy
        self.iterations += d
        self.tokens_out += d * n
        run.applied = j
        return done
