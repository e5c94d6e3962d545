"""Mixture-of-experts arithmetic: how many distinct experts a batch activates, and what they cost.

A MoE layer routes each token to ``top_k`` of ``n_experts`` experts. The weights a batch reads are the weights of
the *distinct* experts its tokens picked, not ``top_k`` per token: at one token a step reads ``top_k`` experts, at
a large batch nearly all of them. With uniform, independent routing an expert is missed by one token with
probability ``1 - k/E`` and by ``t`` tokens with ``(1 - k/E) ** t``, which gives the expectation below (the
"expected activated experts" of MoE serving models such as LLMServingSim 2.0's ``moe.csv`` grid).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmsim.perf.models import ModelSpec


def expected_distinct_experts(tokens: float, n_experts: int, top_k: int) -> float:
    """Expected distinct experts ``tokens`` tokens activate in one layer: ``E * (1 - (1 - k/E) ** tokens)``.

    Uniform routing; 0 for no tokens; ``E`` when ``top_k >= E``. Real routers are skewed, which activates fewer
    experts than this at mid batch sizes, so this is an upper bound on the weights read."""
    if tokens <= 0 or n_experts <= 0 or top_k <= 0:
        return 0.0
    if top_k >= n_experts:
        return float(n_experts)
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** tokens)


def moe_layer_flops(model: ModelSpec, tokens: float) -> float:
    """FLOPs of one MoE layer's MLP for ``tokens`` tokens: router, ``top_k`` routed experts and the shared ones."""
    routed = model.experts_per_token * model.expert_params
    return 2.0 * tokens * (model.router_params + routed + model.shared_expert_params)


def moe_layer_weight_bytes(model: ModelSpec, tokens: float) -> float:
    """Weight bytes one MoE layer reads for ``tokens`` tokens: the distinct experts', the shared experts', the
    router's."""
    distinct = expected_distinct_experts(tokens, model.n_experts, model.experts_per_token)
    params = distinct * model.expert_params + model.shared_expert_params + model.router_params
    return params * model.dtype_bytes
