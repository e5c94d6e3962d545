"""Tensor / expert parallelism costs and the hardware table's interconnect columns."""

from __future__ import annotations

import dataclasses

import pytest

from llmsim.errors import ConfigError
from llmsim.perf.hardware import GPUS, INTERCONNECTS, get_gpu
from llmsim.perf.models import from_hf_config, get_model
from llmsim.perf.parallel import allreduce_s, alltoall_s, check_degrees, weight_bytes_per_gpu
from llmsim.perf.profile import kv_capacity_tokens
from tests.perf.helpers import tiny


def test_every_gpu_cites_its_interconnect():
    for g in GPUS.values():
        assert g.interconnect in INTERCONNECTS, g.name
        assert g.interconnect_bw > 0 and g.interconnect_latency_s > 0
    assert get_gpu("rtx-pro-6000").interconnect == "pcie5"  # no NVLink on the RTX PRO 6000
    assert get_gpu("h100").interconnect == "nvlink4"


def test_ring_allreduce():
    g = get_gpu("rtx-pro-6000")
    assert allreduce_s(1e6, 1, g) == 0.0
    assert allreduce_s(1e6, 2, g) == pytest.approx(2 * 0.5 * 1e6 / 64e9 + 10e-6)
    assert allreduce_s(1e6, 4, g) == pytest.approx(2 * 0.75 * 1e6 / 64e9 + 10e-6)
    assert allreduce_s(1e8, 2, get_gpu("h100")) < allreduce_s(1e8, 2, get_gpu("h100-pcie"))  # NVLink beats PCIe


def test_alltoall_dispatch_and_combine():
    g = get_gpu("rtx-pro-6000")
    assert alltoall_s(1e6, 1, g) == 0.0
    assert alltoall_s(1e6, 2, g) == pytest.approx(2 * (0.5 * 1e6 / 64e9 + 10e-6))
    assert alltoall_s(1e6, 8, g) > alltoall_s(1e6, 2, g)


def test_impossible_splits_are_refused():
    dense, moe = get_model("qwen3-32b"), get_model("mixtral-8x7b")
    check_degrees(moe, 2, 2)
    for model, tp, ep, dp, what in ((dense, 1, 2, 1, "is dense"), (moe, 1, 16, 1, "8 experts"),
                                    (moe, 2, 3, 1, "multiple of tp"), (dense, 3, 1, 1, "do not split"),
                                    (dense, 1, 1, 0, "data-parallel")):
        with pytest.raises(ConfigError, match=what):
            check_degrees(model, tp, ep, dp)


def test_expert_parallelism_spreads_the_expert_weights():
    m = get_model("qwen3-30b-a3b")
    assert weight_bytes_per_gpu(m, 1) == m.weight_bytes
    assert weight_bytes_per_gpu(m, 2) == m.weight_bytes / 2  # TP shards everything
    experts = m.routed_expert_params_total * 2
    assert weight_bytes_per_gpu(m, 1, 2) == pytest.approx(m.weight_bytes - experts / 2)
    assert weight_bytes_per_gpu(get_model("llama-2-7b"), 2, 1) == get_model("llama-2-7b").weight_bytes / 2


def test_kv_heads_split_over_ranks_but_never_below_one_and_latents_replicate():
    """A GPU's KV bytes follow vLLM: each rank holds n_kv / tp heads but at least one; MLA latents are not split."""
    qwen_moe = get_model("qwen3-30b-a3b")  # 4 KV heads
    assert [qwen_moe.kv_shards(tp) for tp in (1, 2, 4, 8)] == [1, 2, 4, 4]
    mla = from_hf_config(tiny("tiny-deepseek-v2-mla"))
    assert [mla.kv_shards(tp) for tp in (1, 2, 4)] == [1, 1, 1]
    g = get_gpu("h100")
    # at tp 8 each rank keeps one of the 4 heads: the per-token KV bytes of tp 4, not half of them
    free = 0.9 * g.memory_bytes - qwen_moe.weight_bytes / 8 - 1.5e9
    assert kv_capacity_tokens(qwen_moe, g, 8, 0.9, 1.5e9) == int(free // (qwen_moe.kv_bytes_per_token / 4))
    llama = get_model("llama-3-70b")  # 8 KV heads: tp 8 splits them exactly, as before
    free = 0.9 * g.memory_bytes - llama.weight_bytes / 8 - 1.5e9
    assert kv_capacity_tokens(llama, g, 8, 0.9, 1.5e9) == int(free // (llama.kv_bytes_per_token / 8))


def test_rtx_a6000_and_3090_rows_follow_their_datasheets():
    a6000, r3090 = get_gpu("a6000"), get_gpu("RTX-3090")
    assert (a6000.name, a6000.bandwidth, a6000.peak_flops, a6000.interconnect) == ("rtx-a6000", 768e9, 154.8e12,
                                                                                   "nvlink-bridge")
    # a GeForce card: bf16 GEMMs accumulate in FP32 at half the FP16-accumulate tensor rate
    assert (r3090.name, r3090.bandwidth, r3090.peak_flops) == ("rtx3090", 936e9, 71e12)
    assert get_gpu("rtx4090").peak_flops > 2 * r3090.peak_flops


def test_kv_heads_that_neither_split_nor_replicate_over_tp_are_refused():
    """vLLM splits the KV heads over tp, or replicates them when tp exceeds them, evenly either way: Phi-3-medium's
    10 KV heads (40 query heads) load at tp 2, not at tp 4 or 8; Llama-3-70B's 8 replicate over tp 16."""
    phi3_medium = dataclasses.replace(get_model("llama-2-13b"), name="phi-3-medium", n_kv_heads=10)
    check_degrees(phi3_medium, 2)
    for tp in (4, 8):
        with pytest.raises(ConfigError, match=f"10 KV heads neither split over nor replicate evenly on tp={tp}"):
            check_degrees(phi3_medium, tp)
    check_degrees(get_model("llama-3-70b"), 16)
