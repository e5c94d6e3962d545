"""QLM against its paper ("One Queue Is All You Need", v1 text), equation by equation: every expected number below is
worked out by hand from the paper's formulas on small round inputs (the arithmetic is in the comments), never taken
from the code. Where the code deliberately differs (docs/qlm.md, docs/qlm_estimator.md), the test pins that choice."""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest

from llmsim.request import Request
from llmsim.routing import WAIT
from llmsim.routing.qlm.estimator import EngineRates, OutputLengthModel, estimate_completion, group_completion
from llmsim.routing.qlm.milp import solve_plan
from llmsim.routing.qlm.plan import PlanProblem, RequestGroup, VirtualQueue, edf_plan, evaluate
from llmsim.routing.qlm.router import QLMRouter
from llmsim.routing.slo import choose_batch
from tests.routing.helpers import StubView, inst

pytestmark = pytest.mark.timeout(60)

# Theta = 100 tok/s, d = 0.01 s, eps = 2 (eps d = 0.02 s/token), P = 0.5 s for any prompt, full batch 8
RATES = EngineRates(theta=100.0, epsilon=2.0, d=0.01, batch_size=8, prefill_a=0.5, prefill_b=0.0, prefill_c=0.0,
                    decode_step_full=0.16, typical_prompt=100, typical_output=51, typical_context=125)


def test_eqs_1_to_4_request_completion_time() -> None:
    """C = W + P + D with W = tokens ahead / Theta (Eq. 2), D = O eps d (Eq. 4), O ~ N(mu, sigma) (Eq. 3).
    300 tokens ahead (sd 40), mu 51, sigma 10: W = 3 s, P = 0.5 s, D = (51 - 1) x 0.02 = 1.0 s (the code's one
    documented step less: the prefill emits the first token) -> 4.5 s; std = hypot(40/100, 10 x 0.02) = sqrt(0.2)."""
    mean, std = estimate_completion(RATES, 300, 64, 51, 10, tokens_ahead_std=40)
    assert mean == pytest.approx(4.5)
    assert std == pytest.approx(math.sqrt(0.16 + 0.04))
    # Eq. 2 is linear in the work ahead with slope 1 / Theta: 100 more tokens, 1 s more
    assert estimate_completion(RATES, 400, 64, 51, 10)[0] - estimate_completion(RATES, 300, 64, 51, 10)[0] == \
        pytest.approx(1.0)


def test_eq_3_normal_fit_of_a_group() -> None:
    """Lengths 10, 20, 30 with no prior weight: mu = 20, sigma = 10 (sample std)."""
    m = OutputLengthModel(prior_mean=99, prior_std=9, prior_weight=0).fit([10, 20, 30])
    assert (m.mean, m.std) == (pytest.approx(20.0), pytest.approx(10.0))


def test_eq_5_group_completion_is_the_max_over_its_requests() -> None:
    """C = max_q C_q. (a) sigma = 0: every C_q is exact, C_q = (q - 1) x 51 / 100 + 0.5 + 1.0, so a group of 3 ends
    with its last request at 1.02 + 1.5 = 2.52 s. (b) Theta huge (no queueing inside the group), sigma = 10: two
    i.i.d. N(1.5, 0.2) completions, whose max has mean 1.5 + 0.2 / sqrt(pi) = 1.6128 and std
    0.2 sqrt(1 - 1/pi) = 0.1651 (Monte Carlo, 1,000 draws: within 3 standard errors). (c) A group of one is Eq. 1."""
    assert group_completion(RATES, 3, 64, 51, 0) == (pytest.approx(2.52), pytest.approx(0.0, abs=1e-12))
    fast = EngineRates(1e12, 2.0, 0.01, 8, 0.5, 0.0, 0.0, 0.16, 100, 51, 125)
    mean, std = group_completion(fast, 2, 64, 51, 10)
    assert mean == pytest.approx(1.5 + 0.2 / math.sqrt(math.pi), abs=0.016)
    assert std == pytest.approx(0.2 * math.sqrt(1 - 1 / math.pi), rel=0.08)
    # three: E[max of 3 standard Normals] = 3 / (2 sqrt(pi)) = 0.8463, so 1.5 + 0.2 x 0.8463 = 1.669 s, well above
    # the last request's own 1.5 s (what the router used before)
    assert group_completion(fast, 3, 64, 51, 10)[0] == pytest.approx(1.5 + 0.2 * 1.5 / math.sqrt(math.pi), abs=0.016)
    assert group_completion(RATES, 1, 64, 51, 10) == estimate_completion(RATES, 0, 64, 51, 10)
    # never below the last request's completion (3 - 1 requests x 51 tokens ahead of it)
    last = estimate_completion(RATES, 2 * 51, 64, 51, 10, tokens_ahead_std=math.sqrt(2) * 10)[0]
    assert group_completion(RATES, 3, 64, 51, 10)[0] >= last
    assert group_completion(RATES, 3, 64, 51, 10) == group_completion(RATES, 3, 64, 51, 10)  # deterministic


def _q(**kw) -> VirtualQueue:
    return VirtualQueue("q0", "A", swap_s={"A": 10.0, "B": 10.0}, backlog_mean_s=1.0, **kw)


def _g(gid: str, model: str, w: float, c: float, deadline: float, c_std: float = 0.0) -> RequestGroup:
    return RequestGroup(gid, model, 1, deadline, (w,), (0.0,), (c,), (c_std,))


def test_eqs_10_11_13_cumulative_completion_penalty_and_objective() -> None:
    """One queue, model A loaded, 1 s backlog, swap S = 10 s. g1 (A: W 2, C 3, SLO 5) then g2 (B: W 4, C 5, SLO 20):
    ct1 = 1 + 3 = 4 (no swap: A is loaded), ct2 = 1 + W1 2 + swap into its slot 10 + C2 5 = 18;
    penalties (Eq. 11) 4 - 5 = -1 and 18 - 20 = -2; objective (Eq. 13) = -3; one swap."""
    problem = PlanProblem((_g("g1", "A", 2, 3, 5), _g("g2", "B", 4, 5, 20)), (_q(),))
    plan = evaluate(problem, [["g1", "g2"]])
    assert plan.mean_completion_s == {"g1": pytest.approx(4.0), "g2": pytest.approx(18.0)}
    assert plan.objective == pytest.approx(-3.0) and plan.swaps == 1 and plan.feasible


def test_eq_12_chance_constraint_and_violation_probability() -> None:
    """g1's completion ~ N(4, 1), SLO 5, alpha = 0.05: the quantile 4 + 1.645 = 5.645 > 5 breaks Eq. 12
    (P(p <= 0) = Phi(1) = 0.841 < 0.95), and P(completion > SLO) = 1 - Phi(1) = 0.1587."""
    problem = PlanProblem((_g("g1", "A", 2, 3, 5, c_std=1.0),), (_q(),), alpha=0.05)
    plan = evaluate(problem, [["g1"]])
    assert not plan.feasible
    assert plan.violation_prob["g1"] == pytest.approx(1 - NormalDist().cdf(1.0), abs=1e-9)
    assert evaluate(PlanProblem((_g("g1", "A", 2, 3, 6),), (_q(),)), [["g1"]]).feasible  # 4 <= 6


def test_eq_13_plan_generator_minimises_the_total_penalty() -> None:
    """Same model, W = C, SLO 100 each: g1 (1 s) first gives ct 1 + 1, 1 + 11 -> sum p = 2 + 12 - 200 = -186;
    g2 (10 s) first gives 1 + 10, 1 + 11 -> 11 + 12 - 200 = -177. The MILP takes the shorter first (-186)."""
    problem = PlanProblem((_g("g1", "A", 1, 1, 100), _g("g2", "A", 10, 10, 100)), (_q(),), violation_weight=None)
    plan = solve_plan(problem, time_budget_s=5.0)
    assert plan.queues == (("g1", "g2"),) and plan.objective == pytest.approx(-186.0) and not plan.fallback


def test_eq_9_model_transitions_are_counted_from_the_loaded_model() -> None:
    """Order A, B, A on a queue with A loaded: transitions at slots 1 and 2 (not at slot 0) -> 2 swaps, each
    delaying its own group: ct = 1 + 1 = 2, 1 + 1 + 10 + 1 = 13, 1 + 2 + 20 + 1 = 24 (W = C = 1)."""
    gs = (_g("a1", "A", 1, 1, 99), _g("b", "B", 1, 1, 99), _g("a2", "A", 1, 1, 99))
    plan = evaluate(PlanProblem(gs, (_q(),)), [["a1", "b", "a2"]])
    assert plan.swaps == 2
    assert plan.mean_completion_s == {"a1": pytest.approx(2.0), "b": pytest.approx(13.0), "a2": pytest.approx(24.0)}


def test_edf_fallback_orders_groups_by_slo() -> None:
    """App. A.3's fallback: earliest deadline first (SLOs 30, 10, 20 -> g2, g3, g1 on the one queue)."""
    gs = (_g("g1", "A", 1, 1, 30), _g("g2", "A", 1, 1, 10), _g("g3", "A", 1, 1, 20))
    assert edf_plan(PlanProblem(gs, (_q(),))).queues == (("g2", "g3", "g1"),)


def test_algorithm_1_group_size_cap_and_defaults() -> None:
    """Groups hold at most delta x avg_batch_size requests: delta 2 x batch 2 = 4, so the 5th request of one key
    opens a second group. Defaults: delta = 4 (the paper's choice), alpha = 0.05 (Delta unstated)."""
    defaults = QLMRouter()
    assert defaults.delta == 4.0 and defaults.alpha == 0.05
    r = QLMRouter(delta=2, avg_batch_size=2, slo_s={"ls": 30})
    busy = StubView([inst(0, "llama-2-7b", running=1, waiting=2)])  # no room: every request is held
    for k in range(5):
        r.route(Request(k, 0.0, 64, 32, slo_class="ls"), busy)
    assert r.stats["groups"] == 2


def test_router_gives_the_plan_generator_eq_5_group_completions() -> None:
    """The group completion C the router hands the plan generator is Eq. 5's max over the group's requests."""
    r = QLMRouter(slo_s={"ls": 30}, output_mean=51, output_std=10)
    view = StubView([inst(0, "llama-2-7b", running=1, waiting=2)])
    for k in range(3):
        r.route(Request(k, 0.0, 64, 32, slo_class="ls"), view)
    st = view.state()
    group = r._problem(st, 0.0).groups[0]
    rates = r._rates_of(st.instances[0])
    assert group.count == 3
    assert group.completion_mean_s[0] == pytest.approx(group_completion(rates, 3, 64, 51, 10)[0])
    last = estimate_completion(rates, 2 * 51, 64, 51, 10, tokens_ahead_std=math.sqrt(2) * 10)[0]
    assert group.completion_mean_s[0] > last
    assert group.service_mean_s[0] == pytest.approx(3 * 51 / rates.theta)  # W: the group's tokens / Theta


def test_shepherd_batch_choice_maximises_requests_that_meet_their_deadline() -> None:
    """SHEPHERD's goodput choice by hand: requests 1-3; at batch 1 all meet, at 2 only 1 and 2, at 3 only 1.
    Met count min(b, #met at b): 1, 2, 1 -> batch 2 with members 1 and 2."""
    met = [[True, True, True], [True, True, False], [True, False, False]]
    for solver in ("milp", "enumerate"):
        choice = choose_batch([1, 2, 3], [10.0, 20.0, 30.0], met, 3, solver)
        assert (choice.size, choice.members, choice.n_met) == (2, (1, 2), 2)


def test_load_balancing_is_not_preemptive() -> None:
    """The paper's section 5: "once request groups start executing on an LLM serving instance, they cannot be
    migrated to another instance". Four requests of one group wait on instance 0; instance 0 pulls the first (the
    group has started there); then instance 1 has room and nothing to do: the rest of the group stays on 0, neither
    stolen between plans nor offered to instance 1 by the plan generator."""
    model = "llama-2-7b"
    full = [inst(0, model, running=1, waiting=2), inst(1, model, running=1, waiting=2)]
    r = QLMRouter(slo_s={"ls": 30})
    reqs = [Request(k, 0.0, 64, 32, slo_class="ls") for k in range(4)]
    for q in reqs:
        assert r.route(q, StubView(full)) == WAIT
    assert r.route(reqs[0], StubView([inst(0, model, running=1), full[1]])) == 0  # pulled: the group started on 0
    idle1 = StubView([full[0], inst(1, model, running=1)])
    assert r.route(reqs[1], idle1) == WAIT  # instance 0 has no room; instance 1 must not take the started group
    assert {r._groups[r._held[k]].queue for k in (1, 2, 3)} == {0}
    group = r._problem(idle1.state(), 0.0).groups[0]
    assert math.isfinite(group.service_mean_s[0]) and group.service_mean_s[1] == math.inf
    # a started group takes no newcomers (they would be pinned to its instance): the next arrival opens a group
    # of its own, which the idle instance 1 takes
    assert r.route(Request(4, 0.0, 64, 32, slo_class="ls"), idle1) == 1 and r.stats["groups"] == 2
