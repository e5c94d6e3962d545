"""How long QLM's MILP plan generator takes against queue size and instance count, on seeded random problems
(``python -m experiments.bench qlm_plan --bench``; docs/qlm.md, "Solve time against queue size").

A benchmark, so it lives with the others (``random_problem`` also feeds the plan generator's tests).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

import numpy as np

from llmsim.routing.qlm.milp import solve_plan
from llmsim.routing.qlm.plan import PlanProblem, RequestGroup, VirtualQueue, edf_plan


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
    """``python -m experiments.bench qlm_plan --bench``: print the solve-time table."""
    ap = argparse.ArgumentParser(prog="python -m experiments.bench qlm_plan",
                                 description="QLM's MILP plan generator: solve time against queue size")
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
