"""The WorkloadRouter paper's dedicated small / large split (its Table 2) and the options that make it the learned
router's guide: requests by predicted decode length to two instance groups, a spill to the other group's best
instance where that is quicker, and a balance over the whole cluster where most requests are heavy."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from llmsim.errors import ConfigError
from llmsim.routing.base import Router, kwarg_flag, kwarg_number, register_router
from llmsim.routing.load import (
    DECODE_BUCKETS,
    DEFAULT_STEP_S,
    held_seats,
    kv_seats,
    kv_tokens,
    predicted_output,
)

if TYPE_CHECKING:
    from llmsim.request import Request
    from llmsim.state.view import RouterView

RECENT_DECAY = 0.99  # ``large: by_work`` and ``balance_heavy``: a request's weight in the recent mix, per later request


def add_recent(pair: list[float], heavy: bool, weight: float = 1.0) -> None:
    """Counts a request of weight ``weight`` into a decayed (light, heavy) pair, every earlier one decayed by
    :data:`RECENT_DECAY` (the split's recent mix; the instance_set observation keeps the same)."""
    pair[0] *= RECENT_DECAY
    pair[1] *= RECENT_DECAY
    pair[int(heavy)] += weight


def spill_load_kwarg(key: str, value: Any, spill: float | None) -> float:
    """A spill's load: a finite number >= 0, non-zero only with a spill (else a ConfigError naming it)."""
    load = kwarg_number(key, value, strict=False)
    if load and spill is None:
        raise ConfigError(f"policy.kwargs.{key}: a load needs a spill, got {value!r} without one")
    return load


@register_router
class DedicatedSmallLargeRouter(Router):
    """The WorkloadRouter paper's dedicated split (its Table 2): heavy-decode requests (predicted output above
    ``threshold`` tokens, the predictor's first bucket bound, 250) go only to the "large" instances, the others only to
    the "small" ones; round robin within each group. ``large`` = how many of the instances (the last ones) are large;
    default half (the paper's 2-instance split is 1 + 1). ``within: least_work_left`` picks the instance with the
    fewest predicted tokens left inside the group instead of taking turns: the same split, blind to no load, and a
    function of the state alone (a guide a set observation can carry). ``within: least_latency`` scores each
    instance by the request's estimated latency there instead (its queued tokens over its seats plus the request's
    predicted output, each at the instance's own iteration time), and ``spill`` (a ratio >= 1) sends the request to
    the other group's best instance when (1 + its latency) x spill < 1 + the own group's best: the learned
    WorkloadRouter's spill guide (agents/nets.py), so the suite holds the router to its own guide. ``spill_load``
    raises that ratio with the other instance's share of busy seats, x (1 + spill_load x running / max_num_seqs):
    a request's own latency does not count the requests it slows down where it spills, and they are more the fuller
    that instance runs. ``spill_heavy: false`` lets only the light requests spill (to a large instance): a heavy
    decode spilled to a small instance holds its seat and memory while many short requests pass through.
    ``spill_load_light`` is the load of a light request's spill (to the large group; default ``spill_load``): the
    large instances' heavy decodes are slowed by every light request that joins their batch, and are many.
    ``kv_aware: true`` counts what each instance's KV cache holds, for clusters of unequal GPUs: the large group is
    the instances with the most KV tokens (the last ones among equals), and an instance's seats in ``least_latency``
    are its ``max_num_seqs`` x its KV tokens / the largest KV cache's. Without it a 16 GB V100 that holds 4,000
    tokens of KV counts 128 seats like an A100 that holds 50,000, fills its cache and preempts. On equal GPUs it
    changes nothing. ``spill_queued: false`` spills only to an instance where nothing waits: once both groups
    queue, a spill makes a light request wait behind heavy ones, or a heavy decode take seats from many light
    requests for its whole length; the split by class keeps the light requests' queue short, which the mean counts
    most, while spilling into an instance with room still uses an idle half of the cluster. ``spill_min_group``
    spills only where each group has at least that many instances: with one instance a group (2 instances), a
    spill balances no group, it mixes the two classes the split keeps apart. ``large: by_work`` sizes the large
    group by the heavy requests' share of the recent predicted output tokens: where most requests are heavy (most
    conversation outputs are over 250 tokens) the split no longer crowds them onto half the cluster.
    ``batch_seats: true`` caps an instance's seats in ``least_latency`` at the batch its KV cache holds at its
    running requests' present footprint (running x KV blocks / blocks used): a 16 GB V100 whose cache holds one
    4,096-token context runs a few requests at once, not its 128 seats, so its queue drains that much slower.
    ``balance_heavy`` (a share in (0, 1)) sends the request to the candidate of least KV demand (``least_kv``'s rule)
    while the heavy requests' share of the recent ones (each request's weight decays by 1 % per request after it) is
    above it: the split protects light requests from heavy decodes, and where most requests are heavy it only
    gives the majority half the cluster."""

    name = "dedicated_small_large"

    def __init__(self, seed: int = 0, large: int | str | None = None, threshold: int = DECODE_BUCKETS[0],
                 within: str = "round_robin", spill: float | None = None, spill_load: float = 0.0,
                 spill_heavy: bool = True, kv_aware: bool = False, spill_load_light: float | None = None,
                 spill_queued: bool = True, spill_min_group: int = 1, batch_seats: bool = False,
                 balance_heavy: float | None = None, **kw: Any) -> None:
        super().__init__(seed, **kw)
        self.by_work = large == "by_work"
        if self.by_work:
            large = None
        if large is not None and (isinstance(large, bool) or not isinstance(large, int) or large < 1):
            raise ConfigError(f"policy.kwargs.large: expected a positive number of instances or by_work, "
                              f"got {large!r}")
        if within not in ("round_robin", "least_work_left", "least_latency"):
            raise ConfigError(f"policy.kwargs.within: expected round_robin, least_work_left or least_latency, "
                              f"got {within!r}")
        if spill is not None and (within == "round_robin" or isinstance(spill, bool)
                                  or not isinstance(spill, int | float) or not 1.0 <= spill < math.inf):
            raise ConfigError(f"policy.kwargs.spill: expected a ratio >= 1 with within least_work_left or "
                              f"least_latency, got {spill!r}")
        self.large, self.threshold, self.within, self.spill = large, threshold, within, spill
        self.spill_load = spill_load_kwarg("spill_load", spill_load, spill)
        self.spill_load_light = self.spill_load if spill_load_light is None else spill_load_kwarg(
            "spill_load_light", spill_load_light, spill)
        self.spill_heavy = kwarg_flag("spill_heavy", spill_heavy)
        self.kv_aware = kwarg_flag("kv_aware", kv_aware)
        self.spill_queued = kwarg_flag("spill_queued", spill_queued)
        self.spill_min_group = int(kwarg_number("spill_min_group", spill_min_group, lo=1, strict=False, integer=True))
        self.batch_seats = kwarg_flag("batch_seats", batch_seats)
        self.balance_heavy = None if balance_heavy is None else kwarg_number("balance_heavy", balance_heavy)
        if self.balance_heavy is not None and not self.balance_heavy < 1.0:
            raise ConfigError(f"policy.kwargs.balance_heavy: expected a share strictly between 0 and 1, "
                              f"got {balance_heavy!r}")
        self._next = [0, 0]
        self._work = [0.0, 0.0]  # with by_work: recent predicted output tokens of the light and the heavy requests
        self._seen = [0.0, 0.0]  # with balance_heavy: recent light and heavy requests (decayed counts)

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._next = [0, 0]
        self._work = [0.0, 0.0]
        self._seen = [0.0, 0.0]

    def route(self, req: Request, view: RouterView) -> int:
        n = view.num_instances
        pred = predicted_output(req)
        heavy = pred > self.threshold
        if self.balance_heavy is not None and self.mostly_heavy(heavy):
            return min(view.candidates(req), key=view.kv_demand_fractions().__getitem__)
        n_large = self.large if self.large is not None else max(1, n // 2)
        if self.by_work:
            n_large = self.work_share_large(n, heavy, pred)
        if n_large >= n:
            raise ConfigError(f"policy.kwargs.large: {n_large} large instances leave none of the {n} small")
        large = self.large_group(view, n_large)
        group = [i for i in range(n) if (i in large) == heavy]
        cands = view.candidates(req)
        if self.within != "round_robin":
            inside = [i for i in group if i in cands]
            if not inside:
                return cands[0]
            score = self.scores(req, view)
            best = min(inside, key=lambda i: score[i])  # (the first of equals: the routers' tie rule)
            outside = [i for i in cands if i not in group]
            if (self.spill is None or not outside or (heavy and not self.spill_heavy)
                    or min(n_large, n - n_large) < self.spill_min_group):
                return best
            other = min(outside, key=lambda i: score[i])
            there = view.state().instances[other]
            if not self.spill_queued and there.num_waiting + there.num_swapped:
                return best  # it would wait there behind the other class's requests and hold up those behind it
            ratio = self.spill
            load = self.spill_load if heavy else self.spill_load_light
            if load:  # the busier the other instance, the more a spill costs the requests already there
                ratio *= 1.0 + load * there.num_running / there.max_num_seqs
            return other if (1.0 + score[other]) * ratio < 1.0 + score[best] else best
        k = int(heavy)
        for _ in range(len(group)):
            i = group[self._next[k] % len(group)]
            self._next[k] += 1
            if i in cands:
                return i
        return cands[0]

    def work_share_large(self, n: int, heavy: bool, tokens: int) -> int:
        """``large: by_work``: the large group's size in proportion to the heavy requests' share of the recent
        predicted output tokens (each request's weight decays by 1 % per request after it), 1 to n - 1."""
        w = self._work
        add_recent(w, heavy, tokens)
        return max(1, min(n - 1, round(n * w[1] / (w[0] + w[1])))) if w[0] + w[1] > 0 else max(1, n // 2)

    def mostly_heavy(self, heavy: bool) -> bool:
        """Counts the request into the recent mix; True where the heavy share is above ``balance_heavy``."""
        seen = self._seen
        add_recent(seen, heavy)
        return seen[1] > self.balance_heavy * (seen[0] + seen[1])

    def large_group(self, view: RouterView, n_large: int) -> set[int]:
        """The large instances: the last ``n_large``, or with ``kv_aware`` the ``n_large`` of most KV tokens (ties to
        the later instance). Not speed: the state's iteration time changes with the batch, the group must not."""
        n = view.num_instances
        if not self.kv_aware:
            return set(range(n - n_large, n))
        size = [kv_tokens(i) for i in view.state().instances]
        return set(sorted(range(n), key=lambda k: (size[k], k))[n - n_large:])

    def scores(self, req: Request, view: RouterView) -> list[float]:
        """Per instance: tokens of work left, or the request's estimated latency in seconds (``least_latency``)."""
        work = view.work_left()
        if self.within == "least_work_left":
            return work
        pred = predicted_output(req)
        insts = view.state().instances
        largest = max(kv_tokens(i) for i in insts) if self.kv_aware else 0
        out = []
        for w, inst in zip(work, insts):
            tau = inst.step_time if inst.step_time > 0 else DEFAULT_STEP_S
            seats = kv_seats(inst, largest) if self.kv_aware else inst.max_num_seqs
            if self.batch_seats:
                seats = min(seats, held_seats(inst))
            out.append(w * tau / seats + pred * tau)
        return out
