"""RouteBalance's budget and batching details: the budget clamp written to ``Request.token_cap`` (Eq. 2) and honoured
by the engine, the admission filter switch, one estimator call per batch window, and the testbed's topic signal
that lets the kNN estimator beat chance (docs/routebalance.md, docs/routebalance_testbed.md)."""

from __future__ import annotations

import numpy as np
import pytest

from llmsim import InstanceConfig, simulate
from llmsim.envs import routebalance_tasks as rb
from llmsim.request import Request
from llmsim.routing import make_router
from llmsim.routing.routebalance.estimators import OracleEstimator
from tests.routing.helpers import M3, M7, M14, MODELS, cluster, idle3, labelled, workload

pytestmark = pytest.mark.timeout(60)

# USD per 1M tokens chosen so that every number below is exact: 3B 1 / 2, 7B 3 / 4, 14B 5 / 6
PRICES = {M3: [1.0, 2.0], M7: [3.0, 4.0], M14: [5.0, 6.0]}


def test_clamp_by_hand_is_written_to_the_token_cap() -> None:
    """prompt 100, budget 500e-6: 3B predicted 100 x 1 + 100 x 2 = 300e-6 fits (7B 1100e-6, 14B 1400e-6 do not);
    max_tokens := min(1024, floor((500 - 100 x 1) / 2)) = 200, predicted output min(100, 200) = 100."""
    r = make_router("routebalance", weights="quality", prices=PRICES)
    req = labelled(0, 100, (100, 200, 150), (0.3, 0.5, 0.6), extra={"cost_budget": 500e-6})
    assert req.token_cap is None
    assert r.route(req, idle3()) == 0
    assert req.token_cap == 200 and req.max_tokens is None
    assert r.budget_log[0] == (200, False) and req.predicted_output == 100
    # none fits (3B predicts 100 + 400 x 2 = 900e-6): the smallest worst-case cost 100 x 1 + 1024 x 2 is 3B; the
    # clamp (200) is below the predicted 400 tokens, so the predicted output becomes 200
    big = labelled(1, 100, (400, 400, 400), (0.3, 0.5, 0.6), extra={"cost_budget": 500e-6})
    assert r.route(big, idle3()) == 0 and r.stats["budget_fallbacks"] == 1
    assert big.token_cap == 200 and big.predicted_output == 200
    # a client cap below the clamp stays (never raised); it also caps the predicted length
    own = labelled(2, 100, (400, 400, 400), (0.3, 0.5, 0.6), extra={"cost_budget": 500e-6})
    own.max_tokens = 150
    assert r.route(own, idle3()) == 0 and own.token_cap is None and own.predicted_output == 150
    # no budget: max_tokens untouched
    free = labelled(3, 100, (100, 200, 150), (0.3, 0.5, 0.6))
    assert r.route(free, idle3()) == 2 and free.token_cap is None


def test_filter_off_keeps_the_clamp() -> None:
    """budget_filter false (the Table 8 'without filter' arm): Eq. 1 over every candidate, then the same clamp."""
    r = make_router("routebalance", weights="quality", prices=PRICES, budget_filter=False)
    req = labelled(0, 100, (100, 200, 150), (0.3, 0.5, 0.6), extra={"cost_budget": 500e-6})
    assert r.route(req, idle3()) == 2  # 14B: floor((500 - 100 x 5) / 6) = 0 -> at least 1 token
    assert req.token_cap == 1 and r.stats["filtered"] == 0 and r.stats["clamped"] == 1


def test_engine_stops_at_the_clamped_max_tokens() -> None:
    """A small simulation: each budgeted request generates exactly its clamped max_tokens when its answer is
    longer, and its realised cost stays within the budget."""
    insts = [InstanceConfig(model=m, gpu="a100-80gb") for m in (M3, M14)]
    reqs = []
    for i in range(12):
        outs = (300 + 10 * i, 300, 300 + 10 * i)
        extra = {"cost_budget": (100 * 0.06 + 120 * 0.06) / 1e6} if i % 2 == 0 else None  # 120 tokens on 3B
        reqs.append(labelled(i, 100, outs, (0.3, 0.5, 0.6), arrival=0.05 * i, extra=extra))
    r = make_router("routebalance", weights="quality")
    df = simulate(insts, reqs, r, central_queue_tick=0.004).requests.set_index("id")
    for q in reqs:
        model = insts[int(df.loc[q.id, "instance"])].model
        if q.extra:
            assert q.token_cap == r.budget_log[q.id][0] and model == M3
            assert q.token_cap in (119, 120) and df.loc[q.id, "output_tokens"] == q.token_cap
            assert rb.request_cost(q, model, {m: tuple(p) for m, p in rb.PRICES.items()}) <= q.extra["cost_budget"]
        else:
            assert q.token_cap is None and df.loc[q.id, "output_tokens"] == q.output_for(model)


class CountingEstimator(OracleEstimator):
    """The oracle, answering whole batch windows; records each call's size."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self.sizes: list[int] = []

    def predict_batch(self, requests: list[Request], models: list[list[str]]) -> list:
        self.sizes.append(len(requests))
        return [self.predict(r, m) for r, m in zip(requests, models)]


def test_one_estimator_call_per_batch_window() -> None:
    est = CountingEstimator()
    r = make_router("routebalance", estimator=est)
    simulate(cluster(), workload(200), r, central_queue_tick=0.004)
    assert len(est.sizes) == r.stats["batches"] == r.stats["estimate_calls"]
    assert sum(est.sizes) == r.stats["decisions"] == 200 and max(est.sizes) > 1
    assert r.stats["estimate_s"] <= r.stats["decide_s"]


def test_workload_carries_max_tokens_and_topics() -> None:
    reqs = rb.routebalance_workload(12.0, n=300)
    assert all(r.max_tokens == rb.MAX_TOKENS for r in reqs)
    assert all(len(r.extra["embedding"]) == rb.EMBED_DIM and 0 <= r.extra["topic"] < rb.TOPICS_PER_DATASET
               for r in reqs)
    legacy = rb.routebalance_workload(12.0, n=300, topic_signal=0.0)
    assert [r.quality_by_model for r in legacy] != [r.quality_by_model for r in reqs]
    assert [r.extra["embedding"] for r in legacy] == [r.extra["embedding"] for r in reqs]
    with pytest.raises(Exception, match="topic_signal"):
        rb.routebalance_workload(12.0, n=10, topic_signal=2.0)


def test_knn_beats_chance_on_the_testbed_and_batches_its_search() -> None:
    """With the topic signal the kNN estimator's best-model accuracy clears both random (25 %) and the prompt-blind
    constant (always the best mean tier); with topic_signal 0 it does not. One neighbour search per call."""
    from llmsim.routing.routebalance.predictors import KnnEstimator, estimator_accuracy

    accs = {}
    for sig in (rb.TOPIC_SIGNAL, 0.0):
        train = rb.routebalance_workload(12.0, n=4000, seed=1005, topic_signal=sig)
        test = rb.routebalance_workload(12.0, n=1500, seed=5, topic_signal=sig)
        est = KnnEstimator(train=train, k=10)
        accs[sig] = estimator_accuracy(est, test, train=train)
        assert est.calls == 1
    a, blind = accs[rb.TOPIC_SIGNAL], accs[0.0]
    assert a["best_model_acc"] > max(a["const_best_model_acc"], a["random_acc"]) + 0.02, a
    assert a["routed_quality"] > a["const_routed_quality"] + 0.01, a
    assert blind["best_model_acc"] < blind["const_best_model_acc"] + 0.02, blind
    est = KnnEstimator(train=rb.routebalance_workload(12.0, n=500, seed=1005), k=10)
    test = rb.routebalance_workload(12.0, n=40, seed=5)
    out = est.predict_batch(test, [list(MODELS)] * len(test))
    assert est.calls == 1 and len(out) == 40
    assert out[3] == est.predict(test[3], list(MODELS))  # batched == one at a time
    assert np.isfinite(np.array([q for q, _ in out])).all()


def test_same_seed_same_budget_run() -> None:
    from experiments.papers.routebalance import setup as S

    def once() -> list:
        reqs = S.workload(16.0, 150, 5)
        S.assign_budgets(reqs, 75, 5)
        r = make_router("routebalance", weights=[0.8, 0.1, 0.1], prices={m: list(p) for m, p in rb.PRICES.items()})
        df = simulate(S.instances(), reqs, r, central_queue_tick=0.004, seed=5).requests
        return [df.instance.tolist(), df.output_tokens.tolist(), [q.token_cap for q in reqs]]

    a = once()
    assert a == once()
    assert sum(1 for m in a[2] if m is not None and m < rb.MAX_TOKENS) > 0  # some budgets clamp
