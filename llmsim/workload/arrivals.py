"""Synthetic arrival processes, drawn in numpy batches.

Every process yields sorted arrays of absolute arrival times (seconds) from ``batches(rng)``, so
the synthetic stream never holds more than one batch. Processes may be infinite (Poisson, Gamma,
repeating phases) or finite (a phase schedule that does not repeat).

Termination is part of the design: every batch either advances time or raises. Arrival times that
overflow to inf, a rate so high that gaps vanish below float resolution, or a repeating schedule that
cycles without producing arrivals raise :class:`ConfigError` naming the parameter, never loop.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmsim.errors import ConfigError
from llmsim.workload.base import check_float, check_int

BATCH = 4096
CV_MAX = 100.0  # beyond this Gamma(1/cv^2) gaps underflow to 0 in bulk: the "process" is a few giant bursts
MIN_ARRIVALS_PER_CYCLE = 1e-3  # a repeating schedule expecting fewer would cycle ~forever between arrivals
MAX_EMPTY_CYCLES = 1_000_000  # backstop: a repeating schedule this many cycles without an arrival is an error


def _cumsum(t: float, gaps: np.ndarray) -> np.ndarray:
    """Arrival times ``t + cumsum(gaps)``; an overflow to inf is checked by :func:`_checked`, not warned about."""
    with np.errstate(over="ignore"):
        return t + np.cumsum(gaps)


def _gaps(rng: np.random.Generator, rate: float, cv: float, n: int) -> np.ndarray:
    """``n`` renewal inter-arrival gaps with mean ``1/rate`` and coefficient of variation ``cv``.

    cv == 1 is exponential (Poisson), otherwise Gamma(shape=1/cv^2).
    """
    if cv == 1.0:
        return rng.exponential(1.0 / rate, size=n)
    shape = 1.0 / (cv * cv)
    return rng.gamma(shape, 1.0 / (rate * shape), size=n)


def _stationary_gap(rng: np.random.Generator, rate: float, cv: float) -> float:
    """The first gap of a stationary Gamma renewal process (the forward-recurrence time: a length-biased gap,
    Gamma(shape + 1), times U(0, 1)), so a phase of ``d`` seconds expects exactly ``rate * d`` arrivals; a full
    first gap would add ``(cv^2 - 1) / 2`` arrivals to every phase."""
    shape = 1.0 / (cv * cv)
    return float(rng.gamma(shape + 1.0, 1.0 / (rate * shape)) * rng.random())


def _rate(name: str, value: Any, allow_zero: bool = False) -> float:
    """A rate in req/s whose mean gap ``1/rate`` is a finite float (1e-310 would make it inf)."""
    v = check_float(name, value, ge=0.0) if allow_zero else check_float(name, value, gt=0.0)
    if v > 0 and not math.isfinite(1.0 / v):
        raise ConfigError(f"{name}: expected a rate whose mean gap 1/rate is finite (>= 1e-300 req/s), got {value!r}")
    return v


def _cv(name: str, value: Any) -> float:
    return check_float(name, value, gt=0.0, le=CV_MAX)


def _checked(times: np.ndarray, t: float, what: str) -> Iterator[np.ndarray]:
    """Yields a batch that started at ``t``, after checking it advances time and stays finite.

    A batch whose tail overflows to inf yields its finite prefix first and raises only if the consumer asks
    for more, so a short stream at a tiny rate (arrivals near 1e306 s) still works.
    """
    last = float(times[-1])
    if not math.isfinite(last):
        k = int(np.argmin(np.isfinite(times)))
        if k:
            yield times[:k]
        raise ConfigError(
            f"{what}: arrival times overflow to inf after t = {float(times[k - 1]) if k else t:.6g} s; expected a "
            f"rate whose arrivals stay finite (raise the rate or lower num_requests)"
        )
    if last <= t:
        raise ConfigError(
            f"{what}: arrival times stopped advancing at t = {t:.6g} s (gaps below float resolution there); "
            f"expected a lower rate or a shorter stream"
        )
    yield times


class ArrivalProcess:
    """Base class: ``batches(rng)`` yields sorted arrays of absolute arrival times."""

    def batches(self, rng: np.random.Generator, batch: int = BATCH) -> Iterator[np.ndarray]:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        raise NotImplementedError

    def expected_requests(self, duration: float | None) -> float | None:
        """Expected (or an upper bound on the) number of arrivals before ``duration`` (None: the whole
        stream; inf: endless). ``None`` if unknown. Lets a synthetic workload refuse an endless stream."""
        return None

    def first(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """The first ``n`` arrival times (a finite schedule may give fewer)."""
        n = check_int("n", n, ge=0)
        if n == 0:
            return np.empty(0)
        out: list[np.ndarray] = []
        got = 0
        for times in self.batches(rng, n):
            out.append(times[: n - got])
            got += out[-1].size
            if got >= n:
                break
        return np.concatenate(out) if out else np.empty(0)


@dataclass
class GammaArrivals(ArrivalProcess):
    """Renewal process with mean rate ``rate`` (req/s) and inter-arrival CV ``cv`` (1 = Poisson)."""

    rate: float
    cv: float = 1.0

    def __post_init__(self) -> None:
        self.rate = _rate("arrival.rate", self.rate)
        self.cv = _cv("arrival.cv", self.cv)

    def batches(self, rng: np.random.Generator, batch: int = BATCH) -> Iterator[np.ndarray]:
        batch = check_int("batch", batch)
        t = 0.0
        while True:
            times = _cumsum(t, _gaps(rng, self.rate, self.cv, batch))
            yield from _checked(times, t, "arrival.rate")
            t = float(times[-1])

    def describe(self) -> dict[str, Any]:
        if self.cv == 1.0:
            return {"process": "poisson", "rate": self.rate}
        return {"process": "gamma", "rate": self.rate, "cv": self.cv}

    def expected_requests(self, duration: float | None) -> float | None:
        return math.inf if duration is None else self.rate * duration


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
    """Piecewise-constant rate: each phase is its own stationary renewal process, restarted at the phase start
    with a forward-recurrence first gap, so a phase expects ``rate * duration`` arrivals whatever its ``cv``.

    With ``repeat`` the schedule cycles forever (e.g. a square wave); otherwise the stream ends
    with the last phase. Rates may be 0 (a silent phase).
    """

    phases: Sequence[Phase]
    repeat: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.repeat, bool):
            raise ConfigError(f"arrival.repeat: expected true or false, got {self.repeat!r}")
        if not self.phases:
            raise ConfigError("arrival.phases: expected at least one (duration_s, rate) phase, got none")
        checked = []
        for i, ph in enumerate(self.phases):
            if not isinstance(ph, Phase):
                raise ConfigError(f"arrival.phases[{i}]: expected a Phase(duration, rate, cv), got {ph!r}")
            checked.append(Phase(check_float(f"arrival.phases[{i}].duration", ph.duration, gt=0.0),
                                 _rate(f"arrival.phases[{i}].rate", ph.rate, allow_zero=True),
                                 _cv(f"arrival.phases[{i}].cv", ph.cv)))
        self.phases = tuple(checked)
        if not math.isfinite(self.period):
            raise ConfigError(f"arrival.phases: expected a schedule of finite total length, got {self.period!r} s")
        per_cycle = self.expected_requests(self.period)
        if self.repeat and per_cycle < MIN_ARRIVALS_PER_CYCLE:
            raise ConfigError(
                f"arrival.phases: a repeating schedule expects {per_cycle:.3g} requests per {self.period:g} s cycle; "
                f"expected at least {MIN_ARRIVALS_PER_CYCLE:g} (at least one phase with rate * duration > 0)"
            )

    @property
    def period(self) -> float:
        """Length of one pass through the schedule (s)."""
        return float(sum(ph.duration for ph in self.phases))

    def batches(self, rng: np.random.Generator, batch: int = BATCH) -> Iterator[np.ndarray]:
        batch = check_int("batch", batch)
        start = 0.0
        empty_cycles = 0
        while True:
            produced = False
            for ph in self.phases:
                end = start + ph.duration
                if not math.isfinite(end) or end <= start:
                    raise ConfigError(f"arrival.phases: the schedule time ran past the float range at {start:.6g} s")
                if ph.rate > 0:
                    for times in phase_batches(rng, start, end, ph.rate, ph.cv, batch, stationary=True):
                        produced = True
                        yield times
                start = end
            if not self.repeat:
                return
            empty_cycles = 0 if produced else empty_cycles + 1
            if empty_cycles >= MAX_EMPTY_CYCLES:
                raise ConfigError(f"arrival.phases: no arrival in {MAX_EMPTY_CYCLES} cycles of the schedule; "
                                  f"expected rates that produce requests")

    def describe(self) -> dict[str, Any]:
        return {
            "process": "phases",
            "phases": [[ph.duration, ph.rate, ph.cv] for ph in self.phases],
            "repeat": self.repeat,
        }

    def expected_requests(self, duration: float | None) -> float | None:
        if duration is None:
            duration = math.inf if self.repeat else self.period
        if self.repeat and math.isinf(duration):
            return math.inf
        cycles, rest = divmod(duration, self.period) if self.repeat else (0.0, min(duration, self.period))
        total = cycles * sum(ph.rate * ph.duration for ph in self.phases)
        for ph in self.phases:
            take = min(rest, ph.duration)
            total += ph.rate * take
            rest -= take
        return total


def phase_batches(
    rng: np.random.Generator, start: float, end: float, rate: float, cv: float, batch: int,
    stationary: bool = False, first: float | None = None,
) -> Generator[np.ndarray, None, float]:
    """Arrivals of a Gamma renewal process (``rate``, ``cv``) started at ``start`` and truncated at ``end``, in
    numpy batches of at most ``batch``; returns the first arrival at or after ``end`` (inf if time overflowed),
    so a caller can continue the process into the next phase. ``stationary`` draws the first gap from the
    forward-recurrence distribution, so the phase holds ``rate`` req/s on average whatever its ``cv`` (cv = 1
    draws as before: an exponential gap is already stationary); ``first`` instead gives the first arrival
    (>= ``start``), e.g. the previous phase's process carried over."""
    t = start
    lead = first is not None or (stationary and cv != 1.0)
    while True:
        expected = (end - t) * rate
        n = int(min(batch, expected + 4.0 * np.sqrt(expected + 1.0) * max(cv, 1.0) + 8))
        if lead:
            head = first - start if first is not None else _stationary_gap(rng, rate, cv)
            gaps = np.concatenate(([head], _gaps(rng, rate, cv, n - 1)))
            lead = False
        else:
            gaps = _gaps(rng, rate, cv, n)
        times = _cumsum(t, gaps)
        inside = times[times < end]  # an overflow to inf is past ``end``: the phase just ends
        if inside.size < times.size:
            if inside.size:
                yield inside
            return float(times[inside.size])
        yield from _checked(inside, t, "arrival.phases rate")
        t = float(times[-1])


def square_wave(low: float, high: float, period: float, duty: float = 0.5, cv: float = 1.0) -> PhasedArrivals:
    """Repeating high/low schedule: ``duty * period`` s at ``high`` req/s, then the rest at ``low``."""
    duty = check_float("arrival.duty", duty, gt=0.0, lt=1.0)
    period = check_float("arrival.period", period, gt=0.0)
    low = _rate("arrival.low", low, allow_zero=True)
    high = _rate("arrival.high", high)
    cv = _cv("arrival.cv", cv)
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
    """Markov-modulated Poisson (MMPP): each phase draws a rate, then a Geometric number of requests.

    ``mixture`` is a list of ``(probability, low, high)``: the phase rate is uniform in
    ``[low, high]`` of a component picked with that probability (no draw when there is one
    component). The phase holds a Geometric number of requests with mean ``mean_requests`` (fixed) or
    ``mean_seconds * rate`` (so a phase lasts ``mean_seconds`` in expectation). Arrivals within a
    phase are Poisson. This is the "unpredictable" workload family of "Learned Best-Effort LLM Serving"
    (its App. B), and the one MMPP generator of the project (``llmsim.envs.tasks`` uses it too).
    """

    mixture: Sequence[tuple[float, float, float]]
    mean_requests: float | None = None
    mean_seconds: float | None = None

    def __post_init__(self) -> None:
        if (self.mean_requests is None) == (self.mean_seconds is None):
            raise ConfigError("arrival: expected exactly one of 'mean_requests' and 'mean_seconds'")
        if isinstance(self.mixture, str | bytes) or not self.mixture:
            raise ConfigError(f"arrival.mixture: expected a list of [probability, low, high], got {self.mixture!r}")
        comps = []
        for i, comp in enumerate(self.mixture):
            if isinstance(comp, str | bytes) or not isinstance(comp, Sequence | np.ndarray) or len(comp) != 3:
                raise ConfigError(f"arrival.mixture[{i}]: expected [probability, low, high], got {comp!r}")
            p = check_float(f"arrival.mixture[{i}].probability", comp[0], ge=0.0, le=1.0)
            lo = _rate(f"arrival.mixture[{i}].low", comp[1])
            hi = _rate(f"arrival.mixture[{i}].high", comp[2])
            if hi < lo:
                raise ConfigError(f"arrival.mixture[{i}]: expected low <= high, got {list(comp)!r}")
            comps.append((p, lo, hi))
        total = sum(c[0] for c in comps)
        if abs(total - 1.0) > 1e-6:
            raise ConfigError(f"arrival.mixture: expected probabilities summing to 1, got {total!r}")
        self.mixture = tuple(comps)
        self._probs = np.array([c[0] for c in comps])
        if self.mean_requests is not None:
            self.mean_requests = check_float("arrival.mean_requests", self.mean_requests, ge=1.0)
        if self.mean_seconds is not None:
            self.mean_seconds = check_float("arrival.mean_seconds", self.mean_seconds, gt=0.0)

    def _phase(self, rng: np.random.Generator) -> tuple[float, int]:
        """One phase: (rate, number of requests). Draws: component (if > 1), rate, count."""
        comp = self.mixture[0] if len(self.mixture) == 1 else self.mixture[int(rng.choice(len(self._probs),
                                                                                         p=self._probs))]
        rate = float(rng.uniform(comp[1], comp[2]))
        mean = self.mean_requests if self.mean_requests is not None else self.mean_seconds * rate
        return rate, int(rng.geometric(1.0 / max(mean, 1.0)))

    def runs(self, rng: np.random.Generator, batch: int = BATCH,
             limit: int | None = None) -> Iterator[tuple[np.ndarray, float]]:
        """(arrival times, phase rate) pieces of at most ``batch`` arrivals; with ``limit``, the stream
        stops after ``limit`` arrivals and draws no gap past them (so a caller sharing ``rng`` sees the
        same state whatever the batch size)."""
        batch = check_int("batch", batch)
        left = math.inf if limit is None else check_int("limit", limit, ge=0)
        t = 0.0
        while left > 0:
            rate, count = self._phase(rng)
            while count > 0 and left > 0:
                n = int(min(count, batch, left))
                times = _cumsum(t, rng.exponential(1.0 / rate, size=n))
                for piece in _checked(times, t, "arrival.mixture rate"):
                    yield piece, rate
                t = float(times[-1])
                count -= n
                left -= n

    def batches(self, rng: np.random.Generator, batch: int = BATCH) -> Iterator[np.ndarray]:
        for times, _ in self.runs(rng, batch):
            yield times

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The first ``n`` arrival times and the phase rate in force at each (each phase's gaps drawn at once)."""
        n = check_int("n", n, ge=0)
        pieces = list(self.runs(rng, batch=max(n, 1), limit=n))
        if not pieces:
            return np.empty(0), np.empty(0)
        times = np.concatenate([p[0] for p in pieces])
        rates = np.concatenate([np.full(p[0].size, p[1]) for p in pieces])
        return times, rates

    def first(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.sample(rng, n)[0]

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"process": "mmpp", "mixture": [list(c) for c in self.mixture]}
        if self.mean_requests is not None:
            d["mean_requests"] = self.mean_requests
        else:
            d["mean_seconds"] = self.mean_seconds
        return d

    def expected_requests(self, duration: float | None) -> float | None:
        return math.inf if duration is None else max(c[2] for c in self.mixture if c[0] > 0) * duration


# "Learned Best-Effort LLM Serving" (App. B): the "unpredictable" workloads; 10,000 requests each in the paper.
# Plain config data (each entry is an ``arrival`` mapping), not a registry of classes: ``{preset: name}``
# is expanded to the mapping and built like any other arrival config.
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
# The same paper's "stable" schedule when no rate is given: random rates in [0.25, 48] held ~40 s each.
BEST_EFFORT_STABLE = {"process": "mmpp", "mixture": [[1.0, 0.25, 48.0]], "mean_seconds": 40.0}
