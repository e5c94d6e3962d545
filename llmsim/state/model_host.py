"""What a router may know of a multi-model instance's models: public, plain values (``ClusterView.model_hosts``)."""

from __future__ import annotations

from typing import Any, NamedTuple


class ModelHostState(NamedTuple):
    """What a router may know of one instance's models (``ClusterView.model_hosts``): public, plain values.

    Outside ``ClusterState``'s versioned layout (saved policies never read it); still, fields are only appended at
    the end, with a default, so positional readers keep working."""

    idx: int
    loaded: str  # the model whose weights are on the GPU (the one being swapped out until a swap ends)
    catalog: tuple[str, ...]  # every model this instance may load
    cached: tuple[str, ...]  # models in the host-memory cache, least recently used first
    swapping_to: str | None  # the model being loaded now, else None
    swap_ends: float  # when that load ends (s), else 0.0
    num_held: int  # requests held at the instance for another model (or behind one)
    host_cache_bytes: int  # capacity of the host-memory model cache (0: no cache)
    swap_s: tuple[float, ...]  # per catalog model, what loading it would take if started now (warm or cold)
    # per catalog model, its llmsim.perf.models.ModelSpec as the engine loads it (its own config, kv_cache_dtype
    # applied), so a router prices a swap to it as that model, not the registry's of its name; () when unknown
    specs: tuple[Any, ...] = ()
