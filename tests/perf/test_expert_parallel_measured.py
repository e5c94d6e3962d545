"""Expert parallelism on a measured MoE profile: the experts' curves read at one GPU's share, all-to-all added."""

from __future__ import annotations

import pytest

from llmsim.errors import ProfileError
from llmsim.perf.models import get_model
from llmsim.perf.moe import expected_distinct_experts
from llmsim.perf.parallel import alltoall_s
from llmsim.perf.profile import load_profile

MODEL, GPU = "qwen3-30b-a3b", "rtx-pro-6000"


def test_ep_profile_is_labelled_and_splits_the_expert_weights():
    one = load_profile(MODEL, GPU, 1)
    two = load_profile(MODEL, GPU, 1, ep=2)
    d = two.describe()
    assert d["kind"] == "measured" and d["ep"] == 2 and d["name"].startswith(f"{MODEL}@{GPU}-ep2")
    assert d["parts"]["alltoall"] == "estimated" and "alltoall" in d["estimated_parts"]
    assert "link" in d["part_sources"]["alltoall"]
    assert "ep" not in one.describe() and "alltoall" not in one.describe()["parts"]
    # half the routed experts per GPU (about 28.5 of 30.5 B parameters are experts): far more room for KV
    assert two.kv_capacity_tokens(0.9) > 1.8 * one.kv_capacity_tokens(0.9)


@pytest.mark.parametrize("ep", [2, 4])
def test_ep_experts_time_is_the_table_at_one_gpus_share_plus_the_all_to_all(ep):
    one, spread = load_profile(MODEL, GPU, 1), load_profile(MODEL, GPU, 1, ep=ep)
    m, curves = get_model(MODEL), one.expert_curves
    assert curves is not None and spread.expert_curves is not None
    for t in (1, 16, 256):
        base = one.step_time(t, t, 0, 0, t, 100 * t)
        with_ep = spread.step_time(t, t, 0, 0, t, 100 * t)
        local = expected_distinct_experts(ep * t, m.n_experts, m.experts_per_token) / ep
        routed = m.experts_per_token * m.hidden * m.dtype_bytes * t
        expected = curves.at(t, local) + m.n_moe_layers * alltoall_s(routed, ep, spread.gpu)
        assert with_ep - base == pytest.approx(expected - curves(t), rel=1e-9, abs=1e-12)
    # a large batch activates every expert at ep 1; spread over 4 GPUs each reads a quarter: faster per GPU
    if ep == 4:
        assert spread.step_time(256, 256, 0, 0, 256, 0) < one.step_time(256, 256, 0, 0, 256, 0)


def test_ep_on_a_dense_profile_is_refused_in_one_line():
    with pytest.raises(ProfileError, match="is dense"):
        load_profile("qwen3-32b", GPU, 1, ep=2)
    assert load_profile(MODEL, GPU, 1).expert_curves is not None
    assert load_profile("qwen3-32b", GPU, 1).expert_curves is None
