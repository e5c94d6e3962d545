"""What splitting a model over GPUs costs: tensor, expert and data parallelism.

* **Tensor parallelism (TP)** shards every GEMM over ``tp`` GPUs; each decoder layer then all-reduces its
  activations twice (after attention's output projection and after the MLP). A ring all-reduce moves
  ``2 (tp - 1) / tp`` times the buffer over each GPU's link (NCCL's ring algorithm, as in Megatron-LM's analysis).
* **Expert parallelism (EP)** spreads a MoE model's experts over ``ep`` GPUs, whole experts per GPU (vLLM's
  ``--enable-expert-parallel``: the EP group is TP x DP). Each MoE layer sends every token's hidden state to the
  GPUs holding its experts and back (dispatch and combine, two all-to-alls); a GPU keeps ``(ep - 1) / ep`` of the
  traffic off-device.
* **Data parallelism (DP)** runs ``dp`` replicas, each its own engine with its own KV cache, behind a balancer
  (vLLM's DP front end sends a request to the least-loaded engine); it costs nothing per iteration, so it lives in
  the cluster (one instance per replica), not here.

Link bandwidth and latency are the GPU's ``interconnect_bw`` / ``interconnect_latency_s`` (llmsim.perf.hardware).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.errors import ConfigError

if TYPE_CHECKING:
    from llmsim.perf.hardware import GpuSpec
    from llmsim.perf.models import ModelSpec

ALLREDUCES_PER_LAYER = 2  # after attention's output projection and after the MLP (Megatron-LM's layout)
ALLTOALLS_PER_MOE_LAYER = 2  # dispatch before the experts, combine after them
FALLBACK_LINK_BW = 25e9  # bytes/s when a GPU's table row has no interconnect figure


def link_bandwidth(gpu: GpuSpec) -> float:
    """Bytes/s per direction between two GPUs of one instance (the table's figure, else a PCIe 4 x16 share)."""
    return gpu.interconnect_bw if gpu.interconnect_bw > 0 else FALLBACK_LINK_BW


def allreduce_s(n_bytes: float, tp: int, gpu: GpuSpec) -> float:
    """One ring all-reduce of an ``n_bytes`` buffer over ``tp`` GPUs: ``2 (tp-1)/tp * bytes / BW + latency``; 0 at
    tp 1."""
    if tp <= 1:
        return 0.0
    return 2 * (tp - 1) / tp * n_bytes / link_bandwidth(gpu) + gpu.interconnect_latency_s


def alltoall_s(n_bytes: float, ep: int, gpu: GpuSpec) -> float:
    """One MoE layer's expert-parallel dispatch plus combine of ``n_bytes`` of routed activations (tokens x top_k x
    hidden x dtype) over ``ep`` GPUs: each way moves ``(ep-1)/ep`` of them off-device; 0 at ep 1."""
    if ep <= 1:
        return 0.0
    one_way = (ep - 1) / ep * n_bytes / link_bandwidth(gpu) + gpu.interconnect_latency_s
    return ALLTOALLS_PER_MOE_LAYER * one_way


def check_degrees(model: ModelSpec, tp: int, ep: int = 1, dp: int = 1) -> None:
    """Refuse impossible splits in one line: degrees >= 1, heads divisible by tp (the KV heads too, or tp by them:
    vLLM then replicates them), EP only for a MoE model with at least ``ep`` experts, and an EP group that is a
    multiple of tp."""
    for key, v in (("tensor-parallel degree (tp)", tp), ("expert-parallel degree (ep)", ep),
                   ("data-parallel degree (dp)", dp)):
        if int(v) != v or v < 1:
            raise ConfigError(f"{key} must be an integer >= 1, got {v!r}")
    if model.n_heads % tp:
        raise ConfigError(f"model {model.name!r}: {model.n_heads} attention heads do not split over tp={tp}")
    kv = model.n_kv_heads
    if not model.kv_lora_rank and (kv % tp if kv >= tp else tp % kv):  # (latent attention has one shared latent)
        raise ConfigError(f"model {model.name!r}: {kv} KV heads neither split over nor replicate evenly on tp={tp}")
    if ep > 1:
        if not model.is_moe:
            raise ConfigError(f"model {model.name!r} is dense: expert parallelism (ep={ep}) needs a "
                              "mixture-of-experts model")
        if model.n_experts < ep:
            raise ConfigError(f"model {model.name!r}: {model.n_experts} experts cannot spread over ep={ep} GPUs")
        if ep % tp:
            raise ConfigError(f"expert-parallel group ep={ep} must be a multiple of tp={tp} (vLLM: ep = tp x dp)")


def expert_shards(tp: int, ep: int) -> int:
    """Over how many GPUs the experts' weights are split: the EP group with expert parallelism, else TP (vLLM
    shards each expert's GEMMs over the TP group)."""
    return ep if ep > 1 else tp


def weight_bytes_per_gpu(model: ModelSpec, tp: int, ep: int = 1) -> float:
    """Weight bytes each GPU holds: the non-expert part sharded by tp, the experts by the EP group (or tp)."""
    if not model.is_moe or ep <= 1:
        return model.weight_bytes / tp
    expert = model.routed_expert_params_total * model.dtype_bytes
    return (model.weight_bytes - expert) / tp + expert / ep
