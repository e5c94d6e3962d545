"""Automatic prefix caching, block by block, as vLLM does it (``enable_prefix_caching``).

Block identities. A request names its content by chained prefix-block ids: ``hash_ids[i]`` identifies the
tokens ``[0, (i + 1) * hash_block)`` of its sequence (prompt, then output), as Mooncake's 512-token
``hash_ids`` and vLLM's block hashes do - two requests with the same id at position ``i`` share those
tokens. An engine with blocks of ``bs`` tokens names its block ``j`` (tokens ``[j*bs, (j+1)*bs)``) by the id of
the hash block holding the block's last token and that token's offset in it (:func:`block_keys`; when the
two sizes are equal the key is the id itself), so any ``hash_block`` maps onto any engine block size; a
chained id carries everything before it, so equal keys mean equal prefixes.

The cache (:class:`PrefixCache`) keeps which running requests hold each cached block; a block that no
running request holds stays cached and counts as free (vLLM's free-block queue keeps its hash), and is
evicted least recently used when a new allocation needs its room - among blocks freed together, the last
block of the sequence first, as vLLM's free queue orders them. Every operation of ``llmsim.engine.kv.KVCache`` that
lowers the free count records the evictions it causes by lowering ``kv.cached`` (the free blocks whose content is
kept) to it, the same two compares with caching off; they are carried out before the cache is next read
(``owed``; a decode run of the fast path records them when it materialises, which is the same: nothing is released
within a run).

Blocks are stored in runs (:class:`Run`): consecutive blocks of one sequence cached together, with one set of
holders, as a radix tree stores them (SGLang's RadixAttention), indexed by their first key only. A run is a view
``src[lo:hi]`` of the key sequence of the request that computed it (its own ids, not a copy, when they are the
keys; :meth:`PrefixCache.lookup`), so splitting, trimming and extending a run move two integers. What the engine
keeps about a request (its ``prefix_state``, a :class:`State`) is itself the first run the request registers, so a
request that reuses nothing costs one object; the state stays behind in the cache when the request leaves.
A lookup walks the request's keys from its first block: each run it meets is entered at its start (keys are
chained: a block's predecessors come before it) and compared as a slice; a hit covers a leading part of each run
it touches, so a run splits at most in two. Registering, releasing and evicting cost Python work per run, not per
block, and a lookup whose first key is not cached returns at once: with no reuse, caching costs little
(docs/prefix_caching.md, Speed).

A new request reuses the longest run of cached blocks from its start, but at least one token is
computed (vLLM recomputes the last prompt token to sample from it). Prompt blocks become cached when the
iteration that computes them ends, or, under a policy that asks for it as vLLM V1 does (``chunked``), when they
are allocated to the iteration that will compute them (``KVCache.allocated``), so a request admitted
later in the same iteration reuses them; every block also when its request leaves the GPU (finished or
preempted: its output blocks too, as far as its ids cover them). A block computed while an equal one is
already cached stays private to its request (vLLM does not merge them). Counting follows vLLM's
``prefix_cache_queries`` / ``prefix_cache_hits`` (tokens; counted by the instance), one query per admission
of a request with nothing computed (a preempted request is queried again when it comes back).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from operator import index
from typing import TYPE_CHECKING, Any

from llmsim.errors import LLMSimError

if TYPE_CHECKING:
    from llmsim.request import Request

# blocks owed before a lookup that cannot hit pays them: one pay evicts many runs at once, yet evicted runs are not
# kept for long. Kept longer (4,096), the runs and ids waiting to be freed made the garbage collector run ~25 % more
# often (gen-0 collections) and cost more instructions in all than paying early: 5.6 % over no caching at 512,
# 7.0 % at 4,096, 6.3 % at 128 (docs/prefix_caching.md, Speed).
PAY_SLACK = 512


def block_keys(r: Request, block_size: int, tokens: int | None = None) -> list[Any]:
    """Keys of ``r``'s full engine blocks within its first ``tokens`` tokens (default: prompt + output) that its
    ids cover; empty without ids. Ids cover the prompt; they cover output tokens too only when there are more
    ids than the prompt needs (then up to ``len(hash_ids) * hash_block`` tokens). A key is the id itself when
    ``hash_block == block_size``, else the pair (id, offset of the block's last token). Routers that track
    prefixes themselves hash with this too."""
    ids = r.hash_ids
    if not ids:
        return []
    h = r.hash_block
    nb = _full_blocks(r, block_size, tokens)
    if h == block_size:
        return list(ids[:nb])
    if h % block_size == 0:  # several engine blocks per id, e.g. Mooncake's 512 over 16
        return BlockKeys(ids, h // block_size, block_size, nb)[:]
    return [(ids[t // h], t % h) for t in range(block_size - 1, nb * block_size, block_size)]


class BlockKeys:
    """The keys of a request's engine blocks when each of its ids names several (``hash_block`` a multiple of the
    block size, as Mooncake's 512-token ids over 16-token blocks): key ``j`` is :func:`block_keys`' pair (id,
    offset of the block's last token), made when asked. A list of those pairs, one tuple per block kept while the
    blocks stay cached, made caching with no reuse cost ~1.5x the wall time of caching off on such ids (the
    garbage collector traced them: docs/prefix_caching.md, Speed); the engine keeps a request's first key and each
    run's, and asks for others only where a run starts or a hit is compared.
    Slices are lists of pairs, so runs compare as with :func:`block_keys`' lists."""

    __slots__ = ("ids", "per", "bs", "n")

    def __init__(self, ids: Sequence[Any], per: int, bs: int, n: int) -> None:
        self.ids, self.per, self.bs, self.n = ids, per, bs, n  # (per: engine blocks per id; n: keys)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, j: Any) -> Any:
        if j.__class__ is int and 0 <= j < self.n:  # the engine's question: one key (first, cheapest)
            per, bs = self.per, self.bs
            return self.ids[j // per], (j % per + 1) * bs - 1
        if isinstance(j, slice):
            per, bs, ids = self.per, self.bs, self.ids
            return [(ids[k // per], (k % per + 1) * bs - 1) for k in range(*j.indices(self.n))]
        j = index(j)  # (numpy integers too)
        if j < 0:
            j += self.n
        if 0 <= j < self.n:
            return self[j]
        raise IndexError(f"block key {j} of {self.n}")


def new_state(r: Request, bs: int) -> State:
    """A new engine state for ``r``'s blocks of ``bs`` tokens. Its keys are the request's own ids, not a copy, when
    they are the keys (hash_block == bs: runs are slices of them by position, so no reuse costs no per-block work),
    a :class:`BlockKeys` when each id names several blocks (its first key made here, once), else :func:`block_keys`'
    list."""
    ids, h = r.hash_ids, r.hash_block
    if ids and h % bs == 0:
        p = r.prompt_tokens
        # ids that cover the prompt and no output (the usual case) name its full blocks; else _full_blocks' whole rule
        full = p // bs if p + h > len(ids) * h >= p - p % bs else _full_blocks(r, bs)
        if h == bs:
            return State(bs, ids, full, ids[0])
        # (its first key is BlockKeys' key 0, written out: asking it costs a call per request, ~1.5 % with no reuse)
        return State(bs, BlockKeys(ids, h // bs, bs, full), full, (ids[0], bs - 1) if full else None)
    keys = block_keys(r, bs)
    return State(bs, keys, len(keys), keys[0] if keys else None)


def _full_blocks(r: Request, block_size: int, tokens: int | None = None) -> int:
    """Full engine blocks of ``r`` within its first ``tokens`` tokens that its ids cover (``block_keys``'s rule)."""
    h = r.hash_block
    p = r.prompt_tokens
    n = p + r.output_tokens if tokens is None else tokens
    covered = len(r.hash_ids) * h
    if covered < p + h:
        if covered < p - p % block_size:  # (the keys of its full blocks would run out)
            raise LLMSimError(f"request {r.id}: its {len(r.hash_ids)} hash_ids of {h} tokens name {covered} tokens, "
                              f"fewer than the {p - p % block_size} of its {p}-token prompt's full {block_size}-token "
                              "blocks; expected ids covering the prompt (the last may be partial)")
        covered = p
    return (n if n < covered else covered) // block_size


class Run:
    """Consecutive cached blocks of one sequence with the same holders (the :class:`State` of running requests): the
    keys ``src[lo:hi]`` of a request's key sequence, not a copy of them, and ``first``, its key in the index
    (``src[lo]``, kept: a :class:`BlockKeys` makes a key each time it is asked)."""

    __slots__ = ("src", "lo", "hi", "holders", "queued", "first")

    def __init__(self, src: Sequence[Any], lo: int, hi: int, holders: tuple[State, ...], first: Any) -> None:
        self.src, self.lo, self.hi, self.first = src, lo, hi, first
        # a tuple: most runs have one holder all their life, and a 1-tuple is one small allocation (a list is two)
        self.holders = holders  # empty: a free run, in the LRU
        self.queued = 0  # entries naming it in the LRU queue (the newest counts while it is free; PrefixCache.lru)

    @property
    def keys(self) -> list[Any]:
        """The run's block keys (a copy; tests and debugging)."""
        return list(self.src[self.lo:self.hi])


class State(Run):
    """What an engine keeps about a request's blocks (``Request.prefix_state``): its block size ``bs``, its keys
    (``src``), how many of them name full blocks (``full``) and how many are registered (``done``). It is also the
    first run of blocks the request registers itself (its *home* run, ``src[lo:hi]``, among its own holders once
    registered), so a request that reuses nothing and registers one run costs this one object. ``held`` lists the
    runs it holds in sequence order, or is None while that is its home run alone (or nothing); ``key0`` is its first
    key (None without keys), asked at every lookup and registration. While ``done`` is 0 it holds nothing (its
    holders are empty, ``held`` is None and ``first`` is ``key0``: a hit sets ``done``, and leaving resets both).
    Once its home run is registered the object outlives the request as a cached run: the request leaves it behind
    (:meth:`PrefixCache.leave`) and gets a new state if it comes back."""

    __slots__ = ("bs", "full", "done", "held", "key0")

    def __init__(self, bs: int, keys: Sequence[Any], full: int, key0: Any) -> None:
        self.src = keys
        self.first = self.key0 = key0  # (its home run's key while that starts at 0: the common case)
        self.lo = self.hi = self.done = self.queued = 0
        self.holders = ()  # (its home run is not registered yet)
        self.bs, self.full = bs, full
        self.held: list[Run] | None = None

    def runs(self) -> list[Run]:
        """The runs it holds, in sequence order (tests, debugging)."""
        if self.held is not None:
            return list(self.held)
        return [self] if self.holders else []


class PrefixCache:
    """Cached blocks of one instance: runs indexed by their first key, and the free runs in LRU order."""

    __slots__ = ("block_size", "heads", "lru", "stale", "free_blocks", "evictions", "kv")

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.heads: dict[Any, Run] = {}  # first key -> run
        # free runs, least recently freed first, as a queue with lazy deletion: a free run that a request takes keeps
        # its entry, which eviction skips (the run is held, or freed again later with a newer entry: ``Run.queued``).
        # Appending and popping cost no hashing and no allocation per entry, unlike an OrderedDict (docs/
        # prefix_caching.md, Speed); :meth:`free_runs` lists the live entries. (Not a plain dict: taking its first
        # key costs a scan past the deleted ones, O(free runs) per eviction.)
        self.lru: deque[Run] = deque()
        self.stale = 0  # entries of the queue that no longer count (compacted when they are the majority)
        self.free_blocks = 0  # blocks in free runs (counted as free by the KV cache)
        self.evictions = 0  # carried out (``evicted`` adds the ones owed)
        # the KV cache of the instance (it sets this): ``kv.cached`` is how many of the free runs' blocks are kept,
        # ``kv.shared`` the blocks held twice (sum over held runs of (holders - 1) * blocks)
        self.kv: Any = None

    @property
    def owed(self) -> int:
        """Evictions that allocations made and that are not carried out yet: the KV cache's hot paths only lower
        ``kv.cached`` below the free count, and :meth:`pay` evicts the difference before the cache is next read.
        The oldest blocks are the ones owed - releases append newer ones and nothing else reorders the LRU - so
        this is eager eviction. A lookup that cannot hit (its first key is not cached) pays only once more than
        PAY_SLACK blocks are owed."""
        return self.free_blocks - self.kv.cached

    @property
    def evicted(self) -> int:
        """Cached blocks evicted to make room so far (owed ones included)."""
        return self.evictions + self.owed

    def free_runs(self) -> list[Run]:
        """The free runs, least recently freed first: the queue's live entries (tests, debugging)."""
        out, seen = [], set()
        for run in reversed(self.lru):  # the newest entry of a free run is its place
            if not run.holders and id(run) not in seen:
                seen.add(id(run))
                out.append(run)
        assert len(out) + self.stale == len(self.lru), "LRU queue entries miscounted"
        out.reverse()
        return out

    def pay(self) -> None:
        """Evict the blocks owed: the least recently freed runs, each from its last block."""
        kept = self.kv.cached
        over = self.free_blocks - kept
        if not over:
            return
        self.evictions += over
        self.free_blocks = kept
        lru, heads = self.lru, self.heads
        pop = lru.popleft
        while over > 0:
            run = pop()
            q = run.queued - 1
            run.queued = q
            if q or run.holders:  # a stale entry: the run was taken since (and maybe freed again: a newer entry)
                self.stale -= 1
                continue
            n = run.hi - run.lo
            if n > over:  # the run's last blocks go first; the rest stays oldest
                run.hi -= over
                run.queued = 1
                lru.appendleft(run)
                return
            over -= n
            first = run.first
            if heads.get(first) is run:
                del heads[first]

    def match(self, keys: Sequence[Any], limit: int) -> tuple[int, int]:
        """(blocks of the longest cached prefix among the first ``limit`` keys, how many of them are free now).
        :meth:`lookup` answers a miss (first key not cached) itself, paying owed evictions only past ``PAY_SLACK``:
        here the owed evictions are paid first, as before any read."""
        heads = self.heads
        if limit > len(keys):
            limit = len(keys)
        if limit <= 0:
            return 0, 0
        if self.owed:
            self.pay()
        n = taken = 0
        while n < limit:
            run = heads.get(keys[n])
            if run is None:
                break
            m = _common(keys, n, limit, run)
            if not run.holders:
                taken += m
            n += m
        return n, taken

    # ------------------------------------------------------------------ a request's blocks (r.prefix_state)
    def lookup(self, r: Request) -> tuple[int, int]:
        """(cached blocks ``r`` would reuse at admission, how many of them are free now: admitting it takes them)."""
        st = r.prefix_state
        bs = self.block_size
        if st is None or st.bs != bs:
            st = r.prefix_state = new_state(r, bs)
        if st.key0 not in self.heads:  # nothing to find (evicting only shrinks the cache): pay later, in bulk:
            if self.free_blocks - self.kv.cached > PAY_SLACK:  # (self.owed, inlined) no reuse costs little
                self.pay()
            return 0, 0
        return self.reusable(r, st)

    def reusable(self, r: Request, st: State) -> tuple[int, int]:
        """(cached blocks of ``st``'s keys that ``r`` would reuse, how many of them are free now): the longest cached
        prefix of its full blocks, leaving at least one token of its prompt (and output so far) to compute."""
        limit = (r.prompt_tokens + r.generated - 1) // self.block_size
        return self.match(st.src, limit if limit < st.full else st.full)

    def take(self, r: Request, n: int) -> int:
        """``r`` (nothing computed) holds the first ``n`` of its keys, which :meth:`lookup` just found; returns how
        many of them were free (in use now)."""
        if self.owed:
            self.pay()
        kv = self.kv
        st = r.prefix_state
        keys = st.src
        st.done = n
        held = st.held = []  # (it holds nothing yet: a new state, or one that left without registering a run)
        heads = self.heads
        i = taken = 0
        while i < n:
            run = heads[keys[i]]
            m = _common(keys, i, n, run)
            free = not run.holders
            whole = m == run.hi - run.lo
            if not whole:
                run = self._split(run, m)  # (the rest stays free, its queue entry live)
            if free:
                self.free_blocks -= m
                kv.cached -= m
                taken += m
            else:
                kv.shared += m
            run.holders += (st,)
            held.append(run)
            if free and whole:
                self._unqueue()  # (once held: a compaction drops its entry)
            i += m
        return taken

    def _unqueue(self) -> None:
        """A free run was taken: its queue entry goes stale. Once stale entries are most of a long queue, keep only
        the live ones (amortised O(1); without evictions nothing else would ever drop them)."""
        self.stale += 1
        lru = self.lru
        if self.stale > 64 and 2 * self.stale > len(lru):
            live = []
            for run in reversed(lru):  # the newest entry of a free run is its place
                if run.queued and not run.holders:
                    live.append(run)
                run.queued = 0
            live.reverse()
            for run in live:
                run.queued = 1
            self.lru = deque(live)
            self.stale = 0

    def _split(self, run: Run, m: int) -> Run:
        """Cut ``run`` after its first ``m`` blocks and return the new leading run (the same holders; a free run's
        head is about to be held, so it does not enter the LRU)."""
        head = Run(run.src, run.lo, run.lo + m, run.holders, run.first)
        run.lo += m
        run.first = run.src[run.lo]
        self.heads[head.first] = head
        self.heads[run.first] = run
        for h in head.holders:  # a holder holds both parts, in sequence order
            held = h.held
            if held is None:  # it held its home run alone: this one
                h.held = [head, run]
            else:
                held.insert(held.index(run), head)
        return head

    def computed(self, batch: list[Request]) -> None:
        """Cache the prompt blocks the requests of ``batch`` have computed so far (the end of an iteration)."""
        bs = self.block_size
        for r in batch:
            st = r.prefix_state
            if st is None or st.bs != bs or st.done >= st.full:
                continue  # no ids; keys for another engine's blocks (admitted without a lookup); or all cached
            c = r.computed
            p = r.prompt_tokens
            upto = (c if c < p else p) // bs  # (never above full: ids cover at least the prompt's full blocks)
            if upto > st.done:
                self.cache_to(st, upto)

    def cache_to(self, st: State, upto: int) -> None:
        """Cache ``st``'s blocks up to ``upto`` (more than it has registered), held by its request: at the end of the
        iteration that computes them (:meth:`computed`), or when they are allocated (``KVCache.allocated``)."""
        if st.done or st.key0 in self.heads:  # (a state with none registered holds nothing: State)
            self._register(st, upto)
        else:  # its first blocks, none cached (_register's home-run case, inlined: the path of no reuse)
            st.done = st.hi = upto
            st.holders = (st,)
            self.heads[st.key0] = st

    def leave(self, r: Request, back: bool = False) -> int:
        """``r`` leaves the GPU: cache its computed blocks (outputs too) and drop its holds; returns the blocks other
        requests still hold (stay in use). Runs it alone held become free, the last of the sequence first
        (evicted first). A state whose home run was registered stays behind as that run: ``r`` gets a new one if it
        comes ``back`` as it is (a swap), else none (a lookup at its next admission makes one)."""
        st = r.prefix_state
        if st.bs != self.block_size:
            return 0
        if st.done < st.full:  # blocks its ids name that are not cached yet (outputs, or a prompt cut short)
            upto = r.computed // st.bs
            if upto > st.full:
                upto = st.full
            if upto > st.done:
                self._register(st, upto)
        st.done = 0
        held = st.held
        if held is None:
            hs = st.holders
            if not hs:
                return 0  # it registered nothing and holds nothing
            if len(hs) == 1:  # its home run, which it alone holds: the common case
                st.holders = ()
                self.lru.append(st)
                st.queued += 1
                n = st.hi - st.lo
                self.free_blocks += n
                self.kv.cached += n
                r.prefix_state = State(st.bs, st.src, st.full, st.key0) if back else None
                return 0
            held = [st]
        home = bool(st.holders)
        queue = self.lru.append
        still = freed = 0
        for k in range(len(held) - 1, -1, -1):
            run = held[k]
            hs = run.holders
            n = run.hi - run.lo
            if len(hs) == 1:
                run.holders = ()
                queue(run)
                run.queued += 1
                freed += n
            else:
                run.holders = _without(hs, st)
                still += n
        st.held = None
        self.free_blocks += freed
        kv = self.kv
        kv.cached += freed
        kv.shared -= still
        if home:
            r.prefix_state = State(st.bs, st.src, st.full, st.key0) if back else None
        return still

    def _register(self, st: State, stop: int) -> None:
        """Cache blocks ``st.done..stop-1`` that a request just computed, held by it. Blocks already cached (an equal
        request computed them too) stay private to it."""
        keys, start = st.src, st.done
        st.done = stop
        heads = self.heads
        first = st.key0
        if first in heads:  # (a miss needs no lookup)
            n = self.match(keys, stop)[0]
            if n > start:
                start = n
                if start >= stop:
                    return
        held = st.held
        last = held[-1] if held else st if st.holders else None
        if last is not None and last.src is keys and last.hi == start and len(last.holders) == 1 \
                and last.holders[0] is st:
            last.hi = stop  # the next chunk of the run it registered last
            return
        if st.holders:  # its home run is registered already: a new run
            run = Run(keys, start, stop, (st,), keys[start])
            if held is None:
                st.held = [st, run]
            else:
                held.append(run)
        else:  # its first run is its state
            st.lo, st.hi, st.holders = start, stop, (st,)
            st.first = keys[start] if start else first
            run = st
            if held is not None:
                held.append(st)
        heads[run.first] = run


def _without(holders: tuple[State, ...], st: State) -> tuple[State, ...]:
    """``holders`` less ``st``. (Not a comprehension in :meth:`PrefixCache.leave`: its closure would make ``st`` a
    cell there, a cost on every call.)"""
    return tuple([h for h in holders if h is not st])


def _common(a: Sequence[Any], i: int, limit: int, run: Run) -> int:
    """Length of the common prefix of ``a[i:limit]`` and ``run``'s keys."""
    b, lo = run.src, run.lo
    m = min(limit - i, run.hi - lo)
    if (b is a and lo == i) or a[i:i + m] == b[lo:lo + m]:
        return m
    k = 0
    while k < m and a[i + k] == b[lo + k]:
        k += 1
    return k
