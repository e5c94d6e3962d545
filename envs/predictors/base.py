"""Predictors of per-model output length and quality, as seen by observations (never by the engine).

The interface plus an oracle (ground truth), a noisy oracle (for ablations of prediction error), optionally
bucketised like the DistilBERT classifiers of the QoS-aware edge router and "Intelligent Router for LLM Workloads"
(the reported value is the bucket midpoint), a zero predictor (the QoS-aware edge router's "without
predictors" ablation) and a wrapper that zeroes one output of another predictor (its partial ablations). The learned
ones are beside this module (length_buckets.py, qos.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral

import numpy as np

from llmsim import portable
from llmsim.envs.options import non_negative, positive
from llmsim.errors import ConfigError
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


NOISE_BLOCK = 4096  # standard normals the noisy oracle draws at a time


@dataclass
class NoisyOraclePredictor(Predictor):
    """Truth with multiplicative log-normal length noise and additive Gaussian quality noise.

    ``len_buckets`` > 0 bucketises lengths into equal buckets of width ``len_max / len_buckets`` and
    reports the midpoint (the QoS-aware edge router: 10 buckets up to 300 tokens); likewise ``q_buckets`` for quality.

    Each call reads the next ``2 n`` standard normals of its generator (n lengths, then n qualities). They are drawn
    ``NOISE_BLOCK`` at a time, with the length factors ``exp(len_sigma z)`` of a block computed at once: a generator's
    stream does not depend on how it is cut into draws, so the values are the ones a draw per call gives, at a
    fraction of the numpy calls (a reset without a seed keeps the drawn rest, the stream's continuation).
    """

    len_sigma: float = 0.3
    q_sd: float = 0.05
    len_buckets: int = 0
    len_max: float = 300.0
    q_buckets: int = 0
    q_max: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        # a NaN noise scale made NaN predictions (observations outside their space), a zero bucket range divided by 0
        for key in ("len_sigma", "q_sd"):
            non_negative(f"predictor.{key}", getattr(self, key))
        for key in ("len_max", "q_max"):
            positive(f"predictor.{key}", getattr(self, key))
        for key in ("len_buckets", "q_buckets"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, Integral) or v < 0:
                raise ConfigError(f"predictor.{key}: expected an integer >= 0 (0: no buckets), got {v!r}")
        self.reset(self.seed)

    def reset(self, seed: int | None) -> None:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
            self._z: list[float] = []  # drawn, not yet used normals ...
            self._factor: list[float] = []  # ... and exp(len_sigma * z) of each
            self._next = 0

    def _noise(self, m: int) -> int:
        """Where the next ``m`` normals start in the buffers (refilled from the generator when short)."""
        k = self._next
        if k + m > len(self._z):
            z = self.rng.standard_normal(max(NOISE_BLOCK, m))
            self._z = self._z[k:] + z.tolist()
            self._factor = self._factor[k:] + portable.exp(self.len_sigma * z).tolist()
            k = 0
        self._next = k + m
        return k

    def predict(self, req: Request, models: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        n = len(models)
        k = self._noise(2 * n)
        factor, z = self._factor, self._z
        # (float64 arithmetic on Python floats, as numpy's on the float64 arrays of the truth)
        lens = [max(1.0, float(req.output_for(m)) * factor[k + i]) for i, m in enumerate(models)]
        q = req.quality_by_model or {}
        sd = self.q_sd
        # (max then min: np.clip's order of the bounds)
        qual = [min(max(float(q.get(m, 0.0)) + sd * z[k + n + i], 0.0), 1.0) for i, m in enumerate(models)]
        return (bucket_midpoints(lens, self.len_max / self.len_buckets, self.len_buckets) if self.len_buckets
                else np.array(lens),
                bucket_midpoints(qual, self.q_max / self.q_buckets, self.q_buckets) if self.q_buckets
                else np.array(qual))


def bucket_midpoints(x: np.ndarray | list[float], w: float, buckets: int) -> np.ndarray:
    """``(min(floor(x / w), buckets - 1) + 0.5) * w``, each value as numpy computes it (the same IEEE operations
    on the same doubles), in Python for the few values of one request (a numpy call per operation costs more)."""
    vals = x.tolist() if isinstance(x, np.ndarray) else x
    if not all(map(math.isfinite, vals)):
        arr = np.asarray(x, dtype=np.float64)
        return (np.minimum(np.floor(arr / w), buckets - 1) + 0.5) * w
    top = buckets - 1
    return np.array([(min(math.floor(v / w), top) + 0.5) * w for v in vals], dtype=np.float64)


ABLATABLE = ("score", "length")  # the outputs AblatedPredictor can zero: predicted quality, predicted length


def ablated_outputs(zero: object) -> tuple[str, ...]:
    """``zero`` as a tuple in ``ABLATABLE``'s order: a non-empty list of distinct names from it, else one line."""
    items = [zero] if isinstance(zero, str) else zero
    if not isinstance(items, Sequence) or not items or not all(isinstance(z, str) for z in items) \
            or len(set(items)) != len(items) or not set(items) <= set(ABLATABLE):
        raise ConfigError(f"predictor.zero: expected a non-empty list of distinct names from {list(ABLATABLE)} "
                          f"(score: predicted quality, length: predicted output length), got {zero!r}")
    return tuple(z for z in ABLATABLE if z in items)


def under_base(message: str) -> str:
    """A predictor error about an ablate predictor's base, its key moved under ``predictor.base``."""
    return "predictor.base" + message[len("predictor"):] if message.startswith("predictor") else message


class AblatedPredictor(Predictor):
    """``base``'s predictions with the outputs named in ``zero`` set to 0: the QoS-aware edge router's predictor
    ablations (Fig. 18). ``zero: [score]`` is ZS+PL, ``[length]`` PS+ZL, ``[score, length]`` ZS+ZL (as ``zero``).

    ``base`` is a predictor spec of this registry (or a Predictor, e.g. a learned one built by
    ``from_config.make_agent_predictor``). It is always called, so its random stream (a noisy oracle's) advances as
    without the wrapper: the kept output equals the base predictor's, value for value, under the same seed."""

    def __init__(self, base: str | Mapping | Predictor | None = None, zero: object = None, seed: int = 0) -> None:
        if base is None:
            raise ConfigError(f"predictor.base: the ablate predictor needs the predictor it ablates, one of "
                              f"{[n for n in PREDICTORS.names() if n != 'ablate']}, a mapping or a Predictor")
        self.zero = ablated_outputs(zero)
        if isinstance(base, Mapping):
            base = dict(base)
        if base == "ablate" or (isinstance(base, dict) and base.get("kind") == "ablate"):
            raise ConfigError("predictor.base: an ablate predictor cannot wrap another; list every output to zero "
                              "in one 'zero'")
        kind = base.get("kind") if isinstance(base, dict) else base
        if kind in LEARNED:
            raise ConfigError(not_fitted_here("predictor.base", kind, "the whole ablate spec", ("ablate",)))
        try:
            self.base = make_predictor(base, seed=seed)
        except ConfigError as e:
            raise ConfigError(under_base(str(e))) from None

    def reset(self, seed: int | None) -> None:
        self.base.reset(seed)

    def predict(self, req: Request, models: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        lens, qual = self.base.predict(req, models)
        return (np.zeros(len(models)) if "length" in self.zero else lens,
                np.zeros(len(models)) if "score" in self.zero else qual)


LEARNED = ("learned", "learned_qos")  # fitted by from_config.make_agent_predictor (needs the training stack)
FITTED_BY = "llmsim.envs.predictors.from_config.make_agent_predictor, which fits it first, as llmsim-train does"


def not_fitted_here(where: str, kind: str, what: str, besides: tuple[str, ...] = ()) -> str:
    """Why the env refuses a learned predictor ``kind`` at ``where``, and what builds it instead."""
    own = ", ".join(n for n in sorted(PREDICTORS.names()) if n not in besides)
    return (f"{where}: {kind!r} is a learned predictor, which the env does not fit (its own: {own}); give {what} to "
            f"{FITTED_BY}, and pass its result as the env's predictor")


PREDICTORS: Registry[type[Predictor]] = Registry("predictor")
PREDICTORS.register(OraclePredictor, name="oracle")
PREDICTORS.register(NoisyOraclePredictor, name="noisy")
PREDICTORS.register(ZeroPredictor, name="zero")
PREDICTORS.register(AblatedPredictor, name="ablate")


def make_predictor(spec: str | dict | Predictor | None, seed: int = 0) -> Predictor:
    """``"oracle"``, ``"noisy"``, ``"zero"``, ``{"kind": "noisy", ...kwargs}`` (a mapping without kind means
    noisy) or ``{"kind": "ablate", "base": <spec>, "zero": ["score"] | ["length"] | ["score", "length"]}``."""
    if isinstance(spec, dict) and "kind" not in spec:
        spec = {"kind": "noisy", **spec}
    kind = spec.get("kind") if isinstance(spec, dict) else spec
    if kind in LEARNED:
        raise ConfigError(not_fitted_here("predictor", kind, "it"))
    if isinstance(kind, str) and kind not in PREDICTORS:
        raise ConfigError(f"predictor: unknown predictor {kind!r}; expected one of {sorted(PREDICTORS.names())}, "
                          f"or learned or learned_qos through {FITTED_BY}, and pass its result as the env's predictor")
    extra = {"seed": seed} if kind in ("noisy", "ablate") else {}
    return PREDICTORS.build(spec, Predictor, "oracle", "predictor", **extra)
