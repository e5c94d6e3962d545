"""Expected distinct experts a batch activates, and the MoE layer's FLOPs and weight bytes built on it."""

from __future__ import annotations

import numpy as np
import pytest

from llmsim.perf.models import get_model
from llmsim.perf.moe import expected_distinct_experts, moe_layer_flops, moe_layer_weight_bytes


def test_the_edges_one_token_reads_top_k_experts_a_large_batch_all():
    assert expected_distinct_experts(0, 128, 8) == 0.0
    assert expected_distinct_experts(1, 128, 8) == pytest.approx(8.0)
    assert expected_distinct_experts(10_000, 128, 8) == pytest.approx(128.0)
    assert expected_distinct_experts(5, 8, 8) == 8.0  # top-k = E: every expert
    values = [expected_distinct_experts(t, 128, 8) for t in range(1, 200)]
    assert all(b > a for a, b in zip(values, values[1:]))  # more tokens, more experts, never more than E


@pytest.mark.parametrize(("tokens", "experts", "top_k"), [(4, 128, 8), (32, 128, 8), (3, 8, 2), (16, 16, 2)])
def test_matches_uniform_routing_sampled(tokens, experts, top_k):
    rng = np.random.default_rng(0)
    draws = [len({e for _ in range(tokens) for e in rng.choice(experts, top_k, replace=False)}) for _ in range(2000)]
    assert expected_distinct_experts(tokens, experts, top_k) == pytest.approx(np.mean(draws), rel=0.02)


def test_moe_layer_reads_distinct_experts_but_computes_top_k_per_token():
    m = get_model("qwen3-30b-a3b")
    one = moe_layer_weight_bytes(m, 1)
    assert one == pytest.approx((8 * m.expert_params + m.router_params) * 2)
    assert moe_layer_weight_bytes(m, 4096) == pytest.approx((128 * m.expert_params + m.router_params) * 2, rel=1e-6)
    assert moe_layer_flops(m, 100) == pytest.approx(100 * moe_layer_flops(m, 1))  # FLOPs linear in tokens
    assert moe_layer_flops(m, 1) == 2 * (8 * m.expert_params + m.router_params)
