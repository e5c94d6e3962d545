"""RouteBalance (llmsim/routing/routebalance/router.py, docs/routebalance.md): Eq. 1 on hand-computed cases, the budget
filter and its fallback, presets moving the tier mix, dead reckoning against telemetry, LPT, determinism, no hang
with and without a tick, labels-free workloads, bad options, the decision-cost record."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from llmsim import InstanceConfig, simulate
from llmsim.errors import ConfigError
from llmsim.request import Request
from llmsim.routing import ROUTERS, WAIT, make_router
from llmsim.routing.routebalance.estimators import ESTIMATORS, OracleEstimator, register_estimator
from llmsim.routing.routebalance.objective import PRESETS
from llmsim.routing.routebalance.router import RouteBalanceRouter
from llmsim.routing.routebalance.state import Reckoned, predicted_latency, telemetry_of
from llmsim.state.cluster_state import ClusterState, InstanceState, RequestState
from tests.helpers import REPO
from tests.routing.helpers import M3, M7, M14, MODELS, StubView, cluster, idle3, inst, labelled, workload

pytestmark = pytest.mark.timeout(60)

REQ = dict(prompt=100, outs=(100, 200, 150), quals=(0.3, 0.5, 0.6))
# by hand: cost (100 in + L out) x price / 1e6; latency = static prior (12.3, 20.6, 18.4 ms) x L on an idle instance
COST = (100 * 0.06 + 100 * 0.06, 100 * 0.07 + 200 * 0.07, 100 * 0.15 + 150 * 0.15)  # x 1e-6: 12, 21, 37.5
LAT = (0.0123 * 100, 0.0206 * 200, 0.0184 * 150)  # 1.23, 4.12, 2.76 s


def hand_scores(w: tuple[float, float, float], quals=REQ["quals"]) -> list[float]:
    return [w[0] * quals[k] + w[1] * (1 - COST[k] / 37.5) + w[2] * (1 - LAT[k] / 4.12) for k in range(3)]


@pytest.mark.parametrize("preset", ["uniform", "quality", "cost", "latency"])
def test_eq1_scores_by_hand(preset: str) -> None:
    r = make_router("routebalance", weights=preset)
    req = labelled(0, REQ["prompt"], REQ["outs"], REQ["quals"])
    got = {c.instance: c for c in r.score(req, idle3())}
    want = hand_scores(PRESETS[preset])
    for k in range(3):
        assert got[k].cost == pytest.approx(COST[k] * 1e-6, rel=1e-12)
        assert got[k].latency == pytest.approx(LAT[k], rel=1e-12)
        assert got[k].score == pytest.approx(want[k], rel=1e-6)
    assert r.route(req, idle3()) == int(np.argmax(want))  # idle cluster: decided at once


def test_eq1_by_hand_numbers_and_minmax() -> None:
    """Uniform: 3B = (0.3 + 0.68 + 0.70146) / 3; quality preset picks 14B; min-max quality rescales Q to [0, 1]."""
    req = labelled(0, REQ["prompt"], REQ["outs"], REQ["quals"])
    s = {c.instance: c.score for c in make_router("routebalance").score(req, idle3())}
    assert s[0] == pytest.approx((0.3 + (1 - 12 / 37.5) + (1 - 1.23 / 4.12)) / 3, rel=1e-6)
    assert s[1] == pytest.approx((0.5 + (1 - 21 / 37.5) + 0.0) / 3, rel=1e-6)
    assert s[2] == pytest.approx((0.6 + 0.0 + (1 - 2.76 / 4.12)) / 3, rel=1e-6)
    assert make_router("routebalance", weights="quality").route(req, idle3()) == 2
    mm = {c.instance: c.score for c in make_router("routebalance", quality_norm="minmax").score(req, idle3())}
    assert mm[0] == pytest.approx(hand_scores(PRESETS["uniform"], (0.0, 2 / 3, 1.0))[0], rel=1e-6)
    assert mm[2] == pytest.approx(hand_scores(PRESETS["uniform"], (0.0, 2 / 3, 1.0))[2], rel=1e-6)
    # norm=minmax: the cheapest gets the full cost term, the dearest none
    n = {c.instance: c.score for c in make_router("routebalance", norm="minmax", weights=[0, 1, 0]).score(req, idle3())}
    assert n[0] == pytest.approx(1.0, abs=1e-6) and n[2] == pytest.approx(0.0, abs=1e-6)


def test_explicit_weights_forms_agree() -> None:
    a = make_router("routebalance", weights=[0.5, 0.2, 0.3]).weights
    b = make_router("routebalance", weights={"qual": 0.5, "cost": 0.2, "lat": 0.3}).weights
    c = make_router("routebalance", weights=[0.33, 0.33, 0.33]).weights  # the paper's rounding, rescaled
    assert a == b == pytest.approx((0.5, 0.2, 0.3)) and c == pytest.approx(PRESETS["uniform"])


def test_latency_uses_telemetry_queue_and_free_slot() -> None:
    """T = step_time x (pending decode / running + L) on a full instance; prior x L with a free slot."""
    rows = tuple(RequestState(k, 50, 10, 59, 110.0, None, 0.0) for k in range(2))  # 2 x 100 decode tokens left
    busy = inst(1, M7, running=2, waiting=1, step=0.025, rows=rows)
    v = StubView([inst(0, M3), busy, inst(2, M14)])
    req = labelled(0, REQ["prompt"], REQ["outs"], REQ["quals"])
    got = {c.instance: c.latency for c in make_router("routebalance").score(req, v)}
    assert got[1] == pytest.approx(0.025 * (200 / 2 + 200))
    assert got[0] == pytest.approx(LAT[0]) and got[2] == pytest.approx(LAT[2])
    static = {c.instance: c.latency for c in make_router("routebalance", latency="static").score(req, v)}
    assert static[1] == pytest.approx(0.0206 * 200)  # arm 4: the prior, no queue term
    d = Reckoned.from_state(busy)
    assert not d.slot_open() and predicted_latency(d, 0.01, 10) == pytest.approx(0.01 * (100 + 10))


def test_budget_filter_and_fallback() -> None:
    """Eq. 2 keeps only candidates whose predicted cost fits; none fits -> smallest worst-case cost (3B)."""
    v = idle3()
    req = labelled(0, 100, REQ["outs"], REQ["quals"], extra={"cost_budget": 15e-6})  # 3B (12e-6) fits, 7B does not
    r = make_router("routebalance", weights="quality")  # would pick 14B without a budget
    assert [c.instance for c in r.score(req, v)] == [0]
    assert r.route(req, v) == 0
    n, exhausted = r.budget_log[0]  # the dispatch clamp: floor((15e-6 - 100 x 0.06e-6) / 0.06e-6) = 150
    assert r.stats["budget_fallbacks"] == 0 and n in (149, 150) and not exhausted
    r = make_router("routebalance", weights="quality", cost_budget=25e-6)  # the policy default: 3B or 7B fit
    assert r.route(labelled(1, 100, REQ["outs"], REQ["quals"]), v) == 1
    r = make_router("routebalance", weights="quality")
    tight = labelled(2, 100, REQ["outs"], REQ["quals"], extra={"cost_budget": 8e-6})  # below every candidate
    assert r.route(tight, v) == 0
    n, exhausted = r.budget_log[2]
    assert r.stats["budget_fallbacks"] == 1 and n in (33, 34) and not exhausted  # (8 - 6) / 0.06 tokens
    broke = labelled(3, 100, REQ["outs"], REQ["quals"], extra={"cost_budget": 1e-9})
    assert r.route(broke, v) == 0 and r.budget_log[3] == (1, True)  # cannot even pay the prompt
    assert r.stats["exhausted"] == 1 and r.stats["clamped"] == 2


def test_max_tokens_caps_the_predicted_length() -> None:
    req = labelled(0, 100, (5000, 5000, 5000), REQ["quals"], extra={"max_tokens": 64})
    assert {c.length for c in make_router("routebalance").score(req, idle3())} == {64.0}
    req = labelled(1, 100, (5000, 5000, 5000), REQ["quals"])
    assert {c.length for c in make_router("routebalance", max_tokens=300).score(req, idle3())} == {300.0}


def test_tiebreak_shorter_queue_then_least_recently_used() -> None:
    v = StubView([inst(0, M3, waiting=2), inst(1, M3, waiting=1), inst(2, M3, waiting=1)])
    req = labelled(0, 100, REQ["outs"], None)
    r = make_router("routebalance", latency="static")  # equal scores: the tiebreak decides
    assert [c.instance for c in r.score(req, v)] == [1, 2, 0]
    r._D = [Reckoned.from_state(i) for i in v.instances]
    r._D[1].last_assigned = 5
    assert [c.instance for c in r.score(req, v)] == [2, 1, 0]


def test_lpt_orders_the_batch() -> None:
    """Two equal instances, a fixed batch of two: the longer request (arriving second) is assigned first, so it
    gets instance 0; with lpt off the first arrival does."""
    for lpt, want in ((True, (1, 0)), (False, (0, 1))):
        v = StubView([inst(0, M3, running=1), inst(1, M3)])
        r = make_router("routebalance", batching="fixed", max_batch_size=2, lpt=lpt, latency="static")
        short, long_ = labelled(0, 10, (10, 10, 10), None), labelled(1, 10, (500, 500, 500), None)
        assert r.route(short, v) == WAIT  # an engine holds work: the window stays open
        v.instances = (inst(0, M3, running=1), inst(1, M3, running=1))  # equal again when the batch closes
        got_long = r.route(long_, v)  # the batch is full: decided now
        got_short = r.route(short, v)  # offered again: its instance
        assert (got_short, got_long) == want
        assert r.held == 0 and r.stats["batches"] == 1


# ---------------------------------------------------------------------- simulations
def run(tick: float | None = 0.004, n: int = 240, seed: int = 0, staleness: float = 0.0, labels: bool = True,
        **kw):
    r = make_router("routebalance", seed=seed, **kw)
    res = simulate(cluster(), workload(n, seed=seed, labels=labels), r, central_queue_tick=tick, seed=seed,
                   view_staleness=staleness)
    return res, r


@pytest.mark.parametrize(("tick", "staleness", "batching"), [
    (None, 0.0, "adaptive"), (0.004, 0.0, "adaptive"), (None, 0.5, "adaptive"), (0.02, 0.0, "fixed"),
    (None, 0.0, "off")])
def test_nothing_hangs_or_is_lost(tick, staleness, batching) -> None:
    res, r = run(tick=tick, staleness=staleness, batching=batching)
    assert len(res.requests) == 240 and len(res.dropped) == 0
    assert res.requests["finish"].notna().all()
    assert r.held == 0 and r.stats["routed"] == 240 == r.stats["decisions"]
    if batching != "off":
        assert r.stats["batches"] < 240  # some batches held several requests


def test_a_lone_request_on_an_idle_cluster_is_not_held() -> None:
    """No engine holds work: the batch is decided at once (no completion would re-offer a held request)."""
    r = make_router("routebalance")
    res = simulate(cluster(), [labelled(0, 50, (20, 20, 20), (0.3, 0.4, 0.5), arrival=1.0)], r)
    assert len(res.requests) == 1 and res.requests["routed_time"].iloc[0] == 1.0
    assert r.stats["idle_closes"] == 1


def test_presets_move_the_tier_mix() -> None:
    mix = {}
    for preset in ("quality", "uniform", "cost"):
        res, _ = run(weights=preset)
        mix[preset] = res.requests["instance"].value_counts(normalize=True).reindex(range(3), fill_value=0.0)
    assert mix["quality"][2] > mix["uniform"][2] >= mix["cost"][2]  # 14B: the best quality
    assert mix["cost"][0] > mix["quality"][0]  # 3B: the cheapest
    assert mix["quality"][2] > 0.5 and mix["cost"][0] > 0.5


def test_dead_reckoning_equals_telemetry_when_refreshed_every_batch() -> None:
    checks, diffs = [], []

    def hook(period: float):
        def on_batch(st: ClusterState, D: list[Reckoned], undispatched: int) -> None:
            same = all(d.telemetry() == telemetry_of(i) for d, i in zip(D, st.instances))
            (checks if period == 0 else diffs).append((same, undispatched))
        return on_batch

    for period in (0.0, 1.0):
        r = make_router("routebalance", telemetry_period_s=period)
        r.on_batch = hook(period)
        simulate(cluster(), workload(), r, central_queue_tick=0.004)
    assert len(checks) > 50 and all(same for same, und in checks if und == 0)
    assert sum(1 for _, und in checks if und == 0) > 50
    assert len(diffs) < len(checks) / 3  # period 1 s: few refreshes, D runs on its local updates in between


def test_dispatch_attaches_the_predicted_length() -> None:
    reqs = workload()
    res = simulate(cluster(), reqs, make_router("routebalance"), central_queue_tick=0.004)
    for q, k in zip(reqs, res.requests.sort_values("id")["instance"]):
        assert q.predicted_output == min(1024, q.outputs_by_model[MODELS[k]])


@pytest.mark.parametrize("kw", [{}, {"estimator": "noisy", "estimator_kwargs": {"quality_sd": 0.2}},
                                {"telemetry_period_s": 0.5, "tiebreak": "latency"}])
def test_same_seed_same_run(kw: dict) -> None:
    a, _ = run(seed=3, **kw)
    b, _ = run(seed=3, **kw)
    pd.testing.assert_frame_equal(a.requests, b.requests)


def test_no_quality_labels_makes_the_quality_term_constant() -> None:
    """Synthetic workloads carry no labels: quality 0 for every candidate (raw and min-max), lengths from
    output_tokens; the choice is then the same as with w_qual's share moved nowhere (equal qualities)."""
    req = labelled(0, REQ["prompt"], REQ["outs"], None)
    flat = labelled(0, REQ["prompt"], REQ["outs"], (0.5, 0.5, 0.5))
    for norm in ("raw", "minmax"):
        a = {c.instance: c.score for c in make_router("routebalance", quality_norm=norm).score(req, idle3())}
        b = {c.instance: c.score for c in make_router("routebalance", quality_norm=norm).score(flat, idle3())}
        shift = 0.5 / 3 if norm == "raw" else 0.0
        assert all(a[k] == pytest.approx(b[k] - shift, abs=1e-12) for k in range(3))
    res, r = run(labels=False)
    assert len(res.requests) == 240 and r.stats["no_quality"] == 240


def test_synthetic_workload_on_a_single_model_cluster() -> None:
    """The default-cluster case: one model (no quality, one price whatever it is) -> pure latency balancing; no
    price is needed then, but two unpriced models, or a budget on an unpriced model, are ConfigErrors."""
    reqs = [Request(i, i * 0.05, 200, 50 + 7 * (i % 13)) for i in range(120)]
    insts = [InstanceConfig(model="llama-2-7b", gpu="a100-80gb") for _ in range(2)]
    r = make_router("routebalance")
    res = simulate(insts, reqs, r, central_queue_tick=0.004)
    assert len(res.requests) == 120 and set(res.requests["instance"]) == {0, 1} and r.stats["no_quality"] == 120
    two = [*insts, InstanceConfig(model="llama-2-13b", gpu="a100-80gb")]
    with pytest.raises(ConfigError, match=r"^policy\.kwargs\.prices: no price for model 'llama-2-7b'"):
        simulate(two, reqs, make_router("routebalance"))
    res = simulate(two, reqs, make_router("routebalance", prices={"llama-2-7b": [0.1, 0.1], "llama-2-13b": [0.2, 0.2]}))
    assert len(res.requests) == 120
    with pytest.raises(ConfigError, match=r"^policy\.kwargs\.prices: request 0 has a cost budget"):
        simulate(insts, reqs, make_router("routebalance", cost_budget=1.0))


def test_decision_cost_is_recorded() -> None:
    _, r = run()
    assert r.stats["decisions"] == 240 and r.stats["decide_s"] > 0 and r.stats["route_s"] >= r.stats["decide_s"]
    assert r.mean_decision_ms == 1000.0 * r.stats["decide_s"] / 240 > 0  # (its size is the machine's, not checked)


def test_tpot_prior_from_the_profile_for_other_models() -> None:
    r = make_router("routebalance", tpot_prior="profile")
    p = r.priors.prior_s(inst(0, M3))
    assert 0.001 < p < 0.05 and p != pytest.approx(0.0123)
    assert make_router("routebalance").priors.prior_s(inst(0, M3)) == pytest.approx(0.0123)
    bad = InstanceState(0, "0:x", "no-such-model", "a100-80gb", True, 0, 0, 0, 0, 1, 16, 1, 1, 1, 0.0, 0.0)
    with pytest.raises(ConfigError, match=r"^policy\.kwargs\.static_tpot_ms"):
        r.priors.prior_s(bad)


def test_estimator_registry_hook() -> None:
    @register_estimator("const_test")
    class Const(OracleEstimator):
        def predict(self, request, models):
            return [0.5] * len(models), [42.0] * len(models)
    try:
        r = make_router("routebalance", estimator="const_test")
        assert {c.length for c in r.score(labelled(0, 10, (1, 2, 3), None), idle3())} == {42.0}
    finally:
        ESTIMATORS._entries.pop("const_test")


def test_registered_and_built_from_the_conf_file() -> None:
    assert "routebalance" in ROUTERS.names()
    conf = yaml.safe_load((REPO / "conf/policy/routebalance.yaml").read_text())
    r = make_router(conf["name"], **conf["kwargs"])
    assert isinstance(r, RouteBalanceRouter) and r.weights == PRESETS["uniform"]


@pytest.mark.parametrize(("kw", "key"), [
    ({"weights": [0.5, 0.5, 0.5]}, "weights"), ({"weights": "fast"}, "weights"), ({"weights": [1, -1, 1]}, "weights"),
    ({"weights": {"q": 1}}, "weights"), ({"prices": {"m": [1]}}, "prices.m"), ({"prices": {"m": [1, -2]}}, "prices.m"),
    ({"prices": [1, 2]}, "prices"), ({"estimator": "knn"}, "estimator"), ({"estimator_kwargs": {"zz": 1}},
                                                                           "estimator_kwargs"),
    ({"estimator": "noisy", "estimator_kwargs": {"quality_sd": -1}}, "estimator_kwargs.quality_sd"),
    ({"quality_norm": "z"}, "quality_norm"), ({"norm": "sum"}, "norm"), ({"cost_budget": -1}, "cost_budget"),
    ({"max_tokens": 0}, "max_tokens"), ({"batching": "big"}, "batching"), ({"max_batch_size": 0}, "max_batch_size"),
    ({"batch_timeout_ms": -5}, "batch_timeout_ms"), ({"lpt": "yes"}, "lpt"),
    ({"telemetry_period_s": -1}, "telemetry_period_s"), ({"latency": "xgb"}, "latency"),
    ({"static_tpot_ms": {M3: 0}}, f"static_tpot_ms.{M3}"), ({"tpot_prior": "x"}, "tpot_prior"),
    ({"tiebreak": "random"}, "tiebreak"), ({"reckon_tokens": "all"}, "reckon_tokens"),
])
def test_bad_options_are_one_line_config_errors(kw: dict, key: str) -> None:
    with pytest.raises(ConfigError) as e:
        make_router("routebalance", **kw)
    msg = str(e.value)
    assert msg.startswith(f"policy.kwargs.{key}") and "\n" not in msg


def test_unknown_option_and_missing_quality_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"^policy\.kwargs"):
        make_router("routebalance", window=3)
    partial = Request(0, 0.0, 10, 10, quality_by_model={M3: 0.4})
    with pytest.raises(ConfigError, match="no quality for model"):
        make_router("routebalance").route(partial, idle3())
