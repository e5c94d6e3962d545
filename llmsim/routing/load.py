"""Load balancing by predicted work: the non-learned baselines of "Intelligent Router for LLM Workloads" (the
heuristic-guided RL router, WorkloadRouter) as llmsim routers.

That paper compares its RL router with round robin, earliest-available, JSQ (``least_work_left``),
maximum-capacity usage every 1 s and Min-Min on 4 x Llama-2-7B, and (Table 2) with a decode balancer
and a dedicated small / large split (``split``). The paper gives one sentence each; the choices made here are listed
in docs/testbeds.md and in each class docstring.

The routers that hold requests at the router (earliest-available, max-capacity) route a request only
to an instance with *space* for it: free KV tokens (capacity minus blocks in use minus the prompt blocks
waiting there) at least the blocks of its prompt (``footprint="prompt"``, what vLLM needs to admit it;
``"full"`` adds its predicted output) and, when ``max_num_seqs`` is given, a free batch slot. They need
a central-queue tick to act between completions (the paper's router acts every 0.02 s:
``sim.central_queue_tick=0.02``).

The view gives KV use as a fraction only; the capacity in tokens comes from ``kv_tokens`` (an int, or
one per instance) or, when omitted, is estimated from the view once an instance holds running
requests (resident tokens / used fraction), which is exact to within a block per request.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llmsim.errors import ConfigError
from llmsim.routing.base import WAIT, Router, register_router

if TYPE_CHECKING:
    from llmsim.request import Request
    from llmsim.state.cluster_state import InstanceState
    from llmsim.state.view import RouterView

# the paper's decode-length predictor's buckets (tokens, its §5.1) and its fitted prefill slope (§5.2)
DECODE_BUCKETS = (250, 1000, 4000)
GRAD_P = 3.2e-4  # s per prompt token (the paper's §5.2)
DEFAULT_STEP_S = 0.03  # s: an idle instance's iteration time in latency estimates (also the instance_set's)
DECODE_STEP = 0.02  # s, the minimum decode batch time (the paper's §6), the "average decode batch time" of T_est


def kv_tokens(inst: InstanceState) -> int:
    """Tokens of context the instance's KV cache holds."""
    return inst.kv_blocks_total * inst.block_size


def kv_seats(inst: InstanceState, largest_kv: float) -> float:
    """The instance's batch seats scaled by its KV cache against the cluster's largest (``largest_kv`` tokens; at
    least one): a cache a tenth the size runs a tenth as many requests at once. Exactly ``max_num_seqs`` for the
    largest cache."""
    return max(inst.max_num_seqs * kv_tokens(inst) / largest_kv, 1.0)


def held_seats(inst: InstanceState) -> float:
    """The batch the instance's KV cache holds at its running requests' present footprint (at least one; its
    ``max_num_seqs`` while nothing runs or nothing is held)."""
    if not inst.num_running or not inst.kv_blocks_used:
        return float(inst.max_num_seqs)
    return max(inst.num_running * inst.kv_blocks_total / inst.kv_blocks_used, 1.0)


def predicted_output(req: Request) -> int:
    """The request's predicted output tokens: the predictor's value when one ran, else the truth (an oracle).

    The simulator has no predictor of its own; the papers' baselines that read lengths either assume them
    known (decode balancer) or read a classifier that the WorkloadRouter paper reports 79 % accurate, so an
    oracle is the stand-in and the envs' predictors replace it when they set ``predicted_output``."""
    return int(req.predicted_output) if req.predicted_output is not None else int(req.output_tokens)


def bucket_upper(tokens: float, buckets: Sequence[int] = DECODE_BUCKETS) -> int:
    """Upper bound of the predictor bucket holding ``tokens`` (the last bucket's bound above it)."""
    for b in buckets:
        if tokens <= b:
            return b
    return buckets[-1]


def _per_instance(value: Any, n: int, name: str) -> list[float] | None:
    if value is None:
        return None
    vals = [value] * n if isinstance(value, (int, float)) else list(value)
    if len(vals) != n or any(isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0 for v in vals):
        raise ConfigError(f"policy.kwargs.{name}: expected a positive number or one per instance ({n}), got {value!r}")
    return [float(v) for v in vals]


class CapacityRouter(Router):
    """Base of routers that check whether an instance has room for a request (see the module docstring)."""

    def __init__(self, seed: int = 0, kv_tokens: Any = None, max_num_seqs: int | None = None,
                 block_size: int = 16, footprint: str = "prompt", **kw: Any) -> None:
        super().__init__(seed, **kw)
        if footprint not in ("full", "prompt"):
            raise ConfigError(f"policy.kwargs.footprint: expected 'full' or 'prompt', got {footprint!r}")
        self.footprint = footprint
        if max_num_seqs is not None and (isinstance(max_num_seqs, bool) or not isinstance(max_num_seqs, int)
                                         or max_num_seqs < 1):
            raise ConfigError(f"policy.kwargs.max_num_seqs: expected a positive integer, got {max_num_seqs!r}")
        self.kv_tokens_arg = kv_tokens
        self.max_num_seqs = max_num_seqs
        self.block_size = int(block_size)
        self._cap: list[float | None] | None = None

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._cap = None

    def capacities(self, view: RouterView) -> list[float | None]:
        """KV capacity in tokens per instance (given, or estimated once running requests reveal it)."""
        if self._cap is None:
            given = _per_instance(self.kv_tokens_arg, view.num_instances, "kv_tokens")
            self._cap = list(given) if given is not None else [None] * view.num_instances
        if any(c is None for c in self._cap):
            used = view.kv_used_fractions()
            for i, c in enumerate(self._cap):
                if c is None and used[i] > 0:
                    bs = self.block_size
                    resident = sum(-(-(p + g) // bs) * bs for _, p, g, _, st in view.requests(i) if st == "running")
                    if resident > 0:
                        self._cap[i] = resident / used[i]
        return self._cap

    def free_tokens(self, view: RouterView) -> list[float]:
        """Free KV tokens per instance after the prompts already waiting there (inf when unknown and idle)."""
        caps = self.capacities(view)
        demand = view.kv_demand_fractions()
        queue = view.queue_lengths()
        out = []
        for c, d, q in zip(caps, demand, queue):
            if c is None:
                out.append(float("inf") if q == 0 else 0.0)  # an idle instance can take anything servable
            else:
                out.append(c * (1.0 - d))
        return out

    def has_slot(self, view: RouterView) -> list[bool]:
        if self.max_num_seqs is None:
            return [True] * view.num_instances
        return [r + w < self.max_num_seqs for r, w in zip(view.num_running(), view.num_waiting())]

    def need(self, req: Request) -> int:
        """KV tokens the request needs: its prompt (or prompt + predicted output with ``footprint="full"``),
        in whole blocks."""
        bs = self.block_size
        tokens = req.prompt_tokens + (predicted_output(req) if self.footprint == "full" else 0)
        return -(-tokens // bs) * bs


@register_router
class EarliestAvailableRouter(CapacityRouter):
    """The WorkloadRouter paper's lightweight heuristic: route the queue head as soon as any instance has space for it.

    Requests are routed in arrival order (the head of the router queue first; the ones behind it wait, as
    the paper's router routes "one at a time"). "Space" counts only what the instances hold now, not how
    their running requests will grow (the paper: it "ignores what is already running, so it risks later
    preemption"). Among the instances with space, the next one after the last used is taken, so no
    instance is favoured. Needs a central-queue tick (``sim.central_queue_tick``, 0.02 s in the paper)."""

    name = "earliest_available"

    def __init__(self, seed: int = 0, **kw: Any) -> None:
        super().__init__(seed, **kw)
        self._pending: dict[int, None] = {}
        self._last = -1

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._pending = {}
        self._last = -1

    def route(self, req: Request, view: RouterView) -> int:
        pending = self._pending
        if req.id not in pending:
            pending[req.id] = None
        if next(iter(pending)) != req.id:
            return WAIT  # an earlier request is still held: strict arrival order
        free, slots, need = self.free_tokens(view), self.has_slot(view), self.need(req)
        cands = view.candidates(req)
        n = view.num_instances
        for k in range(1, n + 1):
            i = (self._last + k) % n
            if i in cands and slots[i] and free[i] >= need:
                self._last = i
                del pending[req.id]
                return i
        return WAIT


@register_router
class MaxCapacityRouter(CapacityRouter):
    """The WorkloadRouter paper's "maximum capacity usage": at 1 s intervals, route the queue head to the instance with
    the most available capacity that can process it, repeating while the new head fits.

    A round runs at the first decision point at or after each multiple of ``interval`` (with a 0.02 s
    central-queue tick, within 0.02 s of it); between rounds every request waits, so a request arriving
    at 0.3 s is routed at the 1 s round. Without a tick, held requests are offered again only at
    completions, so on an idle cluster the request being offered in a due round may go before the head.
    Capacity = free KV tokens (see :class:`CapacityRouter`); ties go to the lowest index."""

    name = "max_capacity"

    def __init__(self, seed: int = 0, interval: float = 1.0, **kw: Any) -> None:
        super().__init__(seed, **kw)
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval > 0:
            raise ConfigError(f"policy.kwargs.interval: expected a positive number of seconds, got {interval!r}")
        self.interval = float(interval)
        self._pending: dict[int, None] = {}
        self._round_at = -1.0
        self._next_round = 0.0
        self._blocked = False

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._pending = {}
        self._round_at, self._next_round, self._blocked = -1.0, 0.0, False

    def route(self, req: Request, view: RouterView) -> int:
        pending = self._pending
        now = view.now
        if req.id not in pending:
            if not pending:  # the router was idle: the next round is the next multiple of the interval
                self._next_round = max(self._next_round, math.ceil(now / self.interval) * self.interval)
            pending[req.id] = None
        if now >= self._next_round:
            self._round_at = now
            self._next_round = (int(now / self.interval) + 1) * self.interval
            self._blocked = False
        if now != self._round_at or self._blocked:
            return WAIT
        if next(iter(pending)) != req.id and any(view.queue_lengths()):
            # the head goes first; only on an idle cluster (no completion will come to retry the queue, as
            # without a central-queue tick) may the request being offered go ahead of it
            return WAIT
        free, slots, need = self.free_tokens(view), self.has_slot(view), self.need(req)
        best, best_free = -1, -1.0
        for i in view.candidates(req):
            if slots[i] and free[i] >= need and free[i] > best_free:
                best, best_free = i, free[i]
        if best < 0:
            self._blocked = True  # the head does not fit anywhere: the rest wait for the next round
            return WAIT
        del pending[req.id]
        return best


@register_router
class MinMinRouter(Router):
    """The WorkloadRouter paper's Min-Min: job time = prompt x 3.2e-4 s + the upper bound of the predicted decode
    bucket (250 / 1,000 / 4,000 tokens) x 0.02 s (the paper's T_est). Each request goes, when it arrives,
    to the instance where it would complete first: the least ready time, i.e. job time still ahead there
    (each resident request's job time times the share of its bucket bound not yet generated); ties to the
    lowest index. Routed at once (the batch form, which orders a queue shortest job first, needs requests
    held at the router; the paper's 1.5 % gain over round robin points to immediate dispatch)."""

    name = "min_min"

    def __init__(self, seed: int = 0, **kw: Any) -> None:
        super().__init__(seed, **kw)
        self._jobs: dict[int, tuple[float, int]] = {}  # id -> (job time, decode bucket bound)

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._jobs = {}

    @staticmethod
    def job_time(req: Request) -> tuple[float, int]:
        ub = bucket_upper(predicted_output(req))
        return GRAD_P * req.prompt_tokens + DECODE_STEP * ub, ub

    def route(self, req: Request, view: RouterView) -> int:
        best, best_t = -1, 0.0
        for i in view.candidates(req):
            t = 0.0
            for rid, _, g, _, _ in view.requests(i):
                job = self._jobs.get(rid)
                if job is not None:
                    t += job[0] * max(0.0, 1.0 - g / job[1])
            if best < 0 or t < best_t:
                best, best_t = i, t
        self._jobs[req.id] = self.job_time(req)
        return best


@register_router
class DecodeBalancerRouter(Router):
    """The WorkloadRouter paper's decode balancer (its Table 2): output lengths are known; send each request to
    the instance with the fewest decode tokens still to generate (its requests' known outputs minus what they
    generated). Routes immediately; ties go to the lowest index."""

    name = "decode_balancer"

    def __init__(self, seed: int = 0, **kw: Any) -> None:
        super().__init__(seed, **kw)
        self._out: dict[int, int] = {}

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._out = {}

    def route(self, req: Request, view: RouterView) -> int:
        best, best_left = -1, 0
        for i in view.candidates(req):
            left = 0
            for rid, _, g, pred, _ in view.requests(i):
                out = self._out.get(rid, pred if pred is not None else g)
                left += max(int(out) - g, 0)
            if best < 0 or left < best_left:
                best, best_left = i, left
        self._out[req.id] = predicted_output(req)
        return best


@register_router
class VllmDataParallelBalancer(Router):
    """vLLM's balancer between data-parallel engines (``DPLBAsyncMPClient``): the engine with the lowest
    ``4 x waiting + running``, scanning from a rotating start so that ties spread. vLLM reads the counts from a
    coordinator every 100 ms and counts its own sends in between; the simulator's live counts are that limit."""

    name = "vllm_data_parallel"

    def __init__(self, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(seed, **kwargs)
        self.start = 0

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self.start = 0

    def route(self, req: Request, view: RouterView) -> int:
        waiting, running = view.num_waiting(), view.num_running()
        candidates = set(view.candidates(req))
        n = view.num_instances
        best, best_score = -1, None
        for k in range(n):
            i = (self.start + k) % n
            score = 4 * waiting[i] + running[i]
            if i in candidates and (best_score is None or score < best_score):
                best, best_score = i, score
        self.start = (self.start + 1) % n
        return best if best >= 0 else min(candidates)
