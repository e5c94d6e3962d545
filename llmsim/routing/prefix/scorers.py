"""Scorers and the picker of the prefix-aware routers (llm-d's inference scheduler: filters, weighted scorers, picker).

Every scorer gives each candidate instance a score in [0, 1] (higher: better), as llm-d's scorer plugins do;
the router adds them with its weights and the picker takes the maximum (docs/prefix_routing.md).

* :func:`precise_prefix_scores`: the prompt fraction instance i holds in its prefix cache right now
  (``view.prefix_hit_tokens``), what llm-d's precise prefix-cache scorer learns from vLLM's KV events.
* :class:`ApproxPrefixIndex`: the router's own bookkeeping of the block keys it sent to each instance (an LRU
  per instance), llm-d's approximate prefix scorer: it knows nothing of the engines' evictions.
* :func:`queue_scores`: min-max normalised queue length, 1 for the shortest (llm-d's queue scorer).
* :func:`kv_scores`: 1 - KV cache use (llm-d's kv-cache-utilization scorer).

Only the public :class:`~llmsim.state.view.SimulatorView` is read. Cost per request: O(candidates x blocks of
the request) for the prefix scorers, O(candidates) for the others.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from llmsim.engine.prefix_cache import block_keys

if TYPE_CHECKING:
    from llmsim.request import Request
    from llmsim.state.view import SimulatorView

# blocks tracked per instance when the view tells no KV capacity: the default LRU capacity per server of the
# Gateway API Inference Extension's prefix plugin (llm-d's approximate scorer), 31,250 blocks
DEFAULT_LRU_BLOCKS = 31250
EPS = 1e-12  # scores closer than this tie


def precise_prefix_scores(req: Request, view: SimulatorView, cands: list[int]) -> list[float]:
    """Hit tokens / prompt tokens of each candidate, from the engines' caches (0 without ids or caching)."""
    p = req.prompt_tokens
    if p <= 0 or not req.hash_ids:
        return [0.0] * len(cands)
    return [min(1.0, view.prefix_hit_tokens(i, req) / p) for i in cands]


def queue_scores(queues: list[int] | list[float], cands: list[int]) -> list[float]:
    """(max - q) / (max - min) over the candidates, 1 for all when they are equal (llm-d's queue scorer)."""
    qs = [queues[i] for i in cands]
    lo, hi = min(qs), max(qs)
    if hi <= lo:
        return [1.0] * len(cands)
    span = hi - lo
    return [(hi - q) / span for q in qs]


def kv_scores(view: SimulatorView, cands: list[int]) -> list[float]:
    """1 - fraction of KV blocks in use, clipped to [0, 1] (llm-d's kv-cache-utilization scorer)."""
    kv = view.kv_used_fractions()
    return [min(1.0, max(0.0, 1.0 - kv[i])) for i in cands]


def pick(cands: list[int], scores: list[float], queues: list[int] | list[float]) -> int:
    """The candidate of highest score; ties (within EPS) go to the shorter queue, then the lower index."""
    best = cands[0]
    best_s = scores[0]
    best_q = queues[best]
    for i, s in zip(cands[1:], scores[1:], strict=True):
        if s > best_s + EPS:
            best, best_s, best_q = i, s, queues[i]
        elif s >= best_s - EPS:
            q = queues[i]
            if q < best_q or (q == best_q and i < best):
                best, best_s, best_q = i, max(s, best_s), q
    return best


class ApproxPrefixIndex:
    """Per instance, an LRU of the prompt block keys the router sent there (llm-d's approximate prefix index).

    ``capacity``: blocks kept per instance; None estimates it, at the first request, from each instance's KV
    capacity in blocks (``ClusterState`` ``kv_blocks_total``), else :data:`DEFAULT_LRU_BLOCKS`. A request's keys
    are touched last block first, so its first block is the most recent and a long prompt that overflows the
    LRU loses its tail, not its prefix (vLLM frees a request's blocks in that order too)."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity
        self.caps: list[int] = []
        self.lru: list[OrderedDict[int, None]] = []

    def reset(self) -> None:
        self.caps = []
        self.lru = []

    def bind(self, view: SimulatorView) -> None:
        """Size the per-instance LRUs for ``view``'s cluster (once, or again when the instance count changed)."""
        n = view.num_instances
        if len(self.lru) == n:
            return
        if self.capacity is not None:
            caps = [self.capacity] * n
        else:
            insts = getattr(view.state(), "instances", ())
            caps = [int(getattr(s, "kv_blocks_total", 0) or 0) or DEFAULT_LRU_BLOCKS for s in insts]
            caps += [DEFAULT_LRU_BLOCKS] * (n - len(caps))
        self.caps = caps
        self.lru = [OrderedDict() for _ in range(n)]

    def keys(self, req: Request, view: SimulatorView, cands: list[int]) -> dict[int, list[int]]:
        """The request's prompt block keys per engine block size among the candidates (hashed once per size)."""
        out: dict[int, list[int]] = {}
        for i in cands:
            bs = view.block_size(i)
            if bs not in out:
                out[bs] = block_keys(req, bs, req.prompt_tokens)
        return out

    def match(self, i: int, keys: list[int]) -> int:
        """Blocks of the longest run of ``keys``, from the first, that instance ``i`` is believed to hold."""
        lru = self.lru[i]
        n = 0
        for k in keys:
            if k not in lru:
                break
            n += 1
        return n

    def scores(self, req: Request, view: SimulatorView, cands: list[int],
               keys: dict[int, list[int]]) -> list[float]:
        """Matched blocks x block size / prompt tokens of each candidate (= matched / prompt blocks), in [0, 1]."""
        p = req.prompt_tokens
        if p <= 0:
            return [0.0] * len(cands)
        out = []
        for i in cands:
            bs = view.block_size(i)
            out.append(min(1.0, self.match(i, keys[bs]) * bs / p))
        return out

    def record(self, i: int, keys: list[int]) -> None:
        """Instance ``i`` got a request with these prompt keys: they become its most recent (tail first)."""
        lru = self.lru[i]
        for k in reversed(keys):
            if k in lru:
                lru.move_to_end(k)
            else:
                lru[k] = None
        over = len(lru) - self.caps[i]
        for _ in range(over):
            lru.popitem(last=False)
