"""Multi-model instances (llmsim.engine.model_host): model swaps take the computed time, the KV cache is rebuilt for the
loaded model, a host-memory cache makes swaps warm, prefetch warms a model in the background, requests are
served in arrival order per instance, and random multi-model runs conserve tokens and memory and never hang."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsim import InstanceConfig
from llmsim.cluster import Cluster
from llmsim.cluster.config import instances_from_config
from llmsim.engine.kv import build_kv_cache
from llmsim.errors import ConfigError, LLMSimError
from llmsim.event_loop import ROUTE
from llmsim.perf.profile import load_profile
from llmsim.request import Request
from llmsim.routing import Router, make_router
from llmsim.schema import SLO
from llmsim.simulation.run import collect, simulate
from tests.helpers import examples
from tests.routing.test_instance_model import LONG

A, B = "mistral-7b", "vicuna-13b"
GPU = "a100-80gb"
STORAGE = 2.0  # GB/s


def _inst(cache_gb: float = 0.0, overhead: float = 0.0) -> InstanceConfig:
    return InstanceConfig(model=A, gpu=GPU, models=(B,), host_cache_gb=cache_gb, storage_gbps=STORAGE,
                          swap_overhead_s=overhead)


def _copy_s(model: str) -> float:
    p = load_profile(model, GPU)
    return p.model.weight_bytes / p.tp / p.gpu.host_link_bw


def _cold_s(model: str) -> float:
    return load_profile(model, GPU).model.weight_bytes / (STORAGE * 1e9) + _copy_s(model)


def test_a_cold_swap_takes_storage_read_plus_host_copy_and_rebuilds_the_kv_cache() -> None:
    c = Cluster([_inst(overhead=0.5)], make_router("round_robin"))
    before = c.view.state().instances[0]
    assert before.model == A
    c.run([Request(0, 0.0, 100, 10, model=B)])
    r = c.recorder.requests_frame().iloc[0]
    assert r["first_scheduled"] == pytest.approx(0.5 + _cold_s(B), rel=1e-12)
    after = c.view.state().instances[0]
    assert after.model == B
    want = build_kv_cache("x", load_profile(B, GPU), c.instances[0].config).total
    assert after.kv_blocks_total == want < before.kv_blocks_total  # a bigger model leaves less room for KV
    assert c.model_swap_stats == {"model_swaps": 1, "warm_swaps": 0, "swap_seconds": pytest.approx(0.5 + _cold_s(B))}


def test_the_host_cache_makes_the_swap_back_warm_and_without_it_every_swap_is_cold() -> None:
    reqs = [Request(0, 0.0, 100, 10, model=B), Request(1, 100.0, 100, 10, model=A)]
    warm = simulate([_inst(cache_gb=64.0)], reqs)
    cold = simulate([_inst(cache_gb=0.0)], reqs)
    t_warm = warm.requests.set_index("id").loc[1, "first_scheduled"]
    t_cold = cold.requests.set_index("id").loc[1, "first_scheduled"]
    assert t_warm == pytest.approx(100.0 + _copy_s(A), rel=1e-12)  # mistral was loaded through host memory
    assert t_cold == pytest.approx(100.0 + _cold_s(A), rel=1e-12)
    assert warm.summary["warm_swaps"] == 1 and cold.summary["warm_swaps"] == 0


def test_prefetch_warms_a_model_in_the_background_and_a_swap_during_it_waits_for_the_rest() -> None:
    done = Cluster([_inst(cache_gb=64.0)], make_router("round_robin"))
    done.env.call_at(0.0, ROUTE, lambda: done.view.prefetch_model(0, B))
    done.run([Request(0, 60.0, 100, 10, model=B)])
    assert done.recorder.requests_frame().iloc[0]["first_scheduled"] == pytest.approx(60.0 + _copy_s(B))
    midway = Cluster([_inst(cache_gb=64.0)], make_router("round_robin"))
    midway.env.call_at(0.0, ROUTE, lambda: midway.view.prefetch_model(0, B))
    midway.run([Request(0, 1.0, 100, 10, model=B)])
    read = load_profile(B, GPU).model.weight_bytes / (STORAGE * 1e9)
    assert midway.recorder.requests_frame().iloc[0]["first_scheduled"] == pytest.approx(read + _copy_s(B))
    no_room = Cluster([_inst(cache_gb=1.0)], make_router("round_robin"))
    assert no_room.prefetch_model(0, B) is False  # a 26 GB model does not fit a 1 GB cache
    with pytest.raises(ConfigError, match="cannot prefetch model 'llama-2-70b'"):
        no_room.prefetch_model(0, "llama-2-70b")


def test_an_instance_serves_models_in_arrival_order_swapping_each_time_the_model_changes() -> None:
    reqs = [Request(i, 0.01 * i, 50, 20, model=m) for i, m in enumerate([A, B, B, A, B])]
    res = simulate([_inst(cache_gb=64.0)], reqs)
    df = res.requests.sort_values("id")
    starts = df["first_scheduled"].tolist()
    # A runs first; B, B after one swap; A after another; B after a third
    assert starts[0] < starts[1] <= starts[2] < starts[3] < starts[4]
    assert res.summary["model_swaps"] == 3
    assert res.summary["completed"] == 5


def test_routing_follows_the_models_instances_can_load() -> None:
    insts = [InstanceConfig(model=A, gpu=GPU), InstanceConfig(model=B, gpu=GPU)]
    c = Cluster(insts, make_router("round_robin"))
    assert c.view.candidates(Request(0, 0.0, 10, 10, model=B)) == [1]
    assert c.view.candidates(Request(0, 0.0, 10, 10)) == [0, 1]
    for name in ("round_robin", "jsq", "random", "least_kv"):  # the heuristics pick among the candidates
        res = simulate(insts, [Request(i, 0.1 * i, 10, 10, model=B) for i in range(4)], name)
        assert res.summary["completed"] == 4 and set(res.requests["instance"]) == {1}, name

    class First(Router):
        name = "first"

        def route(self, req, view):
            return 0

    res = simulate(insts, [Request(i, 0.1 * i, 10, 10, model=B) for i in range(2)], First())
    assert res.summary["dropped_by_reason"] == {"routed_to_unfit_instance:model_not_served": 2}
    with pytest.raises(ConfigError, match="needs model 'llama-2-7b', which no instance serves"):
        simulate(insts, [Request(0, 0.0, 10, 10, model="llama-2-7b")])
    res = simulate(insts, [Request(0, 0.0, 10, 10, model="llama-2-7b")], on_unservable="drop")
    assert res.summary["dropped_by_reason"] == {"model_not_served": 1}


def test_limits_are_the_smallest_of_the_catalog() -> None:
    c = Cluster([_inst()], make_router("round_robin"))
    inst = c.instances[0]
    b_kv = build_kv_cache("x", load_profile(B, GPU), inst.config)
    assert inst.limits.max_prompt_blocks() == b_kv.total - b_kv.watermark
    assert inst.max_model_len == min(load_profile(m, GPU).model.max_position for m in (A, B))
    hosts = c.view.model_hosts()
    assert hosts[0].loaded == A and hosts[0].catalog == (A, B) and hosts[0].num_held == 0


def test_config_keys_build_multi_model_instances_and_bad_values_name_the_key() -> None:
    cfg = {"instances": [{"model": A, "gpu": GPU, "models": [B], "host_cache_gb": 64, "count": 2}]}
    insts = instances_from_config(cfg)
    assert [i.models for i in insts] == [(B,), (B,)] and insts[0].host_cache_gb == 64
    with pytest.raises(ConfigError, match=r"cluster.instances\[0\].storage_gbps"):
        instances_from_config({"instances": [{"model": A, "models": [B], "storage_gbps": 0}]})
    with pytest.raises(LLMSimError, match="unknown model .no-such-model."):
        Cluster([InstanceConfig(model=A, gpu=GPU, models=("no-such-model",))], make_router("round_robin"))


def _random_run(seed: int, models: list[str], ops: list[tuple[float, int]], cache: float,
                ) -> tuple[Cluster, list[Request]]:
    reqs = [Request(i, 0.3 * i, 30 + 17 * ((i * 7 + seed) % 11), 5 + (i * 13 + seed) % 40, model=m)
            for i, m in enumerate(models)]
    insts = [_inst(cache_gb=cache) for _ in range(2)]
    c = Cluster(insts, make_router("jsq"))
    for t, k in ops:
        c.env.call_at(t, ROUTE, lambda k=k: c.view.prefetch_model(k % 2, B if k % 3 else A))
    c.run(reqs)
    return c, reqs


@settings(max_examples=examples(25), deadline=None)
@given(seed=st.integers(0, 10**6), models=st.lists(st.sampled_from([A, B, None]), min_size=1, max_size=30),
       ops=st.lists(st.tuples(st.floats(0, 10), st.integers(0, 5)), max_size=4),
       cache=st.sampled_from([0.0, 30.0, 64.0]))
def test_random_multi_model_runs_conserve_tokens_and_memory(seed, models, ops, cache) -> None:
    c, reqs = _random_run(seed, models, ops, cache)
    res = collect(c, SLO())
    df = res.requests
    assert res.summary["completed"] == len(models) and len(res.dropped) == 0
    assert all(r.generated == r.target_tokens == r.output_tokens for r in reqs)
    for inst in c.instances:
        assert inst.kv.free == inst.kv_total and not (inst.running or inst.waiting or inst.swapped)
        assert not inst.host.held and inst.host.swapping_to is None
        assert sum(inst.host.cache.values()) <= inst.host.cache_capacity
    assert all(math.isfinite(x) for x in df["e2el_ms"])


def test_a_synthetic_workload_draws_each_requests_model_from_model_mix() -> None:
    from llmsim.workload.config import build_workload

    base = {"kind": "synthetic", "arrival": {"process": "poisson", "rate": 10}, "prompt": 100, "output": 10,
            "num_requests": 2000, "slo_class_mix": {"ls": 1, "batch": 3}}
    plain = list(build_workload(base, seed=1))
    mixed = list(build_workload({**base, "model_mix": {A: 3, B: 1}}, seed=1))
    assert all(r.model is None for r in plain)
    share = sum(r.model == B for r in mixed) / len(mixed)
    assert 0.22 < share < 0.28
    # adding a model mix leaves the other fields as they were
    assert [(r.arrival, r.slo_class) for r in plain] == [(r.arrival, r.slo_class) for r in mixed]
    with pytest.raises(ConfigError, match="model_mix"):
        build_workload({**base, "model_mix": {A: -1}}, seed=1)


def test_the_terminal_report_shows_model_swaps() -> None:
    from llmsim.metrics.report import outcome_rows

    res = simulate([_inst(cache_gb=64.0)], [Request(0, 0.0, 100, 10, model=B), Request(1, 50.0, 100, 10, model=A)])
    rows = dict(outcome_rows(res.summary))
    assert rows["Model swaps (warm)"] == "2 (1)"
    plain = dict(outcome_rows(simulate([InstanceConfig(model=A, gpu=GPU)], [Request(0, 0.0, 10, 10)]).summary))
    assert "Model swaps (warm)" not in plain


def test_a_config_json_model_is_in_its_catalog_by_its_name_as_loaded(tmp_path) -> None:
    """A multi-model instance whose loaded model is a config.json: its catalog names it as the instance does
    (the config's model name), so it builds and serves both models; two entries of one name and different specs
    are refused by key."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LONG))
    inst = InstanceConfig(model=str(path), gpu=GPU, models=(A,))
    reqs = [Request(i, 0.1 * i, 200, 20, model=("llama-3-8b", A)[i % 2]) for i in range(4)]
    res = simulate([inst], reqs, make_router("round_robin"))
    assert len(res.requests) == 4 and res.summary["model_swaps"] >= 1
    with pytest.raises(ConfigError, match=r"models: 'llama-3-8b' is model 'llama-3-8b', which the catalog already"):
        simulate([InstanceConfig(model=str(path), gpu=GPU, models=("llama-3-8b",))], reqs[:1],
                 make_router("round_robin"))
