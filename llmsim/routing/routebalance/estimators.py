"""RouteBalance's estimators: each request's quality and output length on every candidate model.

The RouteBalance paper predicts both with a kNN over prompt embeddings (its §4.2; here
:mod:`llmsim.routing.routebalance.predictors`, ``estimator: knn``). Two ablation arms need no training:

* ``oracle``: the request's hidden per-model ground truth (what the learned estimator approximates);
* ``noisy``: the oracle plus seeded noise, to measure how much estimation error costs.

An estimator is anything with ``predict(request, models)``; one with ``predict_batch`` answers a whole batch window
at once (the paper's batched neighbour search). :data:`ESTIMATORS` names them for ``policy.kwargs.estimator``.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from llmsim.errors import ConfigError
from llmsim.registry import Registry
from llmsim.routing.base import kwarg_number

if TYPE_CHECKING:
    from llmsim.request import Request


class Estimator(Protocol):
    """Quality and output length of ``request`` on each of ``models`` (in that order).

    ``qualities`` is None when there is no quality signal for the request (the quality term is then the same
    for every candidate); lengths are positive token counts."""

    def predict(self, request: Request, models: Sequence[str]) -> tuple[Sequence[float] | None, Sequence[float]]:
        ...


Prediction = tuple[Sequence[float] | None, Sequence[float]]


def predict_batch(est: Any, requests: Sequence[Request], models: Sequence[Sequence[str]]) -> list[Prediction]:
    """Every request's prediction for its candidate models (``models[k]`` for ``requests[k]``): one call of the
    estimator's own ``predict_batch`` when it has one (the kNN estimator: one neighbour search per batch window,
    as the paper's Algorithm 1 does), else ``predict`` per request."""
    batch = getattr(est, "predict_batch", None)
    if batch is not None:
        return list(batch(requests, models))
    return [est.predict(r, m) for r, m in zip(requests, models)]


class OracleEstimator:
    """The ablation arm: the request's hidden per-model ground truth (``quality_by_model``, ``outputs_by_model``).

    No ``quality_by_model``: no quality signal (None). Without a per-model length the request's own
    ``output_tokens`` stands in. A quality table that lacks a candidate model is a ConfigError."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def predict(self, request: Request, models: Sequence[str]) -> tuple[list[float] | None, list[float]]:
        q = request.quality_by_model
        quals = None
        if q:
            missing = [m for m in models if m not in q]
            if missing:
                raise ConfigError(f"request {request.id} has no quality for model(s) {missing}: RouteBalance's oracle "
                                  "estimator needs quality_by_model for every candidate model (or none at all)")
            quals = [float(q[m]) for m in models]
        return quals, [float(request.output_for(m)) for m in models]


class NoisyEstimator(OracleEstimator):
    """The oracle plus noise: quality + N(0, ``quality_sd``) clipped to [0, 1], length x LogNormal(0,
    ``length_sigma``), rounded, at least 1. Draws are seeded by (seed, request id, model), so they do not
    depend on batch composition or call order."""

    def __init__(self, seed: int = 0, quality_sd: float = 0.1, length_sigma: float = 0.5) -> None:
        super().__init__(seed)
        self.quality_sd = kwarg_number("estimator_kwargs.quality_sd", quality_sd, strict=False)
        self.length_sigma = kwarg_number("estimator_kwargs.length_sigma", length_sigma, strict=False)

    def predict(self, request: Request, models: Sequence[str]) -> tuple[list[float] | None, list[float]]:
        quals, lens = super().predict(request, models)
        out_q, out_l = [], []
        for k, m in enumerate(models):
            rng = np.random.default_rng((self.seed, int(request.id), zlib.crc32(m.encode())))
            zq, zl = rng.standard_normal(2)
            if quals is not None:
                out_q.append(min(1.0, max(0.0, quals[k] + self.quality_sd * zq)))
            out_l.append(max(1.0, float(round(lens[k] * math.exp(self.length_sigma * zl)))))
        return (out_q if quals is not None else None), out_l


# ``estimator: name`` -> factory(seed=..., **estimator_kwargs); the learned "knn" registers in predictors.py
ESTIMATORS: Registry[Callable[..., Estimator]] = Registry("RouteBalance estimator")
ESTIMATORS.register(OracleEstimator, name="oracle")
ESTIMATORS.register(NoisyEstimator, name="noisy")
register_estimator = ESTIMATORS.register  # ``@register_estimator("name")`` on a factory f(seed=..., **kwargs)
ESTIMATORS.register_lazy("knn", "llmsim.routing.routebalance.predictors:KnnEstimator")  # (pandas, on first use)


def make_estimator(name: Any, seed: int, kwargs: Mapping[str, Any] | None) -> Estimator:
    """The estimator ``policy.kwargs.estimator`` names (or an estimator object, from Python) with its
    ``estimator_kwargs``."""
    if not isinstance(name, str):
        if hasattr(name, "predict"):
            return name  # an estimator object (Python use)
        raise ConfigError(f"policy.kwargs.estimator: expected a name of {ESTIMATORS.names()}, got {name!r}")
    factory = ESTIMATORS.get(name, "policy.kwargs.estimator")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise ConfigError(f"policy.kwargs.estimator_kwargs: expected a mapping, got {kwargs!r}")
    try:
        return factory(seed=seed, **dict(kwargs or {}))
    except TypeError as e:
        raise ConfigError(f"policy.kwargs.estimator_kwargs: {e}") from None
