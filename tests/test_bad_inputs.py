"""The bad-input corpus: one case per class of bad input found by trying llmsim as a new user would.

Command-line cases run the real entry point in a fresh process and assert: the exit code, no traceback, one
line on stderr naming the key / file / row at fault, and that it ends in seconds (the subprocess timeout).
Python-API cases assert the exception type and message under a pytest timeout, so a hang fails fast.
"""

from __future__ import annotations

import gzip
import json
import lzma
import math
import subprocess
import sys
from pathlib import Path

import pytest

from llmsim import InstanceConfig, Request, simulate
from llmsim.errors import ConfigError, LLMSimError

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZURE_OK = "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n"


def _cli(args: list[str], tmp: Path, module: str = "llmsim", timeout: float = 60) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", module, *args]
    if module == "llmsim":
        cmd += ["output.plots=false", f"hydra.run.dir={tmp}/run"]
    return subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=timeout)


def _assert_clear(p: subprocess.CompletedProcess, *needles: str, rc: int = 2) -> None:
    err = p.stderr
    assert p.returncode == rc, (p.returncode, err[-2000:])
    assert "Traceback" not in err, err[-3000:]
    for n in needles:
        assert n in err, (n, err[-2000:])


# ------------------------------------------------------------------------------------------ config values
CONFIG_CASES = [
    (["seed=abc"], "seed: expected an integer, got 'abc'"),
    (["workload.num_requests=two"], "workload.num_requests: expected an integer"),
    (["engine.max_num_seqs=1.5"], "engine.max_num_seqs: expected an integer, got 1.5"),
    (["sim.metrics_interval=nan"], "sim.metrics_interval: expected a finite number"),
    (["sim.view_staleness=nan"], "sim.view_staleness: expected a finite number"),
    (["sim.central_queue_tick=-1"], "sim.central_queue_tick: expected a value > 0"),
    (["sim.central_queue_tick=0"], "sim.central_queue_tick: expected a value > 0"),
    (["engine.max_model_len=100000"], "engine.max_model_len: 100000 exceeds the context length"),
    (["cluster.instances=[{model:llama-2-7b,gpu:a100-80gb,tp:0}]"], "cluster.instances[0].tp: expected a value >= 1"),
    (["workload.prompt=abc"], "workload.prompt: expected an integer, got 'abc'"),
    (["workload.prompt=0"], "workload.prompt: expected a value >= 1"),
    (["~workload.prompt", "+workload.prompt={dist:fixed,value:abc}"],
     "workload.prompt.value: expected an integer, got 'abc'"),
    (["+foo=1"], "unknown key 'foo'"),
    (["+cluster.instances.0.gpus=a100"], "unknown key 'gpus'"),
    (["engine.policy=vllm_v1"], "engine.policy: unknown value 'vllm_v1'"),
    (["engine.preemption=never"], "engine.preemption: expected one of recompute, swap"),
]


@pytest.mark.parametrize("args,needle", CONFIG_CASES, ids=[" ".join(a) for a, _ in CONFIG_CASES])
def test_cli_config_value(args, needle, tmp_path) -> None:
    _assert_clear(_cli(args, tmp_path), needle)


def test_cli_hydra_override_of_missing_key(tmp_path) -> None:
    """Overriding a key that does not exist is refused like any bad input (exit 2), naming it; no traceback."""
    _assert_clear(_cli(["engine.polcy=x"], tmp_path), "engine.polcy")


# ------------------------------------------------------------------------------------------ runs that hung
@pytest.mark.timeout(60)
def test_cli_tiny_rate_ends_fast(tmp_path) -> None:
    """Arrivals ~12 days apart: the run's cost follows its events, not the simulated span (1.4 years)."""
    p = _cli(["workload.rate=1e-6", "workload.num_requests=40"], tmp_path, timeout=50)
    assert p.returncode == 0, p.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["completed"] == 40
    timeline = (tmp_path / "run" / "timeline.csv").read_text().splitlines()
    assert len(timeline) < 40 * 4 * 200  # rows per busy stretch, not one per idle second of 4e7 s


@pytest.mark.timeout(60)
def test_cli_absurd_rate_is_a_clear_error(tmp_path) -> None:
    """Arrivals at t ~ 1e300 s, where a step time is lost in floating-point rounding: one clear line."""
    _assert_clear(_cli(["workload.rate=1e-300", "workload.num_requests=5"], tmp_path, timeout=50), "request 0")


@pytest.mark.timeout(30)
def test_api_always_wait_router_ends_with_never_routed() -> None:
    from llmsim.routing import WAIT, Router

    class AlwaysWait(Router):
        name = "always_wait"

        def route(self, req, view):
            return WAIT

    reqs = [Request(i, 0.1 * i, 32, 4) for i in range(10)]
    for tick in (None, 0.05):
        res = simulate([InstanceConfig()], reqs, AlwaysWait(), central_queue_tick=tick)
        assert res.summary["completed"] == 0
        assert res.summary["dropped_by_reason"] == {"never_routed": 10}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("field,value", [("prompt_tokens", -3), ("prompt_tokens", math.nan),
                                         ("prompt_tokens", 10**30), ("prompt_tokens", 0),
                                         ("output_tokens", 0), ("arrival", math.nan)])
def test_api_bad_request_fields(field, value) -> None:
    r = Request(7, 0.0, 32, 4)
    setattr(r, field, value)
    with pytest.raises(ConfigError, match=rf"request 7: {field}"):
        simulate([InstanceConfig()], [r], "round_robin")


@pytest.mark.timeout(30)
def test_env_defer_action_rejected() -> None:
    import gymnasium as gym

    import llmsim.envs  # noqa: F401
    from llmsim.envs.routing_env import InvalidAction

    env = gym.make("llmsim/Routing-v0", num_requests=5)
    env.reset(seed=0)
    with pytest.raises(InvalidAction):
        env.step(-3)
    for tick in (0, -1):
        with pytest.raises(ConfigError, match="env.tick"):
            gym.make("llmsim/WorkloadRouter-v0", tick=tick)


# ------------------------------------------------------------------------------------------ trace files
def _azure_cases(tmp: Path) -> list[tuple[str, Path, list[str]]]:
    d = tmp / "traces"
    d.mkdir()
    cases = []

    def add(name: str, content: bytes | str, needles: list[str], suffix: str = ".csv") -> None:
        f = d / f"{name}{suffix}"
        f.write_bytes(content if isinstance(content, bytes) else content.encode())
        cases.append((name, f, [f.name, *needles]))

    add("empty", "", ["empty"])
    add("header_only", AZURE_HEADER, ["no request"])
    add("renamed_column", "TIMESTAMP,Context,GeneratedTokens\n2023-11-16 18:15:46,374,44\n", ["ContextTokens"])
    add("nan_prompt", AZURE_HEADER + "2023-11-16 18:15:46,nan,44\n", ["line 2", "ContextTokens"])
    add("inf_output", AZURE_HEADER + "2023-11-16 18:15:46,374,Infinity\n", ["line 2", "GeneratedTokens"])
    add("negative", AZURE_HEADER + "2023-11-16 18:15:46,-374,44\n", ["line 2", "ContextTokens"])
    add("non_numeric", AZURE_HEADER + "2023-11-16 18:15:46,lots,44\n", ["line 2", "ContextTokens"])
    add("absurd", AZURE_HEADER + "2023-11-16 18:15:46,1e30,44\n", ["line 2", "ContextTokens"])
    add("bad_time", AZURE_HEADER + "yesterday,374,44\n", ["line 2", "TIMESTAMP"])
    add("binary", b"\x00\xff\xfe\x10garbage\x81\x82", [])
    add("truncated_gz", gzip.compress((AZURE_HEADER + AZURE_OK).encode())[:20], [], ".csv.gz")
    add("bad_xz", lzma.compress((AZURE_HEADER + AZURE_OK).encode())[:-8], [], ".csv.xz")
    return cases


def test_cli_bad_azure_traces(tmp_path) -> None:
    for name, f, needles in _azure_cases(tmp_path):
        p = _cli(["workload=azure_conv", f"workload.path={f}"], tmp_path)
        try:
            _assert_clear(p, *needles)
        except AssertionError as e:
            raise AssertionError(f"case {name}: {e}") from None


def test_cli_trace_directory_and_missing_file(tmp_path) -> None:
    _assert_clear(_cli(["workload=azure_conv", f"workload.path={tmp_path}"], tmp_path), str(tmp_path))
    _assert_clear(_cli(["workload=azure_conv", f"workload.path={tmp_path}/nope.csv"], tmp_path), "nope.csv")


def test_cli_compressed_trace_reads(tmp_path) -> None:
    for suffix, pack in ((".csv.gz", gzip.compress), (".csv.xz", lzma.compress)):
        f = tmp_path / f"ok{suffix}"
        f.write_bytes(pack((AZURE_HEADER + AZURE_OK).encode()))
        p = _cli(["workload=azure_conv", f"workload.path={f}"], tmp_path)
        assert p.returncode == 0, p.stderr[-2000:]
        assert json.loads((tmp_path / "run" / "summary.json").read_text())["completed"] == 2


def test_cli_bad_mooncake_rows(tmp_path) -> None:
    good = {"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": [1]}
    for name, line, needle in [
        ("not_json", "{timestamp: 0,", "line 2"),
        ("missing", json.dumps({"timestamp": 5, "input_length": 100}), "output_length"),
        ("nan", '{"timestamp": 5, "input_length": NaN, "output_length": 3}', "input_length"),
        ("negative", json.dumps({**good, "timestamp": 5, "output_length": -1}), "output_length"),
    ]:
        f = tmp_path / f"{name}.jsonl"
        f.write_text(json.dumps(good) + "\n" + line + "\n")
        p = _cli(["workload=mooncake", f"workload.path={f}"], tmp_path)
        try:
            _assert_clear(p, f.name, needle)
        except AssertionError as e:
            raise AssertionError(f"case {name}: {e}") from None


# ------------------------------------------------------------------------------------------ replay inputs
@pytest.mark.parametrize("name,content,needle", [
    ("empty", "", "empty"),
    ("blank", "\n\n", "no request"),
    ("not_json", "{oops\n", "line 1"),
    ("nan", '{"input_toks": NaN, "output_toks": 3, "arrival_time": 0}\n', "line 1"),
])
def test_replay_bad_jsonl(name, content, needle, tmp_path) -> None:
    f = tmp_path / f"{name}.jsonl"
    f.write_text(content)
    p = _cli(["replay", "--requests", str(f), "--model", "llama-3.1-8b", "--gpu", "rtx-pro-6000"], tmp_path,
             module="llmsim.profiles")
    _assert_clear(p, f.name, needle)


# ------------------------------------------------------------------------------------------ profile files
@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d.pop("memory"), "memory"),
    (lambda d: d["decode_attention"].__setitem__("per_seq", -1e-6), "decode_attention.per_seq"),
    (lambda d: d["decode_attention"].__setitem__("per_seq", float("nan")), "decode_attention.per_seq"),
    (lambda d: d["decode_attention"].__setitem__("per_seq", "fast"), "decode_attention.per_seq"),
])
def test_bad_profile_yaml(mutate, needle, tmp_path) -> None:
    import yaml

    from llmsim.perf.profile_table import load_profile_file
    from tests.helpers import REPO

    doc = yaml.safe_load((REPO / "profiles" / "data" / "a100-80gb" / "llama-2-7b.yaml").read_text())
    mutate(doc)
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(doc))
    with pytest.raises(LLMSimError, match=needle) as e:
        load_profile_file(f)
    assert "bad.yaml" in str(e.value)
