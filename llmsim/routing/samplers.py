"""Named training data for the routing parts that learn from a sample: Avengers-Pro's per-cluster table
(``avengers_pro``), RouteBalance's kNN estimator (``estimator: knn``) and its per-tier TPOT head
(``tpot_prior: xgboost``).

A config names its sample instead of importing code: ``train: {sampler: NAME, **kwargs}`` calls the entry
``NAME`` of :data:`SAMPLERS` once with the other keys. Why a registry: a config may only name what the project
registered, and the routers never import the layers that draw the data. Those layers (the RouteBalance testbed in
``llmsim.envs``, the telemetry of ``llmsim.simulation``) sit above the routing, so they plug their samplers in
through the entry-point group ``llmsim.samplers`` (``llmsim.registry``), found by name on first use:

* ``routebalance_workload``: labelled requests of the RouteBalance task mix (``rate``, ``n``, ``seed``, ...);
* ``routebalance_telemetry``: telemetry rows of simulated RouteBalance runs (``llmsim.simulation.telemetry``).

In Python, pass the data itself (a list of requests or rows) instead of a mapping.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from llmsim.errors import ConfigError
from llmsim.registry import Registry

SAMPLERS: Registry[Callable[..., Iterable[Any]]] = Registry("training sampler", key="sampler",
                                                            plugins="llmsim.samplers")
register_sampler = SAMPLERS.register  # ``@register_sampler("name")`` on a function returning the sample


def find_sampler(name: Any, where: str) -> Callable[..., Iterable[Any]]:
    """The training sampler ``name`` (a ConfigError naming ``where`` if there is none: it says where samplers of
    other packages come from, since a missing entry point is the usual cause)."""
    if not isinstance(name, str):
        raise ConfigError(f"{where}: expected the name of a training sampler, got {name!r}")
    try:
        return SAMPLERS.get(name, where)
    except ConfigError as e:
        raise ConfigError(f"{e} (packages add samplers through the entry-point group 'llmsim.samplers')") from None


def draw(spec: Mapping[str, Any], where: str) -> list[Any]:
    """The sample ``{sampler: NAME, **kwargs}`` names: ``SAMPLERS[NAME](**kwargs)`` as a list. ``where`` is the
    config key of the mapping (``policy.kwargs.train``), which errors name."""
    kwargs = dict(spec)
    name = kwargs.pop("sampler", None)
    sampler = find_sampler(name, f"{where}.sampler")
    try:
        return list(sampler(**kwargs))
    except TypeError as e:
        raise ConfigError(f"{where}: training sampler {name!r} rejected its options {sorted(kwargs)}: {e}") from None


def training_sample(train: Any, where: str) -> list[Any]:
    """``train`` as a list: the data itself (a list of requests or rows) or a ``{sampler: NAME, ...}`` mapping."""
    if isinstance(train, Mapping):
        return draw(train, where)
    if train is None or isinstance(train, str) or not isinstance(train, Sequence):
        raise ConfigError(f"{where}: expected a list (requests or rows) or {{sampler: NAME, ...kwargs}} with NAME "
                          f"a registered training sampler, got {type(train).__name__}")
    return list(train)
