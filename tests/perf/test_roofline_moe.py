"""The roofline prices MoE layers by the distinct experts a step activates, TP all-reduces and EP all-to-alls,
and says truthfully that every part is a roofline."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmsim.cluster.config import InstanceConfig
from llmsim.perf.hardware import get_gpu
from llmsim.perf.models import get_model
from llmsim.perf.parallel import ALLREDUCES_PER_LAYER, allreduce_s
from llmsim.perf.profile import RooflineProfile, load_profile


def decode(p, n: int, ctx: int = 512) -> float:
    return p.step_time(n, n, 0, 0, n, n * ctx)


def test_moe_decode_costs_between_its_active_and_its_total_dense_twin():
    g = get_gpu("h100")
    moe = get_model("qwen3-30b-a3b")
    p = RooflineProfile(moe, g)
    dense_active = RooflineProfile(replace(moe, n_experts=0, intermediate=8 * moe.moe_intermediate), g)
    dense_total = RooflineProfile(replace(moe, n_experts=0, intermediate=128 * moe.moe_intermediate), g)
    assert decode(dense_active, 1) < decode(p, 1) < decode(dense_total, 1)
    # a bigger batch activates more experts: the step grows much faster than a dense model's would
    assert decode(p, 32) - decode(p, 1) > 5 * (decode(dense_active, 32) - decode(dense_active, 1))
    assert decode(p, 256) == pytest.approx(decode(dense_total, 256), rel=0.25)


def test_tp_allreduce_matches_the_parallel_module():
    g, m = get_gpu("rtx-pro-6000"), get_model("qwen3-32b")
    p2 = RooflineProfile(m, g, 2)
    no_link = RooflineProfile(m, replace(g, interconnect_bw=1e30, interconnect_latency_s=0.0), 2)
    n = 512
    extra = decode(p2, n) - decode(no_link, n)
    one = allreduce_s(n * m.hidden * m.dtype_bytes, 2, g)
    assert extra == pytest.approx(ALLREDUCES_PER_LAYER * m.n_layers * one, rel=1e-6)


def test_expert_parallelism_adds_alltoall_and_frees_memory():
    g, m = get_gpu("rtx-pro-6000"), get_model("qwen3-30b-a3b")
    ep1, ep2 = RooflineProfile(m, g), RooflineProfile(m, g, 1, ep=2)
    assert ep2.kv_capacity_tokens(0.9) > 1.5 * ep1.kv_capacity_tokens(0.9)
    fast = RooflineProfile(m, replace(g, interconnect_bw=1e30, interconnect_latency_s=0.0), 1, ep=2)
    assert decode(ep2, 64) > decode(fast, 64)  # the all-to-all over PCIe costs
    assert ep2.describe()["ep"] == 2 and ep2.name.endswith("-ep2")


def test_roofline_labels_every_part():
    d = load_profile("qwen3-30b-a3b", "l40s", kind="roofline").describe()
    assert d["kind"] == "roofline"
    assert set(d["parts"].values()) == {"roofline", "assumed"} and d["parts"]["dense"] == "roofline"


def test_an_instance_carries_expert_parallelism_into_its_profile():
    prof = InstanceConfig(model="mixtral-8x7b", gpu="h100", tp=2, ep=2, profile_kind="roofline").build_profile()
    assert prof.ep == 2
    with pytest.raises(Exception, match="dense"):
        InstanceConfig(model="llama-3.1-8b", gpu="h100", ep=2).build_profile()
