"""The paged KV cache of one instance: GPU blocks held by running requests, CPU blocks by swapped ones.

Every allocation, release and swap goes through :class:`KVCache`, so the block accounting is written
once and its invariants hold after every operation:

* ``0 <= free <= total`` and ``0 <= cpu_free <= cpu_total``;
* ``free + used == total`` (``used`` is derived, so this holds by construction);
* on the stepped path ``used == sum(r.blocks for r in running)`` and
  ``cpu_total - cpu_free == sum(r.blocks for r in swapped)``. During a fast-path run the running
  requests' ``blocks`` lag behind ``free`` (blocks taken with :meth:`take` are attributed when the run
  materialises, by :meth:`settle`); ``free`` itself is always exact.

``free`` is a plain attribute, not a property: policies read it in their per-request loops.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from llmsim.engine.prefix_cache import PrefixCache, new_state
from llmsim.engine.window import skipped_blocks
from llmsim.errors import ConfigError, LLMSimError

if TYPE_CHECKING:
    from llmsim.perf.profile import Profile
    from llmsim.request import Request


def build_kv_cache(name: str, prof: Profile, cfg: Any) -> KVCache:
    """The KV cache of instance ``name`` serving ``prof`` under ``cfg``: GPU memory left after the weights (or
    ``num_gpu_blocks``), plus CPU swap space with swap preemption. Errors name the key to change. (``cfg``: an
    ``llmsim.engine.config.EngineConfig``, untyped here since the engine module imports this one.)"""
    bs = cfg.block_size
    if cfg.num_gpu_blocks is not None:
        total = cfg.num_gpu_blocks
    else:
        total = prof.kv_capacity_tokens(cfg.gpu_memory_utilization) // bs
    if not 1 <= total < 1 << 62:
        raise ConfigError(
            f"instance {name}: the KV cache has room for {total!r} blocks of {bs} tokens "
            f"({prof.name}, engine.gpu_memory_utilization={cfg.gpu_memory_utilization}); expected at least 1: "
            "raise engine.gpu_memory_utilization, use a larger GPU or set engine.num_gpu_blocks"
        )
    cpu_total = 0
    if cfg.preemption == "swap":
        block_bytes = bs * prof.model.kv_bytes_per_token // prof.model.kv_shards(prof.tp)
        if not block_bytes >= 1 or not prof.gpu.host_link_bw > 0:
            raise ConfigError(f"instance {name}: engine.preemption=swap needs KV blocks of >= 1 byte and a "
                              f"host link > 0 B/s; got {block_bytes!r} B and {prof.gpu.host_link_bw!r} B/s")
        cpu_total = int(cfg.swap_space_gb * 1e9) // block_bytes
    prefix = PrefixCache(bs) if cfg.enable_prefix_caching else None
    m = prof.model
    if m.sliding_window and m.window_every_layer:
        return WindowedKVCache(int(total), bs, m.sliding_window, int(cfg.watermark * total), cpu_total, name, prefix)
    return KVCache(int(total), bs, int(cfg.watermark * total), cpu_total, name, prefix)


class KVCache:
    """Block counts of one instance's GPU cache (and CPU swap space), and the operations that move them."""

    __slots__ = ("owner", "block_size", "total", "free", "watermark", "cpu_total", "cpu_free", "prefix", "outside",
                 "cached", "shared")

    windowed = False  # requests hold only the blocks of their attention window (WindowedKVCache)

    def __init__(self, total: int, block_size: int, watermark: int = 0, cpu_total: int = 0, owner: str = "",
                 prefix: PrefixCache | None = None) -> None:
        if not 1 <= total < 1 << 62 or not 0 <= watermark < total or not 0 <= cpu_total < 1 << 62 or block_size < 1:
            raise LLMSimError(f"KV cache {owner}: impossible sizes total={total!r}, watermark={watermark!r}, "
                              f"cpu_total={cpu_total!r}, block_size={block_size!r}")
        self.owner = owner  # names the instance in error messages
        self.block_size = block_size
        self.total = total
        self.free = total
        self.watermark = watermark  # blocks admission keeps free (vLLM V0); 0 for policies without one
        self.cpu_total = cpu_total
        self.cpu_free = cpu_total
        self.prefix = prefix  # cached prefix blocks (llmsim.engine.prefix_cache); None when prefix caching is off
        # free blocks whose cached prefix content is kept (not owed for eviction; llmsim.engine.prefix_cache): never
        # above ``free``, so each operation that lowers ``free`` ends with ``if self.cached > free: self.cached =
        # free``, the same two compares with caching off (then 0) as on
        self.cached = 0
        # blocks held by more than one request, counted once per extra holder (a prefix hit on a running request's
        # blocks): ``used == sum(r.blocks for r in running) - shared``; 0 without prefix caching
        self.shared = 0
        if prefix is not None:
            prefix.kv = self
        self.outside = 0  # blocks held by requests not running here: KV copies in flight (llmsim.cluster.disagg)

    @property
    def used(self) -> int:
        return self.total - self.free

    @property
    def max_allocation(self) -> int:
        """The most blocks one request may hold: the whole cache minus the watermark."""
        return self.total - self.watermark

    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold ``tokens`` tokens."""
        return -(-tokens // self.block_size)

    def needed(self, r: Request, n_new: int) -> int:
        """New blocks ``r`` needs to compute ``n_new`` more tokens (0 if it holds enough)."""
        need = -(-(r.computed + n_new) // self.block_size) - r.blocks
        return need if need > 0 else 0

    def allocate(self, r: Request, need: int) -> None:
        """Give ``r`` ``need`` more GPU blocks (the caller checked that they are free)."""
        free = self.free - need
        if free < 0 or need < 0:
            raise self._broken(f"cannot allocate {need} block(s) to request {r.id} with {self.free} free")
        self.free = free
        r.blocks += need
        if self.cached > free:
            self.cached = free  # the cached blocks beyond the free count are evicted (llmsim.engine.prefix_cache)

    def reserve(self, n: int) -> None:
        """Hold ``n`` free blocks for a request not running here (a KV copy coming in; llmsim.engine.handoff)."""
        self.take(n)
        self.outside += n

    def take(self, n: int) -> None:
        """Take ``n`` free blocks whose owners the caller records itself (decode steps; see module doc)."""
        free = self.free - n
        if free < 0 or n < 0:
            raise self._broken(f"cannot take {n} block(s) with {self.free} free")
        self.free = free
        if self.cached > free:
            self.cached = free  # the cached blocks beyond the free count are evicted (llmsim.engine.prefix_cache)

    def release(self, r: Request) -> None:
        """Free every GPU block ``r`` holds (it finished, was dropped, or is preempted for recompute); with prefix
        caching its computed full blocks stay cached, and blocks other requests share stay in use."""
        still = 0 if r.prefix_state is None or self.prefix is None else self.prefix.leave(r)
        free = self.free + r.blocks - still
        if free > self.total or r.blocks < 0:
            raise self._broken(f"cannot release {r.blocks} block(s) of request {r.id} with {self.free} of "
                               f"{self.total} free")
        self.free = free
        r.blocks = 0

    def swap_out(self, r: Request) -> bool:
        """Move ``r``'s blocks to CPU swap space if it has room: True if moved (``r.blocks`` then counts
        CPU blocks), False if not (nothing changed)."""
        n = r.blocks
        if not self.cpu_total or n > self.cpu_free:
            return False
        still = 0 if r.prefix_state is None or self.prefix is None else self.prefix.leave(r, back=True)
        if self.free + n - still > self.total or n < 0:
            raise self._broken(f"cannot swap out {n} block(s) of request {r.id} with {self.free} of {self.total} free")
        self.cpu_free -= n
        self.free += n - still
        return True

    def swap_in(self, r: Request, need: int) -> int:
        """Bring swapped-out ``r`` back holding ``need`` GPU blocks (its old ones plus any new); returns the
        number of blocks moved from CPU."""
        moved = r.blocks
        free = self.free - need
        if free < 0 or need < moved or self.cpu_free + moved > self.cpu_total:
            raise self._broken(f"cannot swap in request {r.id} ({moved} blocks) into {need} with {self.free} free")
        self.cpu_free += moved
        self.free = free
        r.blocks = need
        if self.cached > free:
            self.cached = free  # the cached blocks beyond the free count are evicted (llmsim.engine.prefix_cache)
        return moved

    def drop_swapped(self, r: Request) -> None:
        """Forget swapped-out ``r`` (dropped): its CPU blocks are free again."""
        cpu_free = self.cpu_free + r.blocks
        if cpu_free > self.cpu_total or r.blocks < 0:
            raise self._broken(f"cannot free {r.blocks} CPU block(s) of request {r.id} with {self.cpu_free} of "
                               f"{self.cpu_total} free")
        self.cpu_free = cpu_free
        r.blocks = 0

    def settle(self, used: int) -> None:
        """Set the GPU blocks in use from the running requests' own counts (end of a fast-path stretch)."""
        used += self.outside - self.shared
        if not 0 <= used <= self.total:
            raise self._broken(f"settle at {used} blocks used of {self.total}")
        self.free = free = self.total - used
        if self.cached > free:
            self.cached = free  # the cached blocks beyond the free count are evicted (llmsim.engine.prefix_cache)

    def check(self, running: Iterable[Request], swapped: Iterable[Request] = ()) -> None:
        """Raise if the counts disagree with the blocks the requests hold (tests, debugging; stepped path)."""
        on_gpu = sum(r.blocks for r in running) - self.shared + self.outside
        on_cpu = sum(r.blocks for r in swapped)
        if not (0 <= self.free <= self.total and 0 <= self.cpu_free <= self.cpu_total
                and on_gpu + self.free == self.total and on_cpu + self.cpu_free == self.cpu_total):
            raise self._broken(f"GPU {self.free} free + {on_gpu} held != {self.total}, or CPU {self.cpu_free} free + "
                               f"{on_cpu} held != {self.cpu_total}")

    # ------------------------------------------------------------------ prefix caching (llmsim.engine.prefix_cache)
    def acquire_prefix(self, r: Request, n: int) -> None:
        """Give ``r`` (with nothing computed) its ``n`` cached blocks from ``PrefixCache.lookup``, made just before."""
        assert r.prefix_state is not None and self.prefix is not None and r.blocks == 0 and r.computed == 0
        self.free -= self.prefix.take(r, n)
        if self.free < 0:
            raise self._broken(f"prefix hit of {n} block(s) for request {r.id} took more than the free blocks")
        r.blocks = n
        r.computed = n * self.block_size

    def cached_prefix(self, r: Request) -> tuple[int, int]:
        """(blocks of ``r``'s prompt found in the prefix cache, how many of them are free now) for a waiting request
        with nothing computed; (0, 0) without prefix caching or ids. Policies pass the first to ``Instance.admit``
        and count both against the free blocks."""
        if r.hash_ids is None or r.computed or self.prefix is None:
            return 0, 0
        return self.prefix.lookup(r)

    def prefix_hit_tokens(self, r: Request) -> int:
        """Prompt tokens ``r`` would find cached here now (what a KV-event-fed router knows; ClusterView)."""
        pc = self.prefix
        if not r.hash_ids or pc is None:
            return 0
        bs = self.block_size
        if r.computed:  # running or partly computed elsewhere: ask as a fresh request would, leaving its state (the
            # engine's that runs it, perhaps with another block size) as it is
            return pc.reusable(r, new_state(r, bs))[0] * bs
        return pc.lookup(r)[0] * bs

    def allocated(self, r: Request, n_new: int) -> None:
        """``r`` holds the blocks for ``n_new`` more tokens in the iteration being scheduled: with prefix caching, the
        prompt blocks they fill become cached now, as vLLM V1 caches a request's full blocks at allocation
        (``KVCacheManager.allocate_slots`` -> ``cache_blocks``, up to its computed plus scheduled tokens), so a request
        admitted later in the same iteration reuses them. The iteration computes them before any later one reads
        them; ``PrefixCache.computed`` at its end then finds nothing new."""
        st = r.prefix_state
        bs = self.block_size
        if self.prefix is None or st is None or st.bs != bs or st.done >= st.full:
            return  # (no caching, no ids, keys for another engine's blocks, or all cached: PrefixCache.computed)
        c = r.computed + n_new
        upto = (c if c < r.prompt_tokens else r.prompt_tokens) // bs
        if upto > st.done:
            self.prefix.cache_to(st, upto)

    def computed(self, batch: list[Request]) -> None:
        """A stepped iteration of ``batch`` moved its requests' computed tokens: with prefix caching the prompt
        blocks computed so far become cached (a windowed cache also frees the blocks that left the window)."""
        if self.prefix is not None:
            self.prefix.computed(batch)

    def _broken(self, what: str) -> LLMSimError:
        return LLMSimError(f"instance {self.owner}: KV cache accounting broken: {what} (a batch policy moved blocks "
                           "without checking they were free)")


class WindowedKVCache(KVCache):
    """A KV cache whose requests give back the blocks that left their attention window (``llmsim.engine.window``)."""

    __slots__ = ("window", "skipped")

    windowed = True

    def __init__(self, total: int, block_size: int, window: int, watermark: int = 0, cpu_total: int = 0,
                 owner: str = "", prefix: PrefixCache | None = None) -> None:
        super().__init__(total, block_size, watermark, cpu_total, owner, prefix)
        self.window = window  # attention window in tokens
        self.skipped: dict[int, int] = {}  # request id -> blocks freed from the front of its table

    def needed(self, r: Request, n_new: int) -> int:
        """New blocks ``r`` needs to compute ``n_new`` more tokens: its table grows as for full attention, the
        blocks already freed from its front no longer count."""
        need = -(-(r.computed + n_new) // self.block_size) - self.skipped.get(r.id, 0) - r.blocks
        return need if need > 0 else 0

    def computed(self, batch: list[Request]) -> None:
        """Free the blocks that left the window of each request of ``batch`` (its computed tokens just moved); a
        request with prefix-block ids under prefix caching keeps its whole table (``llmsim.engine.window``)."""
        if self.prefix is not None:
            self.prefix.computed(batch)
        window, bs, skipped = self.window, self.block_size, self.skipped
        freed = 0
        for r in batch:
            gone = skipped_blocks(r.computed, window, bs)
            if gone and r.prefix_state is None:
                new = gone - skipped.get(r.id, 0)
                if new > 0:
                    skipped[r.id] = gone
                    r.blocks -= new
                    freed += new
        if freed:
            free = self.free + freed
            if free > self.total:
                raise self._broken(f"sliding window freed {freed} block(s) with {self.free} of {self.total} free")
            self.free = free

    def release(self, r: Request) -> None:
        super().release(r)
        self.skipped.pop(r.id, None)

    def drop_swapped(self, r: Request) -> None:
        super().drop_swapped(r)
        self.skipped.pop(r.id, None)
