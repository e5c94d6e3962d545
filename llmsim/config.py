"""Turn a plain config mapping (what Hydra composes from conf/) into simulator objects.

Kept free of hydra/omegaconf imports: the CLI converts its DictConfig to a dict first, so the same
function serves notebooks and the Gymnasium envs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from llmsim.cluster import InstanceConfig
from llmsim.engine import EngineConfig
from llmsim.errors import ConfigError
from llmsim.metrics import SLO

_ENGINE_KEYS = {f.name for f in fields(EngineConfig)}
_INSTANCE_KEYS = {"model", "gpu", "tp", "count", "name", "engine", "profile_kind", "device"}
_SIM_KEYS = {"view_staleness", "metrics_interval", "central_queue_tick", "on_unservable", "colocation_interference"}


def _check(d: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed keys: {sorted(allowed)}")


def engine_config(d: Mapping[str, Any] | None, where: str = "engine") -> EngineConfig:
    d = dict(d or {})
    _check(d, _ENGINE_KEYS, where)
    return EngineConfig(**d)


def instances_from_config(cluster: Mapping[str, Any], engine: Mapping[str, Any] | None = None) -> list[InstanceConfig]:
    """``cluster.instances`` entries (with ``count``) expanded; per-entry ``engine`` overrides the global one."""
    _check(cluster, {"instances"}, "cluster")
    entries = cluster.get("instances")
    if not entries:
        raise ConfigError("cluster.instances: a cluster needs at least one instance, got none")
    out: list[InstanceConfig] = []
    for k, entry in enumerate(entries):
        where = f"cluster.instances[{k}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}: expected a mapping with model, gpu, count..., got {entry!r}")
        _check(entry, _INSTANCE_KEYS, where)
        count = int(entry.get("count", 1))
        if count < 0:
            raise ConfigError(f"{where}.count must be >= 0, got {count}")
        eng = {**dict(engine or {}), **dict(entry.get("engine") or {})}
        ecfg = engine_config(eng, f"{where}.engine")
        for c in range(count):
            name = entry.get("name") or f"{entry.get('model', 'llama-2-7b')}@{entry.get('gpu', 'a100-80gb')}"
            out.append(
                InstanceConfig(
                    model=entry.get("model", "llama-2-7b"),
                    gpu=entry.get("gpu", "a100-80gb"),
                    tp=int(entry.get("tp", 1)),
                    engine=EngineConfig(**{f.name: getattr(ecfg, f.name) for f in fields(EngineConfig)}),
                    profile_kind=entry.get("profile_kind", "auto"),
                    name=f"{name}#{c}" if count > 1 else name,
                    # "gpu{i}" puts replica i on device gpu<i>; a plain name puts every replica on it
                    device=None if entry.get("device") is None else str(entry["device"]).replace("{i}", str(c)),
                )
            )
    if not out:
        raise ConfigError("cluster.instances: every entry has count 0; a cluster needs at least one instance")
    return out


def slo_from_config(d: Mapping[str, Any] | None) -> SLO:
    d = dict(d or {})
    _check(d, {"ttft_ms", "tpot_ms", "e2el_ms"}, "slo")
    return SLO(**{k: (None if v is None else float(v)) for k, v in d.items()})


def sim_options(d: Mapping[str, Any] | None) -> dict[str, Any]:
    d = dict(d or {})
    _check(d, _SIM_KEYS, "sim")
    return d
