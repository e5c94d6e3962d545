"""``python -m llmsim.profiles calibrate`` recovers a known per-sequence CPU overhead from a recorded run (a
synthetic one made by llmsim itself, so no ../shared data is needed), and the replay's timeline comparison reads
and plots a run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from llmsim.cluster import InstanceConfig
from llmsim.engine.config import EngineConfig
from llmsim.perf.profile import load_profile
from llmsim.profiles.calibrate import fit_overhead, write_fit
from llmsim.profiles.cli import main
from llmsim.request import Request
from llmsim.simulation.run import simulate

pytestmark = pytest.mark.timeout(240)
TRUE_PER_SEQ = 14e-6


def record_run(d, per_seq: float, n: int = 160, seed: int = 0):
    """A vLLM-bench-style run directory (requests.jsonl, timeseries.csv, meta.json) produced by llmsim with the
    committed RTX PRO 6000 profile and ``per_seq`` as its CPU overhead: the ground truth the fit must find."""
    rng = np.random.default_rng(seed)
    prof = load_profile("llama-3.1-8b", "rtx-pro-6000", 1, "measured").with_overhead(per_seq=per_seq)
    arrivals = np.cumsum(rng.exponential(1 / 9.0, n))
    prompts, outs = rng.integers(100, 1500, n), rng.integers(50, 900, n)
    eng = EngineConfig(policy="chunked", max_num_seqs=64, max_num_batched_tokens=2048, max_model_len=4096)
    reqs = [Request(i, float(a), int(p), int(o)) for i, (a, p, o) in enumerate(zip(arrivals, prompts, outs))]
    res = simulate([InstanceConfig(model="llama-3.1-8b", gpu="rtx-pro-6000", profile=prof, engine=eng)], reqs)
    df = res.requests.sort_values("id")
    start = 1_700_000_000.0
    lines = [json.dumps({"input_toks": int(r.prompt_tokens), "output_toks": int(r.output_tokens),
                         "arrival_time": start + r.arrival, "queued_ts": 1000.0 + r.arrival,
                         "first_token_ts": 1000.0 + r.first_token, "last_token_ts": 1000.0 + r.finish})
             for r in df.itertuples()]
    (d / "requests.jsonl").write_text("\n".join(lines) + "\n")
    tl = res.timeline
    rows = ["t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct"]
    rows += [f"{t:.1f},0,0,{int(r)},{int(w)},0.0" for t, r, w in zip(tl.time, tl.running, tl.waiting) if t >= 1]
    (d / "timeseries.csv").write_text("\n".join(rows) + "\n")
    (d / "meta.json").write_text(json.dumps({"started_at": "2023-11-14T22:13:20Z",
                                             "engine_kwargs": {"max_num_seqs": 64, "max_num_batched_tokens": 2048}}))
    return d / "requests.jsonl"


def test_the_fit_recovers_a_known_overhead_and_improves_the_held_out_half(tmp_path) -> None:
    f = fit_overhead(record_run(tmp_path, TRUE_PER_SEQ), "llama-3.1-8b", "rtx-pro-6000")
    assert abs(f.per_seq - TRUE_PER_SEQ) <= 2e-6, f.per_seq
    assert f.holdout_rmse < f.before_holdout_rmse and f.holdout_rmse < 3
    assert all(abs(v) < 5 for k, v in f.errors_pct.items() if k.startswith("mean")), f.errors_pct
    out = write_fit(f, tmp_path / "fits")
    assert yaml.safe_load(out.read_text())["overhead"]["per_seq"] == pytest.approx(f.per_seq, rel=1e-3)


def test_replay_prints_and_plots_the_timeline(tmp_path, capsys) -> None:
    req = record_run(tmp_path, TRUE_PER_SEQ, n=60)
    png = tmp_path / "tl.png"
    assert main(["replay", "--requests", str(req), "--model", "llama-3.1-8b", "--gpu", "rtx-pro-6000", "--timeline",
                 "--plot", str(png), "--overhead-per-seq", str(TRUE_PER_SEQ)]) == 0
    out = capsys.readouterr().out
    assert "running sim" in out
    # its own truth: only the once-a-second sampling differs (the scrapes are a fraction of a second apart)
    assert float(out.split("rmse of running + waiting over the run: ")[1].split()[0]) < 1.5
    assert png.is_file() and png.stat().st_size > 10_000
    (tmp_path / "timeseries.csv").unlink()
    args = ["replay", "--requests", str(req), "--model", "llama-3.1-8b", "--gpu", "rtx-pro-6000", "--timeline"]
    assert main(args) == 2
    assert "no timeseries.csv" in capsys.readouterr().err


class Replayed(Exception):
    """Stops a fit at its first replay, whose arguments the test reads."""


def test_calibrate_replays_the_recorded_deployment_as_replay_reads_it(tmp_path, monkeypatch) -> None:
    req = record_run(tmp_path, TRUE_PER_SEQ, n=30)
    (tmp_path / "meta.json").write_text(json.dumps({"engine_kwargs": {
        "tensor_parallel_size": 2, "data_parallel_size": 2, "block_size": 32, "enable_prefix_caching": False,
        "max_num_seqs": 64, "max_num_batched_tokens": 4096, "enable_chunked_prefill": False}}))
    seen: dict = {}

    def first_replay(*args, **kwargs):
        seen.update(kwargs)
        raise Replayed

    monkeypatch.setattr("llmsim.profiles.calibrate.simulate_run", first_replay)
    with pytest.raises(Replayed):
        fit_overhead(req, "llama-3.1-8b", "a100-80gb")
    assert {k: seen[k] for k in ("tp", "dp", "block_size", "enable_prefix_caching", "max_num_batched_tokens",
                                 "policy")} == {"tp": 2, "dp": 2, "block_size": 32, "enable_prefix_caching": False,
                                                "max_num_batched_tokens": 4096, "policy": "vllm_v0"}


def test_calibrate_refuses_a_bad_meta_setting_in_one_line(tmp_path, capsys) -> None:
    req = record_run(tmp_path, TRUE_PER_SEQ, n=30)
    (tmp_path / "meta.json").write_text(json.dumps({"engine_kwargs": {"block_size": "big"}}))
    args = ["calibrate", "--requests", str(req), "--model", "llama-3.1-8b", "--gpu", "rtx-pro-6000"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "meta.json: block_size: expected a whole number, got 'big'" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(("flag", "needle"), [("-1", "--fit-until -1: expected seconds in (0, "),
                                              ("nan", "--fit-until nan: expected seconds in (0, "),
                                              ("1e9", "--fit-until 1e+09: expected seconds in (0, ")])
def test_calibrate_refuses_an_empty_fit_window(tmp_path, capsys, flag, needle) -> None:
    """A window with no second of the run used to print a fit (RMSE nan) made of nothing."""
    req = record_run(tmp_path, TRUE_PER_SEQ, n=30)
    assert main(["calibrate", "--requests", str(req), "--model", "llama-3.1-8b", "--gpu", "rtx-pro-6000",
                 "--fit-until", flag]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(("text", "needle"), [("t,running,waiting\n", "timeseries.csv: no rows after the header"),
                                              ("t,running,waiting\n0,1,0\n1,-3,0\n",
                                               "timeseries.csv: line 3: column 'running': expected a finite number")])
def test_calibrate_refuses_a_bad_timeseries_in_one_line(tmp_path, capsys, text, needle) -> None:
    req = record_run(tmp_path, TRUE_PER_SEQ, n=30)
    (tmp_path / "timeseries.csv").write_text(text)
    assert main(["calibrate", "--requests", str(req), "--model", "llama-3.1-8b", "--gpu", "rtx-pro-6000"]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_replay_refuses_a_max_model_len_of_zero(tmp_path, capsys) -> None:
    """--max-model-len 0 was taken for "unset": the replay ran with the longest request + 16 while its notes said
    ``max_model_len = 0 (flag --max-model-len)``."""
    req = record_run(tmp_path, TRUE_PER_SEQ, n=20)
    assert main(["replay", "--requests", str(req), "--model", "llama-3.1-8b", "--gpu", "rtx-pro-6000",
                 "--max-model-len", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "engine.max_model_len: expected a value >= 2, got 0" in err
