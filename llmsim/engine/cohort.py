"""The running requests of a fast-path engine, advanced lazily across decode runs.

A decode run (``llmsim.engine.fastpath``) moves every running request one token per iteration. Writing those tokens
into each request at the end of every run, and scanning every request again to plan the next run, made a run cost
O(running requests). The cohort keeps instead:

* ``clock``: the decode iterations applied to the cohort so far. A member ``r`` holds exact token counts as of its
  ``r.lazy_mark``; its true counts are ``r.computed + (clock - r.lazy_mark)`` (and the same for ``generated``);
* the sums a run is planned from, in forms that do not move as the clock advances: the members per
  ``(computed - mark) % block_size`` (the run's block residues, rotated by the clock), the sum of ``computed - mark``
  (the decode context), and a heap of ``target - generated + mark`` (the iterations to the first completion).

So a run starts and ends in O(block_size + log n), and a request's counts are written only when someone needs them
(:meth:`DecodeCohort.settle`: an observer syncing the engine, a batch policy's slow path, a request leaving). The
values written are the ones the per-request path writes, so results are bit-identical (the property tests compare
the fast path with stepping).

Membership: every running request of an engine whose batch policy declares ``lazy_running`` (vLLM V0 and its
variants: after its prefill iteration every running request is decoding). A request that becomes running
(:meth:`DecodeCohort.join`) becomes a member when the next run is planned (``fresh`` until then) and leaves
(:meth:`DecodeCohort.leave`) when it finishes, is preempted, evicted, swapped out or handed off. Anything else that
changes members' counts (a stepped iteration over them, :meth:`DecodeCohort.stepping`) marks the cohort ``dirty``:
the next run settles and rebuilds it from the running list, which is what every run cost before.

On a sliding-window cache the cohort is a ``llmsim.engine.window_cohort.WindowedCohort``, which keeps the blocks its
members free as their windows move as sums too.

Membership ids come from one counter shared by every cohort, so a request that moved to another engine never
matches an entry its old engine still keeps (a ``fresh`` entry or a heap entry).
"""

from __future__ import annotations

import heapq
from itertools import count
from typing import TYPE_CHECKING, Any

from llmsim.engine.fastpath import DecodeRun, last_token_runs, run_for
from llmsim.engine.iteration import decode_skew_of
from llmsim.engine.scheduling.base import Scheduled

if TYPE_CHECKING:
    from llmsim.engine.kv import KVCache
    from llmsim.request import Request

_IDS = count(1)  # membership ids, unique across the engines' cohorts (module docstring)


class DecodeCohort:
    """The lazily advanced running requests of one engine (module docstring)."""

    __slots__ = ("bs", "clock", "inv_res", "ctx0", "heap", "n", "fresh", "t_last", "extra", "dirty", "settled_at",
                 "out", "longest")

    def __init__(self, block_size: int, profile: Any = None) -> None:
        self.bs = block_size
        # (-(computed - mark), membership id, request): the longest member context, kept only for a profile whose
        # step time needs it (llmsim.perf.decode_skew); None otherwise (no cost per member)
        self.longest: list[tuple[int, int, Request]] | None = [] if decode_skew_of(profile) is not None else None
        self.clock = 0  # decode iterations applied to the members so far
        self.inv_res = [0] * block_size  # members per (computed - mark) % block_size
        self.ctx0 = 0  # sum over members of (computed - mark)
        self.heap: list[tuple[int, int, Request]] = []  # (target - generated + mark, membership id, request)
        self.n = 0  # members
        self.fresh: list[tuple[Request, int]] = []  # (request, id) of running requests not members yet (joined since
        # the last plan; an entry whose request's ``lazy_id`` is no longer its id left since)
        self.t_last = -1.0  # the end of the last iteration applied to the members
        self.extra = 0  # 1 if the last application stopped mid run (the next iteration's block is already held)
        self.dirty = False  # members' counts were changed behind the cohort's back: rebuild before the next run
        self.settled_at = 0  # the clock when every member was last settled
        self.out = Scheduled()  # what plan_run fills (reused: a run keeps what it reads of it)

    # ------------------------------------------------------------------ membership
    def join(self, r: Request) -> None:
        """``r`` became running (admitted, swapped in): a member from the next plan on."""
        i = next(_IDS)
        r.lazy_id = i
        self.fresh.append((r, i))

    def leave(self, r: Request) -> None:
        """``r`` stops running here (finished, preempted, evicted, swapped out, handed off), its counts settled."""
        if r.lazy_mark is not None:
            self.remove(r)
        r.lazy_id = 0

    def cancel(self, r: Request) -> None:
        """``r`` finishes at its next sampled token (its client left): ``target_tokens`` from its settled count, a
        member staying one under its new key (mid run too: the run's last iteration finds it)."""
        if r.lazy_mark is None:
            r.target_tokens = r.generated + 1
            return
        self.remove(r)
        r.target_tokens = r.generated + 1
        self.add(r)

    def drop(self, running: list[Request], finished: list[Request]) -> None:
        """The finished requests leave ``running`` and the cohort (a filter on members' lagging counts could not
        find them: they are known)."""
        for r in finished:
            running.remove(r)
            self.leave(r)

    def stepping(self, running: list[Request], batch: list[Request]) -> None:
        """A stepped iteration of ``batch`` starts: if it holds members their counts change behind the cohort, so
        they are settled now and the next run rebuilds."""
        for r in batch:
            if r.lazy_mark is not None:
                self.settle(running)
                self.dirty = True
                return

    def add(self, r: Request) -> None:
        """``r`` (exact counts, decoding) becomes a member."""
        mark = self.clock
        r.lazy_mark = mark
        i = r.lazy_id = next(_IDS)
        c0 = r.computed - mark
        self.inv_res[c0 % self.bs] += 1
        self.ctx0 += c0
        self.n += 1
        heapq.heappush(self.heap, (r.target_tokens - r.generated + mark, i, r))
        if self.longest is not None:
            heapq.heappush(self.longest, (-c0, i, r))

    def remove(self, r: Request) -> None:
        """Member ``r`` leaves, with its counts settled first (its heap entry goes stale: ``lazy_mark`` is None)."""
        self.settle_one(r)
        c0 = r.computed - self.clock
        self.inv_res[c0 % self.bs] -= 1
        self.ctx0 -= c0
        self.n -= 1
        r.lazy_mark = None
        r.lazy_id = 0

    def clear(self) -> None:
        """No members (their marks are the caller's to reset)."""
        self.inv_res = [0] * self.bs
        self.ctx0 = 0
        self.heap = []
        self.n = 0
        if self.longest is not None:
            self.longest = []

    # ------------------------------------------------------------------ exact counts when they are needed
    def blocks_at(self, r: Request, c: int) -> int:
        """Blocks member ``r`` holds with ``c`` tokens computed (a windowed cohort also frees those out of its
        window)."""
        return -(-(c + self.extra) // self.bs)

    def settle_one(self, r: Request) -> None:
        """Write member ``r``'s pending iterations into it, as the per-request path would have."""
        d = self.clock - r.lazy_mark  # type: ignore[operator]
        if d:
            c = r.computed + d
            r.computed = c
            r.generated += d
            r.last_token_time = self.t_last
            r.blocks = self.blocks_at(r, c)
            r.lazy_mark = self.clock

    def settle(self, running: list[Request]) -> None:
        """Write every member's pending iterations (members' marks become the clock; the sums do not change)."""
        clock, t_last, bs, extra = self.clock, self.t_last, self.bs, self.extra
        if self.settled_at == clock:
            return
        self.settled_at = clock
        for r in running:
            m = r.lazy_mark
            if m is not None and m != clock:
                d = clock - m
                c = r.computed + d
                r.computed = c
                r.generated += d
                r.last_token_time = t_last
                r.blocks = -(-(c + extra) // bs)
                r.lazy_mark = clock

    # ------------------------------------------------------------------ planning and applying runs
    def residues(self) -> list[int]:
        """Members per (computed % block_size) now: the invariant counts rotated by the clock."""
        bs = self.bs
        shift = self.clock % bs
        inv = self.inv_res
        return inv[bs - shift:] + inv[:bs - shift] if shift else list(inv)

    def first_left(self) -> int:
        """Iterations until the first member finishes (stale heap entries dropped)."""
        heap = self.heap
        while heap:
            key, seq, r = heap[0]
            if r.lazy_id == seq:
                return key - self.clock
            heapq.heappop(heap)
        return 1 << 62

    def advance(self, d: int, t_last: float, extra: int) -> None:
        """``d`` more decode iterations were applied to every member, the last ending at ``t_last``."""
        self.clock += d
        self.t_last = t_last
        self.extra = extra

    def finished(self) -> list[Request]:
        """The members whose last token the clock has reached, settled and removed (heap order)."""
        out: list[Request] = []
        heap = self.heap
        clock = self.clock
        while heap:
            key, seq, r = heap[0]
            if r.lazy_id != seq:
                heapq.heappop(heap)
                continue
            if key > clock:
                return out
            heapq.heappop(heap)
            # (remove and settle_one, inlined on this hot path)
            c = r.computed
            d = clock - r.lazy_mark  # type: ignore[operator]  # (a member's mark is set)
            if d:
                c += d
                r.computed = c
                r.generated += d
                r.last_token_time = self.t_last
                r.blocks = -(-(c + self.extra) // self.bs)
            c0 = c - clock
            self.inv_res[c0 % self.bs] -= 1
            self.ctx0 -= c0
            self.n -= 1
            r.lazy_mark = None
            r.lazy_id = 0
            out.append(r)
        return out

    # ------------------------------------------------------------------ a run's plan
    def rebuild(self, running: list[Request]) -> None:
        """Every running request becomes a member with its counts settled (what a run cost before: O(running))."""
        self.settle(running)
        for r in running:
            r.lazy_mark = None
            r.lazy_id = 0
        self.clear()
        self.fresh = []
        self.dirty = False
        for r in running:
            self.add(r)

    def carry(self, running: list[Request]) -> list[tuple[float, int]]:
        """A run over every running request planned by stepping (settled counts): rebuild around it and give its
        first iteration's gaps."""
        self.rebuild(running)
        return last_token_runs(running)

    def plan(self, running: list[Request], kv: KVCache, out: Scheduled) -> bool:
        """``Instance.decode_all`` on a cohort: one decode token for every running request if the new blocks fit,
        filling ``out`` from the cohort's sums instead of a pass over the requests; False (no block taken) if not.
        The first iteration's inter-token gaps go in ``out.first_gaps``: the members' all start at ``t_last``."""
        if not running:
            self.fresh = []
            return False
        if self.dirty:
            self.rebuild(running)
            gaps = last_token_runs(running)
        else:
            gaps = [(self.t_last, self.n)] if self.n else []
            for r, i in self.fresh:
                if r.lazy_id == i and r.lazy_mark is None:
                    gaps.append((r.last_token_time, 1))
                    self.add(r)
            self.fresh = []
        bs, clock = self.bs, self.clock
        shift = clock % bs  # (residues(), inlined on this hot path)
        inv = self.inv_res
        res = inv[bs - shift:] + inv[:bs - shift] if shift else inv[:]
        need = res[0]  # one new block for each request at a block boundary
        if need > kv.free:
            return False
        kv.free = free = kv.free - need  # (KVCache.take, inlined: checked just above)
        if kv.cached > free:
            kv.cached = free  # the new blocks evict cached ones (llmsim.engine.prefix_cache)
        n = self.n
        out.batch = list(running)
        out.stable = True
        out.res = res
        out.decode_ctx = self.ctx0 + n * clock + n
        heap = self.heap
        out.k_min = heap[0][0] - clock if heap and heap[0][2].lazy_id == heap[0][1] else self.first_left()
        out.first_gaps = gaps
        out.decode_max = self.longest_context() if self.longest is not None else 0
        return True

    def longest_context(self) -> int:
        """The longest member's context in the next iteration (its computed tokens + 1; stale entries dropped)."""
        heap = self.longest
        while heap:
            key, seq, r = heap[0]  # type: ignore[index]
            if r.lazy_id == seq:
                return self.clock - key + 1
            heapq.heappop(heap)  # type: ignore[arg-type]
        return 0

    def plan_run(self, inst: Any, now: float) -> DecodeRun | None:
        """The decode run of every running request of ``inst`` (``llmsim.engine.instance.Instance``) starting at
        ``now``, planned from the cohort's sums: what a policy that declares ``decodes_all_when_idle_queues`` would
        schedule with empty queues; None (no block taken) when the new blocks do not fit or nothing runs."""
        out = self.out
        if not self.plan(inst.running, inst.kv, out):
            return None
        share = inst.gpu_share
        factor = inst.config.step_time_scale if share is None else share.slowdown(now)
        return run_for(inst.name, inst.profile, out, now, inst.kv.free, factor, inst.step_fns)
