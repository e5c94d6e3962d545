"""The options of a heuristic router that an env determines: the capacity routers' KV capacity, the model routers'
instance models, the QoSEdge lookahead's step model. Filled in where a policy spec leaves them absent or null, as
``experiments.testbeds.calibrate`` passes them (evaluation, a checkpoint's light-load gate, an export's manifest)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmsim.envs.paper_timing import QOS_EDGE_K
from llmsim.envs.routing_env import RoutingEnv

CAPACITY_ROUTERS = ("earliest_available", "max_capacity")
MODEL_ROUTERS = ("static_model", "capped_model", "quality_first", "qos_lookahead")
QOS_LIMIT = 0.03  # the QoSEdge factory's default latency limit (s per output token)


def router_kwargs(name: str, kwargs: Mapping[str, Any], env: RoutingEnv, env_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the options this env determines filled in where they are absent or null."""
    kw = dict(kwargs)

    def fill(key: str, value: Any) -> None:
        if kw.get(key) is None:
            kw[key] = value

    if name in CAPACITY_ROUTERS:
        fill("kv_tokens", [kv_tokens(c) for c in env.instance_configs])
        fill("max_num_seqs", int(env.instance_configs[0].resolved_engine().max_num_seqs))
    if name == "max_capacity" and env.decision == "tick":
        # The env routes at most one request per tick, so the paper's 1 s rounds would leave most requests to the
        # env's max-wait fallback (-115 % vs RR); a round per tick keeps the rule without starving it.
        fill("interval", float(env.tick))
    if name in MODEL_ROUTERS:
        fill("models", list(env.instance_models))
    if name == "quality_first":
        fill("max_waiting", env.max_waiting)
    if name == "qos_lookahead":
        models = kw["models"]
        if all(m in QOS_EDGE_K for m in models):
            fill("k1", {m: QOS_EDGE_K[m][0] for m in models})
            fill("k2", {m: QOS_EDGE_K[m][1] for m in models})
        fill("base", {m: float(getattr(c.profile, "base", 0.0)) for m, c in zip(models, env.instance_configs)})
        fill("latency_limit", float(env_cfg.get("latency_limit") or QOS_LIMIT))
    return kw


def kv_tokens(inst: Any) -> int:
    """KV-cache capacity of an instance in tokens (whole blocks), as experiments.testbeds.calibrate gives the
    capacity routers."""
    prof = inst.build_profile()
    bs = inst.engine.block_size
    return prof.kv_capacity_tokens(inst.engine.gpu_memory_utilization) // bs * bs
