"""Which routing stage a :class:`llmsim.envs.routing_env.RoutingEnv` agent drives in a disaggregated cluster.

``stage="prefill"`` (default): the agent routes new requests (among the prefill and mixed instances); the
decode instance is the router default (least KV demand). ``stage="decode"``: a heuristic (``first_stage``,
default ``least_kv``) routes new requests and the agent chooses the decode instance of each prefilled request.
``stage="both"``: the agent does both; ``env.pending_stage`` says which one the pending decision is, and the
observation is the same layout either way (the cluster view's ``stage`` tells the candidates apart).

A decode decision must be one of the decode candidates: the action mask offers exactly those (no wait or drop:
a prefilled request holds KV blocks and must go somewhere); an action outside them is carried out as the default
choice, counted in ``env.stage_fallbacks``.

:class:`StageRouting` is handed what it needs at each call (the cluster view, the driver, the mask), never the env.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from llmsim.errors import ConfigError
from llmsim.routing import ROUTERS, make_router
from llmsim.routing.base import DEFER, default_decode_choice

if TYPE_CHECKING:
    from llmsim.cluster.driver import ClusterDriver
    from llmsim.request import Request
    from llmsim.state.view import RouterView, SimulatorView

STAGES = ("prefill", "decode", "both")


class StageRouting:
    """The stage(s) the agent drives: who decides a new request and who a prefilled one's decode instance."""

    def __init__(self, stage: str = "prefill", first_stage: str = "least_kv") -> None:
        self.stage = stage
        # the heuristic that routes new requests when the agent drives only the decode stage
        ROUTERS.get(first_stage, "env.first_stage")  # a misspelt name fails whatever the stage
        try:
            self.first_router = make_router(first_stage) if stage == "decode" else None
        except ConfigError as e:  # a router that needs options (a name is all env.first_stage gives)
            raise ConfigError(f"env.first_stage: {first_stage!r} cannot run without options ({e}); name a "
                              "heuristic that needs none, e.g. least_kv") from None
        self.fallbacks = 0  # decode choices outside the candidates, carried out as the default one

    def check(self, disaggregated: bool, decision: str, action_kind: str) -> None:
        """One line when the stage cannot work with the env's cluster or decision mode."""
        if self.stage == "prefill":
            return
        if not disaggregated:
            raise ConfigError(f"env.stage: {self.stage!r} needs a disaggregated cluster (instances with role: "
                              "prefill / decode); this one has only mixed instances")
        if decision != "arrival" or action_kind != "instance":
            raise ConfigError(f"env.stage: {self.stage!r} needs decision='arrival' and action='instance' (a decode "
                              f"choice is an instance); got decision={decision!r}, action={action_kind!r}")

    def route_new(self, req: Request, view: RouterView, agent_decision: int) -> int:
        """The first-stage decision: the agent's (DEFER / WAIT) or, with stage="decode", the heuristic's."""
        if self.first_router is not None:
            return self.first_router.route(req, view)
        return agent_decision

    def route_decode(self, req: Request, view: RouterView) -> int:
        """The second-stage decision: DEFER to the agent, or the default choice."""
        if self.stage == "prefill":
            return default_decode_choice(req, view)
        return DEFER

    def take_decode(self, driver: ClusterDriver, d: int) -> None:
        """Carry out the agent's decode choice for the pending prefilled request (a choice outside the decode
        candidates becomes the default one, counted in ``fallbacks``)."""
        if not driver.decide_decode(d):
            self.fallbacks += 1

    @staticmethod
    def restrict_mask(mask: np.ndarray, view: SimulatorView, pending: Request | None, decode_pending: bool,
                      n_choices: int, by_instance: bool) -> None:
        """Restrict the action mask to the stage being decided: the decode candidates only for a decode choice; no
        decode-only instance for a new request (with model choices a replica is picked among the candidates)."""
        if decode_pending and pending is not None:
            mask[:] = False
            mask[view.candidates(pending)] = True
            return
        if not by_instance:
            return
        roles = view.roles()
        for k in range(n_choices):
            if roles[k] == "decode":
                mask[k] = False
        if not mask.any():
            mask[:n_choices] = True  # (nothing pending: every choice is the no-op)
