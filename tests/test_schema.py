"""The config schema rejects bad values with one line naming the key, the value and what was expected."""

from __future__ import annotations

import math

import pytest

from llmsim import EngineConfig
from llmsim.cluster.config import instances_from_config, instances_from_specs
from llmsim.errors import ConfigError
from llmsim.schema import SLO, RunConfig, SimConfig
from llmsim.simulation.from_config import run_from_config

BASE = {
    "cluster": {"instances": [{"model": "llama-2-7b", "gpu": "a100-80gb", "count": 2}]},
    "engine": {"policy": "vllm_v0"},
    "workload": {"kind": "synthetic", "arrival": {"process": "poisson", "rate": 4.0},
                 "prompt": {"dist": "fixed", "value": 64}, "output": {"dist": "fixed", "value": 8},
                 "num_requests": 20},
    "policy": {"name": "round_robin"},
    "output": {"save": False, "plots": False},
}


def _with(path: str, value) -> dict:
    import copy

    cfg = copy.deepcopy(BASE)
    node = cfg
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if k.isdigit() else node.setdefault(k, {})
    node[keys[-1]] = value
    return cfg


BAD = [
    ("sim.metrics_interval", math.nan, r"sim.metrics_interval: expected a finite number, got nan"),
    ("sim.view_staleness", math.nan, r"sim.view_staleness: expected a finite number"),
    ("sim.view_staleness", math.inf, r"sim.view_staleness: expected a finite number"),
    ("sim.central_queue_tick", 0, r"sim.central_queue_tick: expected a value > 0, got 0"),
    ("sim.central_queue_tick", -1, r"sim.central_queue_tick: expected a value > 0, got -1"),
    ("sim.on_unservable", "ignore", r"sim.on_unservable: expected one of error, drop, got 'ignore'"),
    ("engine.max_num_seqs", 1.5, r"engine.max_num_seqs: expected an integer, got 1.5"),
    ("engine.max_num_seqs", -4, r"engine.max_num_seqs: expected a value >= 1, got -4"),
    ("engine.block_size", 0, r"engine.block_size: expected a value >= 1, got 0"),
    ("engine.gpu_memory_utilization", 1.5, r"engine.gpu_memory_utilization: expected a value <= 1"),
    ("engine.fast_path", "maybe", r"engine.fast_path: expected true or false"),
    ("engine.max_model_len", 100000, r"llama-2-7b on a100-80gb\): engine.max_model_len: 100000 exceeds the "
                                     r"context length of .*\(4096 positions\)"),
    ("cluster.instances", [], r"^cluster.instances: expected a list of at least 1 item, got \[\]$"),
    ("cluster.instances.0.tp", 0, r"cluster.instances\[0\].tp: expected a value >= 1, got 0"),
    ("cluster.instances.0.count", -1, r"cluster.instances\[0\].count: expected a value >= 0"),
    ("cluster.instances.0.gpus", "a100", r"cluster.instances\[0\]: unknown key 'gpus' \(did you mean 'gpu'\?\)"),
    ("seed", "abc", r"seed: expected an integer, got 'abc'"),
    ("seed", True, r"seed: expected a number, not a boolean"),
    ("workload.num_requests", "two", r"workload.num_requests: expected an integer, got 'two'"),
    ("workload.prompt", {"dist": "fixed", "value": "abc"}, r"workload.prompt.value: expected an integer, got 'abc'"),
    ("workload.prompt", {"dist": "fixed", "value": 0}, r"workload.prompt.value: expected a value >= 1, got 0"),
    ("workload.arrival", {"process": "poisson", "rate": math.inf}, r"workload.arrival.rate: expected a finite"),
    ("workload.arrival", {"process": "poisson", "rate": 1e-300, "cv": 2},
     r"workload.arrival: unknown key 'cv'; allowed keys: \['process', 'rate'\]"),
    ("slo.ttft_ms", -5, r"slo.ttft_ms: expected a value > 0, got -5"),
    ("output.format", "xlsx", r"output.format: expected one of csv, parquet, got 'xlsx'"),
    ("policy.nme", "jsq", r"policy: unknown key 'nme' \(did you mean 'name'\?\)"),
    # a quoted number in a YAML / JSON config is a mistake, not read as the number (pydantic's lax mode did)
    ("engine.max_num_seqs", "5", r"engine.max_num_seqs: expected an integer, not a string \(write it unquoted\), "
                                 r"got '5'$"),
    ("workload.num_requests", "100", r"^workload.num_requests: expected an integer, not a string"),
    ("slo.ttft_ms", "500", r"^slo.ttft_ms: expected a number, not a string \(write it unquoted\), got '500'$"),
    ("sim.metrics_interval", "2.5", r"^sim.metrics_interval: expected a number, not a string"),
    ("workload.arrival", {"process": "poisson", "rate": "5"}, r"^workload.arrival.rate: expected a number, not a str"),
    ("slo.e2el_ms", "fast", r"^slo.e2el_ms: expected a number, got 'fast'$"),
    # a switch is true or false: pydantic's lax mode read 'yes', 'no', 1 and 0 as booleans without a word
    ("engine.fast_path", "yes", r"^engine.fast_path: expected true or false, got 'yes'$"),
    ("engine.fast_path", 0, r"^engine.fast_path: expected true or false, got 0$"),
    ("engine.enable_prefix_caching", "no", r"^engine.enable_prefix_caching: expected true or false, got 'no'$"),
    ("engine.enable_prefix_caching", 1, r"^engine.enable_prefix_caching: expected true or false, got 1$"),
    ("output.plots", "yes", r"^output.plots: expected true or false, got 'yes'$"),
    ("output.progress", 1, r"^output.progress: expected true or false, got 1$"),
    ("output.save", "no", r"^output.save: expected true or false, got 'no'$"),
]


@pytest.mark.parametrize("path,value,pattern", BAD, ids=[f"{p}={v!r}" for p, v, _ in BAD])
def test_bad_value_named(path: str, value, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern) as e:
        run_from_config(_with(path, value))
    assert "\n" not in str(e.value)


def test_csv_delimiter_must_be_one_character() -> None:
    cfg = _with("workload", {"kind": "csv", "path": "x.csv", "delimiter": "",
                             "columns": {"arrival": "t", "prompt": "p", "output": "o"}})
    with pytest.raises(ConfigError, match=r"workload.delimiter: expected a string of at least 1 character"):
        run_from_config(cfg)


def test_python_api_uses_the_same_schema() -> None:
    with pytest.raises(ConfigError, match=r"engine.max_num_seqs: expected an integer, got 1.5"):
        EngineConfig(max_num_seqs=1.5)
    with pytest.raises(ConfigError, match=r"engine.preemption: expected one of recompute, swap"):
        EngineConfig(preemption="swop")
    with pytest.raises(ConfigError, match=r"sim.metrics_interval: expected a finite number"):
        SimConfig(metrics_interval=float("nan"))
    with pytest.raises(ConfigError, match=r"slo.tpot_ms: expected a value > 0"):
        SLO(tpot_ms=0)
    with pytest.raises(ConfigError, match=r"instances\[1\].tp: expected a value >= 1, got 0"):
        instances_from_specs([{"model": "llama-2-7b"}, {"model": "llama-2-7b", "tp": 0}])


def test_defaults_round_trip() -> None:
    run = RunConfig.parse(BASE)
    assert run.sim.metrics_interval == 1.0 and run.seed == 0 and run.policy.name == "round_robin"
    e = EngineConfig()
    assert EngineConfig.parse(e.model_dump()) == e


def test_device_template_expands_per_replica() -> None:
    insts = instances_from_config({"instances": [{"model": "opt-125m", "gpu": "a100-80gb", "count": 3,
                                                  "device": "gpu{i}", "engine": {"gpu_memory_utilization": 0.3}}]})
    assert [i.device for i in insts] == ["gpu0", "gpu1", "gpu2"]
    same = instances_from_specs([{"model": "opt-125m", "count": 2, "device": "shared",
                                  "engine": {"gpu_memory_utilization": 0.3}}])
    assert [i.device for i in same] == ["shared", "shared"]


def test_batch_policy_defaults_come_from_the_policy() -> None:
    """vllm_v0_sjf prefills whole prompts like vllm_v0: its token budget covers the context, so a 3,000-token
    prompt is served (it used to get the chunked policy's 2,048 and be dropped as cannot_be_scheduled)."""
    e = EngineConfig(policy="vllm_v0_sjf").resolved(4096)
    assert e.max_num_batched_tokens == 4096 and e.watermark == 0.01
    c = EngineConfig(policy="chunked_sjf").resolved(4096)
    assert c.max_num_batched_tokens == 2048 and c.watermark == 0.0
    cfg = _with("engine", {"policy": "vllm_v0_sjf"})
    cfg["workload"]["prompt"] = {"dist": "fixed", "value": 3000}
    s = run_from_config(cfg).summary
    assert s["completed"] == 20 and s["dropped"] == 0


def test_a_bad_global_engine_key_is_named_as_written_not_per_instance() -> None:
    """The global ``engine`` group is merged into every instance's; its bad key is still ``engine.<key>``."""
    with pytest.raises(ConfigError) as e:
        instances_from_config(BASE["cluster"], {"fast_path": "yes"})
    assert str(e.value) == "engine.fast_path: expected true or false, got 'yes'"
    spec = {"instances": [{"model": "llama-2-7b", "gpu": "a100-80gb", "engine": {"save": 1}}]}
    with pytest.raises(ConfigError, match=r"^cluster.instances\[0\].engine: unknown key 'save'"):
        instances_from_config(spec, {"fast_path": False})
