"""Synthetic arrival processes, drawn in numpy batches.

Every process yields sorted arrays of absolute arrival times (seconds) from ``batches(rng)``, so
the synthetic stream never holds more than one batch. Processes may be infinite (Poisson, Gamma,
repeating phases) or finite (a phase schedule that does not repeat).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmsim.errors import ConfigError

BATCH = 4096


def _gaps(rng: np.random.Generator, rate: float, cv: float, n: int) -> np.ndarray:
    """``n`` renewal inter-arrival gaps with mean ``1/rate`` and coefficient of variation ``cv``.

    cv == 1 is exponential (Poisson), cv == 0 deterministic, otherwise Gamma(shape=1/cv^2).
    """
    if cv == 1.0:
        return rng.exponential(1.0 / rate, size=n)
    if cv == 0.0:
        return np.full(n, 1.0 / rate)
    shape = 1.0 / (cv * cv)
    return rng.gamma(shape, 1.0 / (rate * shape), size=n)


def _positive(name: str, value: Any, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: expected a number, got {value!r}") from None
    if not np.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        kind = "a non-negative" if allow_zero else "a positive"
        raise ConfigError(f"{name}: expected {kind} finite number, got {value!r}")
    return v


class ArrivalProcess:
    """Base class: ``batches(rng)`` yields sorted arrays of absolute arrival times."""

    def batches(self, rng: np.random.Generator, batch: int = BATCH) -> Iterator[np.ndarray]:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass
class GammaArrivals(ArrivalProcess):
    """Renewal process with mean rate ``rate`` (req/s) and inter-arrival CV ``cv`` (1 = Poisson)."""

    rate: float
    cv: float = 1.0

    def __post_init__(self) -> None:
        self.rate = _positive("arrival.rate", self.rate)
        self.cv = _positive("arrival.cv", self.cv, allow_zero=True)

    def batches(self, rng: np.random.Generator, batch: int = BATCH) -> Iterator[np.ndarray]:
        t = 0.0
        while True:
            times = t + np.cumsum(_gaps(rng, self.rate, self.cv, batch))
            t = float(times[-1])
            yield times

    def describe(self) -> dict[str, Any]:
        if self.cv == 1.0:
            return {"process": "poisson", "rate": self.rate}
        return {"process": "gamma", "rate": self.rate, "cv": self.cv}


def PoissonArrivals(rate: float) -> GammaArrivals:
    """Poisson arrivals at ``rate`` req/s (a Gamma renewal process with cv = 1)."""
    return GammaArrivals(rate, 1.0)


@dataclass(frozen=True)
class Phase:
    """One segment of a piecewise schedule: ``duration`` seconds at ``rate`` req/s with CV ``cv``."""

    duration: float
    rate: float
    cv: float = 1.0


@dataclass
class PhasedArrivals(ArrivalProcess):
    """Piecewise-constant rate: each phase is its own renewal process restarted at the phase start.

    With ``repeat`` the schedule cycles forever (e.g. a square wave); otherwise the stream ends
    with the last phase. Rates may be 0 (a silent phase).
    """

    phases: Sequence[Phase]
    repeat: bool = False

    def __post_init__(self) -> None:
        if not self.phases:
            raise ConfigError("arrival.phases: expected at least one (duration_s, rate) phase, got none")
        checked = []
        for i, ph in enumerate(self.phases):
            checked.append(
                Phase(
                    _positive(f"arrival.phases[{i}].duration", ph.duration),
                    _positive(f"arrival.phases[{i}].rate", ph.rate, allow_zero=True),
                    _positive(f"arrival.phases[{i}].cv", ph.cv, allow_zero=True),
                )
            )
        self.phases = tuple(checked)
        if self.repeat and all(ph.rate == 0 for ph in self.phases):
            raise ConfigError("arrival.phases: a repeating schedule needs at least one phase with rate > 0")

    @property
    def period(self) -> float:
        """Length of one pass through the schedule (s)."""
        return float(sum(ph.duration for ph in self.phases))

    def batches(self, rng: np.random.Generator, batch: int = BATCH) -> Iterator[np.ndarray]:
        start = 0.0
        while True:
            for ph in self.phases:
                end = start + ph.duration
                if ph.rate > 0:
                    yield from _phase_batches(rng, start, end, ph.rate, ph.cv, batch)
                start = end
            if not self.repeat:
                return

    def describe(self) -> dict[str, Any]:
        return {
            "process": "phases",
            "phases": [[ph.duration, ph.rate, ph.cv] for ph in self.phases],
            "repeat": self.repeat,
        }


def _phase_batches(
    rng: np.random.Generator, start: float, end: float, rate: float, cv: float, batch: int
) -> Iterator[np.ndarray]:
    """Arrivals of a renewal process started at ``start``, truncated at ``end``."""
    t = start
    while True:
        expected = (end - t) * rate
        n = int(min(batch, expected + 4.0 * np.sqrt(expected + 1.0) * max(cv, 1.0) + 8))
        times = t + np.cumsum(_gaps(rng, rate, cv, n))
        inside = times[times < end]
        if inside.size:
            yield inside
        if inside.size < times.size:
            return
        t = float(times[-1])


def square_wave(low: float, high: float, period: float, duty: float = 0.5, cv: float = 1.0) -> PhasedArrivals:
    """Repeating high/low schedule: ``duty * period`` s at ``high`` req/s, then the rest at ``low``."""
    duty = _positive("arrival.duty", duty)
    if duty >= 1.0:
        raise ConfigError(f"arrival.duty: expected a fraction in (0, 1), got {duty!r}")
    period = _positive("arrival.period", period)
    return _SquareWave(
        [Phase(period * duty, high, cv), Phase(period * (1 - duty), low, cv)],
        repeat=True,
        params={"process": "square_wave", "low": low, "high": high, "period": period, "duty": duty, "cv": cv},
    )


class _SquareWave(PhasedArrivals):
    """A repeating two-phase schedule that describes itself by its square-wave parameters."""

    def __init__(self, phases: Sequence[Phase], repeat: bool, params: dict[str, Any]) -> None:
        super().__init__(phases, repeat)
        self.params = params

    def describe(self) -> dict[str, Any]:
        return dict(self.params)


@dataclass
class RandomPhases(ArrivalProcess):
    """Markov-modulated Poisson: each phase draws a rate, then a Geometric number of requests.

    ``mixture`` is a list of ``(probability, low, high)``: the phase rate is uniform in
    ``[low, high]`` of a component picked with that probability. The phase holds a Geometric
    number of requests with mean ``mean_requests`` (fixed) or ``mean_seconds * rate`` (so a phase
    lasts ``mean_seconds`` in expectation). Arrivals within a phase are Poisson. This is the
    "unpredictable" workload family of spec 002 (App. B of the best-effort paper).
    """

    mixture: Sequence[tuple[float, float, float]]
    mean_requests: float | None = None
    mean_seconds: float | None = None

    def __post_init__(self) -> None:
        if (self.mean_requests is None) == (self.mean_seconds is None):
            raise ConfigError("arrival: expected exactly one of 'mean_requests' and 'mean_seconds'")
        if not self.mixture:
            raise ConfigError("arrival.mixture: expected at least one [probability, low, high] component")
        comps = []
        for i, comp in enumerate(self.mixture):
            if len(comp) != 3:
                raise ConfigError(f"arrival.mixture[{i}]: expected [probability, low, high], got {comp!r}")
            p = _positive(f"arrival.mixture[{i}].probability", comp[0])
            lo = _positive(f"arrival.mixture[{i}].low", comp[1])
            hi = _positive(f"arrival.mixture[{i}].high", comp[2])
            if hi < lo:
                raise ConfigError(f"arrival.mixture[{i}]: expected low <= high, got {comp!r}")
            comps.append((p, lo, hi))
        total = sum(c[0] for c in comps)
        if abs(total - 1.0) > 1e-6:
            raise ConfigError(f"arrival.mixture: probabilities must sum to 1, got {total}")
        self.mixture = tuple(comps)
        if self.mean_requests is not None:
            self.mean_requests = _positive("arrival.mean_requests", self.mean_requests)
        if self.mean_seconds is not None:
            self.mean_seconds = _positive("arrival.mean_seconds", self.mean_seconds)

    def batches(self, rng: np.random.Generator, batch: int = BATCH) -> Iterator[np.ndarray]:
        probs = np.array([c[0] for c in self.mixture])
        t = 0.0
        while True:
            comp = self.mixture[int(rng.choice(len(probs), p=probs))]
            rate = float(rng.uniform(comp[1], comp[2]))
            mean = self.mean_requests if self.mean_requests is not None else self.mean_seconds * rate
            count = int(rng.geometric(min(1.0, 1.0 / max(mean, 1.0))))
            while count > 0:
                n = min(count, batch)
                times = t + np.cumsum(rng.exponential(1.0 / rate, size=n))
                t = float(times[-1])
                count -= n
                yield times

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"process": "mmpp", "mixture": [list(c) for c in self.mixture]}
        if self.mean_requests is not None:
            d["mean_requests"] = self.mean_requests
        else:
            d["mean_seconds"] = self.mean_seconds
        return d


# Spec 002 (best-effort serving, App. B) "unpredictable" workloads; 10,000 requests each in the paper.
ARRIVAL_PRESETS: dict[str, dict[str, Any]] = {
    # rate ~ 90% U[0.25, 2], 8% U[2, 40], 2% U[40, 48]; Geometric(mean 20*rate) requests per phase
    "best_effort_unpredictable_1": {
        "process": "mmpp",
        "mixture": [[0.90, 0.25, 2.0], [0.08, 2.0, 40.0], [0.02, 40.0, 48.0]],
        "mean_seconds": 20.0,
    },
    # rate ~ U[1, 48] ("randomly fluctuates"; uniform assumed); Geometric(mean 500) requests per phase
    "best_effort_unpredictable_2": {
        "process": "mmpp",
        "mixture": [[1.0, 1.0, 48.0]],
        "mean_requests": 500.0,
    },
}
