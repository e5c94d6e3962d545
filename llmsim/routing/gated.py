"""A router that changes rule with the cluster's load: one router while the cluster is light, another once it is busy.

The routers that balance load (``least_work_left``, ``min_min``) and the WorkloadRouter paper's dedicated split win in
different regimes: while every request is admitted at once, spreading the work evenly serves each request soonest;
once requests queue, keeping the heavy decodes apart from the short ones is what keeps the short ones moving. A
gate on one cluster-wide load signal, read from the public state at each decision, picks the rule. The learned
WorkloadRouter's guide computes the same gate from its observation (agents/nets.py), so the suite holds the router
to its own guide.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmsim.errors import ConfigError
from llmsim.routing.base import Router, kwarg_number, make_router, register_router

if TYPE_CHECKING:
    from llmsim.request import Request
    from llmsim.state.cluster_state import ClusterState
    from llmsim.state.view import RouterView

# cluster-wide load signals, each over the cluster's batch seats (sum of max_num_seqs); the observation's names
GATE_FEATURES = ("waiting_per_seat", "running_per_seat")
WAITING_CAP = 4.0  # the observation clips waiting_per_seat here


def load_signal(state: ClusterState, feature: str) -> float:
    """The gate's signal: requests queued (waiting or swapped) or running, per batch seat of the cluster."""
    insts = state.instances
    seats = float(sum(i.max_num_seqs for i in insts)) or 1.0
    if feature == "running_per_seat":
        return sum(i.num_running for i in insts) / seats
    return min(WAITING_CAP, sum(i.num_waiting + i.num_swapped for i in insts) / seats)


def sub_router(key: str, spec: Any, seed: int) -> Router:
    """A router named by ``spec``: a registered name, or ``{name, kwargs}``."""
    if isinstance(spec, str):
        return make_router(spec, seed)
    if isinstance(spec, dict) and isinstance(spec.get("name"), str) and set(spec) <= {"name", "kwargs"} \
            and isinstance(spec.get("kwargs", {}), dict):
        return make_router(spec["name"], seed, **spec.get("kwargs", {}))
    raise ConfigError(f"policy.kwargs.{key}: expected a router name or {{name, kwargs}}, got {spec!r}")


@register_router
class LoadGatedRouter(Router):
    """``light`` while the cluster's ``feature`` (:data:`GATE_FEATURES`) is at most ``below``, else ``busy``.

    ``feature: waiting_per_seat, below: 0`` switches to ``busy`` as soon as one request queues anywhere."""

    name = "load_gated"

    def __init__(self, seed: int = 0, light: Any = "least_work_left", busy: Any = "dedicated_small_large",
                 feature: str = "waiting_per_seat", below: float = 0.0, **kw: Any) -> None:
        super().__init__(seed, **kw)
        if feature not in GATE_FEATURES:
            raise ConfigError(f"policy.kwargs.feature: expected one of {list(GATE_FEATURES)}, got {feature!r}")
        self.feature, self.below = feature, kwarg_number("below", below, strict=False)
        self.light, self.busy = sub_router("light", light, seed), sub_router("busy", busy, seed)

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self.light.reset(seed)
        self.busy.reset(seed)

    def pick(self, view: RouterView) -> Router:
        """The rule for the current decision."""
        return self.light if load_signal(view.state(), self.feature) <= self.below else self.busy

    def route(self, req: Request, view: RouterView) -> int:
        return self.pick(view).route(req, view)

    def route_decode(self, req: Request, view: RouterView) -> int:
        return self.pick(view).route_decode(req, view)
