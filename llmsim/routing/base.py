"""Router interface and registry: ``route(request, view) -> instance index | WAIT | DROP``.

A router must answer a Python or numpy ``int``; anything else (None, a float, a string, an index past
the last instance) is a ConfigError naming the router and the value (checked by the cluster).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from llmsim.errors import ConfigError
from llmsim.perf.models import ModelSpec
from llmsim.registry import Registry

if TYPE_CHECKING:
    from llmsim.request import Request
    from llmsim.state.cluster_state import InstanceState
    from llmsim.state.view import SimulatorView

WAIT = -1  # keep the request in the central queue; it is decided again later
DROP = -2  # reject the request (counted and reported)
DEFER = -3  # an outside driver (a Gymnasium env) decides; used by envs/


class Router:
    """Base class of routing policies. Subclasses set ``name`` and implement :meth:`route`."""

    name: ClassVar[str] = "router"

    def __init__(self, seed: int = 0, **kwargs: Any) -> None:
        if kwargs:
            raise ConfigError(f"policy.kwargs: routing policy {self.name!r} got unknown option(s) {sorted(kwargs)}")
        self.rng = np.random.default_rng(seed)

    def reset(self, seed: int | None = None) -> None:
        if seed is not None:
            self.rng = np.random.default_rng(seed)

    def route(self, req: Request, view: SimulatorView) -> int:
        raise NotImplementedError

    def upcoming(self, view: SimulatorView, k: int) -> int | None:
        """The instance the ``k``-th next new request will be routed to (``k = 0``: the next one) when that is
        fixed now, whatever the requests and the cluster's state until then; None when it is not (the default).
        Only a hint that lets an engine plan its decode runs up to its next arrival (``Cluster.run``): a wrong
        answer costs speed, never results."""
        return None

    def route_decode(self, req: Request, view: SimulatorView) -> int:
        """The second stage in a disaggregated cluster (llmsim.cluster.disagg): the decode instance of ``req``, whose
        prefill just ended (``view.stage == "decode"``; ``view.candidates(req)`` lists the decode and mixed
        instances of its model). Default: :func:`default_decode_choice`; the load heuristics apply their own
        rule to both stages."""
        return default_decode_choice(req, view)


def default_decode_choice(req: Request, view: SimulatorView) -> int:
    """The decode instance a router without its own second stage gets (llmsim.cluster.disagg): the candidate with the
    least KV demand (running and queued context over capacity), ties to the lower index - the load signal that
    matters for decoding, where memory, not compute, runs out first."""
    cands = view.candidates(req)
    demand = view.kv_demand_fractions()
    return min(cands, key=lambda i: (demand[i], i))


# routers of other packages register by entry point (group "llmsim.routers"; the envs' "onnx" router)
ROUTERS: Registry[type[Router]] = Registry("routing policy", key="name", plugins="llmsim.routers")
register_router = ROUTERS.register  # ``@register_router`` uses the class's ``name``


def kwarg_number(name: str, value: Any, *, lo: float = 0.0, strict: bool = True, integer: bool = False) -> float:
    """A router option that must be a number > lo (>= lo unless ``strict``), else a ConfigError naming
    ``policy.kwargs.<name>``."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > lo if strict else value >= lo) and (not integer or float(value).is_integer())
    if not ok:
        kind = "an integer" if integer else "a finite number"
        raise ConfigError(f"policy.kwargs.{name}: expected {kind} {'>' if strict else '>='} {lo}, got {value!r}")
    return float(value)


def kwarg_flag(name: str, value: Any) -> bool:
    """A true/false router option, else a ConfigError naming ``policy.kwargs.<name>``."""
    if not isinstance(value, bool):
        raise ConfigError(f"policy.kwargs.{name}: expected true or false, got {value!r}")
    return value


def make_router(name: str, seed: int = 0, **kwargs: Any) -> Router:
    """A router by registered name (``policy.name``) with its options (``policy.kwargs``)."""
    return ROUTERS.get(name, "policy.name")(seed=seed, **kwargs)


def instance_model(inst: InstanceState) -> str | ModelSpec:
    """The model an instance serves as loaded (its state's ``model_spec``; rebuilt from ``ClusterState.to_dict``'s
    fields), else its name: a config that reuses a registered name with another context length or KV cache is
    priced as itself, never as the registry's model of that name. Hashable: routers key their caches by it."""
    spec = inst.model_spec
    if spec is None:
        return inst.model
    if isinstance(spec, dict):
        try:
            return ModelSpec(**{**spec, "aliases": tuple(spec.get("aliases", ()))})
        except (TypeError, ValueError) as e:
            raise ConfigError(f"instance {inst.idx} ({inst.name}) model_spec: expected the fields of "
                              f"llmsim.perf.models.ModelSpec ({e})") from None
    return spec
