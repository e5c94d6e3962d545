"""The decode fast path on a sliding-window KV cache: the blocks a run's requests free as their windows move.

On a ``WindowedKVCache`` (``llmsim.engine.window``) a decoding request past its window takes one block and frees one
every ``block_size`` iterations, at different residues. A decode run (``llmsim.engine.fastpath.DecodeRun``) counts
those frees where it plans how far it can go before the cache runs out, and applies them when it materialises,
exactly as stepping does: per request, or for the members of a decode cohort from the sums it keeps
(``llmsim.engine.window_cohort``: :meth:`WindowFrees.of_cohort`, :meth:`WindowFrees.apply_cohort`). Stepping frees
after each iteration (``WindowedKVCache.computed``): the blocks iteration ``i`` needs are checked against the free
count that includes the frees of iterations up to ``i - 1``, and while iteration ``i`` runs a request holds its new
block and the one about to leave its window.

The schedule of one request, with ``c0`` tokens computed and ``s0`` blocks skipped at the run's start: after
iteration ``k`` its skipped count is ``max(s0, skipped_blocks(c0 + k))``. With ``s = max(s0, skipped_blocks(c0))``
it frees ``s - s0`` blocks after iteration 1 (a request whose skipped count lags, e.g. one whose KV was copied from
a prefill instance), then one block after iterations ``a, a + bs, a + 2 bs, ...`` where ``a = (s + 1) * bs + w - 1
- c0 >= 1`` is the iteration at which ``skipped_blocks`` first passes ``s``. A request with ``a <= bs`` frees at
every ``k`` congruent to ``a`` from the start; one still inside its window (``a > bs``) joins those counts at ``k =
a``. Requests with prefix-block ids under prefix caching keep their whole table and free nothing.

Free blocks can now rise during a run, which could let a request that waits for room (the waiting or swapped queue,
a KV copy coming in, a parked request) start at a later boundary. A run that starts while something waits therefore
ends at the first boundary whose free count passes the one its start saw, before or after the iteration's new
blocks (``caps``): up to there every check a batch policy makes against the free count fails as it did at the start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.engine.fastpath import NEVER, DecodeRun, RunOwner, bad_step
from llmsim.engine.window import skipped_blocks

if TYPE_CHECKING:
    from llmsim.engine.kv import KVCache, WindowedKVCache
    from llmsim.engine.window_cohort import WindowedCohort
    from llmsim.request import Request

NO_CAP = 1 << 62


class WindowFrees:
    """The window frees of one decode run's requests (module docstring), advanced as the run is planned."""

    __slots__ = ("bs", "window", "skipped", "res", "pending", "next", "lump", "held", "cap_pre", "cap_post",
                 "lows")

    def __init__(self, reqs: list[Request], kv: WindowedKVCache, held: int, free: int, need1: int,
                 waits: bool) -> None:
        bs = kv.block_size
        w = kv.window
        skipped = kv.skipped  # request id -> blocks freed from the front of its table
        res = [0] * bs  # requests freeing a block after iteration k, per k % bs (those past their window)
        pending: list[int] = []  # first free iteration of the requests still inside their window
        lump = 0
        for r in reqs:
            if r.prefix_state is not None:
                continue  # (its table is the prefix cache's to count: WindowedKVCache.computed)
            c0 = r.computed
            s0 = skipped.get(r.id, 0)
            s = skipped_blocks(c0, w, bs)
            if s > s0:
                lump += s - s0
            else:
                s = s0
            a = (s + 1) * bs + w - 1 - c0
            if a <= bs:
                res[a % bs] += 1
            else:
                pending.append(a)
        pending.sort()
        self.setup(kv, res, pending, lump, held, free, need1, waits)

    @classmethod
    def of_cohort(cls, cohort: WindowedCohort, kv: WindowedKVCache, held: int, free: int, need1: int,
                  waits: bool) -> WindowFrees:
        """The window frees of a run over every member of ``cohort`` (``llmsim.engine.window_cohort``), from its
        sums instead of a pass over the requests; the run takes the lagging members' lump."""
        self = cls.__new__(cls)
        off = kv.block_size - cohort.clock  # (a member reaching x = 0 at clock t first frees after iteration t + off)
        self.setup(kv, cohort.free_residues(), [t + off for t in cohort.pending], cohort.lump, held, free, need1,
                   waits)
        cohort.lump = 0
        return self

    def setup(self, kv: WindowedKVCache, res: list[int], pending: list[int], lump: int, held: int, free: int,
              need1: int, waits: bool) -> None:
        """The run's schedule of frees (module docstring) and the limits it plans within."""
        self.bs = kv.block_size
        self.window = kv.window
        self.skipped = kv.skipped
        self.res = res
        self.pending = pending
        self.next = 0  # pending[next:] have not reached their first free
        self.lump = lump  # blocks freed after iteration 1 beyond the schedule
        self.held = held  # 1 if the requests' blocks already count iteration 1's new block (extra, as materialised)
        # while something waits for room: the free count before (cap_pre) and after (cap_post) iteration 1's new
        # blocks; a boundary past either ends the run
        self.cap_pre = free + need1 if waits else NO_CAP
        self.cap_post = free if waits else NO_CAP
        # with prefix caching, the lowest free count after each planned iteration's new blocks: stepping evicts the
        # cached blocks beyond it (KVCache.take), and the frees that follow do not bring them back
        self.lows: list[int] | None = [free] if kv.prefix is not None else None

    def plan(self, run: DecodeRun, done: int, limit: int, cut: float) -> None:
        """``DecodeRun.plan``'s loop over iterations ``done + 1 .. limit`` (ending at the first boundary at or past
        ``cut``), with the blocks the windows free before each iteration."""
        bounds = run.bounds
        bs = self.bs
        res, fres, step = run.res, self.res, run.step
        pending, p = self.pending, self.next
        n_pending = len(pending)
        n = run.n
        factor = run.factor
        free = run.free
        cap_pre, cap_post = self.cap_pre, self.cap_post
        lows = self.lows
        ctx = run.ctx1 + n * done
        last = bounds[-1]
        for i in range(done + 1, limit + 1):
            if last >= cut:
                break
            k = i - 1  # the iteration whose frees come before iteration i
            while p < n_pending and pending[p] <= k:
                fres[pending[p] % bs] += 1
                p += 1
            avail = free + fres[k % bs]
            if k == 1:
                avail += self.lump
            need = res[(1 - i) % bs]
            if need > avail or avail > cap_pre or avail - need > cap_post:
                run.k_final = k
                break
            free = avail - need
            if lows is not None:
                lows.append(free if free < lows[-1] else lows[-1])
            dt = step(ctx)
            if factor != 1.0:
                dt *= factor
            nxt = last + dt
            if not last < nxt < NEVER:
                raise bad_step(run.owner, last, dt, f"a decode batch of {n} request(s), context {ctx} tokens")
            bounds.append(nxt)
            last = nxt
            ctx += n
        run.free = free
        self.next = p

    def apply(self, run: DecodeRun, inst: RunOwner, d: int, last: float, extra: int) -> list[Request]:
        """Write ``d`` more iterations into every request of ``run`` with the blocks they took and freed, and settle
        the KV cache (``DecodeRun.materialise`` without a decode cohort)."""
        bs, w, skipped = self.bs, self.window, self.skipped
        held = self.held
        used = 0
        done = []
        for r in run.reqs:
            c_old = r.computed
            c = c_old + d
            r.computed = c
            g = r.generated + d
            r.generated = g
            r.last_token_time = last
            nb = r.blocks + (c + extra - 1) // bs - (c_old + held - 1) // bs  # (plus the new table entries)
            if r.prefix_state is None:
                s = c - w + 1
                if s >= bs:  # (skipped_blocks, inlined)
                    s //= bs
                    old = skipped.get(r.id, 0)
                    if s > old:
                        skipped[r.id] = s
                        nb -= s - old
            r.blocks = nb
            used += nb
            if g >= r.target_tokens:
                done.append(r)
        self.held = extra
        self.settle(run, inst.kv, used, d, extra)
        return done

    def apply_cohort(self, run: DecodeRun, inst: RunOwner, j: int, d: int, extra: int) -> list[Request]:
        """``DecodeRun.materialise`` of iterations up to ``j`` with a windowed decode cohort: it advances the
        cohort's clock, settles the KV cache from the members' full blocks less the blocks they skipped, and at the
        run's end gives the members that finished (settled, in the run's order)."""
        cohort = inst.cohort
        cohort.clock = clock = cohort.clock + d  # (WindowedCohort.advance, inlined on this hot path)
        cohort.t_last = run.bounds[j - 1]
        cohort.extra = extra
        if cohort.pending and cohort.pending[0] <= clock:
            cohort.advance_to(clock)
        used = run.used_blocks(j if extra else j - 1, self.bs) - cohort.skipped_total()
        kv = inst.kv
        u = used + kv.outside - kv.shared  # (KVCache.settle, inlined: it explains a count out of range)
        if not 0 <= u <= kv.total:
            kv.settle(used)
        kv.free = cap = kv.total - u
        if self.lows is not None:  # (see settle)
            low = self.lows[run.applied + d + extra - 1]
            if low < cap:
                cap = low
        if kv.cached > cap:
            kv.cached = cap  # the cached blocks beyond the free count (or the run's lowest) are evicted
        if j != run.end:
            return []
        done = cohort.finished()
        if len(done) > 1:
            done.sort(key=run.reqs.index)  # (as the per-request pass finds them)
        return done

    def settle(self, run: DecodeRun, kv: KVCache, used: int, d: int, extra: int) -> None:
        """The KV cache after ``d`` more iterations of ``run`` whose requests hold ``used`` blocks; with prefix
        caching, the cached blocks the run's lowest free count evicted stay evicted."""
        kv.settle(used)
        if self.lows is not None:
            low = self.lows[run.applied + d + extra - 1]  # (the iterations given their blocks so far)
            if kv.cached > low:
                kv.cached = low

