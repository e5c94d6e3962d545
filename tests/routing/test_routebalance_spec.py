"""RouteBalance against its paper (arXiv 2606.17949) and the public code where the paper is silent: each equation,
default and rule on small inputs whose expected values are worked out by hand in the comments, never read from the
code. Complements the hand-computed Eq. 1 cases of test_routebalance.py and the clamp of test_routebalance_clamp.py."""

from __future__ import annotations

import pytest

from llmsim.request import Request
from llmsim.routing import WAIT, make_router
from llmsim.routing.routebalance.objective import DEFAULT_PRICES, PRESETS, Candidate, score_candidates
from llmsim.routing.routebalance.router import BATCH_LEVELS
from llmsim.routing.routebalance.state import DEFAULT_TPOT_MS, Reckoned, predicted_latency
from tests.routing.helpers import M3, StubView, idle3, inst, labelled

pytestmark = pytest.mark.timeout(60)

M72 = "qwen2.5-72b"


def test_eq_1_max_divide_by_hand() -> None:
    """Weights (q 0.5, c 0.25, l 0.25); Q (0.2, 0.6), C (1e-5, 4e-5) USD, T (2, 1) s, both in the candidate set:
    S0 = 0.5 x 0.2 + 0.25 (1 - 1/4) + 0.25 (1 - 2/2) = 0.2875; S1 = 0.5 x 0.6 + 0.25 (1 - 4/4) + 0.25 (1 - 1/2) = 0.425.
    Quality enters raw (no normalisation), cost and latency divided by their maxima."""
    pool = [Candidate(0, "a", 0.2, 10, 1e-5, 2.0), Candidate(1, "b", 0.6, 10, 4e-5, 1.0)]
    score_candidates(pool, (0.5, 0.25, 0.25), "raw", "max")
    assert [c.score for c in pool] == [pytest.approx(0.2875), pytest.approx(0.425)]


def test_eq_2_predicted_cost_with_the_72b_asymmetric_price() -> None:
    """72B is 0.38 in / 0.40 out per 1M tokens: prompt 200, predicted 300 -> (200 x 0.38 + 300 x 0.40) / 1e6 =
    (76 + 120) / 1e6 = 1.96e-4 USD; 3B 0.06 / 0.06 with predicted 100 -> 300 x 0.06 / 1e6 = 1.8e-5."""
    req = Request(0, 0.0, 200, 100, outputs_by_model={M3: 100, M72: 300}, quality_by_model={M3: 0.3, M72: 0.5})
    got = {c.model: c.cost for c in make_router("routebalance").score(req, StubView([inst(0, M3), inst(1, M72)]))}
    assert got == {M3: pytest.approx(1.8e-5, rel=1e-12), M72: pytest.approx(1.96e-4, rel=1e-12)}


def test_latency_estimate_with_a_queue_and_with_a_free_slot() -> None:
    """T = tpot (d_i / b_i + L): 600 pending decode tokens over 3 running, L = 50, tpot 20 ms -> 0.02 x 250 = 5 s.
    A free decode slot (running < max_num_seqs, nobody waiting) leaves tpot x L = 1 s."""
    queued = Reckoned(0, M3, True, running=3, waiting=1, pending_decode=600, pending_prefill=0, max_num_seqs=256,
                      step_time=0.02)
    assert predicted_latency(queued, 0.02, 50) == pytest.approx(5.0)
    free = Reckoned(0, M3, True, 3, 0, 600, 0, 256, 0.02)
    assert predicted_latency(free, 0.02, 50) == pytest.approx(1.0)
    full = Reckoned(0, M3, True, 256, 0, 600, 0, 256, 0.02)  # no slot although nobody waits
    assert predicted_latency(full, 0.02, 50) == pytest.approx(0.02 * (600 / 256 + 50))


def test_defaults_are_the_papers() -> None:
    """Presets (written (qual, cost, lat)): uniform thirds, quality 0.8/0.1/0.1, latency 0.1/0.1/0.8 (lat 0.8),
    cost 0.1/0.8/0.1 (cost 0.8); prices 3B .06/.06, 7B .07/.07, 14B .15/.15, 72B .38/.40; arm-4 TPOT priors
    12.3 / 20.6 / 18.4 / 47.4 ms; adaptive batching < 0.3 -> 4 / 50 ms, < 0.7 -> 16 / 100 ms, else 32 / 200 ms;
    initial batch 8 / 100 ms; weights (q, c, l) of the quality preset sum to 1."""
    want = {"uniform": pytest.approx((1 / 3,) * 3), "quality": (0.8, 0.1, 0.1), "latency": (0.1, 0.1, 0.8),
            "cost": (0.1, 0.8, 0.1)}
    assert want == PRESETS
    assert DEFAULT_PRICES == {M3: (0.06, 0.06), "qwen2.5-7b": (0.07, 0.07), "qwen2.5-14b": (0.15, 0.15),
                              M72: (0.38, 0.40)}
    assert DEFAULT_TPOT_MS == {M3: 12.3, "qwen2.5-7b": 20.6, "qwen2.5-14b": 18.4, M72: 47.4}
    levels = ((0.3, 4, 0.05), (0.7, 16, 0.1), (float("inf"), 32, 0.2))
    assert levels == BATCH_LEVELS
    r = make_router("routebalance")
    assert r.init_batch == (8, 0.1) and r.batching == "adaptive" and r.lpt and r.quality_norm == "raw"


@pytest.mark.parametrize(("waiting_on", "want"), [(2, (4, 0.05)), (3, (16, 0.1)), (6, (16, 0.1)), (7, (32, 0.2))])
def test_adaptive_batch_follows_the_busy_ratio(waiting_on: int, want: tuple[int, float]) -> None:
    """Ten instances, ``waiting_on`` of them with a waiting request: busy ratio 0.2 -> 4 / 50 ms, 0.3 and 0.6 ->
    16 / 100 ms (0.3 is not < 0.3), 0.7 -> 32 / 200 ms. Read at the batch's telemetry refresh."""
    v = StubView([inst(k, M3, running=1, waiting=int(k < waiting_on)) for k in range(10)])
    r = make_router("routebalance", latency="static")
    assert r.route(labelled(0, 10, (10, 10, 10), None), v) == WAIT  # window of 8 / 100 ms still open
    v.now = 0.1  # the 100 ms window expires: decided, telemetry read
    assert r.route(labelled(0, 10, (10, 10, 10), None), v) != WAIT
    assert r._batch == want


def test_dead_reckoning_adds_the_chosen_models_length() -> None:
    """Algorithm 1 line 7: after r goes to i*, D[i*] gains r's predicted length on m(i*) (80, not the LPT key 300),
    one waiting request and its prompt tokens (the public code's update). With reckon_tokens=lpt_key (the public
    code) it gains max over models, 300. Latency-only weights: 3B's 12.3 ms x 80 beats 72B's 47.4 ms x 300."""
    for mode, tokens in (("chosen", 80.0), ("lpt_key", 300.0)):
        seen: list[list[Reckoned]] = []
        r = make_router("routebalance", weights=[0, 0, 1], latency="static", batching="fixed", max_batch_size=2,
                        reckon_tokens=mode)
        v = StubView([inst(0, M3, running=1), inst(1, M3, running=1), inst(2, M72, running=1)])
        a = Request(0, 0.0, 40, 80, outputs_by_model={M3: 80, M72: 300})
        b = Request(1, 0.0, 40, 10, outputs_by_model={M3: 10, M72: 10})
        r.route(a, v)
        r.on_batch = lambda st, d, n, seen=seen: seen.append(d)
        r.route(b, v)  # the batch of two closes: a (longer) first
        d0 = seen[0][r.route(a, v)]
        assert (d0.pending_decode, d0.waiting, d0.pending_prefill) == (tokens, 1, 40)


def test_clamp_with_the_72b_prices() -> None:
    """Budget 5e-4 USD, prompt 1000 on 72B: left = 5e-4 - 1000 x 0.38e-6 = 1.2e-4 -> floor(1.2e-4 / 0.40e-6) = 300
    output tokens (floating point gives 299.99999999999994: the clamp must still say 300). A budget of 3e-4 does not
    cover the 3.8e-4 prompt: 1 token, exhausted."""
    v = StubView([inst(0, M72)])
    r = make_router("routebalance")
    ok = Request(0, 0.0, 1000, 500, outputs_by_model={M72: 500}, quality_by_model={M72: 0.5},
                 extra={"cost_budget": 5e-4})
    broke = Request(1, 0.0, 1000, 500, outputs_by_model={M72: 500}, quality_by_model={M72: 0.5},
                    extra={"cost_budget": 3e-4})
    assert r.route(ok, v) == 0 and r.route(broke, v) == 0
    assert r.budget_log == {0: (300, False), 1: (1, True)}


def test_score_shows_the_candidate_set_the_decision_uses() -> None:
    """A budget below every candidate's predicted cost: the decision's set C is the smallest worst-case cost (3B:
    100 x 0.06 + 1024 x 0.06 per 1M is below 7B's and 14B's), and ``score`` (tracing) must show that set, not all
    three candidates normalised together."""
    req = labelled(0, 100, (100, 200, 150), (0.3, 0.5, 0.6), extra={"cost_budget": 1e-6})
    r = make_router("routebalance", weights="quality")
    assert [c.instance for c in r.score(req, idle3())] == [0]
    assert r.route(req, idle3()) == 0 and r.stats["budget_fallbacks"] == 1
