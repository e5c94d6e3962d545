"""Nothing may run forever: every input that used to hang ends within seconds, with the right counts or
one clear error. Each test has a hard time limit, so a regression fails fast instead of hanging CI.

Conservation is checked everywhere a run finishes: every request is either finished or dropped,
exactly once.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.cluster import Cluster
from llmsim.errors import ConfigError, LLMSimError
from llmsim.event_loop import ROUTE
from llmsim.request import Request
from llmsim.routing import DEFER, DROP, WAIT, Router
from llmsim.testing import LinearProfile, requests
from llmsim.workload import build_workload


def insts(n: int = 1) -> list[InstanceConfig]:
    return [InstanceConfig(profile=LinearProfile(), engine=EngineConfig(max_model_len=400)) for _ in range(n)]


def assert_conserved(res, ids) -> None:
    got = sorted([*res.requests["id"], *res.dropped["id"]])
    assert got == sorted(ids), "every request finished or dropped, exactly once"
    assert res.summary["completed"] + res.summary["dropped"] == len(ids)


class AlwaysWait(Router):
    name = "always_wait"

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self.calls = 0

    def route(self, req, view):
        self.calls += 1
        return WAIT


class Returns(Router):
    """Answers a fixed value for every request."""

    name = "returns_fixed"

    def __init__(self, value) -> None:
        super().__init__(0)
        self.value = value

    def route(self, req, view):
        return self.value


# ---------------------------------------------------------------------------------------------- WAIT routers
@pytest.mark.timeout(20)
@pytest.mark.parametrize("tick", [None, 0.1, 0.02])
def test_always_wait_router_ends_and_counts_never_routed(tick):
    router = AlwaysWait()
    reqs = requests([(0.1 * i, 20, 5) for i in range(30)])
    res = simulate(insts(2), reqs, router, central_queue_tick=tick)
    assert len(res.requests) == 0
    assert res.summary["dropped_by_reason"] == {"never_routed": 30}
    assert_conserved(res, range(30))
    end = res.dropped["time"].max()
    if tick is None:
        assert router.calls == 30  # asked once, at arrival: nothing could ever retry them
        assert end <= 3.0  # the scrape after the last arrival
    else:
        # after the last arrival (2.9 s) the view settles within 2 metrics intervals, then 100 idle passes
        assert 2.9 + 100 * tick <= end <= 2.9 + 2 * 1.0 + 101 * tick
        assert 30 + 30 * 100 <= router.calls <= 30 * (1 + end / tick + 1)


@pytest.mark.timeout(20)
@pytest.mark.parametrize("tick", [None, 0.5])
def test_wait_on_idle_cluster_then_late_arrival_routes_everything(tick):
    """Early requests are held while the cluster idles; a very late arrival (1e9 s) is routed, its completion
    (or the woken tick) retries the queue, and everything finishes. The idle 1e9 s are skipped in one step."""

    class HoldEarly(Router):
        name = "hold_early"

        def route(self, req, view):
            return WAIT if view.now < 1000.0 else 0

    reqs = requests([(0.0, 20, 5), (0.3, 20, 5), (0.6, 20, 5), (1e9, 20, 5)])
    res = simulate(insts(1), reqs, HoldEarly(), central_queue_tick=tick, metrics_interval=0.01)
    assert_conserved(res, range(4))
    assert len(res.requests) == 4
    early = res.requests.set_index("id").loc[[0, 1, 2]]
    assert (early.routed_time >= 1e9).all()
    assert len(res.timeline) < 50  # not one row per 10 ms of the idle 1e9 s


@pytest.mark.timeout(20)
def test_wait_patience_counts_only_settled_passes():
    """With a stale view, a router waiting for an idle snapshot is not given up on while the snapshot
    still shows the old busy state: idle passes only count once the view has settled."""

    class WhenEmpty(Router):
        name = "when_empty"

        def route(self, req, view):
            return 0 if not any(view.queue_lengths()) else WAIT

    # request 0 keeps the engine busy until ~2.1 s; the snapshot at 1.0 and 2.0 shows it busy, at 3.0 idle
    reqs = requests([(0.0, 10, 190), (1.5, 10, 3)])
    cluster = Cluster(insts(1), WhenEmpty(), view_staleness=1.0, central_queue_tick=0.1, wait_patience=3)
    cluster.run(reqs)
    from llmsim.schema import SLO
    from llmsim.simulation.run import collect

    res = collect(cluster, SLO())
    assert_conserved(res, range(2))
    r1 = res.requests.set_index("id").loc[1]
    assert 3.0 < r1.routed_time < 3.2  # the first tick after the refresh that showed the idle cluster


@pytest.mark.timeout(20)
def test_deferred_without_a_driver_is_an_error_under_run():
    with pytest.raises(ConfigError, match=r"router 'returns_fixed' returned DEFER \(-3\) for request 0.*no outside"):
        simulate(insts(1), requests([(0.0, 10, 3)]), Returns(DEFER))


@pytest.mark.timeout(20)
@pytest.mark.parametrize("tick", [None, 0.05])
def test_deferred_requests_a_driver_leaves_are_never_routed(tick):
    """An outside driver (here: none taking decisions) steps the clock itself; the loop still ends and the
    deferred requests are counted, not lost."""
    cluster = Cluster(insts(1), Returns(DEFER), central_queue_tick=tick)
    cluster.start(requests([(0.0, 10, 3), (0.5, 10, 3)]))
    steps = 0
    while cluster.env._queue:
        cluster.env.step()
        steps += 1
        assert steps < 10_000
    cluster.finish()
    assert [d[4] for d in cluster.recorder.dropped] == ["never_routed", "never_routed"]


# ---------------------------------------------------------------------------------------------- bad router answers
@pytest.mark.timeout(20)
@pytest.mark.parametrize("value", [None, 1.0, np.float64(0.0), "0", 5, -7, True, [0]])
def test_bad_router_answers_are_config_errors_naming_router_and_value(value):
    with pytest.raises(ConfigError, match=r"router 'returns_fixed' returned .*request 0.*expected an int") as e:
        simulate(insts(2), requests([(0.0, 10, 3)]), Returns(value))
    assert repr(value) in str(e.value) and "\n" not in str(e.value)


@pytest.mark.timeout(20)
def test_numpy_integer_answers_are_accepted():
    res = simulate(insts(2), requests([(0.0, 10, 3), (0.1, 10, 3)]), Returns(np.int64(1)))
    assert list(res.requests["instance"]) == [1, 1]


# ---------------------------------------------------------------------------------------------- sparse arrivals
@pytest.mark.timeout(20)
@pytest.mark.parametrize("kw", [{}, {"central_queue_tick": 0.5, "view_staleness": 2.0, "metrics_interval": 0.1}])
def test_sparse_synthetic_arrivals_cost_events_not_simulated_time(kw):
    """Poisson at 1e-9 req/s: arrivals ~1e9 s apart. Every chain skips the idle stretches in one step."""
    wl = build_workload({"kind": "synthetic", "arrival": {"process": "poisson", "rate": 1e-9},
                         "prompt": {"dist": "fixed", "value": 50}, "output": {"dist": "fixed", "value": 20},
                         "num_requests": 6}, seed=0)
    res = simulate(insts(1), wl, "round_robin", **kw)
    assert_conserved(res, range(6))
    assert len(res.requests) == 6 and res.requests["arrival"].min() > 1e8
    assert len(res.timeline) <= 6 * 8  # a few rows per request, none per idle interval


@pytest.mark.timeout(20)
@pytest.mark.parametrize(("router", "reason"), [(DROP, "router"), (WAIT, "never_routed")])
def test_arrivals_far_apart_end_in_seconds(router, reason):
    """Arrivals ~1e11 s apart: the scrape, view-refresh and tick chains jump from event to event."""
    wl = build_workload({"kind": "synthetic", "arrival": {"process": "poisson", "rate": 1e-11},
                         "prompt": {"dist": "fixed", "value": 50}, "output": {"dist": "fixed", "value": 20},
                         "num_requests": 5}, seed=0)
    res = simulate(insts(1), wl, Returns(router), central_queue_tick=0.5, view_staleness=2.0)
    assert_conserved(res, range(5))
    assert res.summary["dropped_by_reason"] == {reason: 5}
    assert res.dropped["arrival"].min() > 1e9
    assert len(res.timeline) <= 1 + 5 * 2


@pytest.mark.timeout(20)
def test_arrival_past_the_horizon_is_a_clear_error():
    """Arrivals near 1e300 s, where float64 time cannot resolve a step: one error naming the request."""
    wl = build_workload({"kind": "synthetic", "arrival": {"process": "poisson", "rate": 1e-300},
                         "prompt": {"dist": "fixed", "value": 50}, "output": {"dist": "fixed", "value": 20},
                         "num_requests": 5}, seed=0)
    with pytest.raises(ConfigError, match=r"request 0: arrival .* past the simulated horizon"):
        simulate(insts(1), wl, "round_robin")


@pytest.mark.timeout(20)
def test_idle_gap_length_does_not_change_the_rows_after_it():
    """Scrapes stay on the grid k * interval: shifting the second burst by a whole number of intervals
    shifts its rows and nothing else; the idle stretch has one row at its start."""

    def run(gap):
        reqs = requests([(0.0, 30, 20), (0.05, 30, 20), (gap, 30, 20), (gap + 0.05, 30, 20)])
        return simulate(insts(1), reqs, "round_robin", metrics_interval=0.25).timeline

    a, b = run(1000.0), run(5000.0)
    assert len(a) == len(b)
    after_a = a[a.time >= 1000.0].reset_index(drop=True)
    after_b = b[b.time >= 5000.0].reset_index(drop=True)
    assert len(after_a) >= 2
    assert (after_b.time - after_a.time == 4000.0).all()
    assert after_a.drop(columns="time").equals(after_b.drop(columns="time"))
    k = a.time / 0.25
    assert (k == np.round(k)).all()  # every row on the grid
    idle_rows = a[(a.time > 1.0) & (a.time < 1000.0)]
    assert len(idle_rows) == 0


@pytest.mark.timeout(20)
def test_throughput_reads_zero_after_an_idle_interval():
    seen = []

    class Spy(Router):
        name = "spy"

        def route(self, req, view):
            seen.append((req.id, view.throughput()))
            return 0

    simulate(insts(1), requests([(0.0, 10, 200), (0.5, 10, 3), (500.0, 10, 3)]), Spy(), metrics_interval=1.0)
    assert seen[2] == (2, [0.0])
    assert seen[1] == (1, [0.0])  # no scrape interval completed yet at 0.5 s


# ---------------------------------------------------------------------------------------------- request checks
BAD_REQUESTS = [
    (dict(prompt_tokens=-3), r"request 17: prompt_tokens must be an integer in \[1, 100000000\], got -3"),
    (dict(prompt_tokens=0), r"request 17: prompt_tokens must be an integer in \[1, 100000000\], got 0"),
    (dict(output_tokens=0), r"request 17: output_tokens must be an integer in \[1, 100000000\], got 0"),
    (dict(prompt_tokens=float("nan")), r"request 17: prompt_tokens must be an integer .* got nan"),
    (dict(prompt_tokens=1e30), r"request 17: prompt_tokens must be an integer .* got 1e\+30"),
    (dict(prompt_tokens=10**30), r"request 17: prompt_tokens must be an integer .* got 10{30}"),
    (dict(output_tokens=12.0), r"request 17: output_tokens must be an integer .* got 12\.0"),
    (dict(prompt_tokens="12"), r"request 17: prompt_tokens must be an integer .* got '12'"),
    (dict(arrival=float("nan")), r"request 17: arrival must be a finite number of seconds, got nan"),
    (dict(arrival=math.inf), r"request 17: arrival must be a finite number of seconds, got inf"),
    (dict(arrival=-1.0), r"request 17: arrival must be >= 0\.0"),
    (dict(arrival=0.1), r"workload is not sorted by arrival: request 17 arrives at 0\.1 after a request at 0\.5"),
    (dict(id=1.5), r"request 1\.5: id must be an integer, got float"),
]


@pytest.mark.timeout(20)
@pytest.mark.parametrize(("bad", "message"), BAD_REQUESTS)
def test_bad_requests_are_rejected_naming_request_and_field(bad, message):
    reqs = requests([(0.0, 10, 3), (0.5, 10, 3)])
    fields = {"id": 17, "arrival": 1.0, "prompt_tokens": 10, "output_tokens": 3, **bad}
    r = Request(fields["id"], fields["arrival"], fields["prompt_tokens"], fields["output_tokens"])
    where = 0 if bad.get("arrival", 1.0) < 0 else 2
    reqs.insert(where, r)
    with pytest.raises(ConfigError, match=message) as e:
        simulate(insts(1), reqs, "round_robin", on_unservable="drop")
    assert "\n" not in str(e.value)


@pytest.mark.timeout(20)
def test_a_workload_yielding_non_requests_is_named():
    with pytest.raises(ConfigError, match=r"workload yielded tuple \(0\.0, 10, 3\); expected an llmsim.request"):
        simulate(insts(1), [(0.0, 10, 3)], "round_robin")


@pytest.mark.timeout(20)
def test_numpy_scalars_in_requests_are_accepted_and_converted():
    r = Request(np.int64(0), np.float64(0.5), np.int32(10), np.int64(3))
    res = simulate(insts(1), [r, Request(1, 1, 10, 3)], "round_robin")
    assert_conserved(res, range(2))
    assert type(r.prompt_tokens) is int and type(r.arrival) is float and type(r.id) is int
    assert res.requests["arrival"].tolist() == [0.5, 1.0]


# ---------------------------------------------------------------------------------------------- config values
@pytest.mark.timeout(20)
@pytest.mark.parametrize(("key", "value"), [
    ("central_queue_tick", 0), ("central_queue_tick", -1), ("central_queue_tick", math.nan),
    ("central_queue_tick", math.inf), ("metrics_interval", 0), ("metrics_interval", -1.0),
    ("metrics_interval", math.nan), ("metrics_interval", math.inf), ("view_staleness", -0.5),
    ("view_staleness", math.nan), ("view_staleness", math.inf), ("colocation_interference", math.nan),
])
def test_bad_sim_timings_name_the_sim_key(key, value):
    with pytest.raises(ConfigError, match=rf"sim\.{key}\b.*{value!r}".replace("(", r"\(")) as e:
        Cluster(insts(1), AlwaysWait(), **{key: value})
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=rf"sim\.{key}\b"):
        simulate(insts(1), requests([(0.0, 10, 3)]), AlwaysWait(), **{key: value})


@pytest.mark.timeout(20)
def test_unservable_hint_names_the_sim_key():
    with pytest.raises(ConfigError, match=r"request 0 .*set sim\.on_unservable=drop"):
        simulate(insts(1), requests([(0.0, 500, 3)]), "round_robin")


# ---------------------------------------------------------------------------------------------- progress guard
@pytest.mark.timeout(20)
def test_progress_guard_names_what_loops():
    cluster = Cluster(insts(1), Returns(0), max_events_per_instant=2000)

    def spin_forever() -> None:
        cluster.env.call_at(cluster.env.now, ROUTE, spin_forever)

    cluster.env.call_at(0.25, ROUTE, spin_forever)
    with pytest.raises(LLMSimError, match=r"stalled: 2,000 events ran at t=0\.25 s.*spin_forever in phase ROUTE"):
        cluster.run(requests([(0.0, 10, 3), (1.0, 10, 3)]))


@pytest.mark.timeout(20)
def test_progress_guard_allows_large_same_instant_bursts():
    """Thousands of arrivals at one instant are progress, not a loop (the guard is far above them)."""
    reqs = requests([(0.0, 10, 2)] * 3000)
    res = simulate(insts(4), reqs, "jsq")
    assert_conserved(res, range(3000))
    assert len(res.requests) == 3000


# ---------------------------------------------------------------------------------------------- mixed outcomes
@pytest.mark.timeout(20)
def test_conservation_with_wait_drop_and_never_routed():
    class Mixed(Router):
        name = "mixed"

        def route(self, req, view):
            if req.id % 3 == 0:
                return DROP
            if req.id % 3 == 1:
                return WAIT if req.id > 20 else 0
            return 1

    reqs = requests([(0.05 * i, 20, 4) for i in range(30)])
    res = simulate(insts(2), reqs, Mixed(), central_queue_tick=0.2)
    assert_conserved(res, range(30))
    assert res.summary["dropped_by_reason"] == {"router": 10, "never_routed": 3}


@pytest.mark.timeout(20)
def test_never_routed_time_is_the_same_with_and_without_the_fast_path():
    """The run's end is when the final idle state was recorded, not the time of a superseded engine event the
    fast path leaves in the queue (co-located engines re-plan their runs when a mate goes idle)."""

    class HoldFirst(Router):
        name = "hold_first"

        def route(self, req, view):
            return WAIT if req.id == 0 else req.id % 3

    def run(fast):
        rng = np.random.default_rng(0)
        t = np.round(np.cumsum(rng.exponential(0.05, 8)), 3)
        reqs = [Request(i, float(t[i]), int(rng.integers(5, 40)), int(rng.integers(2, 80))) for i in range(8)]
        cluster = Cluster([InstanceConfig(profile=LinearProfile(), device="g0",
                                          engine=EngineConfig(fast_path=fast, gpu_memory_utilization=0.3))
                           for _ in range(3)], HoldFirst(), metrics_interval=0.1, colocation_interference=2.5)
        cluster.run(reqs)
        return cluster

    fast, step = run(True), run(False)
    assert fast.env.now > step.env.now  # the fast path did leave a later, superseded event (the test is not vacuous)
    assert fast.recorder.dropped == step.recorder.dropped
    (rid, _, _, _, reason, when, _), = fast.recorder.dropped
    assert (rid, reason) == (0, "never_routed")
    assert when == fast.end_time() == fast.clock.last_scrape
