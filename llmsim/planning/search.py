"""The rate search: the highest arrival rate at which SLO attainment stays at or above a target.

:class:`RateSearch` brackets, then bisects in log-rate; its bracket is rebuilt from *every* evaluated point by the
first-crossing rule (``hi`` = the lowest rate that missed the target, ``lo`` = the highest rate below it that met
it), so a capacity is never reported above a rate that already failed, and a curve that is not monotone says so.
It is a state machine (``next_rates`` / ``record``) rather than a loop, so that many searches share one process
pool in lockstep rounds (:mod:`llmsim.planning.runner`). :class:`CapacityConfig` is the ``capacity`` config group
it reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, StrictBool

from llmsim.errors import ConfigError
from llmsim.schema import Fraction, NonNegInt, PosFloat, PosInt, Schema

METRICS = ("slo_attainment", "slo_ttft_attainment", "slo_tpot_attainment", "slo_e2el_attainment")


class CapacityConfig(Schema):
    """``capacity`` group: what to search and how precisely."""

    where: ClassVar[str] = "capacity"
    target: Fraction = 0.9
    seeds: PosInt = 3
    seed0: NonNegInt = 0
    rate_min: PosFloat = 0.25
    rate_max: PosFloat = 256.0
    rate_start: PosFloat | None = None
    growth: Annotated[PosFloat, Field(gt=1, le=100)] = 2.0
    tolerance: Fraction = 0.05
    num_requests: PosInt = 1000
    requests_per_instance: StrictBool = False  # true: num_requests per instance (compare clusters of different sizes)
    policies: Annotated[list[str | dict[str, Any]], Field(min_length=1)] | None = None
    clusters: Annotated[list[str | dict[str, Any]], Field(min_length=1)] | None = None
    workers: PosInt | None = None
    max_evaluations: PosInt = 40
    points_per_round: Annotated[PosInt, Field(le=64)] = 1
    metric: Literal["slo_attainment", "slo_ttft_attainment", "slo_tpot_attainment", "slo_e2el_attainment"] = (
        "slo_attainment")
    # false: simulate on profiles without their skewed-decode term (llmsim.perf.decode_skew), as replay's
    # --no-decode-skew; a profile without one is unchanged
    decode_skew: StrictBool = True

    def checked(self) -> CapacityConfig:
        """Relations between keys, one line each (pydantic would report the whole mapping as the input)."""
        if self.rate_min >= self.rate_max:
            raise ConfigError(f"capacity.rate_min: expected a value below capacity.rate_max ({self.rate_max:g}), "
                              f"got {self.rate_min:g}")
        if self.rate_start is not None and not self.rate_min <= self.rate_start <= self.rate_max:
            raise ConfigError(f"capacity.rate_start: expected a value in [rate_min, rate_max] = [{self.rate_min:g}, "
                              f"{self.rate_max:g}], got {self.rate_start:g}")
        return self


@dataclass
class Point:
    """One evaluated rate: mean attainment over seeds and the per-seed values behind it."""

    rate: float
    attainment: float
    per_seed: list[float]
    goodput: float
    throughput: float
    p99_ttft_ms: float
    p99_tpot_ms: float
    duration_s: float = math.nan  # first arrival to last answer, drops included (the runs' mean): throughputs' divisor


def make_point(rate: float, results: list[dict[str, Any]], metric: str) -> Point:
    def mean(key: str) -> float:
        vals = [float(r[key]) for r in results if r.get(key) is not None and math.isfinite(float(r[key]))]
        return sum(vals) / len(vals) if vals else float("nan")

    per_seed = [float(r.get(metric) or 0.0) for r in results]
    return Point(rate, sum(per_seed) / len(per_seed), per_seed, mean("request_goodput"),
                 mean("request_throughput"), mean("p99_ttft_ms"), mean("p99_tpot_ms"), mean("duration"))


class RateSearch:
    """Bracket-then-bisect over log-rate, rebuilt from all points by the first-crossing rule each step.

    A state machine (``next_rates`` / ``record``) rather than a loop, so that many searches share one
    process pool and advance in lockstep rounds; ``stop`` lets a caller end it early (budget, pruning).
    """

    def __init__(self, cap: CapacityConfig, *, start: float | None = None, growth: float | None = None,
                 accelerate: bool = False, max_evaluations: int | None = None) -> None:
        self.cap = cap
        self.target = cap.target
        self.start = start or cap.rate_start or math.sqrt(cap.rate_min * cap.rate_max)
        self.start = min(max(self.start, cap.rate_min), cap.rate_max)
        self.growth = growth or cap.growth
        self.accelerate = accelerate  # squared step after each step that did not bracket (a start far off)
        self.max_evaluations = max_evaluations or cap.max_evaluations
        self.points: list[Point] = []
        self.done = False
        self.note = ""

    @property
    def capacity(self) -> float:
        """The highest rate met below the first miss (0 if none): final once ``done``."""
        return self.bracket()[0] or 0.0

    def bracket(self) -> tuple[float | None, float | None]:
        """(lo, hi): hi = lowest rate that missed, lo = highest rate below hi that met (None = not found)."""
        hi = min((p.rate for p in self.points if p.attainment < self.target), default=None)
        lo = max((p.rate for p in self.points if p.attainment >= self.target and (hi is None or p.rate < hi)),
                 default=None)
        return lo, hi

    def violations(self) -> list[Point]:
        """Points that met the target above the first miss: evidence of a non-monotone curve."""
        _, hi = self.bracket()
        return [] if hi is None else [p for p in self.points if p.rate > hi and p.attainment >= self.target]

    def stop(self, note: str) -> None:
        self.note = note
        self.done = True

    def next_rates(self) -> list[float]:
        """The rates to evaluate next (empty once done); decides convergence and the edge cases."""
        if self.done:
            return []
        c = self.cap
        k = min(c.points_per_round, self.max_evaluations - len(self.points))
        lo, hi = self.bracket()
        if lo is not None and hi is not None and hi / lo - 1.0 <= c.tolerance:
            self.stop("")
        elif lo is not None and hi is None and lo >= c.rate_max:
            self.stop(f"target still met at rate_max={c.rate_max:g}; capacity is at least that")
        elif lo is None and hi is not None and hi <= c.rate_min:
            self.stop(f"target missed already at rate_min={c.rate_min:g}")
        elif k <= 0:
            self.stop(f"max_evaluations={self.max_evaluations} reached before the bracket was within tolerance")
        if self.done:
            return []
        g = self.growth ** (2 ** max(0, len(self.points) - 1)) if self.accelerate else self.growth
        if lo is None and hi is None:
            rates = [self.start * g ** (j - (k - 1) / 2) for j in range(k)]
        elif hi is None:
            rates = [lo * g ** (j + 1) for j in range(k)]
        elif lo is None:
            rates = [hi / g ** (j + 1) for j in range(k)]
        else:
            rates = [lo * (hi / lo) ** ((j + 1) / (k + 1)) for j in range(k)]
        seen = {rate_key(p.rate) for p in self.points}
        out = sorted({rate_key(min(max(r, c.rate_min), c.rate_max)) for r in rates} - seen)
        if not out:  # every candidate clamps onto an evaluated rate: nothing more to learn
            self.stop("rate bounds reached")
        return out

    def record(self, point: Point) -> None:
        self.points.append(point)

    def curve(self) -> list[Point]:
        return sorted(self.points, key=lambda p: p.rate)

    def summary_note(self) -> str:
        bad = self.violations()
        if not bad:
            return self.note
        _, hi = self.bracket()
        rates = ", ".join(f"{p.rate:.4g}" for p in sorted(bad, key=lambda p: p.rate))
        msg = (f"non-monotone: target met again at {rates} above the first miss at {hi:.4g}; "
               "capacity is the first crossing")
        return f"{msg}; {self.note}" if self.note else msg


def rate_key(rate: float) -> float:
    """Rates equal to 12 significant digits are the same evaluation (log-spacing round-off)."""
    return float(f"{rate:.12g}")
