"""What a policy given to evaluation is, and how it becomes a :class:`~llmsim.agents.policy.Policy` on an env.

A policy spec is a router name (``"jsq"``), ``{name, kwargs, label}`` for a router, ``{checkpoint: DIR, label}``
for a trained router, or a Policy object. Router options an env determines are filled in from the env when left
null (agents/router_options.py). ``baselines: auto`` is each testbed's short list (the
papers' baselines); ``baselines: all`` is every registered heuristic that applies to it (conf/suite/<testbed>.yaml).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llmsim.agents.checkpoint_meta import a_file, default_label, read_meta
from llmsim.agents.env_setup import checkpoint_env
from llmsim.agents.policy import HeuristicPolicy, Policy
from llmsim.agents.router_options import router_kwargs
from llmsim.agents.suite_config import applicable_heuristics
from llmsim.agents.zoo import checkpoint_dir
from llmsim.envs.load_gate import LoadGate, parse_gate
from llmsim.envs.routing_env import RoutingEnv
from llmsim.errors import ConfigError
from llmsim.routing import ROUTERS

# ``baselines: auto``: the Intelligent Router's heuristics, the Learned Best-Effort paper's static model choices,
# the QoS-aware edge router's routers
AUTO_BASELINES: dict[str, list[Any]] = {
    "workload_router": ["round_robin", "jsq", "least_work_left", "least_kv", "earliest_available",
                        "max_capacity", "min_min"],
    "best_effort": [{"name": "static_model", "kwargs": {"model": m}, "label": f"static_{m}"}
                    for m in ("opt-125m", "opt-1.3b", "opt-6.7b")] + ["round_robin"],
    "qos_edge": ["round_robin", "jsq", "quality_first", "qos_lookahead"],
    "routing": ["round_robin", "jsq", "least_work_left", "least_kv"],
}

PolicySpec = str | Mapping[str, Any] | Policy


# ---------------------------------------------------------------------- policy specs
def normalise_spec(spec: PolicySpec) -> dict[str, Any] | Policy:
    """A router name, a ``{name, kwargs, label}`` / ``{checkpoint, label}`` mapping, or a Policy as is."""
    if isinstance(spec, str):
        return {"kind": "router", "name": spec, "kwargs": {}, "label": spec}
    if isinstance(spec, Mapping):
        d = dict(spec)
        if d.get("kind") in ("router", "checkpoint"):  # normalised already
            return d
        if "checkpoint" in d:
            _only(d, ("checkpoint", "label", "mode", "load_gate"), "checkpoints")
            if not isinstance(d["checkpoint"], str | Path) or not str(d["checkpoint"]):
                raise ConfigError(f"checkpoints: expected a checkpoint directory, got {d['checkpoint']!r}")
            mode = d.get("mode", "greedy")
            if mode not in ("greedy", "sample"):
                raise ConfigError(f"checkpoints: mode {mode!r}: expected greedy (argmax) or sample (SAC's policy)")
            path = str(checkpoint_dir(d["checkpoint"]))  # zoo:<name>: a shipped router's checkpoint (docs/zoo.md)
            out = {"kind": "checkpoint", "path": path, "label": d.get("label"), "mode": mode}
            if "load_gate" in d:  # instead of checkpoint.json's: a mapping (envs/load_gate.py), or none
                out["load_gate"] = d["load_gate"]
            return out
        _only(d, ("name", "kwargs", "label"), "baselines")
        name, kwargs = d.get("name"), d.get("kwargs") or {}
        if not isinstance(name, str) or not isinstance(kwargs, Mapping):
            raise ConfigError(f"baselines: expected a router name or {{name: ROUTER, kwargs: {{...}}}}, got {spec!r}")
        return {"kind": "router", "name": name, "kwargs": dict(kwargs), "label": d.get("label") or name}
    if all(hasattr(spec, a) for a in ("name", "reset", "act")):
        return spec
    raise ConfigError(f"policies: expected a router name, a mapping or a Policy, got {spec!r}")


def _only(d: dict[str, Any], allowed: Sequence[str], where: str) -> None:
    unknown = sorted(set(d) - set(allowed))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown} in {d!r}; allowed keys: {list(allowed)}")


def baseline_specs(baselines: Any, env_id: str) -> list[dict[str, Any]]:
    """``auto`` (the env's AUTO_BASELINES), ``all`` (every heuristic that applies to the testbed), ``none`` or a list
    of router names / ``{name, kwargs, label}``."""
    if baselines is None or baselines == "none":
        return []
    if baselines == "all":
        baselines = applicable_heuristics(env_id)
    elif baselines == "auto":
        if env_id not in AUTO_BASELINES:
            raise ConfigError(f"baselines: no automatic baselines for env id {env_id!r}; list them")
        baselines = AUTO_BASELINES[env_id]
    if isinstance(baselines, str | Mapping) or not isinstance(baselines, Sequence):
        raise ConfigError(f"baselines: expected 'auto', 'all', 'none' or a list of routers, got {baselines!r}")
    specs = [normalise_spec(b) for b in baselines]
    for i, (b, spec) in enumerate(zip(baselines, specs, strict=True)):  # named as typed, before any episode runs
        if isinstance(spec, dict) and spec.get("kind") == "router":
            ROUTERS.get(spec["name"], f"baselines[{i}]" if isinstance(b, str) else f"baselines[{i}].name")
            spec.setdefault("where", f"baselines[{i}]")  # the key its router's own messages are told under
    return specs  # type: ignore[return-value]


def rekeyed(e: ConfigError, where: str) -> ConfigError:
    """A router's message keyed as the llmsim CLI types its options (``policy.kwargs.<opt>: ...``), told under the
    key the spec was given by here (``baselines[1].kwargs.<opt>: ...``)."""
    msg = str(e)
    if msg.startswith("policy."):
        return ConfigError(where + msg[len("policy"):])
    return ConfigError(msg if msg.startswith(where) else f"{where}: {msg}")


def spec_label(spec: dict[str, Any] | Policy) -> str | None:
    """The label a spec's policy will report (a checkpoint's from its checkpoint.json unless given; None when its
    directory is missing, which building it refuses)."""
    if not isinstance(spec, dict):
        return str(spec.name)
    if spec.get("label") or spec["kind"] != "checkpoint":
        return spec.get("label") or spec.get("name")
    if not Path(spec["path"]).is_dir():
        return None
    return default_label(read_meta(spec["path"]))


def checkpoint_specs(checkpoints: Any) -> list[dict[str, Any]]:
    """A mapping label -> directory, or a list of directories, ``{label: directory}`` (one entry; the
    command-line form, as ``checkpoints: []`` cannot be overridden by a mapping) or ``{checkpoint, label}``."""
    if checkpoints is None:
        return []
    if isinstance(checkpoints, Mapping):
        return [normalise_spec({"checkpoint": p, "label": str(k)}) for k, p in checkpoints.items()]  # type: ignore[misc]
    if isinstance(checkpoints, str) or not isinstance(checkpoints, Sequence):
        raise ConfigError(f"checkpoints: expected a list of directories or a mapping label -> directory, got "
                          f"{checkpoints!r}")
    out = []
    for c in checkpoints:
        if isinstance(c, Mapping) and len(c) == 1 and not {"checkpoint", "kind"} & set(c):
            (label, path), = c.items()
            c = {"checkpoint": path, "label": str(label)}
        out.append(normalise_spec(c if isinstance(c, Mapping) else {"checkpoint": c}))
    return out  # type: ignore[return-value]


def build_policy(spec: dict[str, Any] | Policy, env: RoutingEnv, env_cfg: Mapping[str, Any]) -> Policy:
    """The Policy of a normalised spec on ``env`` (a Policy object is copied: episodes share no state)."""
    if not isinstance(spec, dict):
        return copy.deepcopy(spec)
    if spec["kind"] == "checkpoint":
        path = Path(spec["path"])
        if path.is_file():
            raise ConfigError(f"checkpoints: {a_file(path)}")
        if not path.is_dir():
            raise ConfigError(f"checkpoints: {path}: no such checkpoint directory")
        try:
            from llmsim.agents.checkpoint import CheckpointPolicy  # optional: torch (the rl extra), for checkpoints
        except ImportError as e:
            raise ConfigError(f"checkpoints: a learned router needs {e.name} (pip install 'llmsim[rl]'); "
                              "baselines alone run without it") from None
        gate = checkpoint_gate(spec)
        fallback = None if gate is None else HeuristicPolicy(
            gate.router, label=gate.router, **router_kwargs(gate.router, gate.kwargs, env, env_cfg))
        return CheckpointPolicy(path, spec.get("label"), spec.get("mode", "greedy"), gate, fallback)
    kw = router_kwargs(spec["name"], spec["kwargs"], env, env_cfg)
    return HeuristicPolicy(spec["name"], label=spec["label"], **kw)


def checkpoint_gate(spec: dict[str, Any]) -> LoadGate | None:
    """The load gate a checkpoint spec runs with: its own ``load_gate`` (``none``: without one), else
    checkpoint.json's."""
    raw = spec["load_gate"] if "load_gate" in spec else read_meta(Path(spec["path"])).get("load_gate")
    return parse_gate(None if raw in (None, "none") else raw, f"checkpoints: {spec['path']}: load_gate")


def describe(spec: dict[str, Any] | Policy, policy: Policy) -> dict[str, Any]:
    """What a policy is, for evaluation.json."""
    if not isinstance(spec, dict):
        return {"label": policy.name, "kind": "object", "type": type(policy).__name__}
    if spec["kind"] == "checkpoint":
        gate = getattr(policy, "gate", None)
        return {"label": policy.name, "kind": "checkpoint", "path": spec["path"],
                "agent": getattr(policy, "meta", {}).get("agent"), "mode": spec.get("mode", "greedy"),
                **({"load_gate": gate.model_dump() | {"kwargs": _plain(policy.fallback.kwargs)}} if gate else {})}
    return {"label": policy.name, "kind": "router", "name": spec["name"], "kwargs": _plain(policy.kwargs)}


def _plain(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    return x.item() if isinstance(x, np.generic) else x


VIEW_KEYS = ("observation", "predictor", "max_experts")  # max_experts: the QoSEdge graph's padded expert slots


def policy_env_cfg(env_cfg: dict[str, Any], spec: Any) -> dict[str, Any]:
    """The env a policy runs on: a checkpoint trained with its own ``observation`` or ``predictor`` (the QoS-aware
    edge router's Baseline RL sees expert-level features, the no-predictor ablation zeroed predictions) keeps them,
    and one trained on padded expert slots keeps its ``max_experts``; the cluster, the workload and the reward,
    which judge it, stay the evaluation's. A learned predictor is the one saved in the checkpoint's folder."""
    if not isinstance(spec, dict) or spec.get("kind") != "checkpoint" or not Path(spec["path"]).is_dir():
        return env_cfg
    trained = checkpoint_env(read_meta(spec["path"]).get("env") or {}, spec["path"])
    was, now = trained.get("id"), env_cfg.get("id", "routing")
    if was is not None and was != now:  # another testbed's cluster and task (padded slots may fit and run silently)
        raise ConfigError(f"{spec['path']}: trained on env {was!r}, but this env is {now!r} (evaluate it with "
                          f"env={was})")
    view = {k: trained[k] for k in VIEW_KEYS if k in trained and trained[k] != env_cfg.get(k)}
    return {**env_cfg, **copy.deepcopy(view)} if view else env_cfg
