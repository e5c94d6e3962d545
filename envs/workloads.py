"""Episode workloads: K requests drawn from a seed (task mixtures, user-labelled data, llmsim workloads).

A mixture's arrivals can be Poisson, the BestEffort paper's schedules, BurstGPT-like bursts or the arrival times of
a real trace window (``{kind: trace, trace: <llmsim workload config>}``: the trace's timing, the mixture's
contents). :func:`scale_lengths` reshapes a mixture's output lengths (short, long, bimodal) for held-out tests.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmsim.envs import tasks as T
from llmsim.errors import ConfigError
from llmsim.registry import Registry
from llmsim.request import Request
from llmsim.workload import build_workload
from llmsim.workload.base import check_float, check_int
from llmsim.workload.burstgpt_like import BurstGPTLike
from llmsim.workload.schema import parse_workload

ARRIVAL_KINDS = {"poisson": ("rate",), "stable": ("rate",), "bursty": (), "bursty2": (),
                 "burstgpt_like": ("rate", "start_hour", "model"), "trace": ("trace",)}
DEFAULT_ARRIVAL = {"kind": "poisson", "rate": 5.0}
# output-length reshapes of a mixture: (scale of every task's mean output, weight) per component; ``bimodal`` keeps
# the mean output of the mix (0.25 and 1.75 in equal parts) and changes its shape
LENGTH_MIXES: dict[str, tuple[tuple[float, float], ...]] = {
    "short": ((0.5, 1.0),), "long": ((2.0, 1.0),), "bimodal": ((0.25, 1.0), (1.75, 1.0)),
}


class EnvWorkload:
    """``requests(seed, k)`` -> the episode's K requests, sorted by arrival."""

    task_names: list[str] = []
    # the rows of a trace the last ``requests()`` read but left out, by reason (``prompt_over_max_prompt``,
    # ``zero_output_tokens``, ...); None for a workload that reads no trace rows (a mixture, a labelled table)
    skipped: dict[str, int] | None = None

    def requests(self, seed: int, k: int) -> list[Request]:
        raise NotImplementedError

    def check_models(self, models: list[str]) -> None:
        """Refuse a cluster whose models this workload has no data for (only per-model data, a labelled table,
        can lack one; a task mixture or a trace serves any model)."""


def check_arrival(spec: Any, where: str = "workload.arrival") -> dict[str, Any]:
    """An env arrival spec (``{kind: poisson, rate}``, ``{kind: stable[, rate]}``, ``{kind: bursty|bursty2}``,
    ``{kind: burstgpt_like, rate[, start_hour, model]}``),
    checked at construction so a typo or a NaN rate fails before the first episode."""
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: expected a mapping like {DEFAULT_ARRIVAL}, got {spec!r}")
    spec = dict(spec)
    kind = spec.get("kind", "poisson")
    if kind not in ARRIVAL_KINDS:
        raise ConfigError(f"{where}.kind: unknown arrival kind {kind!r}; expected one of {sorted(ARRIVAL_KINDS)}")
    unknown = sorted(set(spec) - {"kind", *ARRIVAL_KINDS[kind]})
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown} for kind {kind!r}; allowed keys: "
                          f"{sorted({'kind', *ARRIVAL_KINDS[kind]})}")
    if kind in ("poisson", "burstgpt_like") and spec.get("rate") is None:
        raise ConfigError(f"{where}.rate: missing required key for kind {kind!r}; expected a rate in req/s")
    if kind == "trace":
        if not isinstance(spec.get("trace"), Mapping):
            raise ConfigError(f"{where}.trace: expected an llmsim workload config (e.g. {{kind: azure, path: ..., "
                              f"window: [0, 1200]}}), got {spec.get('trace')!r}")
        parse_workload(dict(spec["trace"]), f"{where}.trace")
    if spec.get("rate") is not None:
        spec["rate"] = check_float(f"{where}.rate", spec["rate"], gt=0.0)
    return {"kind": kind, **{k: v for k, v in spec.items() if k != "kind"}}


def _arrivals(rng: np.random.Generator, spec: dict[str, Any], k: int) -> tuple[np.ndarray, np.ndarray | None]:
    kind = spec.get("kind", "poisson")
    if kind == "poisson":
        return T.poisson_arrivals(rng, float(spec["rate"]), k), None
    if kind == "burstgpt_like":
        return burstgpt_like_arrivals(rng, spec, k), None
    if kind == "trace":
        return trace_arrivals(spec["trace"], k), None
    return T.best_effort_arrivals(rng, kind, k, spec.get("rate"))


def trace_arrivals(trace: Mapping[str, Any], k: int) -> np.ndarray:
    """The first ``k`` arrival times of an llmsim workload (a real trace window), shifted to start at 0: fewer when
    the window holds fewer. Only the times are used; the requests' contents come from the env's own mixture."""
    return _trace_times(_trace_key(trace))[0][:k].copy()


def trace_rows_skipped(trace: Mapping[str, Any]) -> dict[str, int]:
    """The rows of the trace window :func:`trace_arrivals` left out, by reason (their times are not arrivals)."""
    return dict(_trace_times(_trace_key(trace))[1])


def arrival_rows_skipped(arrival: Mapping[str, Any]) -> dict[str, int] | None:
    """What an arrival spec's trace left out (None: the arrivals are drawn, no trace rows are read)."""
    return trace_rows_skipped(arrival["trace"]) if arrival.get("kind") == "trace" else None


def _trace_key(trace: Mapping[str, Any]) -> str:
    return json.dumps(dict(trace), sort_keys=True, default=str)


@functools.lru_cache(maxsize=16)
def _trace_times(trace_json: str) -> tuple[np.ndarray, dict[str, int]]:
    """A trace's arrival times and the rows it skipped (cached: every episode of a scenario reads the same window)."""
    wl = build_workload(json.loads(trace_json), 0)
    t = np.array([r.arrival for r in wl], float)
    if not len(t):
        raise ConfigError(f"workload.arrival.trace: the trace window holds no request ({trace_json})")
    return t - t[0], dict(wl.stats.skipped)


def scale_lengths(mixture: T.TaskMixture, mix: str | None) -> T.TaskMixture:
    """``mixture`` with its output lengths reshaped by LENGTH_MIXES[mix] (None: as is). Each component is a copy of
    every task with its mean outputs scaled (the same task names, so a predictor keyed by task still applies)."""
    if mix is None:
        return mixture
    if mix not in LENGTH_MIXES:
        raise ConfigError(f"lengths: unknown length mix {mix!r}; expected one of {sorted(LENGTH_MIXES)} or null")
    tasks, weights = [], []
    for scale, w in LENGTH_MIXES[mix]:
        for t, p in zip(mixture.tasks, mixture.probs()):
            tasks.append(dataclasses.replace(t, out_mean={m: v * scale for m, v in t.out_mean.items()}))
            weights.append(float(w * p))
    return T.TaskMixture(tasks, list(mixture.models), weights, mixture.max_total)


def burstgpt_like_arrivals(rng: np.random.Generator, spec: Mapping[str, Any], k: int) -> np.ndarray:
    """K arrival times of llmsim's BurstGPT-like traffic (Gamma arrivals refitted every 20 min along the hour-of-day
    profile; docs/workloads.md), rescaled in time so that the K arrivals average exactly ``rate`` req/s: the
    QoS-aware edge router paper evaluates on "a period during which the average arrival rate is 5". Only the times
    are used; the requests' contents come from the env's own task mixture."""
    wl = BurstGPTLike(rate=1.0, model=spec.get("model", "ChatGPT"), seed=int(rng.integers(2**31 - 1)),
                      num_requests=k, start_hour=float(spec.get("start_hour", 10.0)))
    t = np.array([r.arrival for r in wl], float)
    t -= t[0]
    span = t[-1] if k > 1 and t[-1] > 0 else 1.0
    return t * ((k - 1) / float(spec["rate"]) / span) if k > 1 else t


@dataclass
class MixtureWorkload(EnvWorkload):
    """A task mixture (llmsim.envs.tasks) with Poisson or the BestEffort paper's arrival schedules."""

    mixture: T.TaskMixture
    arrival: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_ARRIVAL))

    def __post_init__(self) -> None:
        if not isinstance(self.mixture, T.TaskMixture):
            raise ConfigError(f"workload.mixture: expected an llmsim.envs.tasks.TaskMixture, got {self.mixture!r}")
        self.arrival = check_arrival(self.arrival)
        self.task_names = list(dict.fromkeys(t.name for t in self.mixture.tasks))

    def requests(self, seed: int, k: int) -> list[Request]:
        k = check_int("num_requests", k, ge=1)
        rng = np.random.default_rng(seed)
        times, rates = _arrivals(rng, self.arrival, k)
        self.skipped = arrival_rows_skipped(self.arrival)
        reqs = self.mixture.sample(rng, times)
        if rates is not None:
            for r, rate in zip(reqs, rates):
                r.extra = {"rate": float(rate)}
        return reqs


@dataclass
class LabelledWorkload(EnvWorkload):
    """Requests resampled from a user table (see :class:`llmsim.envs.tasks.LabelledPool`) with given arrivals."""

    path: str
    arrival: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_ARRIVAL))

    def __post_init__(self) -> None:
        self.arrival = check_arrival(self.arrival)
        self.pool = T.LabelledPool.load(self.path)
        self.task_names = sorted({t for t in self.pool.tasks if t is not None})

    def requests(self, seed: int, k: int) -> list[Request]:
        k = check_int("num_requests", k, ge=1)
        rng = np.random.default_rng(seed)
        times, _ = _arrivals(rng, self.arrival, k)
        self.skipped = arrival_rows_skipped(self.arrival)
        return self.pool.sample(rng, times)

    def check_models(self, models: list[str]) -> None:
        for m in models:
            if m not in self.pool.models:
                raise ConfigError(f"workload: the labelled table {self.path} has rows for models {self.pool.models}, "
                                  f"none for the cluster's {m!r}")


@dataclass
class SimWorkload(EnvWorkload):
    """Any ``llmsim.workload.build_workload`` config (synthetic, traces), first K requests; :attr:`skipped` counts
    the rows read on the way to them but left out (as a simulator run's ``workload_skipped``)."""

    cfg: dict[str, Any]

    def __post_init__(self) -> None:
        parse_workload(self.cfg)  # a bad key or value fails at construction, not at the first reset()
        self.skipped = {}

    def requests(self, seed: int, k: int) -> list[Request]:
        k = check_int("num_requests", k, ge=1)
        wl = build_workload(self.cfg, seed)
        reqs = list(itertools.islice(iter(wl), k))
        self.skipped = dict(wl.stats.skipped)
        return reqs


# name -> factory of a TaskMixture (``preset_kwargs`` are the factory's keyword arguments)
MIXTURE_PRESETS: Registry[Any] = Registry("mixture preset", key="preset")
MIXTURE_PRESETS.register(T.workload_router_mixture, name="workload_router")
MIXTURE_PRESETS.register(T.best_effort_mixture, name="best_effort")
MIXTURE_PRESETS.register(T.qos_edge_mixture, name="qos_edge")
WORKLOAD_KEYS = {"mixture": ("kind", "preset", "preset_kwargs", "arrival"), "labelled": ("kind", "path", "arrival")}


def make_workload(spec: dict[str, Any] | EnvWorkload) -> EnvWorkload:
    """``{"kind": "mixture", "preset": ..., "preset_kwargs": {...}, "arrival": {...}}``,
    ``{"kind": "labelled", "path": ..., "arrival": {...}}``, or any llmsim workload config
    (``{"kind": "synthetic", ...}``)."""
    if isinstance(spec, EnvWorkload):
        return spec
    if not isinstance(spec, Mapping):
        raise ConfigError(f"workload: expected a mapping with a 'kind' key or an EnvWorkload, got {spec!r}")
    kw = dict(spec)
    kind = kw.get("kind")
    if kind in WORKLOAD_KEYS:
        unknown = sorted(set(kw) - set(WORKLOAD_KEYS[kind]))
        if unknown:
            raise ConfigError(f"workload: unknown key(s) {unknown} for kind {kind!r}; allowed keys: "
                              f"{sorted(WORKLOAD_KEYS[kind])}")
    if kind == "mixture":
        preset_kwargs = kw.get("preset_kwargs") or {}
        if not isinstance(preset_kwargs, Mapping):
            raise ConfigError(f"workload.preset_kwargs: expected a mapping, got {preset_kwargs!r}")
        mix = MIXTURE_PRESETS.build(kw.get("preset", "workload_router"), where="workload.preset", **preset_kwargs)
        return MixtureWorkload(mix, kw.get("arrival") or dict(DEFAULT_ARRIVAL))
    if kind == "labelled":
        if not isinstance(kw.get("path"), str) or not kw["path"]:
            raise ConfigError(f"workload.path: expected the path of a labelled table, got {kw.get('path')!r}")
        return LabelledWorkload(kw["path"], kw.get("arrival") or dict(DEFAULT_ARRIVAL))
    return SimWorkload(kw)
