"""Router interface and registry: ``route(request, view) -> instance index | WAIT | DROP``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from llmsim.errors import ConfigError

if TYPE_CHECKING:
    from llmsim.cluster import ClusterView
    from llmsim.request import Request

WAIT = -1  # keep the request in the central queue; it is decided again later
DROP = -2  # reject the request (counted and reported)
DEFER = -3  # an outside driver (a Gymnasium env) decides; used by envs/


class Router:
    """Base class of routing policies. Subclasses set ``name`` and implement :meth:`route`."""

    name: ClassVar[str] = "router"

    def __init__(self, seed: int = 0, **kwargs: Any) -> None:
        if kwargs:
            raise ConfigError(f"policy {self.name!r} got unknown option(s) {sorted(kwargs)}")
        self.rng = np.random.default_rng(seed)

    def reset(self, seed: int | None = None) -> None:
        if seed is not None:
            self.rng = np.random.default_rng(seed)

    def route(self, req: Request, view: ClusterView) -> int:
        raise NotImplementedError


ROUTERS: dict[str, type[Router]] = {}


def register_router(cls: type[Router]) -> type[Router]:
    ROUTERS[cls.name] = cls
    return cls


def make_router(name: str, seed: int = 0, **kwargs: Any) -> Router:
    if name not in ROUTERS:
        raise ConfigError(f"unknown routing policy {name!r}; expected one of {sorted(ROUTERS)}")
    return ROUTERS[name](seed=seed, **kwargs)
