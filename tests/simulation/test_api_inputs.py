"""Bad arguments to the Python API (``simulate``, ``Cluster``) as a notebook user passes them: one ConfigError
naming the argument, raised before any simulation runs (never a TypeError or AttributeError from deep inside)."""

from __future__ import annotations

import pytest

from llmsim import EngineConfig, InstanceConfig, Request, simulate
from llmsim.errors import ConfigError
from llmsim.workload import build_workload


def _reqs() -> list[Request]:
    return [Request(0, 0.0, 10, 5), Request(1, 0.1, 10, 5)]


@pytest.mark.parametrize("instances, needle", [
    ("llama-3-8b", "cluster.instances: expected a list of llmsim.InstanceConfig, got str"),
    (InstanceConfig("llama-3-8b", "h100"), "cluster.instances: expected a list of llmsim.InstanceConfig, got Inst"),
    (["llama-3-8b"], "cluster.instances[0]: expected an llmsim.InstanceConfig, got str"),
    ([InstanceConfig("llama-3-8b", "h100", tp=0)], "cluster.instances[0].tp: expected a value >= 1, got 0"),
    ([InstanceConfig("llama-3-8b", "h100", tp="2")], "cluster.instances[0].tp: expected an integer, got '2'"),
    ([InstanceConfig("llama-3-8b", "h100", engine={"policy": "chunked"})],
     "cluster.instances[0].engine: expected an llmsim.EngineConfig"),
    ([InstanceConfig("llama-3-8b", "h100", host_cache_gb=-1.0)], "cluster.instances[0].host_cache_gb"),
])
def test_bad_instances_name_the_instance_and_key(instances, needle) -> None:
    with pytest.raises(ConfigError) as e:
        simulate(instances, _reqs())
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kwargs, needle", [
    ({"seed": "a"}, "seed: expected an integer in [0, 2**63), got 'a'"),
    ({"seed": -1}, "seed: expected an integer in [0, 2**63), got -1"),
    ({"slo": {"ttft_ms": -5}}, "slo.ttft_ms: expected a value > 0, got -5"),
    ({"slo": 500}, "slo: expected a mapping of SLO keys"),
])
def test_bad_run_arguments_name_the_argument(kwargs, needle) -> None:
    with pytest.raises(ConfigError) as e:
        simulate([InstanceConfig("llama-3-8b", "h100")], _reqs(), **kwargs)
    assert needle in str(e.value)


def test_a_missing_workload_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"^workload: expected an iterable of llmsim.Request, got NoneType$"):
        simulate([InstanceConfig("llama-3-8b", "h100")], None)  # type: ignore[arg-type]


def test_valid_arguments_still_run_and_an_slo_mapping_is_read() -> None:
    inst = InstanceConfig("llama-3-8b", "h100", engine=EngineConfig(policy="chunked"))
    res = simulate((inst, inst), iter(_reqs()), "jsq", seed=3, slo={"ttft_ms": 1e6})
    assert res.summary["completed"] == 2 and res.summary["slo_attainment"] == 1.0


@pytest.mark.parametrize("hash_block", [0, -16, "16", 16.0, True])
def test_a_bad_hash_block_names_the_request_and_field(hash_block) -> None:
    reqs = [Request(i, 0.5 * i, 64, 5, hash_ids=tuple(range(10)), hash_block=hash_block) for i in range(2)]
    with pytest.raises(ConfigError) as e:
        simulate([InstanceConfig("llama-3-8b", "h100", engine=EngineConfig(policy="chunked"))], reqs)
    assert str(e.value) == f"request 0: hash_block must be an integer >= 1 (tokens per hash id), got {hash_block!r}"


@pytest.mark.parametrize("seed", ["a", None, 1.5, True, -1])
def test_build_workload_refuses_a_seed_it_would_cut_or_crash_on(seed) -> None:
    cfg = {"kind": "synthetic", "arrival": {"process": "poisson", "rate": 1}, "lengths": "azure_conv_like",
           "num_requests": 3}
    with pytest.raises(ConfigError) as e:
        build_workload(cfg, seed=seed)
    assert str(e.value) == f"seed: expected an integer in [0, 2**63), got {seed!r}"


@pytest.mark.parametrize("ids, dup, position", [
    ([0, 0, 1], 0, 2),  # the same id twice in a row
    ([0, 1, 2, 1], 1, 4),  # an id of the consecutive run, again
    ([7, 3, 9, 3], 3, 4),  # ids in no order
    ([5, 9, 6, 7, 8, 9], 9, 6),  # a run that grows into an id seen out of order
])
def test_a_duplicate_request_id_is_refused_naming_it(ids, dup, position) -> None:
    reqs = [Request(i, 0.1 * k, 10, 5) for k, i in enumerate(ids)]
    with pytest.raises(ConfigError) as e:
        simulate([InstanceConfig("llama-3-8b", "h100")], reqs)
    msg = str(e.value)
    assert msg.startswith(f"request {dup}: duplicate id (arrival #{position} ") and "\n" not in msg


def test_the_same_request_object_twice_is_a_duplicate_and_distinct_odd_ids_run() -> None:
    r = Request(4, 0.0, 10, 5)
    with pytest.raises(ConfigError, match="request 4: duplicate id"):
        simulate([InstanceConfig("llama-3-8b", "h100")], [r, r])
    ids = [10, -3, 11, 4, 12, 2**40]
    res = simulate([InstanceConfig("llama-3-8b", "h100")], [Request(i, 0.1 * k, 10, 5) for k, i in enumerate(ids)])
    assert sorted(res.requests["id"]) == sorted(ids)


def test_an_empty_workload_gives_a_defined_empty_summary_and_says_so() -> None:
    res = simulate([InstanceConfig("llama-3-8b", "h100")], [])
    s = res.summary
    assert (s["num_requests"], s["completed"], s["dropped"], s["duration"]) == (0, 0, 0, 0.0)
    assert [s[k] for k in ("request_throughput", "output_throughput", "total_token_throughput")] == [0.0, 0.0, 0.0]
    assert [n for n in res.notes if n.startswith("no request to simulate: the workload yielded none")]
    assert len(res.requests) == 0 and len(res.dropped) == 0


def test_simulate_reports_the_trace_rows_a_built_workload_skipped(tmp_path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("t,p,o\n0,10,5\n1,10,0\n2,10,5\n")
    cols = {"arrival": "t", "prompt": "p", "output": "o"}
    wl = build_workload({"kind": "csv", "path": str(path), "columns": cols}, 0)
    res = simulate([InstanceConfig("llama-3-8b", "h100")], wl)
    assert res.summary["completed"] == 2 and res.summary["workload_skipped"] == {"zero_output_tokens": 1}
    assert "workload rows skipped (counted, not simulated): {'zero_output_tokens': 1}" in res.notes
