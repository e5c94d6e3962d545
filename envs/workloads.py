"""Episode workloads: K requests drawn from a seed (task mixtures, user-labelled data, llmsim workloads)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envs import tasks as T
from llmsim.request import Request


class EnvWorkload:
    """``requests(seed, k)`` -> the episode's K requests, sorted by arrival."""

    task_names: list[str] = []

    def requests(self, seed: int, k: int) -> list[Request]:
        raise NotImplementedError


def _arrivals(rng: np.random.Generator, spec: dict[str, Any], k: int) -> tuple[np.ndarray, np.ndarray | None]:
    kind = spec.get("kind", "poisson")
    if kind == "poisson":
        return T.poisson_arrivals(rng, float(spec["rate"]), k), None
    if kind in ("stable", "bursty", "bursty2"):
        return T.best_effort_arrivals(rng, kind, k, spec.get("rate"))
    raise ValueError(f"unknown arrival kind {kind!r}; expected poisson, stable, bursty or bursty2")


@dataclass
class MixtureWorkload(EnvWorkload):
    """A task mixture (envs.tasks) with Poisson or spec-002 arrival schedules."""

    mixture: T.TaskMixture
    arrival: dict[str, Any] = field(default_factory=lambda: {"kind": "poisson", "rate": 5.0})

    def __post_init__(self) -> None:
        self.task_names = [t.name for t in self.mixture.tasks]

    def requests(self, seed: int, k: int) -> list[Request]:
        rng = np.random.default_rng(seed)
        times, rates = _arrivals(rng, self.arrival, k)
        reqs = self.mixture.sample(rng, times)
        if rates is not None:
            for r, rate in zip(reqs, rates):
                r.extra = {"rate": float(rate)}
        return reqs


@dataclass
class LabelledWorkload(EnvWorkload):
    """Requests resampled from a user table (see :class:`envs.tasks.LabelledPool`) with given arrivals."""

    path: str
    arrival: dict[str, Any] = field(default_factory=lambda: {"kind": "poisson", "rate": 5.0})

    def __post_init__(self) -> None:
        self.pool = T.LabelledPool.load(self.path)
        self.task_names = sorted({t for t in self.pool.tasks if t is not None})

    def requests(self, seed: int, k: int) -> list[Request]:
        rng = np.random.default_rng(seed)
        times, _ = _arrivals(rng, self.arrival, k)
        return self.pool.sample(rng, times)


@dataclass
class SimWorkload(EnvWorkload):
    """Any ``llmsim.workload.build_workload`` config (synthetic, traces), first K requests."""

    cfg: dict[str, Any]

    def requests(self, seed: int, k: int) -> list[Request]:
        from llmsim.workload import build_workload

        return list(itertools.islice(iter(build_workload(self.cfg, seed)), k))


PRESETS = {
    "workload_router": T.workload_router_mixture,
    "best_effort": T.best_effort_mixture,
    "qos_edge": T.qos_edge_mixture,
}


def make_workload(spec: dict[str, Any] | EnvWorkload) -> EnvWorkload:
    """``{"kind": "mixture", "preset": ..., "preset_kwargs": {...}, "arrival": {...}}``,
    ``{"kind": "labelled", "path": ..., "arrival": {...}}``, or any llmsim workload config
    (``{"kind": "synthetic", ...}``)."""
    if isinstance(spec, EnvWorkload):
        return spec
    kw = dict(spec)
    kind = kw.get("kind")
    if kind == "mixture":
        preset = kw.get("preset", "workload_router")
        if preset not in PRESETS:
            raise ValueError(f"unknown mixture preset {preset!r}; expected one of {sorted(PRESETS)}")
        mix = PRESETS[preset](**dict(kw.get("preset_kwargs") or {}))
        return MixtureWorkload(mix, dict(kw.get("arrival") or {"kind": "poisson", "rate": 5.0}))
    if kind == "labelled":
        return LabelledWorkload(kw["path"], dict(kw.get("arrival") or {"kind": "poisson", "rate": 5.0}))
    return SimWorkload(kw)
