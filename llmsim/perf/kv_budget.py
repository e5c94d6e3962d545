"""How many tokens of KV cache fit on a GPU: vLLM's memory rule, shared by every profile kind.

Its own module because both :mod:`llmsim.perf.profile` (the roofline) and :mod:`llmsim.perf.profile_table` (measured
profiles) need it, and ``profile`` imports ``profile_table`` to register the measured loader.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.errors import ConfigError

if TYPE_CHECKING:
    from llmsim.perf.hardware import GpuSpec


def kv_capacity_from_bytes(
    model_name: str, gpu: GpuSpec, tp: int, gpu_memory_utilization: float, weight_bytes: float,
    kv_bytes_per_token: float, reserved_bytes: float, kv_shards: int | None = None,
) -> int:
    """Tokens of KV cache per replica: (util * memory - weight shard - reserve) / (KV bytes per token / kv_shards).

    This is vLLM's rule: the KV pool is what remains of ``util * total memory`` after the weights and the
    peak activation / CUDA-graph / non-torch memory (``reserved_bytes``, per GPU). Raises a ConfigError
    naming the model and GPU when the weights alone do not fit. ``kv_shards`` (default ``tp``): over how many
    ranks the KV cache is split (``ModelSpec.kv_shards``).
    """
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ConfigError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    budget = gpu_memory_utilization * gpu.memory_bytes
    weights = weight_bytes / tp
    free = budget - weights - reserved_bytes
    per_token = kv_bytes_per_token / (tp if kv_shards is None else kv_shards)
    if free <= per_token * 16:
        raise ConfigError(
            f"model {model_name!r} does not fit on {tp} x {gpu.name}: weights need "
            f"{weights / 1e9:.1f} GB per GPU plus {reserved_bytes / 1e9:.1f} GB reserved, but "
            f"gpu_memory_utilization={gpu_memory_utilization} x {gpu.memory_bytes / 1e9:.1f} GB = "
            f"{budget / 1e9:.1f} GB; use a larger GPU, more tensor parallelism or a higher utilisation"
        )
    return int(free // per_token)
