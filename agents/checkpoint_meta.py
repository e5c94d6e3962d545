"""checkpoint.json without torch: what a trained router expects of its env, and the check that an env provides it.

The observation layout is the observation builder's name, the observation's shape and the version of the
public ClusterState it is computed from (``llmsim.state.cluster_state.LAYOUT_VERSION``); loading a checkpoint
into an env with another layout or another number of actions is refused with one line naming both. llmsim-evaluate
reads this before it loads any network (agents/checkpoint.py, which needs torch).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmsim.envs.routing_env import RoutingEnv
from llmsim.errors import ConfigError, load_json_file
from llmsim.state.cluster_state import LAYOUT_VERSION

FORMAT = 1


def observation_layout(env: RoutingEnv) -> dict[str, Any]:
    """What a policy's inputs mean: the builder, the shape and the public state version they are read from."""
    space = env.observation_space
    shape = getattr(space, "shape", None)
    out = {"kind": env.obs_builder.name, "shape": list(shape) if shape is not None else None,
           "state_layout_version": LAYOUT_VERSION}
    if hasattr(space, "spaces"):  # a Dict (graph) observation: every array's shape
        out["shapes"] = {k: list(v.shape) for k, v in space.spaces.items()}
    return out


def action_layout(env: RoutingEnv) -> dict[str, Any]:
    return {"n": int(env.action_space.n), "kind": env.action_kind, "choices": env.n_choices,
            "wait": env.wait_action, "drop": env.drop_action}


def default_label(meta: dict[str, Any]) -> str:
    """The name a checkpoint's policy reports when given no label: its own label, else its agent."""
    return str(meta.get("label") or meta.get("agent", "ddqn"))


def a_file(p: Path) -> str:
    """Why a regular file given as a checkpoint is refused: a checkpoint is a directory, not its weights file."""
    return f"{p}: a file, not a checkpoint directory (expected a directory holding checkpoint.json)"


def read_meta(path: str | Path) -> dict[str, Any]:
    """checkpoint.json of checkpoint directory ``path``; one line when it is missing or of another format."""
    p = Path(path)
    f = p / "checkpoint.json"
    if p.is_file():
        raise ConfigError(a_file(p))
    if not f.is_file():
        raise ConfigError(f"{p}: not a checkpoint directory (no checkpoint.json)")
    meta = load_json_file(f)
    if not isinstance(meta, dict):
        raise ConfigError(f"{f}: expected a JSON object (a checkpoint's description), got a {type(meta).__name__}")
    if meta.get("format") != FORMAT:
        raise ConfigError(f"{f}: checkpoint format {meta.get('format')!r}, this llmsim reads format {FORMAT}")
    return meta


def check_compatible(meta: dict[str, Any], env: RoutingEnv, where: str = "checkpoint") -> None:
    """Refuse a checkpoint trained on another observation layout or action layout than ``env`` has."""
    have, want = observation_layout(env), meta.get("observation", {})
    if have != want:
        raise ConfigError(f"{where}: trained on observation layout {describe_layout(want)}, but this env has "
                          f"{describe_layout(have)}")
    n = int(env.action_space.n)
    slots = (meta.get("set_net") or {}).get("n_max")
    if slots is None:  # an actor over a padded graph layout's expert slots (GraphObs max_experts)
        slots = meta.get("slots")
    if slots is not None:  # one network for any number of instances up to n_max (llmsim.envs.randomize)
        if not str(env.action_kind).startswith("instance") or env.n_choices > slots or meta.get("n_actions") != \
                slots + 2:
            raise ConfigError(f"{where}: a policy over {slots} instance slots cannot act on this env "
                              f"({env.n_choices} {env.action_kind} choices + wait + drop)")
        return
    if meta.get("n_actions") != n:
        raise ConfigError(f"{where}: trained with {meta.get('n_actions')} actions, but this env has {n} "
                          f"({env.n_choices} choices + wait + drop)")


def describe_layout(layout: dict[str, Any]) -> str:
    """An observation layout in one phrase: builder, shape(s), ClusterState layout version."""
    shapes = layout.get("shapes")  # a graph observation: its arrays' shapes say how many experts it has
    shape = ", ".join(f"{k} {v}" for k, v in sorted(shapes.items())) if shapes else layout.get("shape")
    return f"{layout.get('kind')!r} shape {shape} on ClusterState layout v{layout.get('state_layout_version')}"
