"""The replay's deployment: TP / DP / EP and the engine settings from meta.json or flags, printed with their
source; a flag contradicting meta.json warns; the profile's parts are labelled truthfully; vLLM's DP balancer."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from llmsim.profiles.cli import main
from llmsim.profiles.replay import Recorded, simulate_run
from llmsim.profiles.replay_deploy import read_meta, resolve
from llmsim.routing.load import VllmDataParallelBalancer

TINY_MOE = str(Path(__file__).resolve().parents[1] / "perf" / "configs" / "tiny-qwen3-moe.json")


def write_run(folder, meta: dict | None, n: int = 40) -> str:
    rng = np.random.default_rng(0)
    t = 0.0
    lines = []
    for _ in range(n):
        t += float(rng.exponential(0.5))
        p, o = int(rng.integers(50, 400)), int(rng.integers(10, 100))
        lines.append(json.dumps({"input_toks": p, "output_toks": o, "queued_ts": t, "arrival_time": t,
                                 "first_token_ts": t + 0.05, "last_token_ts": t + 0.05 + 0.02 * o}))
    (folder / "requests.jsonl").write_text("\n".join(lines) + "\n")
    if meta is not None:
        (folder / "meta.json").write_text(json.dumps(meta))
    return str(folder / "requests.jsonl")


META = {"engine_kwargs": {"tensor_parallel_size": 2, "data_parallel_size": 2, "enable_expert_parallel": True,
                          "enable_prefix_caching": False, "block_size": 32, "max_num_seqs": 64,
                          "enable_chunked_prefill": True, "gpu_memory_utilization": 0.85}}


def test_settings_come_from_meta_and_flags_override_with_a_warning(tmp_path):
    _, meta = read_meta(write_run(tmp_path, META))
    args = SimpleNamespace(tp=1, dp=None, enable_expert_parallel=None, policy=None, enable_prefix_caching=None,
                           block_size=None, max_num_seqs=None, max_num_batched_tokens=None,
                           gpu_memory_utilization=None, max_model_len=None)
    settings, warnings = resolve(args, meta)
    assert settings["tp"].value == 1 and settings["tp"].source == "flag --tp"
    assert (settings["dp"].value, settings["dp"].source) == (2, "meta.json data_parallel_size")
    assert settings["prefix_caching"].value is False and settings["block_size"].value == 32
    assert settings["max_num_batched_tokens"].source == "default"
    assert warnings == ["--tp 1 contradicts meta.json tensor_parallel_size=2; replaying with the flag"]


@pytest.mark.parametrize(("setting", "what"), [
    ({"pipeline_parallel_size": 2}, "pipeline parallelism"),
    ({"speculative_config": {"method": "ngram", "num_speculative_tokens": 3}}, "speculative decoding"),
    ({"num_speculative_tokens": 4}, "speculative decoding"),
    ({"dtype": "float32"}, "fp32 weights"),
])
def test_a_deployment_llmsim_does_not_model_is_refused(tmp_path, capsys, setting, what):
    """These engine arguments change every step time; replaying without them compared another deployment with
    the measured one in silence."""
    req = write_run(tmp_path, {"engine_kwargs": {"tensor_parallel_size": 2, **setting}})
    assert main(["replay", "--requests", req, "--model", "llama-3.1-8b", "--gpu", "h100",
                 "--profile-kind", "roofline"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    key = next(iter(setting))
    assert f"meta.json: {key}=" in err and f"llmsim does not model {what}" in err


@pytest.mark.parametrize("setting", [{"pipeline_parallel_size": 1}, {"speculative_config": None},
                                     {"quantization": None}, {"dtype": "bfloat16"}, {"dtype": "auto"}])
def test_those_settings_at_their_defaults_replay(tmp_path, setting):
    _, meta = read_meta(write_run(tmp_path, {"engine_kwargs": setting}))
    assert meta[next(iter(setting))] == next(iter(setting.values()))


def test_meta_at_the_top_level_or_under_engine_args(tmp_path):
    _, meta = read_meta(write_run(tmp_path, {"engine_args": {"tensor_parallel_size": 4}, "block_size": 8}))
    assert meta["tensor_parallel_size"] == 4 and meta["block_size"] == 8


def test_the_replay_prints_each_setting_its_source_and_the_roofline_parts(tmp_path, capsys):
    req = write_run(tmp_path, META)
    status = main(["replay", "--requests", req, "--model", TINY_MOE, "--gpu", "l40s", "--tp", "1",
                   "--profile-kind", "roofline"])
    out = capsys.readouterr().out
    assert status == 0
    assert "setting dp = 2 (meta.json data_parallel_size)" in out
    assert "setting tp = 1 (flag --tp)" in out
    assert "setting ep = 2" in out  # tp x dp with expert parallelism
    assert "warning: --tp 1 contradicts meta.json tensor_parallel_size=2" in out
    assert "dense=roofline" in out and "estimated parts: none" not in out


def test_an_unknown_model_lists_the_three_forms(tmp_path, capsys):
    req = write_run(tmp_path, None)
    assert main(["replay", "--requests", req, "--model", "qwen3-33b", "--gpu", "l40s"]) == 2
    err = capsys.readouterr().err
    assert "registered name" in err and "Hugging Face id" in err and "config.json" in err


def test_data_parallel_replays_on_dp_engines(tmp_path):
    rec = Recorded(np.zeros(8), np.full(8, 100), np.full(8, 20), None, None)
    one, _, tl1 = simulate_run(rec, "llama-3.1-8b", "h100", profile_kind="roofline")
    two, _, tl2 = simulate_run(rec, "llama-3.1-8b", "h100", profile_kind="roofline", dp=2)
    assert tl1.instance.nunique() == 1 and tl2.instance.nunique() == 2
    assert two["mean_e2el_ms"] < one["mean_e2el_ms"]  # half the batch per engine


class FakeView:
    num_instances = 3

    def __init__(self, waiting, running):
        self.w, self.r = waiting, running

    def num_waiting(self):
        return self.w

    def num_running(self):
        return self.r

    def candidates(self, req):
        return [0, 1, 2]


def test_vllm_balancer_scores_four_times_waiting_plus_running():
    b = VllmDataParallelBalancer()
    assert b.route(None, FakeView([1, 0, 0], [0, 5, 3])) == 2  # scores 4, 5, 3
    assert b.route(None, FakeView([0, 1, 0], [4, 0, 4])) == 1  # 4, 4, 4: rotating start picks 1 on the 2nd call
    assert b.route(None, FakeView([0, 0, 0], [0, 0, 0])) == 2


@pytest.mark.parametrize("flag", ["--dp", "--tp"])
def test_bad_degrees_exit_2(tmp_path, capsys, flag):
    req = write_run(tmp_path, None)
    assert main(["replay", "--requests", req, "--model", "llama-3.1-8b", "--gpu", "h100", flag, "0"]) == 2
    assert "must be an integer >= 1" in capsys.readouterr().err


def test_json_output_stays_json_and_the_settings_go_to_stderr(tmp_path, capsys):
    req = write_run(tmp_path, {"engine_kwargs": {"max_num_seqs": 32}})
    assert main(["replay", "--requests", req, "--model", "llama-3.1-8b", "--gpu", "h100", "--json",
                 "--profile-kind", "roofline"]) == 0
    out, err = capsys.readouterr()
    assert all(json.loads(line)["metric"] for line in out.splitlines())
    assert "setting max_num_seqs = 32 (meta.json max_num_seqs)" in err and "setting tp = 1 (default)" in err


def test_kv_cache_dtype_comes_from_meta_and_reaches_the_profile(tmp_path, capsys):
    req = write_run(tmp_path, {"engine_kwargs": {"kv_cache_dtype": "fp8"}})
    assert main(["replay", "--requests", req, "--model", "llama-3.1-8b", "--gpu", "rtx-pro-6000"]) == 0
    out = capsys.readouterr().out
    assert "kv_cache_dtype = fp8 (meta.json kv_cache_dtype)" in out
    assert "decode_attention=estimated" in out  # the measured profile says nobody timed its fp8 decode attention
    assert main(["replay", "--requests", req, "--model", "llama-3.1-8b", "--gpu", "rtx-pro-6000",
                 "--kv-cache-dtype", "int3"]) == 2
    assert "kv_cache_dtype must be one of" in capsys.readouterr().err


@pytest.mark.parametrize(("meta", "key"), [
    ({"engine_kwargs": {"tensor_parallel_size": "two"}}, "tensor_parallel_size"),
    ({"engine_kwargs": {"tensor_parallel_size": [2]}}, "tensor_parallel_size"),
    ({"tensor_parallel_size": 2.5}, "tensor_parallel_size"),
    ({"engine_args": {"enable_expert_parallel": "no thanks"}}, "enable_expert_parallel"),  # not silently True
    ({"engine_kwargs": {"gpu_memory_utilization": "high"}}, "gpu_memory_utilization"),
    ({"engine_kwargs": {"kv_cache_dtype": 8}}, "kv_cache_dtype"),
    ({"engine_kwargs": {"block_size": float("inf")}}, "block_size"),
    ({"tensor_parallel_size": -1}, "tensor_parallel_size"),  # out of range: the file and key, not a bare "tp"
    ({"engine_args": {"max_num_seqs": 0}}, "max_num_seqs"),
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
])
def test_a_bad_meta_value_is_one_line_naming_the_file_and_key(tmp_path, capsys, meta, key):
    req = write_run(tmp_path, meta)
    assert main(["replay", "--requests", req, "--model", "llama-3.1-8b", "--gpu", "h100",
                 "--profile-kind", "roofline"]) == 2
    err = capsys.readouterr().err
    assert key in err and str(tmp_path / "meta.json") in err and len(err.strip().splitlines()) == 1


def test_a_meta_json_that_is_not_an_object_is_refused(tmp_path, capsys):
    req = write_run(tmp_path, None)
    (tmp_path / "meta.json").write_text("[1, 2]")
    assert main(["replay", "--requests", req, "--model", "llama-3.1-8b", "--gpu", "h100"]) == 2
    err = capsys.readouterr().err
    assert "meta.json" in err and "expected a JSON object" in err


def test_a_dense_run_recorded_with_expert_parallelism_replays_without_it(tmp_path, capsys):
    """vLLM ignores --enable-expert-parallel for a model without experts, so such a run is replayable (ep 1)."""
    req = write_run(tmp_path, {"engine_kwargs": {"tensor_parallel_size": 2, "enable_expert_parallel": True}})
    assert main(["replay", "--requests", req, "--model", "llama-3.1-8b", "--gpu", "h100",
                 "--profile-kind", "roofline"]) == 0
    out = capsys.readouterr().out
    assert "setting expert_parallel = True (meta.json enable_expert_parallel)" in out
    assert "setting ep = 1 (llama-3.1-8b is dense: vLLM ignores expert_parallel)" in out
    assert "-ep" not in out


def test_meta_values_written_as_text_read_as_their_type(tmp_path):
    """A run whose arguments were dumped as text: "false" is false (a truthy string would turn the setting on)."""
    _, meta = read_meta(write_run(tmp_path, {"engine_kwargs": {
        "enable_expert_parallel": "false", "enable_prefix_caching": "True", "tensor_parallel_size": "2",
        "gpu_memory_utilization": "0.85", "block_size": 32.0}}))
    assert meta["enable_expert_parallel"] is False and meta["enable_prefix_caching"] is True
    assert (meta["tensor_parallel_size"], meta["gpu_memory_utilization"], meta["block_size"]) == (2, 0.85, 32)
    assert isinstance(meta["block_size"], int)


def test_a_run_of_another_model_is_refused(tmp_path, capsys):
    """meta.json's ``model`` (vLLM's engine argument) names the model measured: replaying another one compared
    its latencies with the run's in silence. A model of the same layers (an alias, a fine-tune) replays."""
    req = write_run(tmp_path, {"engine_kwargs": {"model": "Qwen/Qwen3-32B", "tensor_parallel_size": 2}})
    assert main(["replay", "--requests", req, "--model", "llama-3.1-8b", "--gpu", "h100",
                 "--profile-kind", "roofline"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert "meta.json: model='Qwen/Qwen3-32B' is qwen3-32b, not --model llama-3.1-8b" in err
    assert main(["replay", "--requests", req, "--model", "qwen3-32b", "--gpu", "h100",
                 "--profile-kind", "roofline"]) == 0
    req = write_run(tmp_path, {"model": "/data/ckpt/my-finetune", "tensor_parallel_size": 2})  # a local path
    assert main(["replay", "--requests", req, "--model", "llama-3.1-8b", "--gpu", "h100",
                 "--profile-kind", "roofline"]) == 0
