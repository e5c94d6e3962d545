"""The decode fast path: a stable decode-only batch planned as one run of identical iterations.

A *stable* batch (see ``Scheduled.stable``) repeats identically until a request finishes, a new block
cannot be allocated, or a new request arrives. :class:`DecodeRun` plans the iteration boundaries
b_1, b_2, ... at once (each b_i = b_{i-1} + step time, as stepping computes them; lazily, in chunks that
double), the engine schedules one event at the run's end, a submission mid-run moves that event to the
first boundary that sees it (:meth:`DecodeRun.request_stop`), and an observer mid-run materialises the
completed iterations (:meth:`DecodeRun.materialise`). Results are bit-identical to stepping (tested).

The engine loop (``llmsim.engine.instance``) owns the events; this module owns the run's arithmetic.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable
from math import log as _log
from math import nextafter
from operator import attrgetter, mul
from typing import TYPE_CHECKING, Any, Protocol

from llmsim.engine.iteration import decode_skew_of
from llmsim.errors import LLMSimError
from llmsim.event_loop import ARRIVAL

if TYPE_CHECKING:
    from llmsim.engine.kv import KVCache
    from llmsim.engine.scheduling.base import Scheduled
    from llmsim.perf.profile import Profile
    from llmsim.request import Request


class RunOwner(Protocol):
    """What a run updates of the engine that owns it (``llmsim.engine.instance.Instance``; a protocol, because that
    module imports this one)."""

    block_size: int
    kv: KVCache
    cohort: Any  # llmsim.engine.cohort.DecodeCohort, or None: who keeps the requests' counts
    recorder: Any  # llmsim.metrics.recorder.Recorder: the run adds its inter-token latencies (itl, itl_hist)
    decode_times: Any  # llmsim.engine.decode_times.DecodeTimes: and its boundaries
    busy_time: float
    iterations: int
    tokens_out: int


FIRST_CHUNK = 16  # iterations planned at once; doubles while a run goes on
NEVER = float("inf")
_LAST_TOKEN_TIME = attrgetter("last_token_time")


def decode_step_fn(profile: Profile, n: int, spread: int = 0) -> Callable[[int], float]:
    """ctx -> step time of a decode-only batch of ``n``: the profile's own closure when it has one
    (bit-identical to step_time, cheaper), else a call of step_time. ``spread = n * max_ctx - sum_ctx`` (constant
    along a run) adds the profile's skewed-decode term (``decode_skew``) when it has one."""
    fn = getattr(profile, "decode_step_fn", None)
    if fn is not None:
        return fn(n, spread) if spread else fn(n)
    step = profile.step_time
    return lambda ctx: step(n, n, 0, 0, n, ctx)


def run_step_fn(profile: Profile, batch: list[Request], ctx: int) -> Callable[[int], float]:
    """:func:`decode_step_fn` of the stable decode ``batch`` (exact counts) whose context sum is ``ctx``."""
    n = len(batch)
    if decode_skew_of(profile) is None:
        return decode_step_fn(profile, n)
    return decode_step_fn(profile, n, n * (max(r.computed for r in batch) + 1) - ctx)


def stable_decode_batch(running: list[Request], kv: KVCache, bs: int, fast: bool, out: Scheduled,
                        check: bool = True) -> bool:
    """One decode token for every running request if all are decoding and the new blocks fit, filling ``out`` in a
    single pass; False (nothing changed) otherwise (``Instance.decode_all``, what batch policies call).

    ``check=False`` skips the all-decoding test for policies where it always holds (vLLM V0 prefills whole prompts,
    so its running requests are always decoding at a boundary). On the fast path the ``blocks`` of the requests at
    a block boundary lag by one until the run materialises; stepping needs them exact now.
    """
    if not running:
        return False
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
    need = res[0]  # one new block for each request at a block boundary
    if need > kv.free:
        return False
    kv.free = free = kv.free - need  # (KVCache.take, inlined on this hot path: checked just above)
    if kv.cached > free:
        kv.cached = free  # the new blocks evict cached ones (llmsim.engine.prefix_cache)
    if not fast:
        for r in running:
            if r.computed % bs == 0:
                r.blocks += 1
            r.n_new = 1
    out.batch = list(running)
    out.stable = True
    out.res = res
    out.decode_ctx = ctx + len(running)
    out.k_min = k_min
    return True


def run_for(owner: str, profile: Profile, sched: Scheduled, now: float, free: int, factor: float,
            step_fns: dict[int, Callable[[int], float]]) -> DecodeRun:
    """The run of the stable decode batch ``sched`` filled by ``Instance.decode_all``, starting at ``now`` with
    ``free`` KV blocks left and the co-location slowdown ``factor``; ``step_fns`` keeps ``decode_step_fn`` per batch
    size for ``profile``."""
    batch = sched.batch
    n = len(batch)
    ctx = sched.decode_ctx
    step = step_fns.get(n)
    if step is None:
        if decode_skew_of(profile) is not None:  # the longest context: the cohort's, else the requests' (exact)
            mx = sched.decode_max or max(r.computed for r in batch) + 1
            step = decode_step_fn(profile, n, n * mx - ctx)  # (not kept: the spread changes from run to run)
        else:
            step = step_fns[n] = decode_step_fn(profile, n)
    dt = step(ctx)  # (bit-identical to profile.step_time(n, n, 0, 0, n, ctx))
    if factor != 1.0:
        dt *= factor
    end = now + dt
    if not now < end < NEVER:
        raise bad_step(owner, now, dt, f"a decode batch of {n} request(s), context {ctx}")
    res: list[int] = sched.res  # type: ignore[assignment]  # (set: a stable decode batch)
    run = DecodeRun(owner, now, batch, end, ctx, free, res, sched.k_min, factor, step)
    if sched.first_gaps is not None:
        run.first_gaps = sched.first_gaps  # (from a decode cohort: llmsim.engine.cohort)
    return run


def residues(reqs: list[Request], block_size: int) -> tuple[list[int], int]:
    """Requests per (computed % block_size), and the iterations until the first of them finishes."""
    res = [0] * block_size
    k_final = 1 << 62
    for r in reqs:
        res[r.computed % block_size] += 1
        left = r.target_tokens - r.generated
        if left < k_final:
            k_final = left
    return res, k_final


def bad_step(owner: str, t: float, dt: float, what: str) -> LLMSimError:
    """The error for a step time that would not move time forward (NaN, inf, <= 0, or lost in rounding)."""
    if dt == dt and 0 < dt < NEVER:
        return LLMSimError(
            f"instance {owner}: step time {dt!r} s at t={t!r} for {what}: it is lost in rounding at this time "
            "(float64 cannot resolve it, so time would stand still); keep simulated times below ~1e12 s, e.g. "
            "with a workload whose arrivals are not absurdly far apart"
        )
    return LLMSimError(
        f"instance {owner}: step time {dt!r} s at t={t!r} for {what}: expected a finite duration > 0; the "
        "profile's step time or a request length (negative, NaN, absurd) is broken"
    )


def last_token_runs(reqs: list[Request]) -> list[tuple[float, int]]:
    """(last-token time, count) for each run of requests sharing one (admission order keeps them together): a
    decode run's first inter-token gaps, which share a handful of values."""
    runs: list[tuple[float, int]] = []
    prev_t, cnt = -1.0, 0
    for t in map(_LAST_TOKEN_TIME, reqs):
        if t == prev_t:
            cnt += 1
        else:
            if cnt:
                runs.append((prev_t, cnt))
            prev_t, cnt = t, 1
    runs.append((prev_t, cnt))
    return runs


class DecodeRun:
    """A planned run of identical decode iterations over the same requests."""

    __slots__ = ("owner", "start", "reqs", "n", "bounds", "applied", "end", "k_final", "ctx1", "free", "res",
                 "stop_t", "stop_strict", "planned", "factor", "step", "full0", "first_gaps", "window")

    def __init__(
        self, owner: str, start: float, reqs: list[Request], b1: float, ctx1: int, free: int, res: list[int],
        k_final: int, factor: float, step: Callable[[int], float],
    ) -> None:
        self.owner = owner  # the instance's name, for errors
        self.start = start  # when iteration 1 began
        self.reqs = reqs
        self.n = len(reqs)
        self.bounds = [b1]  # bounds[i-1] = end of iteration i
        self.applied = 0  # iterations materialised into request state
        self.end = 0  # iteration at which the scheduled event fires
        self.k_final = k_final  # last iteration the run may reach (first completion)
        self.ctx1 = ctx1  # decode context sum of iteration 1
        self.free = free  # KV blocks left after the planned allocations
        self.res = res  # count of requests per (computed % block_size) at run start
        self.stop_t = NEVER  # a submission at this time ends the run at its first boundary
        self.stop_strict = False
        self.planned = FIRST_CHUNK
        self.factor = factor  # co-location slowdown, fixed for the run (a change of it ends the run)
        self.step = step  # decode step time as a function of the context sum (fixed batch size)
        # the requests' full blocks at the start (used_blocks): set by the engine from its KV cache, else derived
        self.full0: int | None = None
        # (last-token time, requests) groups of the first iteration's gaps: given by the cohort, else read from the
        # requests when the run is first applied (llmsim.engine.fastpath.last_token_runs)
        self.first_gaps: list[tuple[float, int]] = []
        # on a sliding-window KV cache, the blocks the requests free as the run goes (a
        # llmsim.engine.window_run.WindowFrees, which plans and applies the run; that module imports this one)
        self.window: Any = None

    def plan(self, block_size: int, horizon: float = NEVER) -> None:
        """Extend the planned boundaries by up to ``planned`` iterations, doubling the next chunk, and no further
        than the first boundary at or after ``horizon`` (when the next arrival comes: it would stop the run there,
        so boundaries planned past it would be thrown away, and the event would have to move earlier)."""
        bounds = self.bounds
        done = len(bounds)
        limit = done + self.planned
        if self.k_final < limit:
            limit = self.k_final
        last = bounds[-1]
        # planning ends at the first boundary that sees the stop: b >= stop_t (strict) or b > stop_t, which for
        # floats is b >= the next float above stop_t; or at the first boundary at or after the horizon
        cut = self.stop_t
        if not self.stop_strict and cut != NEVER:
            cut = nextafter(cut, NEVER)
        if horizon < cut and (last < horizon or not self.end):
            cut = horizon  # (a checkpoint past the horizon plans at least one more iteration)
        self.planned *= 2
        if self.window is not None:
            self.window.plan(self, done, limit, cut)
            return
        res, step = self.res, self.step
        n = self.n
        factor = self.factor
        free = self.free
        ctx = self.ctx1 + n * done
        for i in range(done + 1, limit + 1):
            if last >= cut:
                break
            need = res[(1 - i) % block_size]
            if need > free:
                self.k_final = i - 1
                break
            free -= need
            dt = step(ctx)
            if factor != 1.0:
                dt *= factor
            nxt = last + dt
            if not last < nxt < NEVER:
                raise bad_step(self.owner, last, dt, f"a decode batch of {n} request(s), context {ctx} tokens")
            bounds.append(nxt)
            last = nxt
            ctx += n
        self.free = free

    def stops_at(self, j: int) -> bool:
        """Whether boundary ``j`` (1-based) sees the submission that stops the run."""
        b = self.bounds[j - 1]
        return b > self.stop_t or (b == self.stop_t and self.stop_strict)

    def stop_index(self) -> int:
        """1-based index of the first planned boundary at which a submission is seen (len+1 if none)."""
        if self.stop_t == NEVER:
            return len(self.bounds) + 1
        if self.stop_strict:
            return bisect_left(self.bounds, self.stop_t) + 1
        return bisect_right(self.bounds, self.stop_t) + 1

    def request_stop(self, t: float, strict: bool) -> bool:
        """End the run at its first boundary b >= t (strict) or b > t, unless it already ends sooner.
        True if the stop moved (the caller then moves the pending event: :meth:`truncated_end`)."""
        if t < self.stop_t or (t == self.stop_t and strict and not self.stop_strict):
            self.stop_t, self.stop_strict = t, strict
            return True
        return False

    def next_end(self) -> int:
        """The boundary for the next event: the first where the run must stop, or the end of what is planned."""
        j = len(self.bounds)
        if self.k_final < j:
            j = self.k_final
        if self.stop_t != NEVER:  # (without a stop, stop_index is past the planned boundaries)
            s = self.stop_index()
            if s < j:
                j = s
        lo = self.applied + 1
        if self.end > lo:
            lo = self.end
        return j if j > lo else lo

    def truncated_end(self) -> int:
        """The boundary the pending event must move to after a stop request (``end`` if it need not move)."""
        return max(self.applied + 1, min(self.stop_index(), self.end))

    def step_time(self, j: int) -> float:
        """Duration of iteration ``j + 1`` (in progress once ``j`` are complete); 0.0 past the planned ones."""
        b = self.bounds
        return b[j] - (b[j - 1] if j else self.start) if j < len(b) else 0.0

    def seen(self, now: float, phase: int) -> int:
        """Iterations an observer at (now, phase) has seen completed (never the event's own boundary)."""
        j = self.applied
        last = self.end - 1  # the boundary event itself materialises run.end
        if j >= last:
            return j
        # the boundaries increase strictly: the first one not yet seen, found by bisection
        if phase <= ARRIVAL:
            return bisect_left(self.bounds, now, j, last)  # an arrival at b does not see the boundary b
        return bisect_right(self.bounds, now, j, last)

    def used_blocks(self, j: int, block_size: int) -> int:
        """GPU blocks the run's requests hold once iterations up to ``j < end`` are materialised: what
        :meth:`materialise` settles the KV cache at, from the residues instead of a pass over the requests.

        A request with c = block_size * q + m computed tokens at the run's start holds ceil((c + j + 1) / block_size)
        = q + 1 + (m + j) // block_size blocks mid-run (iteration j + 1 already has its blocks), and (m + j) //
        block_size is j // block_size, plus one exactly when m >= block_size - j % block_size. So u(j) = sum(q) +
        n * (1 + j // block_size) + (requests with such residues): O(1) but a slice sum, exact integers."""
        full = self.full0
        res = self.res
        if full is None:  # sum(q): the computed tokens at the start (ctx1 counts the new token) less sum(m)
            full = self.full0 = (self.ctx1 - self.n - sum(map(mul, range(block_size), res))) // block_size
        jq, jr = divmod(j, block_size)
        used = full + self.n * (1 + jq)
        if jr:
            used += sum(res[block_size - jr:])
        return used

    def materialise(self, inst: RunOwner, j: int) -> list[Request]:
        """Apply iterations ``applied+1 .. j`` to the requests, ``inst``'s KV cache and statistics.

        Returns the requests that finished (possible only at the run's last iteration). With a decode cohort
        (``inst.cohort``, llmsim.engine.cohort) the requests' own counts are left to the cohort: it advances its
        clock and settles only the requests that finished.
        """
        j0 = self.applied
        if j <= j0:
            return []
        d = j - j0
        extra = 1 if j < self.end else 0  # mid-run, iteration j+1 has already been given its blocks
        cohort = inst.cohort
        if cohort is None:
            done = self._apply_to_requests(inst, d, self.bounds[j - 1], extra)
        elif self.window is not None:  # a windowed cohort (llmsim.engine.window_cohort)
            done = self.window.apply_cohort(self, inst, j, d, extra)
        else:
            # during a run only its requests hold GPU blocks: the same count, from the residues (KVCache.settle,
            # inlined on this hot path; it explains a count out of range)
            used = self.used_blocks(j if extra else j - 1, inst.block_size)
            kv = inst.kv
            u = used + kv.outside - kv.shared
            if not 0 <= u <= kv.total:
                kv.settle(used)  # (raises)
            kv.free = free = kv.total - u
            if kv.cached > free:
                kv.cached = free
            cohort.clock += d  # (DecodeCohort.advance, inlined on this hot path)
            cohort.t_last = self.bounds[j - 1]
            cohort.extra = extra
            if j == self.end:
                done = cohort.finished()
                if len(done) > 1:
                    done.sort(key=self.reqs.index)  # in the run's order, as the per-request pass finds them
            else:
                done = []
        self._account(inst, j0, j)
        self.applied = j
        return done

    def _apply_to_requests(self, inst: RunOwner, d: int, last: float, extra: int) -> list[Request]:
        """Write ``d`` more iterations into every request of the run (no cohort) and settle the KV cache."""
        if self.applied == 0:
            self.first_gaps = last_token_runs(self.reqs)
        if self.window is not None:
            return self.window.apply(self, inst, d, last, extra)
        bs = inst.block_size
        used = 0
        done = []
        for r in self.reqs:
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
        inst.kv.settle(used)
        return done

    def _account(self, inst: RunOwner, j0: int, j: int, _log=_log) -> None:
        """Iterations ``j0+1 .. j`` in the engine's statistics and the inter-token latency histogram."""
        bounds, n = self.bounds, self.n
        # each gap goes to the ITL histogram with its weight (Recorder.itl, inlined on this hot path)
        rec = inst.recorder
        hist, inv, off, lo = rec.itl_hist, rec.ITL_INV, rec.ITL_OFFSET, rec.ITL_MIN
        busy = inst.busy_time
        if j0 == 0:
            # on the first iteration, each request's first gap (stalls included) runs from its own last token
            prev = bounds[0]
            gaps = (j - 1) * n
            for t, cnt in self.first_gaps:
                delta = prev - t
                hist[int(_log(delta) * inv) + off if delta > lo else 0] += cnt
                gaps += cnt
            busy += prev - self.start
            rest = bounds[1:j]
        else:
            prev = bounds[j0 - 1]
            gaps = (j - j0) * n
            rest = bounds[j0:j]
        for b in rest:
            delta = b - prev
            hist[int(_log(delta) * inv) + off if delta > lo else 0] += n
            busy += delta
            prev = b
        rec.itl_count += gaps
        log = inst.decode_times  # its iterations' ends (DecodeTimes.add, inlined)
        times = log.times
        times += bounds[j0:j]
        if len(times) > log.limit:
            log.forget()
        inst.busy_time = busy
        inst.iterations += j - j0
        inst.tokens_out += (j - j0) * n
