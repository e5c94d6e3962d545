"""Turn a plain config mapping (what Hydra composes from conf/) into simulator objects.

Kept free of hydra/omegaconf imports: the CLI converts its DictConfig to a dict first, so the same functions
serve notebooks and the Gymnasium envs. Every group is checked by its schema (:mod:`llmsim.schema`) before
anything is built, so a bad key or value fails in milliseconds with one line naming it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmsim.engine.config import EngineConfig
from llmsim.engine.model_host import DEFAULT_STORAGE_GBPS
from llmsim.errors import ConfigError
from llmsim.perf.profile import Profile, load_profile
from llmsim.schema import SLO, ClusterConfig, InstanceSpec, SimConfig


@dataclass
class InstanceConfig:
    """One serving instance: which model on which GPU(s), and its engine settings."""

    model: str = "llama-2-7b"
    gpu: str = "a100-80gb"
    tp: int = 1
    engine: EngineConfig = field(default_factory=EngineConfig)
    profile: Profile | None = None
    profile_kind: str = "auto"
    name: str = ""
    device: str | None = None  # instances with the same device share one GPU (and slow each other down)
    # a multi-model instance (llmsim.engine.model_host): the other models it may load, and what loading costs
    models: tuple[str, ...] = ()
    host_cache_gb: float = 0.0  # host-memory model cache (0: every swap reads storage)
    storage_gbps: float = DEFAULT_STORAGE_GBPS  # storage -> host memory read bandwidth, GB/s
    swap_overhead_s: float = 0.0  # fixed cost of each swap on top of the transfers
    role: str = "mixed"  # prefill / decode disaggregation (llmsim.cluster.disagg): mixed, prefill or decode
    # expert parallelism of a mixture-of-experts model: its experts spread over this many GPUs (vLLM's
    # --enable-expert-parallel makes it tp x dp); 1 shards every expert over the tp GPUs instead
    ep: int = 1
    kv_cache_dtype: str = "auto"  # vLLM's --kv-cache-dtype: fp8 halves the KV bytes per token (docs/models.md)

    def build_profile(self) -> Profile:
        """The given profile, else the measured one for (model, GPU, tp), else the roofline (with ``ep``)."""
        if self.profile is not None:
            return self.profile
        return load_profile(self.model, self.gpu, self.tp, self.profile_kind, ep=self.ep,
                            kv_cache_dtype=self.kv_cache_dtype)

    def resolved_engine(self) -> EngineConfig:
        """The engine settings the instance runs with: defaults that depend on the model, the GPU and the batch
        policy filled in (``EngineConfig.resolved``), e.g. ``max_num_seqs`` where it was not set."""
        prof = self.build_profile()
        return self.engine.resolved(prof.model.max_position, prof.model.name, prof.gpu)


_SPEC_FIELDS = ("model", "gpu", "tp", "ep", "kv_cache_dtype", "profile_kind", "device", "host_cache_gb", "storage_gbps",
                "swap_overhead_s")  # (role: checked with the disaggregation layout, llmsim.cluster.assemble)


def check_instance_configs(configs: Any) -> list[InstanceConfig]:
    """Refuse what the Python API can be handed but the engines cannot use (a bare string, a single instance, a
    ``tp`` of 0 or a dict as ``engine``) with one line naming ``cluster.instances[k].<key>``, before anything
    is built; the same checks as a ``cluster.instances`` config entry."""
    if isinstance(configs, str | bytes | Mapping | InstanceConfig) or not isinstance(configs, Sequence):
        raise ConfigError(f"cluster.instances: expected a list of llmsim.InstanceConfig, got {type(configs).__name__}")
    for k, ic in enumerate(configs):
        where = f"cluster.instances[{k}]"
        if not isinstance(ic, InstanceConfig):
            raise ConfigError(f"{where}: expected an llmsim.InstanceConfig, got {type(ic).__name__} {ic!r:.80}")
        fields = {f: getattr(ic, f) for f in _SPEC_FIELDS}
        for key in ("tp", "ep"):  # (the schema would read "2" as 2, but the engines use the field as given)
            if isinstance(fields[key], bool) or not isinstance(fields[key], int):
                raise ConfigError(f"{where}.{key}: expected an integer, got {fields[key]!r}")
        InstanceSpec.parse({**fields, "models": list(ic.models)}, where)
        if not isinstance(ic.engine, EngineConfig):
            raise ConfigError(f"{where}.engine: expected an llmsim.EngineConfig (EngineConfig(**{{...}}) from a "
                              f"mapping), got {type(ic.engine).__name__}")
        if ic.profile is not None and not isinstance(ic.profile, Profile):
            raise ConfigError(f"{where}.profile: expected None or an llmsim.perf.profile.Profile, "
                              f"got {type(ic.profile).__name__}")
    if not configs:
        raise ConfigError("cluster.instances: a cluster needs at least one instance, got 0")
    return list(configs)


def engine_config(d: Mapping[str, Any] | EngineConfig | None, where: str = "engine") -> EngineConfig:
    return EngineConfig.parse(d, where)


def expand_instance(spec: InstanceSpec, engine: Mapping[str, Any] | EngineConfig | None, where: str,
                    ) -> list[InstanceConfig]:
    """One ``cluster.instances`` entry -> ``count`` InstanceConfigs (``device: gpu{i}`` -> gpu0, gpu1, ...)."""
    base = engine.model_dump() if isinstance(engine, EngineConfig) else dict(engine or {})
    ecfg = EngineConfig.parse({**base, **dict(spec.engine or {})}, f"{where}.engine")
    name = spec.name or f"{spec.model}@{spec.gpu}"
    out = []
    for c in range(spec.count):
        out.append(InstanceConfig(
            model=spec.model, gpu=spec.gpu, tp=spec.tp, ep=spec.ep, kv_cache_dtype=spec.kv_cache_dtype,
            engine=ecfg.model_copy(),
            profile_kind=spec.profile_kind,
            name=f"{name}#{c}" if spec.count > 1 else name,
            device=None if spec.device is None else spec.device.replace("{i}", str(c)),
            models=tuple(spec.models), host_cache_gb=spec.host_cache_gb, storage_gbps=spec.storage_gbps,
            swap_overhead_s=spec.swap_overhead_s, role=spec.role,
        ))
    return out


def instances_from_config(cluster: Mapping[str, Any] | ClusterConfig,
                          engine: Mapping[str, Any] | EngineConfig | None = None) -> list[InstanceConfig]:
    """``cluster.instances`` entries (with ``count``) expanded; per-entry ``engine`` overrides the global one."""
    cfg = ClusterConfig.parse(cluster)
    if engine is not None and not isinstance(engine, EngineConfig):
        engine_config(engine)  # a bad global key is named as the user wrote it, not as an instance's merged one
    out: list[InstanceConfig] = []
    for k, spec in enumerate(cfg.instances):
        out += expand_instance(spec, engine, f"cluster.instances[{k}]")
    if not out:
        raise ConfigError("cluster.instances: every entry has count 0; a cluster needs at least one instance")
    return out


def instances_from_specs(specs: Sequence[InstanceConfig | Mapping[str, Any]], where: str = "instances",
                         ) -> list[InstanceConfig]:
    """The envs' and Python API's spelling: a list of InstanceConfigs and/or ``cluster.instances``-style dicts."""
    if isinstance(specs, str | bytes | Mapping) or not isinstance(specs, Sequence):
        raise ConfigError(f"{where}: expected a list of instances, got {type(specs).__name__}")
    out: list[InstanceConfig] = []
    for k, s in enumerate(specs):
        if isinstance(s, InstanceConfig):
            out.append(s)
            continue
        if not isinstance(s, Mapping):
            raise ConfigError(f"{where}[{k}]: expected a mapping with model, gpu, count... or an InstanceConfig, "
                              f"got {s!r}")
        d = dict(s)
        eng = d.get("engine")
        if isinstance(eng, EngineConfig):
            d["engine"] = eng.model_dump()
        out += expand_instance(InstanceSpec.parse(d, f"{where}[{k}]"), None, f"{where}[{k}]")
    if not out:
        raise ConfigError(f"{where}: a cluster needs at least one instance, got none")
    return out


def slo_from_config(d: Mapping[str, Any] | SLO | None) -> SLO:
    return SLO.parse(d)


def sim_options(d: Mapping[str, Any] | None) -> dict[str, Any]:
    return SimConfig.parse(d).model_dump()
