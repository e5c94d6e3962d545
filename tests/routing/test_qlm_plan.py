"""QLM's plan generator (llmsim/routing/qlm/plan.py, milp.py, bench.py): the MILP against brute force, swaps,
fallback, validation, the solve-time bench."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from experiments.bench.qlm_plan import main, random_problem
from llmsim.errors import ConfigError
from llmsim.routing.qlm.milp import solve_plan
from llmsim.routing.qlm.plan import PlanProblem, RequestGroup, VirtualQueue, brute_force_plan, edf_plan, evaluate


def _group(gid: str, model: str, deadline: float, mean: float, nq: int = 1, std: float = 0.0, **kw) -> RequestGroup:
    return RequestGroup(gid, model, kw.pop("count", 8), deadline, (mean,) * nq, (std,) * nq, **kw)


@pytest.mark.parametrize("soft", [False, True])
def test_milp_equals_brute_force_on_tiny_instances(soft: bool) -> None:
    """Same optimal objective (1e-6) on seeded random instances; hard-infeasible ones fall back to EDF."""
    feasible = infeasible = 0
    for seed in range(36):
        n = 3 + seed % 3
        prob = random_problem(n, 2, n_models=2, seed=seed, violation_weight=10.0 if soft else None,
                              positions=3 if seed % 4 == 0 else None)
        plan, best = solve_plan(prob, time_budget_s=20.0, mip_rel_gap=0.0), brute_force_plan(prob)
        if not soft and not best.feasible:
            infeasible += 1
            assert plan.status == "infeasible" and plan.fallback and not plan.feasible, seed
            continue
        feasible += 1
        assert plan.status == "optimal" and not plan.fallback, seed
        assert math.isclose(plan.objective, best.objective, rel_tol=0.0, abs_tol=1e-6), (seed, plan, best)
        assert plan.feasible == best.feasible or soft
        assert max(len(q) for q in plan.queues) <= prob.slots
    assert feasible >= 10 and (soft or infeasible >= 5)  # both branches were exercised


def test_brute_force_with_ineligible_queue_and_empty_instance() -> None:
    """A group that cannot run on queue 0 (math.inf) and a queue with no model loaded still match brute force."""
    inf = math.inf
    groups = (
        RequestGroup("big", "llama70", 4, 200.0, (inf, 30.0), (0.0, 3.0)),
        RequestGroup("a", "mistral", 8, 60.0, (10.0, 6.0), (1.0, 0.5)),
        RequestGroup("b", "vicuna", 8, 80.0, (12.0, 8.0), (1.0, 1.0)),
        RequestGroup("c", "mistral", 2, 40.0, (5.0, 3.0), (0.5, 0.2)),
    )
    queues = (VirtualQueue("a10", "mistral", default_swap_s=15.0, backlog_mean_s=5.0, backlog_std_s=1.0),
              VirtualQueue("a100", None, {"llama70": 40.0}, default_swap_s=8.0))
    for weight in (None, 5.0):
        prob = PlanProblem(groups, queues, violation_weight=weight)
        plan, best = solve_plan(prob, 20.0, mip_rel_gap=0.0), brute_force_plan(prob)
        assert math.isclose(plan.objective, best.objective, abs_tol=1e-6)
        assert "big" in plan.queues[1]


def test_swap_heavy_instance_groups_by_model() -> None:
    """Alternating models in deadline order: EDF swaps at every group, the MILP serves each model once."""
    groups = tuple(_group(f"g{k}", "A" if k % 2 == 0 else "B", 100.0 + k, 2.0, std=0.2) for k in range(6))
    prob = PlanProblem(groups, (VirtualQueue("q0", "A", {"A": 30.0, "B": 30.0}),))
    plan, edf = solve_plan(prob, 20.0), edf_plan(prob)
    assert plan.status == "optimal" and plan.feasible and not plan.fallback
    assert plan.swaps == 1 and edf.swaps == 5 and not edf.feasible
    models = [g[1] for g in plan.queues[0]]  # ids are g0..g5, even = A
    assert models == sorted(models, key=lambda k: int(k) % 2)
    assert plan.objective < edf.objective - 100.0


def test_infeasible_falls_back_to_edf() -> None:
    groups = (_group("late", "A", 5.0, 10.0), _group("ok", "A", 100.0, 10.0))
    prob = PlanProblem(groups, (VirtualQueue("q0", "A", {"A": 1.0}),))
    plan = solve_plan(prob, 5.0)
    assert plan.status == "infeasible" and plan.fallback and not plan.feasible
    assert plan.queues == edf_plan(prob).queues == (("late", "ok"),)
    assert plan.violation_prob["late"] == 1.0  # zero std, deadline before the mean completion
    soft = solve_plan(PlanProblem(groups, prob.queues, violation_weight=10.0), 5.0)
    assert soft.status == "optimal" and not soft.fallback and not soft.feasible  # soft mode never infeasible


def test_budget_exceeded_falls_back_to_edf() -> None:
    prob = random_problem(40, 8, seed=1, violation_weight=10.0)
    for budget in (0.0, 1e-4):
        plan = solve_plan(prob, time_budget_s=budget)
        assert plan.status == "time_limit" and plan.fallback
        assert plan.queues == edf_plan(prob).queues
        assert plan.solve_time_s >= 0.0  # how long is machine-dependent: the status says the budget stopped it


def test_budget_stopped_incumbent_is_never_worse_than_edf() -> None:
    prob = random_problem(14, 2, seed=3, violation_weight=10.0)
    plan, edf = solve_plan(prob, time_budget_s=0.3), edf_plan(prob)
    assert plan.status in ("optimal", "time_limit")
    assert plan.objective <= edf.objective + 1e-9


def test_violation_probability_is_the_normal_tail() -> None:
    q = VirtualQueue("q0", "A", {"A": 0.0}, backlog_mean_s=10.0, backlog_std_s=3.0)
    g = RequestGroup("g", "A", 1, 30.0, (12.0,), (4.0,), (15.0,), (4.0,))
    plan = evaluate(PlanProblem((g,), (q,)), [["g"]])
    # completion ~ N(10 + 15, sqrt(3^2 + 4^2) = 5): P(> 30) = P(Z > 1)
    assert plan.mean_completion_s["g"] == pytest.approx(25.0)
    assert plan.violation_prob["g"] == pytest.approx(0.158655, abs=1e-6)
    # quantile surrogate 10 + 15 + z*(3 + 4): 36.5 > 30 at alpha 0.05 (z 1.645), 28.7 <= 30 at alpha 0.3
    assert not plan.feasible and evaluate(PlanProblem((g,), (q,), alpha=0.3), [["g"]]).feasible


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"count": -1}, "count"),
        ({"deadline_s": math.nan}, "deadline_s"),
        ({"service_std_s": (math.nan,)}, "service_std_s"),
        ({"service_mean_s": (-1.0,)}, "service_mean_s"),
        ({"service_mean_s": (1.0, 2.0)}, "service_mean_s"),
        ({"service_mean_s": (math.inf,)}, "service_mean_s"),
        ({"completion_std_s": (-0.5,)}, "completion_std_s"),
        ({"model": "unknown"}, "swap_s"),
    ],
)
def test_bad_group_inputs_name_the_field(change: dict, field: str) -> None:
    base = {"id": "g", "model": "A", "count": 3, "deadline_s": 10.0, "service_mean_s": (1.0,), "service_std_s": (0.1,)}
    group = RequestGroup(**{**base, **change})
    with pytest.raises(ConfigError, match=field):
        PlanProblem((group,), (VirtualQueue("q0", "A", {"A": 1.0}),))


def test_bad_problem_inputs_name_the_field() -> None:
    g = _group("g", "A", 10.0, 1.0)
    q = VirtualQueue("q0", "A", {"A": 1.0})
    for kwargs, field in [({"positions": 0}, "positions"), ({"alpha": 0.7}, "alpha"),
                          ({"violation_weight": math.nan}, "violation_weight")]:
        with pytest.raises(ValueError, match=field):
            PlanProblem((g,), (q,), **kwargs)
    with pytest.raises(ConfigError, match="backlog_mean_s"):
        PlanProblem((g,), (VirtualQueue("q0", "A", {"A": 1.0}, backlog_mean_s=math.nan),))
    with pytest.raises(ConfigError, match="groups.id"):
        PlanProblem((g, g), (q,))
    with pytest.raises(ConfigError, match="positions"):
        PlanProblem((g, _group("h", "A", 10.0, 1.0)), (q,), positions=1)
    with pytest.raises(ConfigError, match="time_budget_s"):
        solve_plan(PlanProblem((g,), (q,)), time_budget_s=math.nan)


def test_bench_cli_prints_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--bench", "--sizes", "2,3", "--queues", "1,2", "--budget", "0.5"])
    out = capsys.readouterr().out
    assert "| groups | queues |" in out and out.count("\n| ") >= 5


def test_module_imports_no_heavy_packages() -> None:
    code = ("import sys, llmsim.routing.qlm.plan; "
            "bad = [m for m in ('torch', 'gymnasium', 'hydra', 'envs', 'agents') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
