"""The RouteBalance paper's baselines in pipeline mode (llmsim/routing/model_choice.py, docs/route_baselines.md)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import yaml

from llmsim.envs.routebalance_tasks import MODELS, PRICES, TIERS, routebalance_instances, routebalance_workload
from llmsim.errors import ConfigError
from llmsim.routing import make_router
from llmsim.routing.model_choice import fit_cluster_table
from llmsim.routing.routebalance.objective import DEFAULT_PRICES
from llmsim.simulation.run import simulate
from tests.helpers import REPO

CONF = REPO / "conf" / "policy"
CHEAP_FIRST = sorted(MODELS, key=lambda m: (sum(PRICES[m]), m))  # the routers' class order


@pytest.fixture(scope="module")
def small() -> list:
    """One instance per tier (72B, 14B, 7B, 3B: instance i serves MODELS_OF[i])."""
    return routebalance_instances(tiers=[dataclasses.replace(t, count=1) for t in TIERS])


@pytest.fixture(scope="module")
def table() -> dict:
    return fit_cluster_table(routebalance_workload(12.0, n=2000, seed=1005))


def _models_of(instances: list) -> list[str]:
    return [ic.model for ic in instances]


def _true_best(r) -> str:
    q = [r.quality_by_model[m] for m in CHEAP_FIRST]
    return CHEAP_FIRST[int(np.argmax(q))]


def _served(res, instances) -> dict[int, str]:
    models = _models_of(instances)
    return dict(zip(res.requests["id"].tolist(), [models[i] for i in res.requests["instance"].tolist()]))


def test_default_prices_match_the_testbed() -> None:
    assert DEFAULT_PRICES == PRICES


def test_perfect_classifier_picks_the_true_best(small) -> None:
    reqs = routebalance_workload(4.0, n=300)
    res = simulate(small, reqs, "best_route", policy_kwargs={"accuracy": 1.0, "threshold": 0.0})
    served = _served(res, small)
    assert len(served) == 300
    assert all(served[r.id] == _true_best(r) for r in reqs)


def test_threshold_one_always_falls_back_to_the_smallest(small) -> None:
    reqs = routebalance_workload(4.0, n=200)
    router = make_router("best_route", threshold=1.0)
    res = simulate(small, reqs, router)
    assert set(_served(res, small).values()) == {"qwen2.5-3b"}
    assert router.stats["fallbacks"] == 200 and router.stats["picks"] == {"qwen2.5-3b": 200}


def test_classifier_accuracy_and_confidence() -> None:
    reqs = routebalance_workload(12.0, n=2000, seed=11)
    router = make_router("best_route")
    out = [router.classify(r, CHEAP_FIRST) for r in reqs]
    right = np.array([p == b for p, _, b in out])
    conf = np.array([c for _, c, _ in out])
    assert abs(right.mean() - 0.392) < 0.03
    assert np.all((conf >= 0.25) & (conf <= 1.0))
    assert conf[right].mean() > conf[~right].mean() + 0.03  # thresholding removes more wrong picks than right ones
    kept = [(right[conf >= t].mean(), (conf >= t).mean()) for t in (0.0, 0.5, 0.7)]
    assert kept[0][1] == 1.0 and kept[0][1] > kept[1][1] > kept[2][1] > 0.0
    assert kept[2][0] > kept[0][0]  # accuracy among the confident ones rises with the threshold
    # policy-independent: the same draws whatever the other options
    other = make_router("best_route", threshold=0.8, dispatcher="random", scoring_ms=431)
    assert [other.classify(r, CHEAP_FIRST) for r in reqs[:50]] == out[:50]


def test_avengers_pro_extremes(small, table) -> None:
    reqs = routebalance_workload(4.0, n=300)
    for p_w, want in ((1.0, lambda row: max(row, key=lambda m: (row[m][0], -CHEAP_FIRST.index(m)))),
                      (0.0, lambda row: min(row, key=lambda m: row[m][1]))):
        res = simulate(small, reqs, "avengers_pro", policy_kwargs={"p_w": p_w, "table": table})
        served = _served(res, small)
        assert all(served[r.id] == want(table[r.task]) for r in reqs), p_w
    assert {min(row, key=lambda m: row[m][1]) for row in table.values()} == {"qwen2.5-3b"}


def test_avengers_pro_train_list_and_sampler(table) -> None:
    sample = routebalance_workload(12.0, n=2000, seed=1005)
    a = make_router("avengers_pro", train=sample)
    b = make_router("avengers_pro", train={"sampler": "routebalance_workload", "n": 2000,
                                           "seed": 1005})
    want = {t: {m: tuple(v) for m, v in row.items()} for t, row in table.items()}
    assert a.table == b.table == want
    assert sorted(a.rank("gsm8k", CHEAP_FIRST)) == sorted(CHEAP_FIRST)


@pytest.mark.parametrize("dispatcher", ["round_robin", "shortest_queue", "random"])
def test_dispatchers_stay_within_the_model(dispatcher: str) -> None:
    full = routebalance_instances()
    models = _models_of(full)
    reqs = routebalance_workload(12.0, n=300)
    res = simulate(full, reqs, "best_route", policy_kwargs={"accuracy": 1.0, "threshold": 0.0,
                                                            "dispatcher": dispatcher})
    served = _served(res, full)
    assert all(served[r.id] == _true_best(r) for r in reqs)
    used = res.requests["instance"].value_counts()
    for m in MODELS:  # every replica of a model gets work (RR: within one of each other)
        idx = [i for i, x in enumerate(models) if x == m]
        counts = [int(used.get(i, 0)) for i in idx]
        assert min(counts) > 0, (m, counts)
        if dispatcher == "round_robin":
            assert max(counts) - min(counts) <= 1, (m, counts)


def _delays(small, rate: float, scoring: str) -> tuple[np.ndarray, dict]:
    reqs = routebalance_workload(rate, n=200)
    router = make_router("best_route", scoring_ms=431, scoring=scoring, dispatcher="shortest_queue")
    res = simulate(small, reqs, router, central_queue_tick=0.01)
    df = res.requests
    assert len(df) == 200
    return (df["routed_time"] - df["arrival"]).to_numpy(), router.stats


def test_serial_scoring_queues_and_concurrent_does_not(small) -> None:
    low, _ = _delays(small, 1.5, "serial")  # below 1 / 0.431 = 2.32 req/s
    high, st = _delays(small, 4.0, "serial")  # above: the scoring queue grows all run long
    assert low.min() >= 0.431 and low.mean() < 1.5
    assert high.mean() > 5 * low.mean()
    assert high[-50:].mean() > high[50:100].mean() > high[:50].mean()
    assert st["decision_delay_s_mean"] == pytest.approx(high.mean(), abs=0.011)
    conc, st = _delays(small, 4.0, "concurrent")
    assert np.all(conc >= 0.431 - 1e-9) and np.all(conc <= 0.431 + 0.0101)
    assert st["decision_delay_s_mean"] == pytest.approx(0.431)


def test_scoring_without_a_tick_is_an_error(small) -> None:
    with pytest.raises(ConfigError, match="central_queue_tick"):
        simulate(small, routebalance_workload(4.0, n=100), "best_route", policy_kwargs={"scoring_ms": 431})


@pytest.mark.parametrize("name,kwargs,key", [
    ("best_route", {"dispatcher": "least_loaded"}, "dispatcher"),
    ("best_route", {"threshold": 1.5}, "threshold"),
    ("best_route", {"accuracy": -0.1}, "accuracy"),
    ("best_route", {"scoring": "parallel"}, "scoring"),
    ("best_route", {"scoring_ms": -1}, "scoring_ms"),
    ("best_route", {"scoring_threads": 0}, "scoring_threads"),
    ("best_route", {"scoring_threads": 2.5}, "scoring_threads"),
    ("best_route", {"confidence_correct": [0, 1]}, "confidence_correct"),
    ("best_route", {"fallback": 3}, "fallback"),
    ("best_route", {"prices": {"qwen2.5-3b": [0.1]}}, "prices"),
    ("best_route", {"bogus": 1}, "policy.kwargs"),
    ("avengers_pro", {"p_w": 2}, "p_w"),
    ("avengers_pro", {}, "table"),
    ("avengers_pro", {"table": {"gsm8k": {"qwen2.5-3b": "x"}}}, "table"),
    ("avengers_pro", {"train": {"sampler": "no_such_module:f"}}, "train"),
    ("avengers_pro", {"train": "requests.csv"}, "train"),
    ("avengers_pro", {"train": [1, 2]}, "train[0]"),
    ("avengers_pro", {"train": [{"task": "gsm8k", "quality_by_model": {"qwen2.5-3b": 0.5}}]}, "train[0]"),
])
def test_bad_options_are_one_line_errors(name: str, kwargs: dict, key: str) -> None:
    with pytest.raises(ConfigError) as e:
        make_router(name, **kwargs)
    msg = str(e.value)
    assert "\n" not in msg and (f"policy.kwargs.{key}" in msg if key != "policy.kwargs" else key in msg), msg


def test_options_checked_against_the_cluster(small, table) -> None:
    reqs = routebalance_workload(4.0, n=20)
    with pytest.raises(ConfigError, match="policy.kwargs.fallback"):
        simulate(small, reqs, "best_route", policy_kwargs={"fallback": "llama-2-7b"})
    partial = {t: {m: v for m, v in row.items() if m != "qwen2.5-72b"} for t, row in table.items()}
    with pytest.raises(ConfigError, match="policy.kwargs.table"):
        simulate(small, reqs, "avengers_pro", policy_kwargs={"table": partial})


def test_same_seed_same_frames(small, table) -> None:
    def run(name: str, **kw):
        reqs = routebalance_workload(3.0, n=150)
        return simulate(small, reqs, name, seed=3, central_queue_tick=0.01,
                        policy_kwargs={"dispatcher": "random", "scoring_ms": 431, "scoring": "serial", **kw}).requests
    for name, kw in (("best_route", {}), ("avengers_pro", {"table": table})):
        a, b = run(name, **kw), run(name, **kw)
        assert a.equals(b), name


def test_shipped_configs_build() -> None:
    for name in ("best_route", "avengers_pro"):
        doc = yaml.safe_load((CONF / f"{name}.yaml").read_text())
        assert doc["name"] == name
        kw = dict(doc["kwargs"])
        if name == "avengers_pro":
            kw["train"] = {**kw["train"], "n": 300}
        router = make_router(name, **kw)
        assert router.scoring_s == 0.0 and router.dispatcher == "round_robin"


@pytest.mark.parametrize("name", ["best_route", "avengers_pro"])
def test_same_decisions_on_a_state_view(small, table, name: str) -> None:
    """Only the public state is used: a twin fed StateView(view.state()) decides the same, scoring included."""
    from llmsim.routing import Router
    from llmsim.state.state_view import StateView

    kw = {"dispatcher": "shortest_queue", "scoring_ms": 431, "scoring": "serial"}
    if name == "avengers_pro":
        kw["table"] = table
    a, b = make_router(name, seed=2, **kw), make_router(name, seed=2, **kw)

    class Twin(Router):
        name = "twin_route_baselines"

        def route(self, req, view) -> int:
            want = a.route(req, view)
            assert b.route(req, StateView(view.state())) == want, req.id
            return want

    res = simulate(small, routebalance_workload(3.0, n=120), Twin(), central_queue_tick=0.01)
    assert len(res.requests) == 120 and a.stats == b.stats
