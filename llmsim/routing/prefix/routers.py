"""Prefix-aware routers (docs/prefix_routing.md): ``prefix_aware`` (llm-d's inference scheduler) and
``session_affinity``: send a request where its prompt's prefix is already cached.

``prefix_aware`` follows llm-d's inference scheduler: candidates (the instances that can serve the request)
are scored by weighted scorers (:mod:`llmsim.routing.prefix.scorers`) and the picker takes the maximum.

* ``variant``: ``precise`` scores the prefix from the engines' caches (``view.prefix_hit_tokens``, llm-d's
  precise prefix-cache scorer fed by KV events); ``approx`` from the router's own record of the block keys it
  sent to each instance (llm-d's approximate prefix scorer; ``lru_blocks`` per instance, default the
  instance's KV capacity in blocks).
* ``prefix_weight`` / ``queue_weight`` / ``kv_weight``: 3 / 2 / 2 by default, llm-d's default scheduling
  profile (prefix-cache-scorer 3, queue-scorer 2, kv-cache-utilization-scorer 2).
* ``queue_metric``: what the queue scorer counts: ``total`` (waiting + running + swapped, the default) or
  ``waiting`` (llm-d's scorer reads vLLM's waiting queue only).
* ``load_guard``: an instance whose queue (waiting + running + swapped) exceeds the shortest candidate queue
  by more than this many requests gets prefix score 0, so a popular prefix cannot pile every request onto
  one instance (ours, not llm-d's; null: no guard).

``session_affinity`` sends a session to the instance that served it before. The session is
``req.extra["session"]`` (or ``"session_id"``) when present, else the request's first hash id (its first
``hash_block`` tokens, e.g. a shared system prompt or a conversation's opening). A new session, a request
without either, or a sticky instance whose queue exceeds the shortest by more than ``overload`` requests goes to
the shortest queue (JSQ, lowest index on ties), and the session then sticks there. At most ``max_sessions``
sessions are remembered (least recently used forgotten).

Ties go to the shorter queue, then the lower index: runs are deterministic (no random draws).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from llmsim.errors import ConfigError
from llmsim.routing.base import Router, kwarg_number, register_router
from llmsim.routing.prefix.scorers import (
    ApproxPrefixIndex,
    kv_scores,
    pick,
    precise_prefix_scores,
    queue_scores,
)

if TYPE_CHECKING:
    from llmsim.request import Request
    from llmsim.state.view import SimulatorView

VARIANTS = ("precise", "approx")
QUEUE_METRICS = ("total", "waiting")
DEFAULT_WEIGHTS = (3.0, 2.0, 2.0)  # prefix : queue : kv, llm-d's default profile
DEFAULT_LOAD_GUARD = 16  # requests above the shortest queue beyond which prefix affinity is ignored
DEFAULT_OVERLOAD = 16  # the same for a session's sticky instance
DEFAULT_MAX_SESSIONS = 65536


def _choice(name: str, value: Any, options: tuple[str, ...]) -> str:
    if value not in options:
        raise ConfigError(f"policy.kwargs.{name}: expected one of {list(options)}, got {value!r}")
    return str(value)


def _optional_count(name: str, value: Any, lo: float) -> int | None:
    """None, or an integer >= lo (ConfigError naming ``policy.kwargs.<name>``)."""
    if value is None:
        return None
    return int(kwarg_number(name, value, lo=lo, strict=False, integer=True))


def _argmin(values: list[int], cands: list[int]) -> int:
    best = cands[0]
    for i in cands[1:]:
        if values[i] < values[best]:
            best = i
    return best


@register_router
class PrefixAwareRouter(Router):
    """Weighted prefix + queue + KV scorers, max-score picker (llm-d's inference scheduler)."""

    name = "prefix_aware"

    def __init__(self, seed: int = 0, variant: str = "precise", prefix_weight: Any = DEFAULT_WEIGHTS[0],
                 queue_weight: Any = DEFAULT_WEIGHTS[1], kv_weight: Any = DEFAULT_WEIGHTS[2],
                 queue_metric: str = "total", load_guard: Any = DEFAULT_LOAD_GUARD, lru_blocks: Any = None,
                 **kw: Any) -> None:
        super().__init__(seed, **kw)
        self.variant = _choice("variant", variant, VARIANTS)
        self.w_prefix = kwarg_number("prefix_weight", prefix_weight, strict=False)
        self.w_queue = kwarg_number("queue_weight", queue_weight, strict=False)
        self.w_kv = kwarg_number("kv_weight", kv_weight, strict=False)
        if self.w_prefix + self.w_queue + self.w_kv <= 0:
            raise ConfigError("policy.kwargs.prefix_weight: prefix_weight, queue_weight and kv_weight are all 0; "
                              "at least one must be > 0")
        self.queue_metric = _choice("queue_metric", queue_metric, QUEUE_METRICS)
        self.load_guard = _optional_count("load_guard", load_guard, 0)
        cap = _optional_count("lru_blocks", lru_blocks, 1)
        if cap is not None and self.variant != "approx":
            raise ConfigError(f"policy.kwargs.lru_blocks: only the approx variant tracks blocks, got variant "
                              f"{self.variant!r}")
        self.index = ApproxPrefixIndex(cap) if self.variant == "approx" else None

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        if self.index is not None:
            self.index.reset()

    def prefix_scores(self, req: Request, view: SimulatorView, cands: list[int],
                      keys: dict[int, list[int]] | None) -> list[float]:
        """The variant's prefix score per candidate."""
        if keys is None:
            return precise_prefix_scores(req, view, cands)
        assert self.index is not None
        return self.index.scores(req, view, cands, keys)

    def scores(self, req: Request, view: SimulatorView, cands: list[int], queues: list[int],
               keys: dict[int, list[int]] | None) -> list[float]:
        """Weighted sum of the scorers per candidate (the load guard zeroes the prefix term of busy instances)."""
        total = [0.0] * len(cands)
        if self.w_prefix > 0:
            ps = self.prefix_scores(req, view, cands, keys)
            guard = self.load_guard
            lo = min(queues[i] for i in cands) if guard is not None else 0
            w = self.w_prefix
            for j, i in enumerate(cands):
                if guard is None or queues[i] - lo <= guard:
                    total[j] += w * ps[j]
        if self.w_queue > 0:
            qm = queues if self.queue_metric == "total" else view.num_waiting()
            w = self.w_queue
            for j, s in enumerate(queue_scores(qm, cands)):
                total[j] += w * s
        if self.w_kv > 0:
            w = self.w_kv
            for j, s in enumerate(kv_scores(view, cands)):
                total[j] += w * s
        return total

    def route(self, req: Request, view: SimulatorView) -> int:
        cands = view.candidates(req)
        keys = None
        if self.index is not None:
            self.index.bind(view)
            keys = self.index.keys(req, view, cands)
        if len(cands) == 1:
            best = cands[0]
        else:
            queues = view.queue_lengths()
            best = pick(cands, self.scores(req, view, cands, queues, keys), queues)
        if keys is not None:
            assert self.index is not None
            self.index.record(best, keys[view.block_size(best)])
        return best


def session_of(req: Request) -> Hashable | None:
    """The request's session: ``extra["session"]`` (or ``extra["session_id"]``, what the shared_prefix and BurstGPT
    session workloads set), else its first hash id, else None (no session)."""
    extra = req.extra
    if extra:
        if "session" in extra:
            return ("session", extra["session"])
        if "session_id" in extra:
            return ("session", extra["session_id"])
    if req.hash_ids:
        return ("prefix", req.hash_ids[0])
    return None


@register_router
class SessionAffinityRouter(Router):
    """Same session, same instance; JSQ for new sessions and when the sticky instance is overloaded."""

    name = "session_affinity"

    def __init__(self, seed: int = 0, overload: Any = DEFAULT_OVERLOAD, max_sessions: Any = DEFAULT_MAX_SESSIONS,
                 **kw: Any) -> None:
        super().__init__(seed, **kw)
        self.overload = _optional_count("overload", overload, 0)
        self.max_sessions = int(kwarg_number("max_sessions", max_sessions, lo=1, strict=False, integer=True))
        self.sticky: OrderedDict[Hashable, int] = OrderedDict()

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self.sticky.clear()

    def route(self, req: Request, view: SimulatorView) -> int:
        cands = view.candidates(req)
        queues = view.queue_lengths()
        s = session_of(req)
        if s is None:
            return _argmin(queues, cands)
        i = self.sticky.get(s)
        if i is not None and i in cands:
            lo = min(queues[j] for j in cands)
            if self.overload is None or queues[i] - lo <= self.overload:
                self.sticky.move_to_end(s)
                return i
        i = _argmin(queues, cands)
        self.sticky[s] = i
        self.sticky.move_to_end(s)
        if len(self.sticky) > self.max_sessions:
            self.sticky.popitem(last=False)
        return i
