"""QLM's plan generator (spec 003 section 3, paper section 7): place request groups in virtual-queue positions.

Inputs are plain dataclasses (:class:`RequestGroup`, :class:`VirtualQueue`, :class:`PlanProblem`); the completion
times come from the RCT estimator (another module) as a Normal mean and std per group *per queue*:

* ``service``: how long the group occupies the instance, i.e. the delay it adds to every later group (W_{g,i});
* ``completion``: from the group's start to its last request's end (C_{g,i}, paper Eq. 5; defaults to service);
* the queue's ``backlog``: committed work ahead of any position (the running batch), also a Normal.

Formulation (MILP, solved by HiGHS through ``scipy.optimize.milp`` with the time budget as its time limit).
Positions are indexed *backwards*: r = number of groups behind the slot, r = 0 is the tail, the head is the
highest occupied r. This is the classic positional form that makes Eq. 13 linear (a group at r delays r others).

* x[i,q,r] binary: group i at slot r of queue q. Each group once (Eq. 6a); at most one group per slot and
  slot r+1 used only if slot r is (the paper's "empty groups" padding, kept at the head side, i.e. absent).
* y[q,r,m] = sum_{i: model_i = m} x[i,q,r] (Eq. 7, one indicator per model instead of an integer model id).
* w[q,r,m] binary, w >= y[q,r,m] - y[q,r+1,m] (minus 1 - occupied[q,r+1] for the loaded model): the swap *into*
  slot r loads model m (Eq. 9). Tight because w has a positive cost; no big-M on model ids is needed.
* Z[q,r] = sum_{slots ahead} W + sum_{swaps at or ahead of r} S_{q,m}: the slot's start after the backlog
  (Eq. 10), a recursion over r so the matrix stays sparse; swaps cost the per-(queue, model) swap time.
* Chance constraint (Eq. 12) P(ct <= deadline) >= 1 - alpha, deterministic equivalent with every Normal term
  replaced by mean + z·std, z = Phi^-1(1 - alpha): Z + sum_i x·(backlog_z + Cz - deadline) <= s (slack s).
  Empty slots sit at the head side, where Z = 0, so the row holds trivially there: no big-M.
* Objective (Eq. 13): sum over real groups of E[p] = E[ct] - deadline, in positional form
  sum x·(r·mean W + mean C + mean backlog - deadline) + sum w·(r+1)·S, plus violation_weight · sum s.

Choices where the paper is silent (a careful reimplementer's, recorded here and in docs/qlm.md):

1. alpha = 0.05 by default (the paper gives no Delta).
2. Quantile of a sum <= sum of quantiles: using mean + z·std per term (spec [R]) is *conservative*, since
   sqrt(sum var) <= sum std; it is exact for one random term. The plan also reports the exact Normal violation
   probability (variances added) per group, for the router's trigger.
3. Swap indexing (spec section 10 item 6): a group waits for the swap into its own slot and all swaps ahead; slot
   0's predecessor is the model loaded on the instance now (none loaded: every first group swaps).
4. Empty slots carry no penalty and no constraint (taken literally, Eq. 12 on an empty group with SLO 0 forces
   all padding to the head). The objective is per group, not per request: count-weighting would multiply x by x.
5. Hard chance constraints by default (``violation_weight=None``, the paper); a number turns them into a soft
   penalty of that many seconds per second of quantile overshoot, which is never infeasible.
6. Fallback (paper App. A.3, public code): EDF when infeasible, or when the budget runs out with no incumbent,
   or when EDF scores better than the budget-stopped incumbent (ranked by feasibility, then objective).
7. A queue that cannot serve a group (model too large) takes ``math.inf`` as that queue's service mean.
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any

import numpy as np

from llmsim.errors import ConfigError

_FEAS_TOL = 1e-6  # seconds: slack allowed when re-checking a chance constraint (HiGHS feasibility tolerance)


def _check_number(value: float, name: str, *, allow_inf: bool = False, allow_negative: bool = False) -> None:
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
            _check_number(self.violation_weight, "violation_weight")
        ids = [g.id for g in self.groups]
        if len(set(ids)) != len(ids):
            raise ConfigError(f"groups.id: duplicate group ids in {ids}")
        for q in self.queues:
            _check_number(q.backlog_mean_s, f"queue {q.id!r}.backlog_mean_s")
            _check_number(q.backlog_std_s, f"queue {q.id!r}.backlog_std_s")
            for m, s in q.swap_s.items():
                _check_number(s, f"queue {q.id!r}.swap_s[{m!r}]")
            if q.default_swap_s is not None:
                _check_number(q.default_swap_s, f"queue {q.id!r}.default_swap_s")
        for g in self.groups:
            self._validate_group(g, nq)

    def _validate_group(self, g: RequestGroup, nq: int) -> None:
        where = f"group {g.id!r}"
        if not isinstance(g.count, (int, np.integer)) or isinstance(g.count, bool) or g.count < 0:
            raise ConfigError(f"{where}.count: expected an int >= 0, got {g.count!r}")
        _check_number(g.deadline_s, f"{where}.deadline_s", allow_negative=True)
        for name in ("service_mean_s", "service_std_s", "completion_mean_s", "completion_std_s"):
            values = getattr(g, name)
            if values is None:
                continue
            if len(values) != nq:
                raise ConfigError(f"{where}.{name}: expected {nq} values (one per queue), got {len(values)}")
            for q, v in enumerate(values):
                _check_number(v, f"{where}.{name}[{q}]", allow_inf=name.endswith("mean_s"))
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
        feasible &= overshoot <= _FEAS_TOL
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


def _rank(problem: PlanProblem, plan: Plan) -> tuple[bool, float]:
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


@dataclass
class _Index:
    """Column layout: x[i,q,r] binaries, w[q,r,m] binaries, then Z[q,r] and s[q,r] continuous."""

    n: int
    nq: int
    slots: int
    nm: int

    def __post_init__(self) -> None:
        self.nx, self.nw = self.n * self.nq * self.slots, self.nq * self.slots * self.nm
        self.nvar = self.nx + self.nw + 2 * self.nq * self.slots

    def x(self, i: int, q: int, r: int) -> int:
        return (i * self.nq + q) * self.slots + r

    def w(self, q: int, r: int, m: int) -> int:
        return self.nx + (q * self.slots + r) * self.nm + m

    def z(self, q: int, r: int) -> int:
        return self.nx + self.nw + q * self.slots + r

    def s(self, q: int, r: int) -> int:
        return self.nx + self.nw + self.nq * self.slots + q * self.slots + r


def _costs(problem: PlanProblem, ix: _Index, models: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Objective (Eq. 13 in positional form) and upper bounds (hard mode: slack fixed to 0; ineligible x to 0)."""
    c, ub = np.zeros(ix.nvar), np.full(ix.nvar, np.inf)
    ub[: ix.nx + ix.nw] = 1.0
    slack = slice(ix.s(0, 0), ix.nvar)
    ub[slack] = 0.0 if problem.violation_weight is None else np.inf
    c[slack] = problem.violation_weight or 0.0
    for q, vq in enumerate(problem.queues):
        for r in range(ix.slots):
            for m, model in enumerate(models):  # the swap into slot r delays it and the r groups behind it
                c[ix.w(q, r, m)] = (r + 1) * vq.swap_time(model)
            for i, g in enumerate(problem.groups):
                if g.eligible(q):
                    c[ix.x(i, q, r)] = r * g.service_mean_s[q] + g.comp_mean(q) + vq.backlog_mean_s - g.deadline_s
                else:
                    ub[ix.x(i, q, r)] = 0.0
    return c, ub


def _build_milp(problem: PlanProblem) -> tuple[_Index, np.ndarray, Any, Any, np.ndarray]:
    """Assemble the formulation of the module docstring: (index, c, constraints, bounds, integrality)."""
    from scipy import sparse  # scipy.optimize costs ~0.6 s to import: only when a plan is solved
    from scipy.optimize import Bounds, LinearConstraint

    groups, queues, L, z = problem.groups, problem.queues, problem.slots, problem.z
    models = sorted({g.model for g in groups})
    ix = _Index(len(groups), len(queues), L, len(models))
    n, x = ix.n, ix.x
    c, ub = _costs(problem, ix, models)
    rows: list[tuple[list[tuple[int, float]], float, float]] = []  # (entries, lower, upper) per row

    def add(entries: Sequence[tuple[int, float]], lower: float, upper: float) -> None:
        rows.append((list(entries), lower, upper))

    for i in range(n):  # Eq. 6a: each group exactly once
        add([(x(i, q, r), 1.0) for q in range(ix.nq) for r in range(L)], 1.0, 1.0)
    for q, vq in enumerate(queues):
        wz = [g.service_mean_s[q] + z * g.service_std_s[q] if g.eligible(q) else 0.0 for g in groups]
        cz = [g.comp_mean(q) + z * g.comp_std(q) if g.eligible(q) else 0.0 for g in groups]
        backlog_z = vq.backlog_mean_s + z * vq.backlog_std_s
        for r in range(L):
            occ = [(x(i, q, r), 1.0) for i in range(n)]
            add(occ, -np.inf, 1.0)  # Eq. 6b: at most one group per slot (empty = padding)
            ahead = [(x(i, q, r + 1), 1.0) for i in range(n)] if r + 1 < L else []
            if ahead:  # slot r+1 (ahead) used only if slot r is: padding sits at the head side
                add(ahead + [(col, -1.0) for col, _ in occ], -np.inf, 0.0)
            for m, model in enumerate(models):  # Eq. 9: w >= y[r] - y[r+1] (- (1 - occ[r+1]) for the loaded model)
                entries = [(x(i, q, r), 1.0) for i, g in enumerate(groups) if g.model == model]
                entries += [(x(i, q, r + 1), -1.0) for i, g in enumerate(groups) if g.model == model and r + 1 < L]
                loaded = model == vq.loaded_model
                if loaded:  # + occ[r+1]
                    entries += ahead
                add(entries + [(ix.w(q, r, m), -1.0)], -np.inf, 1.0 if loaded else 0.0)
            swaps = [(ix.w(q, r, m), -vq.swap_time(model)) for m, model in enumerate(models)]
            if r + 1 < L:  # Eq. 10 as a recursion: Z[r] = Z[r+1] + Wz(slot r+1) + swap into r
                add([(ix.z(q, r), 1.0), (ix.z(q, r + 1), -1.0)] + [(x(i, q, r + 1), -wz[i]) for i in range(n)]
                         + swaps, 0.0, 0.0)
            else:
                add([(ix.z(q, r), 1.0)] + swaps, 0.0, 0.0)
            # Eq. 12 (deterministic equivalent); empty slots (head side) have Z = 0, so no big-M is needed
            add([(ix.z(q, r), 1.0), (ix.s(q, r), -1.0)]
                     + [(x(i, q, r), backlog_z + cz[i] - g.deadline_s) for i, g in enumerate(groups)], -np.inf, 0.0)
    row_of = [k for k, (entries, _, _) in enumerate(rows) for _ in entries]
    cols = [col for entries, _, _ in rows for col, _ in entries]
    vals = [val for entries, _, _ in rows for _, val in entries]
    a = sparse.csr_array((vals, (row_of, cols)), shape=(len(rows), ix.nvar))  # duplicate entries are summed
    integrality = np.zeros(ix.nvar)
    integrality[: ix.nx + ix.nw] = 1
    lo, hi = [lo for _, lo, _ in rows], [hi for _, _, hi in rows]
    return ix, c, LinearConstraint(a, lo, hi), Bounds(np.zeros(ix.nvar), ub), integrality


def _read_placement(problem: PlanProblem, ix: _Index, x: np.ndarray) -> list[list[str]]:
    """Ordered group ids per queue (head = highest occupied backward position)."""
    cube = x[: ix.nx].reshape(ix.n, ix.nq, ix.slots)
    orders: list[list[str]] = []
    for q in range(ix.nq):
        slots = [(r, int(np.argmax(cube[:, q, r]))) for r in range(ix.slots) if cube[:, q, r].max() > 0.5]
        orders.append([problem.groups[i].id for r, i in sorted(slots, reverse=True)])
    return orders


def solve_plan(problem: PlanProblem, time_budget_s: float = 1.0, mip_rel_gap: float = 1e-6) -> Plan:
    """The MILP plan, or the EDF plan when the MILP is infeasible or its budget (build + solve) runs out first."""
    _check_number(time_budget_s, "time_budget_s")
    t0 = time.perf_counter()
    if not problem.groups:
        return replace(evaluate(problem, [[] for _ in problem.queues]), status="optimal")
    ix, c, constraint, bounds, integrality = _build_milp(problem)
    left = time_budget_s - (time.perf_counter() - t0)
    if left <= 0:
        return replace(edf_plan(problem), status="time_limit", solve_time_s=time.perf_counter() - t0)
    options = {"time_limit": left, "mip_rel_gap": mip_rel_gap, "presolve": True, "disp": False}
    from scipy.optimize import milp

    res = milp(c, constraints=constraint, bounds=bounds, integrality=integrality, options=options)
    status = {0: "optimal", 1: "time_limit", 2: "infeasible", 3: "unbounded"}.get(res.status, f"error: {res.message}")
    if res.x is None:
        return replace(edf_plan(problem), status=status, solve_time_s=time.perf_counter() - t0)
    plan = evaluate(problem, _read_placement(problem, ix, res.x))
    if status != "optimal":  # budget-stopped incumbent: keep it unless EDF ranks better
        edf = edf_plan(problem)
        if _rank(problem, edf) < _rank(problem, plan):
            return replace(edf, status=status, solve_time_s=time.perf_counter() - t0)
    return replace(plan, status=status, solve_time_s=time.perf_counter() - t0, fallback=False)


def random_problem(n_groups: int, n_queues: int, n_models: int = 3, seed: int = 0, *, tightness: float = 1.0,
                   **kwargs: object) -> PlanProblem:
    """A seeded random instance (tests, benchmark): heterogeneous queue speeds, swaps of 5-20 s, deadlines spread
    around the mean drain time of a balanced cluster times ``tightness``."""
    rng = np.random.default_rng(seed)
    models = [f"m{k}" for k in range(n_models)]
    speed = rng.uniform(0.6, 1.4, n_queues)
    queues = tuple(
        VirtualQueue(f"q{q}", models[int(rng.integers(n_models))], {m: float(rng.uniform(5, 20)) for m in models},
                     backlog_mean_s=float(rng.uniform(0, 10)), backlog_std_s=float(rng.uniform(0, 2)))
        for q in range(n_queues))
    work = rng.uniform(5, 40, n_groups)
    drain = work.sum() / speed.sum()
    groups = []
    for i in range(n_groups):
        mean = tuple(float(work[i] / s) for s in speed)
        std = tuple(float(m * rng.uniform(0.05, 0.3)) for m in mean)
        comp = tuple(float(m * rng.uniform(0.7, 1.0)) for m in mean)
        groups.append(RequestGroup(f"g{i}", models[int(rng.integers(n_models))], int(rng.integers(1, 64)),
                                   float(tightness * rng.uniform(0.3, 1.5) * (drain + 20)), mean, std, comp,
                                   tuple(float(s * 0.8) for s in std)))
    return PlanProblem(tuple(groups), queues, **kwargs)  # type: ignore[arg-type]


def bench(sizes: Sequence[int], queue_counts: Sequence[int], budget_s: float, seed: int, soft: bool,
          balanced: bool = False) -> list[str]:
    """Markdown table rows: MILP solve time against queue size (groups) and instance count."""
    lines = ["| groups | queues | positions | status | solve s | EDF fallback | objective | EDF objective |",
             "|---:|---:|---:|---|---:|---|---:|---:|"]
    print("\n".join(lines), flush=True)
    for nq in queue_counts:
        for n in sizes:
            slots = min(n, 2 * math.ceil(n / nq)) if balanced else n
            prob = random_problem(n, nq, seed=seed, tightness=1.5, violation_weight=10.0 if soft else None,
                                  positions=slots)
            plan, edf = solve_plan(prob, time_budget_s=budget_s), edf_plan(prob)
            lines.append(f"| {n} | {nq} | {slots} | {plan.status} | {plan.solve_time_s:.3f} | {plan.fallback} "
                         f"| {plan.objective:.1f} | {edf.objective:.1f}{'' if edf.feasible else ' (infeasible)'} |")
            print(lines[-1], flush=True)
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m llmsim.routing.qlm.plan --bench``: print the solve-time table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", action="store_true", help="time the MILP against queue size")
    ap.add_argument("--sizes", default="2,5,10,20,30,40")
    ap.add_argument("--queues", default="1,2,4,8")
    ap.add_argument("--budget", type=float, default=1.0, help="solver time budget per plan, s")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hard", action="store_true", help="hard chance constraints (default: soft, weight 10)")
    ap.add_argument("--balanced", action="store_true", help="positions = min(groups, 2 * ceil(groups / queues))")
    args = ap.parse_args(argv)
    if not args.bench:
        ap.error("nothing to do: pass --bench")
    mode = "hard" if args.hard else "soft (weight 10)"
    print(f"# seed {args.seed}, budget {args.budget} s, {mode} chance constraints, alpha 0.05")
    bench([int(s) for s in args.sizes.split(",")], [int(s) for s in args.queues.split(",")], args.budget, args.seed,
          not args.hard, args.balanced)


if __name__ == "__main__":
    main()
