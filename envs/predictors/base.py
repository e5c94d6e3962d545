"""Predictors of per-model output length and quality, as seen by observations (never by the engine).

The interface plus an oracle (ground truth), a noisy oracle (for ablations of prediction error), optionally
bucketised like the DistilBERT classifiers of the QoS-aware edge router and "Intelligent Router for LLM Workloads"
(the reported value is the bucket midpoint), and a zero predictor (the QoS-aware edge router's "without
predictors" ablation). The learned ones are beside this module (length_buckets.py, qos.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from llmsim.registry import Registry
from llmsim.request import Request


class Predictor:
    """``predict(req, models)`` -> (output tokens, quality) arrays over ``models``."""

    def reset(self, seed: int | None) -> None:
        pass

    def predict(self, req: Request, models: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError


def _truth(req: Request, models: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    lens = np.array([req.output_for(m) for m in models], dtype=np.float64)
    q = req.quality_by_model
    qual = np.array([q.get(m, 0.0) if q else 0.0 for m in models], dtype=np.float64)
    return lens, qual


class OraclePredictor(Predictor):
    """Ground-truth lengths and qualities (upper bound; tests)."""

    def predict(self, req: Request, models: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        return _truth(req, models)


class ZeroPredictor(Predictor):
    """Zero predicted length and quality on every model: the QoS-aware edge router's ablation "full method without
    predictors" (ZS+ZL, Fig. 18: the predicted score and length features zeroed). The graph state then carries 0 in the
    arrived node's predicted quality / length features and in the running / waiting nodes' ones."""

    def predict(self, req: Request, models: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(len(models)), np.zeros(len(models))


@dataclass
class NoisyOraclePredictor(Predictor):
    """Truth with multiplicative log-normal length noise and additive Gaussian quality noise.

    ``len_buckets`` > 0 bucketises lengths into equal buckets of width ``len_max / len_buckets`` and
    reports the midpoint (the QoS-aware edge router: 10 buckets up to 300 tokens); likewise ``q_buckets`` for quality.
    """

    len_sigma: float = 0.3
    q_sd: float = 0.05
    len_buckets: int = 0
    len_max: float = 300.0
    q_buckets: int = 0
    q_max: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def reset(self, seed: int | None) -> None:
        if seed is not None:
            self.rng = np.random.default_rng(seed)

    def predict(self, req: Request, models: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        lens, qual = _truth(req, models)
        n = len(models)
        z = self.rng.standard_normal(2 * n)  # (the same draws as two calls of n each)
        lens = np.maximum(1.0, lens * np.exp(self.len_sigma * z[:n]))
        # (max then min: np.clip's values, NaN included, at a fraction of its call overhead)
        qual = np.minimum(np.maximum(qual + self.q_sd * z[n:], 0.0), 1.0)
        if self.len_buckets:
            lens = bucket_midpoints(lens, self.len_max / self.len_buckets, self.len_buckets)
        if self.q_buckets:
            qual = bucket_midpoints(qual, self.q_max / self.q_buckets, self.q_buckets)
        return lens, qual


def bucket_midpoints(x: np.ndarray, w: float, buckets: int) -> np.ndarray:
    """``(min(floor(x / w), buckets - 1) + 0.5) * w``, each value as numpy computes it (the same IEEE operations
    on the same doubles), in Python for the few values of one request (a numpy call per operation costs more)."""
    vals = x.tolist()
    if not all(map(math.isfinite, vals)):
        return (np.minimum(np.floor(x / w), buckets - 1) + 0.5) * w
    top = buckets - 1
    return np.array([(min(math.floor(v / w), top) + 0.5) * w for v in vals], dtype=np.float64)


PREDICTORS: Registry[type[Predictor]] = Registry("predictor")
PREDICTORS.register(OraclePredictor, name="oracle")
PREDICTORS.register(NoisyOraclePredictor, name="noisy")
PREDICTORS.register(ZeroPredictor, name="zero")


def make_predictor(spec: str | dict | Predictor | None, seed: int = 0) -> Predictor:
    """``"oracle"``, ``"noisy"``, ``"zero"`` or ``{"kind": "noisy", ...kwargs}`` (a mapping without kind means
    noisy)."""
    if isinstance(spec, dict) and "kind" not in spec:
        spec = {"kind": "noisy", **spec}
    kind = spec.get("kind") if isinstance(spec, dict) else spec
    extra = {"seed": seed} if kind == "noisy" else {}
    return PREDICTORS.build(spec, Predictor, "oracle", "predictor", **extra)
