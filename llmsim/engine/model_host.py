"""Multi-model instances: one model loaded on the GPU at a time, swapped in from a host-memory cache or storage.

An instance configured with ``models: [...]`` (``InstanceConfig.models``) may serve any model of that catalog; its
``model`` is the one loaded when the run starts. A request names the model it needs (``Request.model``; None: any).
What happens (the "model swapping" of the QLM paper; vLLM has no in-place swap, so a swap here is what a
multi-model server built on it does: drain, replace the weights, rebuild the KV cache):

* **Gate, FCFS.** A request for the loaded model is admitted to the engine while nothing is held; a request for
  another model is *held* at the instance (counted in ``num_held``), and from then on every later request is held
  behind it, so the instance serves models in arrival order (the per-request on-demand swap of the vLLM and EDF
  baselines in the QLM paper: a router that interleaves models makes the instance thrash).
* **Swap.** When the engine has drained (nothing running, waiting or swapped), the model of the oldest held
  request is loaded: the KV cache is flushed and rebuilt for the new model (GPU memory shared between weights and
  KV cache: ``Profile.kv_capacity_tokens``), and the held requests are released in order up to the first that
  needs yet another model. The instance is busy for the swap time and runs no iteration meanwhile.
* **Swap time** (tier-dependent, as in the QLM paper): ``overhead_s + [cold: weight_bytes / storage_bw] +
  weight_bytes / tp / host_link_bw`` - a *cold* load reads the whole checkpoint from storage into host memory
  (one node-local read, ``storage_bw``) and then each GPU copies its shard over its host link; a *warm* load
  (the model is in the host-memory model cache) pays only the copy.
* **Host-memory model cache** (``host_cache_gb``; 0 = none, as plain vLLM): the models whose weights are in CPU
  memory, least recently used evicted first. Every load passes through it; a prefetch (``prefetch``, QLM's "model
  warm start") copies a model from storage into it in the background, at ``storage_bw``, while the GPU serves.
* **Limits are per instance, not per model**: ``max_model_len`` is the smallest of the catalog's and a prompt can
  ever be served when it fits the smallest KV cache of the catalog, so which instances can serve a request does
  not change while models swap (routers and the view cache it).

Nothing hangs: a held request always has a swap ahead of it (the drain is finite; the swap is one timed event)
and a swap always releases at least the request it was started for.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llmsim.engine.kv import build_kv_cache
from llmsim.errors import ConfigError
from llmsim.event_loop import ENGINE
from llmsim.perf.profile import Profile, load_profile
from llmsim.state.model_host import ModelHostState

if TYPE_CHECKING:
    from llmsim.engine.components import ComponentEngine
    from llmsim.request import Request

DEFAULT_STORAGE_GBPS = 2.0  # node-local NVMe sequential read (GB/s), the reproducer's choice (docs/multi_model.md)


class ModelHost:
    """The model catalog, host cache and held requests of one multi-model instance (module docstring)."""

    def __init__(self, engine: ComponentEngine, profiles: dict[str, Profile], storage_bw: float, host_cache_bytes: int,
                 overhead_s: float = 0.0) -> None:
        self.engine = engine
        self.profiles = profiles
        self.loaded = engine.profile.model.name
        if self.loaded not in profiles:
            raise ConfigError(f"instance {engine.name}: the loaded model {self.loaded!r} is not in its models "
                              f"{list(profiles)}")
        if not storage_bw > 0 or host_cache_bytes < 0 or not overhead_s >= 0:
            raise ConfigError(f"instance {engine.name}: expected storage_gbps > 0, host_cache_gb >= 0 and "
                              f"swap_overhead_s >= 0; got {storage_bw / 1e9!r}, {host_cache_bytes / 1e9!r}, "
                              f"{overhead_s!r}")
        self.storage_bw = float(storage_bw)
        self.cache_capacity = int(host_cache_bytes)
        self.overhead_s = float(overhead_s)
        self.held: deque[Request] = deque()
        self.cache: OrderedDict[str, int] = OrderedDict()  # model -> weight bytes, least recently used first
        self.prefetching: dict[str, float] = {}  # model -> when its copy into host memory completes
        self.swapping_to: str | None = None
        self.swap_ends = 0.0
        self.on_model_change: Callable[[ComponentEngine], None] | None = None  # the cluster refreshes its view
        self.swaps = 0
        self.warm_swaps = 0
        self.swap_seconds = 0.0
        self._cache_insert(self.loaded)  # it was loaded through host memory

    # ------------------------------------------------------------------ the gate
    def admits(self, r: Request) -> bool:
        """Whether ``r`` may enter the engine now (else it is held)."""
        m = r.model
        return self.swapping_to is None and not self.held and (m is None or m == self.loaded)

    def hold(self, r: Request, now: float, phase: int) -> None:
        """Hold ``r`` at the instance until a swap loads its model; an idle engine drains at once and starts it."""
        e = self.engine
        if r.model is not None and r.model not in self.profiles:
            raise ConfigError(f"request {r.id} needs model {r.model!r}, which instance {e.name} cannot "
                              f"load (models: {list(self.profiles)})")
        self.held.append(r)
        r.instance = e.idx
        e.changes += 1
        e.queued.version += 1
        if not e.busy:
            e.wake(now, phase)

    def can_load(self, model: str) -> bool:
        return model in self.profiles

    # ------------------------------------------------------------------ swaps
    def weight_bytes(self, model: str) -> int:
        return int(self.profiles[model].model.weight_bytes)

    def swap_time(self, model: str, now: float) -> tuple[float, bool]:
        """Seconds to load ``model`` starting at ``now``, and whether it is a warm load (from host memory)."""
        self._settle(now)
        p = self.profiles[model]
        copy = self.weight_bytes(model) / p.tp / p.gpu.host_link_bw
        if model in self.cache:
            return self.overhead_s + copy, True
        ready = self.prefetching.get(model)
        if ready is not None:  # a prefetch is under way: wait for it, then copy
            return self.overhead_s + (ready - now) + copy, True
        return self.overhead_s + self.weight_bytes(model) / self.storage_bw + copy, False

    def begin_swap(self, now: float) -> bool:
        """The drained engine starts loading the oldest held request's model (False: nothing to load); the engine
        pauses until the load ends, then takes the released requests (:meth:`end_swap`)."""
        e = self.engine
        if not self.held or self.swapping_to is not None or e.running or e.waiting or e.swapped or e.ops.parked:
            return False
        target = self.held[0].model
        if target is None or target == self.loaded:  # (only after a release stopped at another model)
            return False
        dt, warm = self.swap_time(target, now)
        self.swapping_to = target
        self.swap_ends = now + dt
        self.swaps += 1
        self.warm_swaps += warm
        self.swap_seconds += dt
        e.pause(self.swap_ends, self.end_swap)
        return True

    def end_swap(self, now: float) -> None:
        """The load ended: the engine takes the released requests, in order."""
        for r in self.finish_swap(now):
            self.engine.accept(r, now, ENGINE)

    def finish_swap(self, now: float) -> list[Request]:
        """Install the new model (profile, KV cache) and return the held requests it releases, in order."""
        target = self.swapping_to
        assert target is not None
        self.swapping_to = None
        self.swap_ends = 0.0
        self.prefetching.pop(target, None)
        self._cache_insert(target)
        self.loaded = target
        self.engine.install_profile(self.profiles[target])
        if self.on_model_change is not None:
            self.on_model_change(self.engine)
        out = []
        held = self.held
        while held and held[0].model in (None, target):
            out.append(held.popleft())
        return out

    # ------------------------------------------------------------------ host-memory model cache
    def prefetch(self, model: str, now: float) -> bool:
        """Copy ``model`` from storage into the host-memory cache in the background (warm start). False when
        there is no room for it (no cache, or a model bigger than the cache) or nothing to do."""
        if model not in self.profiles:
            raise ConfigError(f"instance {self.engine.name}: cannot prefetch model {model!r}; it loads only "
                              f"{list(self.profiles)}")
        self._settle(now)
        if model in self.cache or model in self.prefetching or model == self.swapping_to:
            if model in self.cache:
                self.cache.move_to_end(model)
            return False
        if self.weight_bytes(model) > self.cache_capacity:
            return False
        start = max([now, *self.prefetching.values()])  # one storage device: prefetches queue behind each other
        self.prefetching[model] = start + self.weight_bytes(model) / self.storage_bw
        return True

    def _settle(self, now: float) -> None:
        """Move prefetches that completed by ``now`` into the cache."""
        for m, t in sorted(self.prefetching.items(), key=lambda kv: kv[1]):
            if t <= now:
                del self.prefetching[m]
                self._cache_insert(m)

    def _cache_insert(self, model: str) -> None:
        size = self.weight_bytes(model)
        if size > self.cache_capacity:
            return
        self.cache.pop(model, None)
        self.cache[model] = size
        while sum(self.cache.values()) > self.cache_capacity:
            self.cache.popitem(last=False)

    def state(self, now: float) -> ModelHostState:
        self._settle(now)
        return ModelHostState(self.engine.idx, self.loaded, tuple(self.profiles), tuple(self.cache),
                              self.swapping_to, self.swap_ends, len(self.held), self.cache_capacity,
                              tuple(self.swap_time(m, now)[0] for m in self.profiles),
                              tuple(p.model for p in self.profiles.values()))

    def stats(self) -> dict[str, Any]:
        return {"model_swaps": self.swaps, "warm_swaps": self.warm_swaps, "swap_seconds": self.swap_seconds}


def catalog_profiles(ic: Any) -> tuple[dict[str, Profile], Any]:
    """The profiles of a multi-model instance config's catalog (its loaded ``model`` first) and its engine config
    with the catalog's common ``max_model_len`` (the smallest context window; module docstring). Keyed by each
    model's name as loaded (a config.json's or alias's resolved name), as a single-model instance is known, so the
    loaded model is in its catalog and requests name models alike on both; two entries that resolve to one name
    with different specs are refused."""
    names = list(dict.fromkeys([ic.model, *ic.models]))
    profiles = {}
    for k, m in enumerate(names):
        p = ic.build_profile() if k == 0 else load_profile(m, ic.gpu, ic.tp, ic.profile_kind,
                                                           kv_cache_dtype=ic.kv_cache_dtype)
        seen = profiles.setdefault(p.model.name, p)
        if seen.model != p.model:
            raise ConfigError(f"models: {m!r} is model {p.model.name!r}, which the catalog already holds with "
                              f"another spec (context, layers or KV cache); give each model its own name")
    cap = ic.engine.max_model_len
    common = min(p.model.max_position for p in profiles.values())
    if cap is not None and cap > common:
        raise ConfigError(f"engine.max_model_len: {cap} exceeds the context length of a model this instance loads "
                          f"({common} positions, models {names}); lower it or leave it null")
    return profiles, ic.engine.model_copy(update={"max_model_len": cap or common})


def attach_host(inst: Any, profiles: dict[str, Profile], ic: Any) -> ModelHost:
    """Give ``inst`` its catalog: prompts must fit the smallest KV cache among its models (so routing limits never
    change while models swap)."""
    cfg = inst.config
    inst.limits.prompt_block_cap = min(
        (kv := build_kv_cache(inst.name, p, cfg)).total - kv.watermark for p in profiles.values())
    inst.host = ModelHost(inst, profiles, ic.storage_gbps * 1e9, int(ic.host_cache_gb * 1e9), ic.swap_overhead_s)
    return inst.host
