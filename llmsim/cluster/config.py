"""Turn a plain config mapping (what Hydra composes from conf/) into simulator objects.

Kept free of hydra/omegaconf imports: the CLI converts its DictConfig to a dict first, so the same functions
serve notebooks and the Gymnasium envs. Every group is checked by its schema (:mod:`llmsim.schema`) before
anything is built, so a bad key or value fails in milliseconds with one line naming it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmsim.cluster.cluster import InstanceConfig
from llmsim.engine.config import EngineConfig
from llmsim.errors import ConfigError
from llmsim.schema import SLO, ClusterConfig, InstanceSpec, SimConfig


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
            model=spec.model, gpu=spec.gpu, tp=spec.tp, engine=ecfg.model_copy(), profile_kind=spec.profile_kind,
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
