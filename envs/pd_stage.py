"""Which routing stage a :class:`llmsim.envs.routing_env.RoutingEnv` agent drives in a disaggregated cluster.

``stage="prefill"`` (default): the agent routes new requests (among the prefill and mixed instances); the
decode instance is the router default (least KV demand). ``stage="decode"``: a heuristic (``first_stage``,
default ``least_kv``) routes new requests and the agent chooses the decode instance of each prefilled request.
``stage="both"``: the agent does both; ``env.pending_stage`` says which one the pending decision is, and the
observation is the same layout either way (the cluster view's ``stage`` tells the candidates apart).

A decode decision must be one of the decode candidates: the action mask offers exactly those (no wait or drop:
a prefilled request holds KV blocks and must go somewhere); an action outside them is carried out as the default
choice, counted in ``env.stage_fallbacks``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from llmsim.errors import ConfigError
from llmsim.routing import make_router
from llmsim.routing.base import DEFER, default_decode_choice

if TYPE_CHECKING:
    from llmsim.request import Request

STAGES = ("prefill", "decode", "both")


def check_stage(env: Any) -> None:
    """One line when the stage cannot work with the env's cluster or decision mode."""
    if env.stage == "prefill":
        return
    if env.cluster.transfers is None:
        raise ConfigError(f"env.stage: {env.stage!r} needs a disaggregated cluster (instances with role: prefill / "
                          "decode); this one has only mixed instances")
    if env.decision != "arrival" or env.action_kind != "instance":
        raise ConfigError(f"env.stage: {env.stage!r} needs decision='arrival' and action='instance' (a decode "
                          f"choice is an instance); got decision={env.decision!r}, action={env.action_kind!r}")


def first_stage_router(env: Any) -> Any:
    """The heuristic that routes new requests when the agent drives only the decode stage."""
    return make_router(env.first_stage) if env.stage == "decode" else None


def route_new(env: Any, req: Request, view: Any, agent_decision: int) -> int:
    """The first-stage decision: the agent's (DEFER / WAIT) or, with stage="decode", the heuristic's."""
    if env.stage == "decode":
        return env.stage_router.route(req, view)
    return agent_decision


def route_decode(env: Any, req: Request, view: Any) -> int:
    """The second-stage decision: DEFER to the agent, or the default choice."""
    if env.stage == "prefill":
        return default_decode_choice(req, view)
    return DEFER


def take_decode(env: Any, d: int) -> None:
    """Carry out the agent's decode choice for the pending prefilled request (a choice outside the decode candidates
    becomes the default one, counted in ``env.stage_fallbacks``)."""
    if not env.driver.decide_decode(d):
        env.stage_fallbacks += 1


def stage_mask(env: Any, mask: np.ndarray) -> None:
    """Restrict the action mask to the stage being decided: the decode candidates only for a decode choice; no
    decode-only instance for a new request."""
    if env.cluster.transfers is None:
        return
    view = env.cluster.view
    n = env.n_choices
    if env.pending_stage == "decode" and env.pending is not None:
        mask[:] = False
        mask[view.candidates(env.pending)] = True
        return
    if not env.action_kind.startswith("instance"):
        return  # model choices: a model's replica is picked among the candidates (decode_action)
    roles = view.roles()
    for k in range(n):
        if roles[k] == "decode":
            mask[k] = False
    if not mask.any():
        mask[:n] = True  # (nothing pending: every choice is the no-op)
