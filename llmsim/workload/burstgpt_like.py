"""``kind: burstgpt_like``: synthetic traffic shaped like the BurstGPT trace (Azure OpenAI GPT services).

The real trace cannot be shipped (and is often not at hand), and the paper publishes its model family but
not its fits, so this generator combines the published structure with numbers measured on the real files:

- arrivals: per (service, model) stream a Gamma renewal process refitted every ``period_s`` (the paper's
  20 minutes): each period has its own rate (an hour-of-day profile, optionally with lognormal noise for the
  API's aperiodic bursts) and its own CV (Gamma shape 1/CV^2);
- request lengths: truncated Zipf (the paper's family), exponent and support fitted to measured quantiles;
- response lengths: a lognormal mixture, bimodal for ChatGPT (the paper's finding);
- request and response correlated through a Gaussian copula.

Every default, its source (published / third-party measured / our choice) and the fits are in
docs/workloads.md. Streams are independent child streams of the seed and merged lazily by time, so a stream's
requests do not depend on which other streams are mixed in.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.special import ndtr

from llmsim import portable
from llmsim.errors import ConfigError
from llmsim.request import Request
from llmsim.workload.arrivals import BATCH, CV_MAX, phase_batches
from llmsim.workload.base import MAX_TOKENS, Workload, WorkloadStats, check_float, check_int

DAY = 86400.0
MODELS = ("ChatGPT", "GPT-4")
SERVICES = {"conversation": "Conversation log", "api": "API log"}  # config name -> the trace's Log Type
MAX_ZIPF_SUPPORT = 2**20  # tokens between min and max of a Zipf length (its CDF table is kept in memory)
MAX_REQUESTS = 1e9  # a stream bounded only by `duration` may not expect more (as for kind: synthetic)
MIN_DAILY_REQUESTS = 0.01  # a stream expecting fewer per day would loop over empty periods for ages
FLUSH_PERIODS = 72  # a quiet stream still reports how far it got at least every 72 periods

# Hour-of-day request counts (slot h = h:00-h:59, local time), shapes only: normalised to mean 1.
# Conversation: read from the BurstGPT README figure (Fig3-4, first two months, medians over days): ~5/h at
# 02-07 h, ~160/h at 10-11 h, ~70/h at 12 h, ~190/h at 15-16 h, ~100/h in the evening; the hours between
# are interpolated by us. GPT-4 conversation has the same shape at half the volume.
CONV_PROFILE = (45, 20, 5, 5, 5, 5, 5, 15, 60, 120, 160, 160, 70, 130, 170, 190, 190, 150, 110, 100, 100, 100,
                90, 70)
# ChatGPT API: no clean daily shape in the figure; a cosine peaking at 14:30 with the 3.0x hour-of-day
# peak/trough ratio measured on BurstGPT_3 (the phase is our choice). GPT-4 API: flat (its night is as busy
# as its day in the figure).
API_PROFILE = tuple(round(1 + 0.5 * math.cos(2 * math.pi * (h - 14) / 24), 6) for h in range(24))


@dataclass(frozen=True)
class StreamSpec:
    """Everything that defines one (service, model) stream apart from its share of the rate."""

    service: str
    model: str
    profile: tuple[float, ...]  # rate multipliers over the day (N equal slots, linear between slot centres)
    cv: tuple[float, ...]  # inter-arrival CV over the day, same layout
    rate_noise: float  # log-sd of an independent mean-one lognormal rate factor per period
    request: tuple[float, int, int]  # Zipf (theta, min, max) of request tokens
    response: tuple[tuple[float, float, float], ...]  # lognormal mixture: (weight, median, sigma) per mode
    corr: float  # Gaussian-copula correlation of (request, response)


_API_RESPONSE = ((0.903, 12.6, 0.788), (0.097, 492.3, 0.40))
DEFAULT_STREAMS: dict[tuple[str, str], StreamSpec] = {
    ("conversation", "ChatGPT"): StreamSpec(
        "conversation", "ChatGPT", CONV_PROFILE, (0.92,), 0.0, (1.682, 181, 4708),
        ((0.10, 12.6, 0.788), (0.90, 134.8, 0.926)), 0.49),
    ("conversation", "GPT-4"): StreamSpec(
        "conversation", "GPT-4", CONV_PROFILE, (0.92,), 0.0, (1.682, 300, 7833), ((1.0, 393.6, 0.476),), 0.49),
    ("api", "ChatGPT"): StreamSpec(
        "api", "ChatGPT", API_PROFILE, (1.5,), 0.5, (2.674, 206, 13656), _API_RESPONSE, 0.34),
    ("api", "GPT-4"): StreamSpec("api", "GPT-4", (1.0,), (1.5,), 0.5, (2.674, 206, 13656), _API_RESPONSE, 0.34),
}
STREAM_ORDER = tuple(DEFAULT_STREAMS)  # fixes each stream's child seed, whatever the mix
DEFAULT_MIX = {"conversation": 0.044, "api": 0.956}  # BurstGPT_3 rows: 233,617 conversation of 5,344,021


class DayProfile:
    """A periodic function of the time of day: ``values`` at the centres of N equal slots, linear between.

    ``mean(t0, t1)`` is the exact average over ``[t0, t1)`` (integral of the piecewise-linear function), so
    the per-period rates of a whole day average exactly to the mean of ``values``.
    """

    def __init__(self, values: Sequence[float], name: str, normalise: bool) -> None:
        if isinstance(values, str | bytes) or not isinstance(values, Sequence) or not values:
            raise ConfigError(f"{name}: expected a non-empty list of numbers over the day, got {values!r}")
        v = [check_float(f"{name}[{i}]", x, ge=0.0) for i, x in enumerate(values)]
        avg = sum(v) / len(v)
        if normalise:
            if avg <= 0:
                raise ConfigError(f"{name}: expected at least one value > 0, got {list(values)!r}")
            v = [x / avg for x in v]
        self.values = tuple(v)
        w = DAY / len(v)
        self.x = [-0.5 * w] + [(i + 0.5) * w for i in range(len(v))] + [DAY + 0.5 * w]
        self.y = [v[-1], *v, v[0]]
        self.cum = [0.0]
        for i in range(len(self.x) - 1):
            self.cum.append(self.cum[-1] + (self.x[i + 1] - self.x[i]) * (self.y[i] + self.y[i + 1]) / 2)
        self.day_integral = self._F(DAY) - self._F(0.0)

    def _seg(self, c: float) -> int:
        return min(max(bisect.bisect_right(self.x, c) - 1, 0), len(self.x) - 2)

    def _interp(self, c: float) -> float:
        i = self._seg(c)
        return self.y[i] + (self.y[i + 1] - self.y[i]) * (c - self.x[i]) / (self.x[i + 1] - self.x[i])

    def at(self, t: float) -> float:
        """Value at time ``t`` (seconds since midnight of day 0)."""
        return self._interp(t % DAY)

    def _F(self, c: float) -> float:
        """Integral from the first node to ``c`` in [0, DAY]."""
        i = self._seg(c)
        return self.cum[i] + (c - self.x[i]) * (self.y[i] + self._interp(c)) / 2

    def _G(self, t: float) -> float:
        """Integral from midnight of day 0 to ``t`` >= 0."""
        days, c = divmod(t, DAY)
        return days * self.day_integral + self._F(c) - self._F(0.0)

    def mean(self, t0: float, t1: float) -> float:
        """Average over ``[t0, t1)``, computed near day 0 so that late times lose no precision."""
        c0 = t0 % DAY
        return (self._G(c0 + (t1 - t0)) - self._G(c0)) / (t1 - t0)


class TruncatedZipf:
    """Zipf lengths: P(k) proportional to k^-theta on [lo, hi] (numpy's zipf conditioned on the range)."""

    def __init__(self, theta: float, lo: int, hi: int, name: str = "request") -> None:
        self.theta = check_float(f"{name}.theta", theta, gt=0.0, le=10.0)
        self.lo = check_int(f"{name}.min", lo, ge=1, le=MAX_TOKENS)
        self.hi = check_int(f"{name}.max", hi, ge=self.lo, le=MAX_TOKENS)
        if self.hi - self.lo + 1 > MAX_ZIPF_SUPPORT:
            raise ConfigError(f"{name}: expected max - min < {MAX_ZIPF_SUPPORT} tokens, got [{self.lo}, {self.hi}]")
        k = np.arange(self.lo, self.hi + 1, dtype=np.float64)
        w = k ** -self.theta
        self.cdf = np.cumsum(w) / w.sum()
        self.mean = float((k * w).sum() / w.sum())

    def ppf(self, u: np.ndarray) -> np.ndarray:
        """Lengths at probabilities ``u`` in [0, 1)."""
        return self.lo + np.minimum(np.searchsorted(self.cdf, u, side="right"), self.cdf.size - 1)

    def describe(self) -> dict[str, Any]:
        return {"dist": "zipf", "theta": self.theta, "min": self.lo, "max": self.hi}


class LogNormalMixture:
    """A mixture of lognormal modes ``(weight, median, sigma)``, sampled through its quantile function so that
    a Gaussian copula can correlate it with another length while keeping this marginal exact."""

    GRID = 8192  # points of the tabulated CDF (log scale, 8 sigma either side of every mode)

    def __init__(self, components: Sequence[Sequence[float]], name: str = "response") -> None:
        if isinstance(components, str | bytes) or not isinstance(components, Sequence) or not components:
            raise ConfigError(f"{name}: expected a list of [weight, median, sigma] modes, got {components!r}")
        comps = []
        for i, c in enumerate(components):
            if isinstance(c, str | bytes) or not isinstance(c, Sequence) or len(c) != 3:
                raise ConfigError(f"{name}[{i}]: expected [weight, median, sigma], got {c!r}")
            comps.append((check_float(f"{name}[{i}].weight", c[0], ge=0.0),
                          check_float(f"{name}[{i}].median", c[1], gt=0.0, le=MAX_TOKENS),
                          check_float(f"{name}[{i}].sigma", c[2], gt=0.0, le=5.0)))
        total = sum(c[0] for c in comps)
        if total <= 0:
            raise ConfigError(f"{name}: expected mode weights with a positive sum, got {list(components)!r}")
        self.components = tuple((w / total, m, s) for w, m, s in comps if w > 0)
        self._table: tuple[np.ndarray, np.ndarray] | None = None

    def _cdf_table(self) -> tuple[np.ndarray, np.ndarray]:
        if self._table is None:
            mu = np.array([math.log(c[1]) for c in self.components])  # (per value, as in llmsim.portable)
            sigma = np.array([c[2] for c in self.components])
            x = np.linspace((mu - 8 * sigma).min(), (mu + 8 * sigma).max(), self.GRID)
            cdf = sum(w * ndtr((x - m) / s) for (w, _, s), m in zip(self.components, mu))
            self._table = (cdf / cdf[-1], x)
        return self._table

    def ppf(self, u: np.ndarray) -> np.ndarray:
        """Real-valued lengths at probabilities ``u`` (the tabulated CDF inverted linearly in log space)."""
        cdf, x = self._cdf_table()
        return portable.exp(np.interp(u, cdf, x))

    @property
    def mean(self) -> float:
        return float(sum(w * m * math.exp(s * s / 2) for w, m, s in self.components))

    def describe(self) -> list[list[float]]:
        return [list(c) for c in self.components]


def _weights(name: str, value: str | Mapping[str, float], names: Sequence[str]) -> dict[str, float]:
    """A single name (weight 1) or ``{name: weight}`` over ``names``, normalised; zero weights dropped."""
    if isinstance(value, str):
        value = {value: 1.0}
    if not isinstance(value, Mapping) or not value:
        raise ConfigError(f"{name}: expected one of {list(names)} or a mapping of them to weights, got {value!r}")
    out = {}
    for k, w in value.items():
        if k not in names:
            raise ConfigError(f"{name}: unknown value {k!r}; expected one of {list(names)}")
        out[k] = check_float(f"{name}.{k}", w, ge=0.0)
    total = sum(out.values())
    if total <= 0:
        raise ConfigError(f"{name}: expected weights with a positive sum, got {dict(value)!r}")
    return {k: w / total for k, w in out.items() if w > 0}


def _as_tuple(value: float | Sequence[float]) -> tuple[float, ...]:
    return tuple(value) if isinstance(value, Sequence) and not isinstance(value, str) else (value,)  # type: ignore[arg-type]


def apply_overrides(spec: StreamSpec, over: Mapping[str, Any] | None, diurnal: bool) -> StreamSpec:
    """The stream's defaults with a service's overrides (``profile``, ``cv``, ``rate_noise``, ``request``,
    ``response``, ``corr``); ``diurnal=False`` flattens the rate profile."""
    if over is not None and not isinstance(over, Mapping):
        raise ConfigError(f"{spec.service}: expected a mapping of a service's parameters, got {over!r}")
    over = dict(over or {})
    unknown = set(over) - {"profile", "cv", "rate_noise", "request", "response", "corr"}
    if unknown:
        raise ConfigError(f"{spec.service}: unknown key(s) {sorted(unknown)}; allowed: corr, cv, profile, "
                          f"rate_noise, request, response")
    changes: dict[str, Any] = {k: v for k, v in over.items() if v is not None}
    if "profile" in changes:
        changes["profile"] = _as_tuple(changes["profile"])
    if "cv" in changes:
        changes["cv"] = _as_tuple(changes["cv"])
    if "request" in changes:
        if not isinstance(changes["request"], Mapping):
            raise ConfigError(f"{spec.service}.request: expected a mapping of theta, min, max, got "
                              f"{changes['request']!r}")
        req = dict(changes["request"])
        if set(req) - {"theta", "min", "max"}:
            raise ConfigError(f"{spec.service}.request: unknown key(s) {sorted(set(req) - {'theta', 'min', 'max'})}; "
                              f"allowed: max, min, theta")
        theta, lo, hi = spec.request
        changes["request"] = (req.get("theta", theta), req.get("min", lo), req.get("max", hi))
    if "response" in changes:
        resp = changes["response"]
        if isinstance(resp, str | bytes) or not isinstance(resp, Sequence) or any(
                isinstance(c, str | bytes) or not isinstance(c, Sequence) for c in resp):
            raise ConfigError(f"{spec.service}.response: expected a list of [weight, median, sigma] modes, "
                              f"got {resp!r}")
        changes["response"] = tuple(tuple(c) for c in resp)
    out = replace(spec, **changes)
    return replace(out, profile=(1.0,)) if not diurnal else out


class _Returning:
    """Iterates a generator and keeps what it returns (here the first arrival past a period's end)."""

    def __init__(self, gen: Generator[np.ndarray, None, float]) -> None:
        self.gen = gen
        self.value = math.inf

    def __iter__(self) -> Iterator[np.ndarray]:
        self.value = yield from self.gen


@dataclass
class _Stream:
    """A resolved stream: its mean rate, day profiles and samplers."""

    spec: StreamSpec
    rate: float
    profile: DayProfile
    cv: DayProfile
    request: TruncatedZipf
    response: LogNormalMixture
    extra: dict[str, str]

    @classmethod
    def build(cls, spec: StreamSpec, rate: float) -> _Stream:
        where = spec.service
        for i, cv in enumerate(spec.cv):
            check_float(f"{where}.cv[{i}]" if len(spec.cv) > 1 else f"{where}.cv", cv, gt=0.0, le=CV_MAX)
        check_float(f"{where}.rate_noise", spec.rate_noise, ge=0.0, le=3.0)
        check_float(f"{where}.corr", spec.corr, gt=-1.0, lt=1.0)
        stream = cls(spec, rate, DayProfile(spec.profile, f"{where}.profile", normalise=True),
                     DayProfile(spec.cv, f"{where}.cv", normalise=False),
                     TruncatedZipf(*spec.request, name=f"{where}.request"),
                     LogNormalMixture(spec.response, f"{where}.response"),
                     {"model": spec.model, "log_type": SERVICES[spec.service]})
        if rate * DAY < MIN_DAILY_REQUESTS:
            raise ConfigError(f"rate: the {spec.service} / {spec.model} stream expects {rate * DAY:.3g} requests a "
                              f"day; expected at least {MIN_DAILY_REQUESTS:g} (raise the rate or its share)")
        return stream

    def lengths(self, rng: np.random.Generator, n: int, max_prompt: int | None,
                max_output: int | None) -> tuple[np.ndarray, np.ndarray]:
        """(request, response) tokens of ``n`` requests: Zipf and mixture marginals, Gaussian copula."""
        z = rng.standard_normal((2, n))
        rho = self.spec.corr
        z_out = rho * z[0] + math.sqrt(1.0 - rho * rho) * z[1]
        prompt = np.minimum(self.request.ppf(ndtr(z[0])), max_prompt or MAX_TOKENS)
        out = np.clip(np.rint(self.response.ppf(ndtr(z_out))), 1, max_output or MAX_TOKENS).astype(np.int64)
        return prompt.astype(np.int64), out

    def describe(self) -> dict[str, Any]:
        s = self.spec
        return {"service": s.service, "model": s.model, "rate": self.rate, "profile": list(self.profile.values),
                "cv": list(s.cv), "rate_noise": s.rate_noise, "request": self.request.describe(),
                "response": self.response.describe(), "corr": s.corr}


class BurstGPTLike(Workload):
    """BurstGPT-shaped synthetic traffic: a merge of (service, model) streams (see the module docstring).

    ``rate`` is the mean over a whole day of all streams together (req/s); a stream gets ``rate`` times its
    share, the product of its ``mix`` (service) and ``model`` weights. ``start_hour`` is the local time of day at
    t = 0 (the trace's clock starts at midnight). ``overrides`` maps a service to replacement parameters
    (``profile``, ``cv``, ``rate_noise``, ``request``, ``response``, ``corr``) for both its models. Requests
    carry ``extra = {"model", "log_type"}`` with the real trace's labels. Stops at ``num_requests`` and/or
    ``duration``; lengths are clipped to ``max_prompt`` / ``max_output``.
    """

    kind = "burstgpt_like"

    def __init__(
        self,
        rate: float = 1.0,
        model: str | Mapping[str, float] = "ChatGPT",
        mix: str | Mapping[str, float] | None = None,
        seed: int = 0,
        num_requests: int | None = None,
        duration: float | None = None,
        start_hour: float = 0.0,
        period_s: float = 1200.0,
        diurnal: bool = True,
        overrides: Mapping[str, Mapping[str, Any] | None] | None = None,
        max_prompt: int | None = None,
        max_output: int | None = None,
        batch: int = BATCH,
    ) -> None:
        super().__init__()
        self.rate = check_float("rate", rate, gt=0.0)
        self.models = _weights("model", model, MODELS)
        self.mix = _weights("mix", DEFAULT_MIX if mix is None else mix, list(SERVICES))
        self.seed = check_int("seed", seed, ge=0)
        self.num_requests = None if num_requests is None else check_int("num_requests", num_requests, ge=1)
        self.duration = None if duration is None else check_float("duration", duration, gt=0.0)
        if self.num_requests is None and self.duration is None:
            raise ConfigError("burstgpt_like workload: expected 'num_requests' or 'duration' (the stream is endless)")
        self.start_hour = check_float("start_hour", start_hour, ge=0.0, lt=24.0)
        self.period_s = check_float("period_s", period_s, gt=0.0, le=DAY)
        if not isinstance(diurnal, bool):
            raise ConfigError(f"diurnal: expected true or false, got {diurnal!r}")
        self.diurnal = diurnal
        if overrides is not None and not isinstance(overrides, Mapping):
            raise ConfigError(f"overrides: expected a mapping of service to parameters, got {overrides!r}")
        overrides = dict(overrides or {})
        for k in overrides:
            if k not in SERVICES:
                raise ConfigError(f"{k}: unknown service; expected one of {list(SERVICES)}")
        self.max_prompt = None if max_prompt is None else check_int("max_prompt", max_prompt, ge=1, le=MAX_TOKENS)
        self.max_output = None if max_output is None else check_int("max_output", max_output, ge=1, le=MAX_TOKENS)
        self.batch = check_int("batch", batch, ge=1)
        self.streams: dict[int, _Stream] = {}  # position in STREAM_ORDER -> stream (fixes its child seed)
        for i, (service, model_name) in enumerate(STREAM_ORDER):
            share = self.mix.get(service, 0.0) * self.models.get(model_name, 0.0)
            if share > 0:
                spec = apply_overrides(DEFAULT_STREAMS[(service, model_name)], overrides.get(service), diurnal)
                self.streams[i] = _Stream.build(spec, self.rate * share)
        if self.num_requests is None and self.rate * self.duration > MAX_REQUESTS:
            raise ConfigError(f"duration: {self.duration:g} s at a mean {self.rate:g} req/s expects about "
                              f"{self.rate * self.duration:.3g} requests; expected at most {MAX_REQUESTS:.0e} without "
                              f"an explicit 'num_requests'")

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "seed": self.seed, "rate": self.rate, "model": dict(self.models), "mix": dict(self.mix),
            "start_hour": self.start_hour, "period_s": self.period_s, "diurnal": self.diurnal,
            "num_requests": self.num_requests, "duration": self.duration, "max_prompt": self.max_prompt,
            "max_output": self.max_output, "streams": [s.describe() for s in self.streams.values()],
        }

    # -- one stream ----------------------------------------------------------------------------
    def _period(self, stream: _Stream, k: int, noise: np.random.Generator) -> tuple[float, float, float, float]:
        """(start, end, rate, cv) of period ``k``: the rate is the profile's exact mean over the period."""
        t0, t1 = k * self.period_s, (k + 1) * self.period_s
        clock = self.start_hour * 3600.0 + t0
        rate = stream.rate * stream.profile.mean(clock, clock + self.period_s)
        sigma = stream.spec.rate_noise
        if sigma > 0:  # drawn for every period, so period k's factor never depends on the others' rates
            rate *= math.exp(sigma * float(noise.standard_normal()) - sigma * sigma / 2)
        return t0, t1, rate, stream.cv.at(clock + self.period_s / 2)

    def _chunks(self, stream: _Stream, seq: np.random.SeedSequence) -> Iterator[tuple[np.ndarray, float]]:
        """(arrival times, covered-until) chunks: every arrival of the stream before covered-until is in this
        chunk or an earlier one. One Gamma renewal process refitted every period: the gap that straddles a
        period's end carries over, its remainder rescaled from the old rate to the new one (a silent period
        pauses it), so a boundary holds no burst (CV > 1) or lull (CV < 1) that a restart with a full gap
        would put there."""
        arr_rng, noise_rng = (np.random.default_rng(s) for s in seq.spawn(2))
        pending: list[np.ndarray] = []
        n_pending = quiet = 0
        k = 0
        carry: float | None = None  # mean gaps (of any rate) from the last period's end to the next arrival
        while True:
            t0, t1, rate, cv = self._period(stream, k, noise_rng)
            if not math.isfinite(t1):
                raise ConfigError(f"period_s: the schedule ran past the float range at {t0:.6g} s")
            if rate > 0:
                first = None if carry is None else t0 + carry / rate
                batches = _Returning(phase_batches(arr_rng, t0, t1, rate, cv, self.batch, first=first))
                for times in batches:
                    pending.append(times)
                    n_pending += times.size
                    if n_pending >= self.batch:
                        yield np.concatenate(pending), float(times[-1])
                        pending, n_pending = [], 0
                carry = (batches.value - t1) * rate if math.isfinite(batches.value) else None
            k += 1
            quiet += 1
            if n_pending or quiet >= FLUSH_PERIODS:
                yield (np.concatenate(pending) if pending else np.empty(0)), t1
                pending, n_pending, quiet = [], 0, 0

    # -- the merge -----------------------------------------------------------------------------
    def _iter(self, stats: WorkloadStats) -> Iterator[Request]:
        children = np.random.SeedSequence(self.seed).spawn(len(STREAM_ORDER))
        feeds = []
        for i, stream in self.streams.items():
            arr_seq, len_seq = children[i].spawn(2)
            feeds.append((stream, self._chunks(stream, arr_seq), np.random.default_rng(len_seq)))
        empty_i = np.empty(0, dtype=np.int64)
        bufs: list[list[Any]] = [[np.empty(0), empty_i, empty_i, 0.0] for _ in feeds]

        def refill(j: int) -> None:
            stream, chunks, len_rng = feeds[j]
            times, covered = next(chunks)
            prompt, output = stream.lengths(len_rng, times.size, self.max_prompt, self.max_output)
            b = bufs[j]
            bufs[j] = [np.concatenate((b[0], times)), np.concatenate((b[1], prompt)),
                       np.concatenate((b[2], output)), covered]

        for j in range(len(feeds)):
            refill(j)
        left = self.num_requests
        next_id = 0
        while True:
            horizon = min(b[3] for b in bufs)
            limit = horizon if self.duration is None else min(horizon, self.duration)
            cols: list[list[np.ndarray]] = [[], [], [], []]
            for j, b in enumerate(bufs):
                n = int(np.searchsorted(b[0], limit, side="left"))
                if n:
                    for c, arr in zip(cols, (b[0][:n], b[1][:n], b[2][:n], np.full(n, j))):
                        c.append(arr)
                    bufs[j] = [b[0][n:], b[1][n:], b[2][n:], b[3]]
            if cols[0]:
                times, prompt, output, which = (np.concatenate(c) for c in cols)
                order = np.argsort(times, kind="stable")  # ties: the lower stream first
                if left is not None:
                    order = order[:left]
                stats.rows_read += order.size
                extras = [feeds[j][0].extra for j in range(len(feeds))]
                for a, p, o, j in zip(times[order].tolist(), prompt[order].tolist(), output[order].tolist(),
                                      which[order].tolist()):
                    stats.yielded += 1
                    yield Request(next_id, a, p, o, extra=dict(extras[j]))
                    next_id += 1
                if left is not None:
                    left -= order.size
                    if left <= 0:
                        stats.stopped = "num_requests"
                        return
            if self.duration is not None and horizon >= self.duration:
                if stats.yielded == 0:
                    raise ConfigError(f"burstgpt_like workload: expected at least one request before duration="
                                      f"{self.duration:g} s, got none (raise the rate or the duration)")
                stats.stopped = "duration"
                return
            for j, b in enumerate(bufs):
                if b[3] == horizon:
                    refill(j)
