"""QLM's plan generator as a mixed-integer program (the QLM paper's §7, Eqs. 6-13), solved by HiGHS through
``scipy.optimize.milp`` with the time budget as its time limit; the EDF plan when that fails.

Positions are indexed *backwards*: r = number of groups behind the slot, r = 0 is the tail, the head is the
highest occupied r. This is the classic positional form that makes Eq. 13 linear (a group at r delays r others).

* x[i,q,r] binary: group i at slot r of queue q. Each group once (Eq. 6a); at most one group per slot and
  slot r+1 used only if slot r is (the paper's "empty groups" padding, kept at the head side, i.e. absent).
* y[q,r,m] = sum_{i: model_i = m} x[i,q,r] (Eq. 7, one indicator per model instead of an integer model id).
* w[q,r,m] binary, w >= y[q,r,m] - y[q,r+1,m] (minus 1 - occupied[q,r+1] for the loaded model): the swap *into*
  slot r loads model m (Eq. 9). Tight because w has a positive cost; no big-M on model ids is needed.
* Z[q,r] = sum_{slots ahead} W + sum_{swaps at or ahead of r} S_{q,m}: the slot's start after the backlog
  (Eq. 10), a recursion over r so the matrix stays sparse; swaps cost the per-(queue, model) swap time.
* Chance constraint (Eq. 12), deterministic equivalent: Z + sum_i x·(backlog_z + Cz - deadline) <= s (slack s).
  Empty slots sit at the head side, where Z = 0, so the row holds trivially there: no big-M.
* Objective (Eq. 13): sum over real groups of E[p] = E[ct] - deadline, in positional form
  sum x·(r·mean W + mean C + mean backlog - deadline) + sum w·(r+1)·S, plus violation_weight · sum s.

Empty slots carry no penalty and no constraint (taken literally, Eq. 12 on an empty group with SLO 0 forces
all padding to the head); the objective is per group, not per request (count-weighting would multiply x by x).
Fallback (the paper's App. A.3 and public code): EDF when infeasible, or when the budget runs out with no
incumbent, or when EDF scores better than the budget-stopped incumbent (ranked by feasibility, then objective).

``python -m experiments.bench qlm_plan --bench`` prints the solve time against queue size and instance count.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

from llmsim.routing.qlm.plan import Plan, PlanProblem, edf_plan, evaluate, plan_rank, require_number


@dataclass
class Columns:
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


def _costs(problem: PlanProblem, ix: Columns, models: list[str]) -> tuple[np.ndarray, np.ndarray]:
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


def _build_milp(problem: PlanProblem) -> tuple[Columns, np.ndarray, Any, Any, np.ndarray]:
    """Assemble the formulation of the module docstring: (index, c, constraints, bounds, integrality)."""
    groups, queues, L, z = problem.groups, problem.queues, problem.slots, problem.z
    models = sorted({g.model for g in groups})
    ix = Columns(len(groups), len(queues), L, len(models))
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


def _read_placement(problem: PlanProblem, ix: Columns, x: np.ndarray) -> list[list[str]]:
    """Ordered group ids per queue (head = highest occupied backward position)."""
    cube = x[: ix.nx].reshape(ix.n, ix.nq, ix.slots)
    orders: list[list[str]] = []
    for q in range(ix.nq):
        slots = [(r, int(np.argmax(cube[:, q, r]))) for r in range(ix.slots) if cube[:, q, r].max() > 0.5]
        orders.append([problem.groups[i].id for r, i in sorted(slots, reverse=True)])
    return orders


def solve_plan(problem: PlanProblem, time_budget_s: float = 1.0, mip_rel_gap: float = 1e-6) -> Plan:
    """The MILP plan, or the EDF plan when the MILP is infeasible or its budget (build + solve) runs out first."""
    require_number(time_budget_s, "time_budget_s")
    t0 = time.perf_counter()
    if not problem.groups:
        return replace(evaluate(problem, [[] for _ in problem.queues]), status="optimal")
    ix, c, constraint, bounds, integrality = _build_milp(problem)
    left = time_budget_s - (time.perf_counter() - t0)
    if left <= 0:
        return replace(edf_plan(problem), status="time_limit", solve_time_s=time.perf_counter() - t0)
    options = {"time_limit": left, "mip_rel_gap": mip_rel_gap, "presolve": True, "disp": False}
    res = milp(c, constraints=constraint, bounds=bounds, integrality=integrality, options=options)
    status = {0: "optimal", 1: "time_limit", 2: "infeasible", 3: "unbounded"}.get(res.status, f"error: {res.message}")
    if res.x is None:
        return replace(edf_plan(problem), status=status, solve_time_s=time.perf_counter() - t0)
    plan = evaluate(problem, _read_placement(problem, ix, res.x))
    if status != "optimal":  # budget-stopped incumbent: keep it unless EDF ranks better
        edf = edf_plan(problem)
        if plan_rank(problem, edf) < plan_rank(problem, plan):
            return replace(edf, status=status, solve_time_s=time.perf_counter() - t0)
    return replace(plan, status=status, solve_time_s=time.perf_counter() - t0, fallback=False)
