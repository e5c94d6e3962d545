"""Heuristic routers pick what their names promise."""

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.cluster import Cluster
from llmsim.request import Request
from llmsim.routing import ROUTERS, make_router
from llmsim.testing import LinearProfile, requests


def cluster(n=3, **eng):
    insts = [InstanceConfig(profile=LinearProfile(), engine=EngineConfig(**eng)) for _ in range(n)]
    return Cluster(insts, make_router("round_robin"))


def test_registry_has_the_heuristics():
    assert {"random", "round_robin", "jsq", "least_kv", "least_work_left", "power_of_two"} <= set(ROUTERS)


def test_round_robin_cycles():
    res = simulate([InstanceConfig(profile=LinearProfile()) for _ in range(3)],
                   requests([(i * 0.01, 10, 2) for i in range(6)]), "round_robin")
    assert list(res.requests.instance) == [0, 1, 2, 0, 1, 2]


def test_jsq_least_kv_and_work_left_pick_the_emptiest_instance():
    c = cluster(3)
    c.start([])
    # put 3 requests on instance 0 and 1 on instance 2 (not started yet)
    for i, (inst, p, o) in enumerate([(0, 100, 10), (0, 100, 10), (0, 100, 10), (2, 400, 500)]):
        c.instances[inst].submit(Request(i, 0.0, p, o), 0.0, 0)
    new = Request(99, 0.0, 10, 10)
    assert make_router("jsq").route(new, c.view) == 1
    assert make_router("least_kv").route(new, c.view) == 1
    assert make_router("least_work_left").route(new, c.view) == 1
    c.instances[1].submit(Request(5, 0.0, 10, 10), 0.0, 0)
    # instance 1 has one short request, instance 2 one long one: work left prefers 1, jsq ties -> lowest (1)
    assert make_router("least_work_left").route(new, c.view) == 1
    assert make_router("jsq").route(new, c.view) == 1


def test_power_of_two_and_random_are_seeded():
    reqs = requests([(i * 0.01, 10, 5) for i in range(50)])
    insts = [InstanceConfig(profile=LinearProfile()) for _ in range(4)]
    for name in ("random", "power_of_two"):
        a = simulate(insts, reqs, name, seed=1).requests.instance.tolist()
        b = simulate(insts, requests([(i * 0.01, 10, 5) for i in range(50)]), name, seed=1).requests.instance.tolist()
        assert a == b and len(set(a)) > 1


def test_stale_view_lags_live_state():
    insts = [InstanceConfig(profile=LinearProfile()) for _ in range(2)]
    # with a 10 s stale view, JSQ sees empty queues for the whole burst and always picks instance 0
    res = simulate(insts, requests([(i * 0.001, 50, 50) for i in range(6)]), "jsq", view_staleness=10.0)
    assert set(res.requests.instance) == {0}
    live = simulate(insts, requests([(i * 0.001, 50, 50) for i in range(6)]), "jsq")
    assert set(live.requests.instance) == {0, 1}


def test_router_registry_is_the_project_registry():
    import pytest

    from llmsim.errors import ConfigError
    from llmsim.registry import Registry
    from llmsim.routing import Router, register_router

    assert isinstance(ROUTERS, Registry)

    @register_router
    class Second(Router):
        name = "test_second_instance"

        def route(self, req, view):
            return 1

    try:
        assert "test_second_instance" in ROUTERS and ROUTERS["test_second_instance"] is Second
        res = simulate([InstanceConfig(profile=LinearProfile()) for _ in range(2)],
                       requests([(0.0, 10, 2), (0.1, 10, 2)]), "test_second_instance")
        assert list(res.requests.instance) == [1, 1]
    finally:
        ROUTERS._entries.pop("test_second_instance")
    with pytest.raises(ConfigError,
                       match=r"^policy\.name: unknown routing policy 'fastest'; expected one of \[.*'jsq'"):
        make_router("fastest")
    with pytest.raises(ConfigError, match=r"policy\.kwargs: routing policy 'jsq' got unknown option\(s\) \['depth'\]"):
        make_router("jsq", depth=2)
