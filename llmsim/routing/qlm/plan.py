"""QLM's plan generator, its problem and its plan (the QLM paper's §7): request groups placed in
virtual-queue positions.

Inputs are plain dataclasses (:class:`RequestGroup`, :class:`VirtualQueue`, :class:`PlanProblem`); the completion
times come from the RCT estimator (:mod:`llmsim.routing.qlm.estimator`) as a Normal mean and std per group *per
queue*:

* ``service``: how long the group occupies the instance, i.e. the delay it adds to every later group (W_{g,i});
* ``completion``: from the group's start to its last request's end (C_{g,i}, paper Eq. 5; defaults to service);
* the queue's ``backlog``: committed work ahead of any position (the running batch), also a Normal.

A plan (:class:`Plan`) is the order of group ids per queue. This module scores a placement exactly as the
optimiser does (:func:`evaluate`), builds the EDF plan the paper falls back on (:func:`edf_plan`) and, for tests,
the exhaustive optimum (:func:`brute_force_plan`); the MILP itself is :mod:`llmsim.routing.qlm.milp`.

Chance constraint (Eq. 12): P(completion <= deadline) >= 1 - alpha, in its deterministic equivalent with every
Normal term replaced by mean + z·std, z = Phi^-1(1 - alpha). Objective (Eq. 13): the sum over groups of
E[completion] - deadline, plus ``violation_weight`` x the quantile overshoot when the constraints are soft.
Choices where the paper is silent (a careful reimplementer's, recorded in docs/qlm.md):

1. alpha = 0.05 by default (the paper gives no Delta).
2. Quantile of a sum <= sum of quantiles: using mean + z·std per term (as the paper's public code) is
   *conservative*, since sqrt(sum var) <= sum std; it is exact for one random term. The plan also reports the exact
   Normal violation probability (variances added) per group, for the router's trigger.
3. Swap indexing: a group waits for the swap into its own slot and all swaps ahead; the first group's predecessor
   is the model loaded on the instance now (none loaded: every first group swaps).
4. Hard chance constraints by default (``violation_weight=None``, the paper); a number turns them into a soft
   penalty of that many seconds per second of quantile overshoot, which is never infeasible.
5. A queue that cannot serve a group (model too large) takes ``math.inf`` as that queue's service mean.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist

import numpy as np

from llmsim.errors import ConfigError

FEAS_TOL = 1e-6  # seconds: slack allowed when re-checking a chance constraint (HiGHS feasibility tolerance)


def require_number(value: float, name: str, *, allow_inf: bool = False, allow_negative: bool = False) -> None:
    """Raise a ConfigError naming ``name`` unless ``value`` is a usable number (why: the solver takes NaN silently)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: expected a number, got {value!r}") from None
    if math.isnan(v) or (math.isinf(v) and not (allow_inf and v > 0)):
        raise ConfigError(f"{name}: expected a finite number, got {value!r}")
    if v < 0 and not allow_negative:
        raise ConfigError(f"{name}: expected >= 0, got {value!r}")


@dataclass(frozen=True)
class RequestGroup:
    """One request group (paper Def. 4.1). Per-queue tuples are indexed like :attr:`PlanProblem.queues`."""

    id: str
    model: str
    count: int
    deadline_s: float  # remaining SLO relative to now (may be negative: already late)
    service_mean_s: tuple[float, ...]  # W: time the group holds queue q (math.inf: cannot run there)
    service_std_s: tuple[float, ...]
    completion_mean_s: tuple[float, ...] | None = None  # C (Eq. 5); None: same as service
    completion_std_s: tuple[float, ...] | None = None

    def comp_mean(self, q: int) -> float:
        return (self.completion_mean_s or self.service_mean_s)[q]

    def comp_std(self, q: int) -> float:
        return (self.completion_std_s or self.service_std_s)[q]

    def eligible(self, q: int) -> bool:
        return math.isfinite(self.service_mean_s[q]) and math.isfinite(self.comp_mean(q))


@dataclass(frozen=True)
class VirtualQueue:
    """One virtual queue = one instance: the model loaded now, swap time per model, committed work ahead."""

    id: str
    loaded_model: str | None
    swap_s: Mapping[str, float] = field(default_factory=dict)
    default_swap_s: float | None = None  # used for models missing from swap_s; None: missing is an error
    backlog_mean_s: float = 0.0
    backlog_std_s: float = 0.0

    def swap_time(self, model: str) -> float:
        if model in self.swap_s:
            return float(self.swap_s[model])
        if self.default_swap_s is None:
            raise ConfigError(f"queue {self.id!r}.swap_s: no swap time for model {model!r} and no default_swap_s")
        return float(self.default_swap_s)


@dataclass(frozen=True)
class PlanProblem:
    """Groups, queues, positions per queue (default: the number of groups) and the chance-constraint settings."""

    groups: tuple[RequestGroup, ...]
    queues: tuple[VirtualQueue, ...]
    positions: int | None = None
    alpha: float = 0.05  # allowed violation probability per group (paper: 1 - Delta)
    violation_weight: float | None = None  # None: hard chance constraints (paper); else soft penalty weight

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", tuple(self.groups))
        object.__setattr__(self, "queues", tuple(self.queues))
        self._validate()

    @property
    def slots(self) -> int:
        return self.positions if self.positions is not None else max(1, len(self.groups))

    @property
    def z(self) -> float:
        return NormalDist().inv_cdf(1.0 - self.alpha)

    def _validate(self) -> None:
        nq = len(self.queues)
        if nq == 0:
            raise ConfigError("queues: at least one virtual queue is needed")
        if self.positions is not None and (not isinstance(self.positions, int) or self.positions < 1):
            raise ConfigError(f"positions: expected an int >= 1, got {self.positions!r}")
        if len(self.groups) > nq * self.slots:
            raise ConfigError(f"positions: {len(self.groups)} groups do not fit {nq} queues x {self.slots} slots")
        if not 0.0 < self.alpha < 0.5:
            raise ConfigError(f"alpha: expected 0 < alpha < 0.5, got {self.alpha!r}")
        if self.violation_weight is not None:
            require_number(self.violation_weight, "violation_weight")
        ids = [g.id for g in self.groups]
        if len(set(ids)) != len(ids):
            raise ConfigError(f"groups.id: duplicate group ids in {ids}")
        for q in self.queues:
            require_number(q.backlog_mean_s, f"queue {q.id!r}.backlog_mean_s")
            require_number(q.backlog_std_s, f"queue {q.id!r}.backlog_std_s")
            for m, s in q.swap_s.items():
                require_number(s, f"queue {q.id!r}.swap_s[{m!r}]")
            if q.default_swap_s is not None:
                require_number(q.default_swap_s, f"queue {q.id!r}.default_swap_s")
        for g in self.groups:
            self._validate_group(g, nq)

    def _validate_group(self, g: RequestGroup, nq: int) -> None:
        where = f"group {g.id!r}"
        if not isinstance(g.count, (int, np.integer)) or isinstance(g.count, bool) or g.count < 0:
            raise ConfigError(f"{where}.count: expected an int >= 0, got {g.count!r}")
        require_number(g.deadline_s, f"{where}.deadline_s", allow_negative=True)
        for name in ("service_mean_s", "service_std_s", "completion_mean_s", "completion_std_s"):
            values = getattr(g, name)
            if values is None:
                continue
            if len(values) != nq:
                raise ConfigError(f"{where}.{name}: expected {nq} values (one per queue), got {len(values)}")
            for q, v in enumerate(values):
                require_number(v, f"{where}.{name}[{q}]", allow_inf=name.endswith("mean_s"))
        if not any(g.eligible(q) for q in range(nq)):
            raise ConfigError(f"{where}.service_mean_s: no queue can serve the group (all infinite)")
        for q in self.queues:
            q.swap_time(g.model)  # raises when a swap time is missing


@dataclass(frozen=True)
class Plan:
    """The plan: ordered group ids per queue (head first) and how it was obtained."""

    queues: tuple[tuple[str, ...], ...]
    objective: float  # sum of E[completion - deadline] (+ violation_weight * overshoot), paper Eq. 13
    feasible: bool  # every group's quantile completion meets its deadline (Eq. 12, deterministic equivalent)
    status: str  # "optimal", "time_limit", "infeasible", "edf", "error: ..."
    solve_time_s: float
    fallback: bool  # the EDF plan was used instead of a MILP solution
    mean_completion_s: Mapping[str, float] = field(default_factory=dict)
    violation_prob: Mapping[str, float] = field(default_factory=dict)  # exact Normal P(completion > deadline)
    swaps: int = 0


def _walk_queue(problem: PlanProblem, q: int, order: Sequence[RequestGroup]) -> tuple[float, bool, int, dict, dict]:
    """One queue, head first: (objective part, feasible, swaps, mean completion by id, violation prob by id)."""
    vq, z, weight = problem.queues[q], problem.z, problem.violation_weight or 0.0
    t_mean, t_quant = vq.backlog_mean_s, vq.backlog_mean_s + z * vq.backlog_std_s
    var, prev = vq.backlog_std_s**2, vq.loaded_model
    objective, feasible, swaps = 0.0, True, 0
    means: dict[str, float] = {}
    probs: dict[str, float] = {}
    for g in order:
        if g.model != prev:
            t_mean += vq.swap_time(g.model)
            t_quant += vq.swap_time(g.model)
            swaps += 1
        ct_mean, ct_quant = t_mean + g.comp_mean(q), t_quant + g.comp_mean(q) + z * g.comp_std(q)
        sd, gap = math.sqrt(var + g.comp_std(q) ** 2), g.deadline_s - ct_mean
        probs[g.id] = 0.5 * math.erfc(gap / (sd * math.sqrt(2.0))) if sd > 0 else float(gap < 0)
        means[g.id] = ct_mean
        overshoot = ct_quant - g.deadline_s
        feasible &= overshoot <= FEAS_TOL
        objective += ct_mean - g.deadline_s + weight * max(0.0, overshoot)
        t_mean += g.service_mean_s[q]
        t_quant += g.service_mean_s[q] + z * g.service_std_s[q]
        var += g.service_std_s[q] ** 2
        prev = g.model
    return objective, feasible, swaps, means, probs


def evaluate(problem: PlanProblem, placement: Sequence[Sequence[str]]) -> Plan:
    """Score a placement exactly as the MILP does (objective, feasibility), plus exact violation probabilities."""
    by_id = {g.id: g for g in problem.groups}
    placed = [gid for queue in placement for gid in queue]
    if sorted(placed) != sorted(by_id) or len(placement) != len(problem.queues):
        raise ConfigError(f"placement: must place each of {sorted(by_id)} once over {len(problem.queues)} queues")
    objective, feasible, swaps = 0.0, True, 0
    means: dict[str, float] = {}
    probs: dict[str, float] = {}
    for q, order in enumerate(placement):
        name = problem.queues[q].id
        if len(order) > problem.slots:
            raise ConfigError(f"placement: queue {name!r} holds {len(order)} groups > {problem.slots} positions")
        if any(not by_id[gid].eligible(q) for gid in order):
            raise ConfigError(f"placement: queue {name!r} holds a group it cannot serve")
        obj, ok, sw, m, p = _walk_queue(problem, q, [by_id[gid] for gid in order])
        objective, feasible, swaps = objective + obj, feasible and ok, swaps + sw
        means.update(m)
        probs.update(p)
    return Plan(tuple(tuple(o) for o in placement), objective, feasible, "evaluated", 0.0, False, means, probs, swaps)


def edf_plan(problem: PlanProblem) -> Plan:
    """EDF fallback: groups by deadline, each appended to the queue where it would finish earliest (mean time);
    ties go to a queue whose last model is the group's, then the lower index."""
    t0 = time.perf_counter()
    tails = [vq.backlog_mean_s for vq in problem.queues]
    last = [vq.loaded_model for vq in problem.queues]
    orders: list[list[str]] = [[] for _ in problem.queues]
    for g in sorted(problem.groups, key=lambda g: (g.deadline_s, g.id)):
        best: tuple[float, int, int] | None = None
        for q, vq in enumerate(problem.queues):
            if not g.eligible(q) or len(orders[q]) >= problem.slots:
                continue
            swap = 0.0 if g.model == last[q] else vq.swap_time(g.model)
            key = (tails[q] + swap + g.comp_mean(q), int(g.model != last[q]), q)
            best = key if best is None or key < best else best
        if best is None:  # every eligible queue is full: the positions limit is too tight for EDF
            raise ConfigError(f"positions: EDF finds no free position for group {g.id!r}")
        q = best[2]
        tails[q] += (0.0 if g.model == last[q] else problem.queues[q].swap_time(g.model)) + g.service_mean_s[q]
        last[q] = g.model
        orders[q].append(g.id)
    plan = evaluate(problem, orders)
    return replace(plan, status="edf", solve_time_s=time.perf_counter() - t0, fallback=True)


def plan_rank(problem: PlanProblem, plan: Plan) -> tuple[bool, float]:
    """Hard mode: feasible plans first, then objective; soft mode: objective only (overshoot is priced)."""
    return (problem.violation_weight is None and not plan.feasible, plan.objective)


def brute_force_plan(problem: PlanProblem) -> Plan:
    """Exhaustive search (tests only): every queue assignment, every order within each queue (memoised per
    queue and subset, which is still exhaustive because the objective and constraints separate by queue)."""
    groups = problem.groups
    nq, n = len(problem.queues), len(groups)
    best_order: dict[tuple[int, frozenset[int]], tuple[tuple[bool, float], tuple[int, ...]]] = {}

    def queue_best(q: int, members: frozenset[int]) -> tuple[tuple[bool, float], tuple[int, ...]]:
        key = (q, members)
        if key not in best_order:
            best: tuple[tuple[bool, float], tuple[int, ...]] | None = None
            for perm in itertools.permutations(sorted(members)):
                obj, ok, *_ = _walk_queue(problem, q, [groups[i] for i in perm])
                rank = (problem.violation_weight is None and not ok, obj)
                best = (rank, perm) if best is None or rank < best[0] else best
            best_order[key] = best if best is not None else ((False, 0.0), ())
        return best_order[key]

    winner: tuple[tuple[bool, float], list[list[str]]] | None = None
    for assign in itertools.product(range(nq), repeat=n):
        if any(not groups[i].eligible(q) for i, q in enumerate(assign)):
            continue
        members = [frozenset(i for i in range(n) if assign[i] == q) for q in range(nq)]
        if any(len(m) > problem.slots for m in members):
            continue
        parts = [queue_best(q, m) for q, m in enumerate(members)]
        rank = (any(p[0][0] for p in parts), sum(p[0][1] for p in parts))
        if winner is None or rank < winner[0]:
            winner = (rank, [[groups[i].id for i in p[1]] for p in parts])
    assert winner is not None
    plan = evaluate(problem, winner[1])
    return replace(plan, status="optimal" if plan.feasible or problem.violation_weight is not None else "infeasible")


