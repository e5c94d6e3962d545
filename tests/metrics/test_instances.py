"""instances.csv: busy fraction and token throughput against the profile's peak, documented columns, and
profile labels that do not contradict the estimated flag."""

from __future__ import annotations

import pytest

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.metrics.instances import INSTANCE_COLUMNS, PEAK_PROMPT_TOKENS, peak_token_throughput, profile_label
from llmsim.testing import LinearProfile, requests
from llmsim.workload import build_workload


def _poisson(rate: float, n: int = 300):
    return build_workload({"kind": "synthetic", "arrival": {"process": "poisson", "rate": rate},
                           "prompt": {"dist": "lognormal", "mu": 6.93, "sigma": 0.5, "min": 1, "max": 4000},
                           "output": {"dist": "lognormal", "mu": 4.86, "sigma": 1.07, "min": 1, "max": 1000},
                           "num_requests": n}, seed=0)


def test_peak_is_a_full_budget_prefill_of_reference_prompts():
    prof = LinearProfile(base=0.01, per_token=0.001, per_seq=0.002)
    cfg = EngineConfig(policy="chunked", max_num_batched_tokens=2048, max_model_len=4096).resolved(4096)
    k = 2048 // PEAK_PROMPT_TOKENS
    assert peak_token_throughput(prof, cfg) == pytest.approx(2048 / (0.01 + 0.001 * 2048 + 0.002 * k))
    slow = cfg.model_copy(update={"step_time_scale": 2.0})
    assert peak_token_throughput(prof, slow) == pytest.approx(peak_token_throughput(prof, cfg) / 2)
    small = EngineConfig(max_num_batched_tokens=300, max_model_len=300).resolved(4096)  # budget < reference prompt
    assert peak_token_throughput(prof, small) == pytest.approx(300 / (0.01 + 0.3 + 0.002))
    few_seqs = EngineConfig(max_num_batched_tokens=4096, max_model_len=4096, max_num_seqs=2).resolved(4096)
    n = 2 * PEAK_PROMPT_TOKENS
    assert peak_token_throughput(prof, few_seqs) == pytest.approx(n / (0.01 + 0.001 * n + 0.004))


def test_busy_fraction_and_throughput_vs_peak_tell_light_load_from_saturation():
    inst = [InstanceConfig("llama-2-7b", "a100-80gb")]
    light = simulate(inst, _poisson(0.5), "round_robin").instances.iloc[0]
    heavy = simulate(inst, _poisson(20.0), "round_robin").instances.iloc[0]
    # busy time over run time reads "loaded" even at light load: one decode batch keeps the GPU busy ...
    assert light["busy_fraction"] > 0.6 and heavy["busy_fraction"] > 0.95
    # ... the token rate against the peak does not
    assert light["token_throughput_vs_peak"] < 0.1
    assert heavy["token_throughput_vs_peak"] > 3 * light["token_throughput_vs_peak"]
    assert heavy["token_throughput_vs_peak"] <= 1.0
    for row in (light, heavy):
        assert row["token_throughput"] == pytest.approx(row["token_throughput_vs_peak"] * row["peak_token_throughput"])


def test_instances_table_columns_are_the_documented_ones():
    reqs = requests([(0.1 * i, 30, 5) for i in range(20)])
    res = simulate([InstanceConfig(profile=LinearProfile()) for _ in range(2)], reqs, "round_robin")
    assert list(res.instances.columns) == list(INSTANCE_COLUMNS)
    assert all(INSTANCE_COLUMNS.values())
    s = res.summary
    assert "mean_utilisation" not in s and "utilisation" not in res.instances
    assert s["mean_busy_fraction"] == pytest.approx(res.instances["busy_fraction"].mean())
    assert s["mean_token_throughput_vs_peak"] == pytest.approx(res.instances["token_throughput_vs_peak"].mean())
    duration = s["duration"]
    assert res.instances["busy_fraction"].tolist() == pytest.approx((res.instances["busy_time_s"] / duration).tolist())


def test_estimated_profile_is_not_labelled_measured():
    res = simulate([InstanceConfig("llama-2-7b", "v100-32gb")], requests([(0.0, 100, 10)]), "round_robin")
    row = res.instances.iloc[0]
    assert bool(row["profile_estimated"])
    assert row["profile"] == "llama-2-7b@v100-32gb"
    text = " ".join(res.notes) + " " + " ".join(str(v) for v in row.to_numpy())
    assert "(measured)" not in text
    assert res.notes == ["step times estimated (roofline), not measured, for: llama-2-7b@v100-32gb"]
    assert profile_label("a@b-tp2 (measured)") == "a@b-tp2" and profile_label("a@b") == "a@b"
    assert profile_label("a@b (estimated as c: same architecture)") == "a@b (as c: same architecture)"


def test_preempted_requests_counted_once_each():
    reqs = requests([(0.0, 30, 40) for _ in range(6)])
    eng = EngineConfig(num_gpu_blocks=12, block_size=16, max_num_seqs=6)
    res = simulate([InstanceConfig(profile=LinearProfile(), engine=eng)], reqs, "round_robin")
    df = res.requests
    assert res.summary["preempted_requests"] == int((df["preemptions"] > 0).sum()) > 0
    assert res.summary["preemptions"] >= res.summary["preempted_requests"]
