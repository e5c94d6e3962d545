"""The one config of a RoutingEnv, and the action layout every env shares.

:class:`RoutingEnvConfig` is everything an env is built from: the cluster (``instances``), the episode workload,
the pluggable parts (``observation``, ``reward``, ``predictor``: a name, a ``{kind: name, ...}`` mapping or an
object, checked by their own registries when the env builds them) and the scalar options. The option types are
llmsim's (:mod:`llmsim.schema`), so ``tick=0``, ``num_requests=1.5`` or ``time_limit=nan`` fail at construction
with one line naming the key (``env.tick: expected a value > 0, got 0``), as in the CLI. Keyword arguments
(``gym.make(id, **kwargs)``, ``RoutingEnv(**kwargs)``) become a config in one place: :meth:`RoutingEnvConfig.of`.
The defaults are those of ``llmsim/Routing-v0``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, StrictBool

from llmsim.errors import ConfigError
from llmsim.schema import SLO, NonNegFloat, NonNegInt, PosFloat, PosInt, Schema

# action kinds: what the first indices choose (instances or models), and which of wait / drop are offered
ACTIONS = ("instance", "instance_wait", "instance_drop", "instance_wait_drop",
           "model", "model_wait", "model_drop", "model_wait_drop")
FALLBACKS = ("least_loaded", "drop")
# llmsim/Routing-v0's cluster and workload: 4 x Llama-2-7B on A100, Poisson 10 req/s over the WorkloadRouter mix
DEFAULT_INSTANCES = ({"model": "llama-2-7b", "gpu": "a100-80gb", "count": 4},)
DEFAULT_WORKLOAD = {"kind": "mixture", "preset": "workload_router", "arrival": {"kind": "poisson", "rate": 10.0}}


def action_layout(kind: str, n_instances: int, n_models: int) -> tuple[int, bool, bool]:
    """(number of choices K, wait offered, drop offered). The space is always Discrete(K + 2): index i < K
    is choice i, K is wait and K + 1 is drop, in every env; the mask offers wait / drop as ``kind`` says."""
    base = kind.split("_")[0]
    k = n_models if base == "model" else n_instances
    return k, "wait" in kind, "drop" in kind


class RoutingEnvConfig(Schema):
    """The whole construction of a :class:`llmsim.envs.routing_env.RoutingEnv` (docs/envs.md, "Arguments").

    ``instances``: InstanceConfigs and / or ``cluster.instances``-style mappings (``{model, gpu, count, engine}``);
    ``workload``: an :class:`~llmsim.envs.workloads.EnvWorkload` or a workload mapping (mixture preset, labelled
    table, any llmsim workload); ``observation`` / ``reward`` / ``predictor``: a registry name, a mapping with
    ``kind``, or an object; ``slo``: latency targets for the episode summary."""

    where: ClassVar[str] = "env"
    instances: list[Any] = Field(default_factory=lambda: [dict(d) for d in DEFAULT_INSTANCES])
    workload: Any = Field(default_factory=lambda: copy.deepcopy(DEFAULT_WORKLOAD))
    observation: Any = "flat"
    reward: Any = "latency"
    predictor: Any = "oracle"
    slo: SLO | None = None
    num_requests: PosInt = 1000
    decision: Literal["arrival", "tick"] = "arrival"
    tick: PosFloat = 0.02
    tick_when_empty: StrictBool = False
    action: Literal[ACTIONS] = "instance"  # type: ignore[valid-type]
    time_limit: NonNegFloat | None = None
    drain_time: NonNegFloat = 600.0
    max_wait_s: PosFloat | None = 10.0
    wait_fallback: Literal["least_loaded", "drop"] = "least_loaded"
    view_staleness: NonNegFloat = 0.0
    max_waiting: NonNegInt | None = None
    fixed_workload_seed: NonNegInt | None = None
    metrics_interval: PosFloat = 1.0
    on_unservable: Literal["error", "drop"] = "drop"
    colocation_interference: NonNegFloat = 1.0
    # disaggregated clusters (llmsim.cluster.disagg, envs/pd_stage.py): which routing stage the agent drives
    stage: Literal["prefill", "decode", "both"] = "prefill"
    first_stage: str = "least_kv"  # the heuristic for new requests with stage="decode"
    kv_link: Literal["nvlink", "infiniband", "pcie", "ethernet"] = "infiniband"
    kv_transfer: Literal["overlap", "blocking"] = "overlap"

    @classmethod
    def of(cls, config: RoutingEnvConfig | Mapping[str, Any] | None = None, **options: Any) -> RoutingEnvConfig:
        """A checked config from ``config`` (a config, a mapping of its keys, or None: the defaults) with
        ``options`` (more keys, e.g. ``gym.make``'s kwargs) on top; then the keys that must agree are checked."""
        if isinstance(config, cls) and not options:
            cfg = config
        elif config is None or isinstance(config, cls | Mapping):
            data = {**dict(config or {}), **options}
            for k in ("instances", "workload"):  # None: the default (as the testbeds read it)
                if k in data and data[k] is None:
                    del data[k]
            cfg = cls.parse(data)
        else:
            cfg = cls.parse(config)  # not a mapping: one line saying so
        if cfg.decision == "tick" and "wait" not in cfg.action:
            raise ConfigError("env.action: decision='tick' needs an action with wait ('instance_wait' or "
                              f"'instance_wait_drop'; the agent may hold the head of the queue), got {cfg.action!r}")
        return cfg
