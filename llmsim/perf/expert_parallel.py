"""Expert parallelism applied to a measured MoE table: the experts spread over an EP group, priced from the table.

A measured profile's ``moe`` curves time all MoE layers' experts on one tensor-parallel shard, every expert local,
by tokens and by the distinct experts a batch activates (LLMServingSim's moe.csv). With expert parallelism (vLLM's
``--enable-expert-parallel``: the EP group is ``tp x dp`` GPUs) whole experts are spread over ``ep`` GPUs and each
MoE layer dispatches tokens to their experts' GPUs and combines the results (two all-to-alls). Assuming the group's
``ep / tp`` data-parallel engines are as loaded as this one and routing is uniform (as the roofline does):

* each GPU computes ``t / tp`` tokens' worth of expert assignments (the group's ``t ep / tp`` tokens x top-k,
  spread over ``ep`` GPUs), with whole experts, i.e. ``tp`` times a TP-sharded table's time at ``t / tp`` tokens;
* it reads the weights of its *local* distinct experts: ``1 / ep`` of the distinct experts the group's tokens activate;
* each MoE layer adds the dispatch and combine all-to-all of the routed activations (:func:`alltoall_s`).

The table's two axes are read at those values; the all-to-all is an estimate from the hardware table's link.
"""

from __future__ import annotations

from typing import Protocol

from llmsim.perf.hardware import GpuSpec
from llmsim.perf.models import ModelSpec
from llmsim.perf.moe import expected_distinct_experts
from llmsim.perf.parallel import alltoall_s


class ExpertCurves(Protocol):
    """What is read from a measured ``moe`` section: time at ``tokens`` with ``distinct`` experts activated."""

    n_experts: int
    top_k: int

    def at(self, tokens: float, distinct: float) -> float: ...


class ExpertParallelExperts:
    """Per-GPU time of every MoE layer's experts under expert parallelism, from a measured table."""

    __slots__ = ("curves", "tp", "ep", "layers", "routed_bytes_per_token", "gpu")

    def __init__(self, curves: ExpertCurves, model: ModelSpec, gpu: GpuSpec, tp: int, ep: int) -> None:
        self.curves, self.tp, self.ep, self.gpu = curves, tp, ep, gpu
        self.layers = model.n_moe_layers
        # routed activations per token and layer on this shard: top-k copies of the hidden state
        self.routed_bytes_per_token = model.experts_per_token * model.hidden * model.activation_bytes / tp

    def __call__(self, tokens: int) -> float:
        """Uncached, as the measured curves: the profile's dense part keeps one value per token count."""
        if tokens <= 0:
            return 0.0
        c = self.curves
        group_tokens = tokens * self.ep / self.tp
        local_distinct = expected_distinct_experts(group_tokens, c.n_experts, c.top_k) / self.ep
        experts = self.tp * c.at(tokens / self.tp, local_distinct)
        return experts + self.layers * alltoall_s(self.routed_bytes_per_token * tokens, self.ep, self.gpu)


def expert_parallel_weight_bytes(model: ModelSpec, weight_bytes: float, tp: int, ep: int) -> float:
    """The weight bytes to divide by ``tp`` for one GPU's share under expert parallelism: the non-expert part is
    split by ``tp`` as before, the routed experts by ``ep`` (``weight_bytes`` is a measured profile's whole model)."""
    expert = model.routed_expert_params_total * model.dtype_bytes
    return weight_bytes - expert + expert * tp / ep
