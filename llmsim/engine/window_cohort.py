"""The decode cohort on a sliding-window KV cache: the members' window frees kept as sums, like their counts.

A member of a :class:`~llmsim.engine.cohort.DecodeCohort` holds exact counts as of its mark; on a
``WindowedKVCache`` (``llmsim.engine.window``) it also gives back the blocks that leave its window. With ``c``
tokens computed and a window of ``w``, let ``x = c - w + 1``: a member with ``x >= 0`` has skipped
``x // block_size`` blocks and frees one more after each iteration that brings ``x`` to a multiple of the block
size; one with ``x < 0`` is still inside its window and starts that schedule once ``x`` reaches 0. ``x`` grows by
one per iteration like ``c``, so ``x - clock`` is fixed for a member, and the cohort keeps, for the members without
prefix-block ids (those keep their whole table and free nothing):

* ``finv``: the members past their window per ``(x - clock) % block_size``, ``fq`` the sum of
  ``(x - clock) // block_size`` and ``nf`` their number: the blocks they have skipped at any clock, in O(block size)
  (:meth:`WindowedCohort.skipped_total`), and the iterations after which they free (the run's free residues);
* ``pending``: the clocks (sorted) at which the members inside their window reach ``x = 0``; a run takes them into
  its schedule, and the cohort moves them into ``finv`` once its clock gets there (:meth:`WindowedCohort.advance_to`);
* ``lump``: the blocks that members whose skipped count lags behind their window (a KV copy from a prefill
  instance) free after the next run's first iteration, as stepping does.

A run (``llmsim.engine.window_run.WindowFrees.of_cohort``) is planned from these sums, and materialising it sets the
free blocks from ``used_blocks`` less :meth:`WindowedCohort.skipped_total`; a member's counts, blocks and skipped
count are written when someone needs them (:meth:`WindowedCohort.blocks_at` and the others below), with the
values stepping leaves. So the results are bit-identical to stepping (the property tests).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from typing import TYPE_CHECKING, Any

from llmsim.engine.cohort import DecodeCohort

if TYPE_CHECKING:
    from llmsim.engine.kv import WindowedKVCache
    from llmsim.request import Request


class WindowedCohort(DecodeCohort):
    """A decode cohort of an engine whose KV cache frees the blocks that leave a sliding window (module doc)."""

    __slots__ = ("window", "skipped", "finv", "fq", "nf", "pending", "lump")

    def __init__(self, block_size: int, profile: Any, kv: WindowedKVCache) -> None:
        super().__init__(block_size, profile)
        self.window = kv.window
        self.skipped = kv.skipped  # request id -> blocks freed from the front of its table (the cache's own dict)
        self.finv = [0] * block_size  # members past their window per (x - clock) % block_size
        self.fq = 0  # sum over them of (x - clock) // block_size
        self.nf = 0  # their number
        self.pending: list[int] = []  # sorted: the clock at which each member inside its window reaches x = 0
        self.lump = 0  # blocks lagging members free after the next run's first iteration

    # ------------------------------------------------------------------ membership
    def add(self, r: Request) -> None:
        super().add(r)
        if r.prefix_state is not None:
            return  # (its table is the prefix cache's to count: WindowedKVCache.computed)
        x = r.computed - self.window + 1
        clock = self.clock
        if x < 0:
            insort(self.pending, clock - x)
            return
        x0 = x - clock
        self.finv[x0 % self.bs] += 1
        self.fq += x0 // self.bs
        self.nf += 1
        lag = x // self.bs - self.skipped.get(r.id, 0)
        if lag > 0:
            self.lump += lag

    def remove(self, r: Request) -> None:
        super().remove(r)  # (settles r first: its counts are exact at the clock)
        if r.prefix_state is None:
            self.forget(r.computed - self.window + 1)

    def forget(self, x: int) -> None:
        """A member without prefix ids, whose ``x`` is this at the current clock, leaves the window sums."""
        clock = self.clock
        if x < 0:
            pending = self.pending
            del pending[bisect_left(pending, clock - x)]
            return
        x0 = x - clock
        self.finv[x0 % self.bs] -= 1
        self.fq -= x0 // self.bs
        self.nf -= 1

    def cancel(self, r: Request) -> None:
        lump = self.lump
        super().cancel(r)
        self.lump = lump  # (leaving and joining again is no new lag: the run under way already frees it)

    def clear(self) -> None:
        super().clear()
        self.finv = [0] * self.bs
        self.fq = self.nf = self.lump = 0
        self.pending = []

    # ------------------------------------------------------------------ exact counts when they are needed
    def blocks_at(self, r: Request, c: int) -> int:
        """Blocks member ``r`` holds with ``c`` tokens computed (its skipped count written, as stepping leaves it)."""
        nb = -(-(c + self.extra) // self.bs)
        if r.prefix_state is None:
            x = c - self.window + 1
            if x >= self.bs:
                s = x // self.bs
                self.skipped[r.id] = s
                return nb - s
        return nb

    def settle(self, running: list[Request]) -> None:
        clock = self.clock
        if self.settled_at == clock:
            return
        self.settled_at = clock
        t_last, bs, extra, w, skipped = self.t_last, self.bs, self.extra, self.window, self.skipped
        for r in running:  # (settle_one and blocks_at, inlined: every observer's sync comes here)
            m = r.lazy_mark
            if m is not None and m != clock:
                d = clock - m
                c = r.computed + d
                r.computed = c
                r.generated += d
                r.last_token_time = t_last
                nb = -(-(c + extra) // bs)
                if r.prefix_state is None:
                    x = c - w + 1
                    if x >= bs:
                        x //= bs
                        skipped[r.id] = x
                        nb -= x
                r.blocks = nb
                r.lazy_mark = clock

    def finished(self) -> list[Request]:
        """The members whose last token the clock has reached, settled and removed (heap order)."""
        out: list[Request] = []
        heap = self.heap
        while heap:
            key, seq, r = heap[0]
            if r.lazy_id != seq:
                heapq.heappop(heap)
                continue
            if key > self.clock:
                return out
            heapq.heappop(heap)
            self.remove(r)
            out.append(r)
        return out

    # ------------------------------------------------------------------ runs
    def advance(self, d: int, t_last: float, extra: int) -> None:
        super().advance(d, t_last, extra)
        self.advance_to(self.clock)

    def advance_to(self, clock: int) -> None:
        """The clock moved to ``clock``: members inside their window that reached ``x = 0`` join ``finv``."""
        pending = self.pending
        if pending and pending[0] <= clock:
            k = bisect_left(pending, clock + 1)
            bs = self.bs
            finv = self.finv
            for t in pending[:k]:
                finv[-t % bs] += 1
                self.fq += -t // bs
            self.nf += k
            del pending[:k]

    def skipped_total(self) -> int:
        """Blocks the members have skipped at the current clock (their lags freed: a run's first iteration is
        applied): the sum of ``x // block_size`` over the members past their window."""
        bs = self.bs
        jq, jr = divmod(self.clock, bs)
        total = self.fq + self.nf * jq
        if jr:
            total += sum(self.finv[bs - jr:])
        return total

    def free_residues(self) -> list[int]:
        """Members past their window freeing a block after the iteration ``k`` of a run starting now, per
        ``k % block_size``: those whose ``x + k`` is a multiple of the block size."""
        bs, finv = self.bs, self.finv
        base = -self.clock
        return [finv[(base - j) % bs] for j in range(bs)]

