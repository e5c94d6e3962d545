"""Building a cluster's engines from its instance configs: each engine with its profile (or a multi-model catalog),
engines that share a GPU linked, and, when any instance has a prefill or decode role, the KV copies between them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llmsim.cluster.config import InstanceConfig
from llmsim.cluster.disagg import KVTransfers
from llmsim.engine.colocation import share_gpus
from llmsim.engine.handoff import MIXED, ROLES, HandOff
from llmsim.engine.instance import Instance
from llmsim.engine.model_host import attach_host, catalog_profiles
from llmsim.errors import ConfigError, LLMSimError

if TYPE_CHECKING:
    from llmsim.event_loop import SimEnv
    from llmsim.metrics.recorder import Recorder


def build_engines(configs: list[InstanceConfig], env: SimEnv, recorder: Recorder,
                  on_model_change: Callable[[Any], None]) -> list[Instance]:
    """One engine per config; errors name the instance (``cluster.instances[k] (model on gpu): ...``)."""
    engines = []
    for idx, ic in enumerate(configs):
        try:
            engines.append(_build_engine(idx, ic, env, recorder, on_model_change))
        except LLMSimError as e:
            raise type(e)(f"cluster.instances[{idx}] ({ic.model} on {ic.gpu}): {e}") from None
    return engines


def _build_engine(idx: int, ic: InstanceConfig, env: SimEnv, recorder: Recorder,
                  on_model_change: Callable[[Any], None]) -> Instance:
    if not ic.models:
        return Instance(idx, env, ic.build_profile(), ic.engine, recorder, ic.name)
    profiles, engine = catalog_profiles(ic)
    inst = Instance(idx, env, next(iter(profiles.values())), engine, recorder, ic.name)  # (the loaded one first)
    attach_host(inst, profiles, ic).on_model_change = on_model_change
    return inst


def link_colocated(configs: list[InstanceConfig], engines: list[Instance], interference: float) -> None:
    """Engines on one ``device`` share its GPU and slow each other down (``llmsim.engine.colocation``)."""
    groups: dict[str, list[Instance]] = {}
    for ic, inst in zip(configs, engines):
        if ic.device is not None:
            groups.setdefault(str(ic.device), []).append(inst)
    for device, members in groups.items():
        gpus = {m.profile.gpu.name for m in members}
        if len(gpus) > 1:
            raise ConfigError(f"device {device!r} is shared by instances on different GPU types {sorted(gpus)}")
        share = sum(ic.engine.gpu_memory_utilization for ic in configs
                    if ic.device is not None and str(ic.device) == device)
        if share > 1.0 + 1e-9:
            raise ConfigError(f"device {device!r}: the gpu_memory_utilization of its instances adds up to "
                              f"{share:.2f} > 1; split the GPU memory between them")
    share_gpus(groups, interference)


def disaggregate(configs: list[InstanceConfig], cluster: Any, link: str, mode: str) -> KVTransfers | None:
    """Give the engines their roles; with any prefill or decode instance, the KV copies between them (each engine
    then gets its ``HandOff``)."""
    roles = [ic.role for ic in configs]
    for k, role in enumerate(roles):
        if role not in ROLES:
            raise ConfigError(f"cluster.instances[{k}].role: {role!r} is not one of {list(ROLES)}")
    if all(role == MIXED for role in roles):
        return None
    for inst, role in zip(cluster.instances, roles):
        inst.role = role
    transfers = KVTransfers(cluster, link, mode)
    for inst in cluster.instances:
        inst.handoff = HandOff(inst, transfers)
    return transfers
