"""Capacity search: the highest arrival rate at which a cluster keeps SLO attainment at or above a target.

    llmsim-capacity capacity.policies=[round_robin,jsq] capacity.target=0.9 slo.ttft_ms=500 slo.tpot_ms=50
    llmsim-capacity capacity.clusters=[a100x4,v100x4]      # several conf/cluster presets in one search
    python -m llmsim.planning.capacity ...                          # the same

This is the "goodput" / capacity figure of DistServe and Vidur. For each (cluster, policy), attainment (the
share of requests meeting every SLO, drops counting as misses; ``capacity.metric`` picks a per-target share
instead) is the mean over ``capacity.seeds`` workload seeds. The same seeds are used at every rate (common
random numbers: a Poisson stream at rate 2r is the stream at rate r with its gaps halved), so the curve is
smooth in rate and bisection is not thrown off by seed noise.

Search, per (cluster, policy): evaluate ``rate_start`` (default: the geometric middle of [rate_min, rate_max]),
grow or shrink the rate by ``growth`` until the target is met at one rate and missed at a higher one, then
bisect in log-rate until the bracket is within ``tolerance`` (relative). ``points_per_round`` > 1 evaluates
that many rates per step (k-section), which keeps many cores busy and samples more of the curve.

Why not plain bisection on the last two points: attainment need not be monotone in rate (few seeds, batching
effects). The bracket is therefore always rebuilt from *every* evaluated point by the first-crossing rule:
``hi`` is the lowest rate that missed the target and ``lo`` the highest rate below it that met it, so a
capacity is never reported above a rate that already failed. Points that meet the target above ``hi`` make
the curve non-monotone: the result says so (``monotone: false`` and a note naming the rates) and the table
flags it. All searches step in lockstep rounds whose simulations run on one process pool, so the result
does not depend on the number of workers or on timing (same config and seeds, same JSON).

The rate is the synthetic workload's ``rate`` (Poisson / Gamma). Other workloads (traces, phased or MMPP
arrivals) are scaled with ``rate_scale``; their base rate (requests / span of the first ``num_requests``
arrivals at scale 1) turns every rate into req/s. Outputs in the run directory: ``capacity.json`` (one object
per cluster x policy), ``capacity.csv`` (every evaluated rate) and ``capacity.png``; see docs/capacity.md.
"""

from __future__ import annotations

import copy
import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from llmsim.errors import ConfigError
from llmsim.planning.capacity_report import print_table, write_outputs
from llmsim.resources import conf_dir
from llmsim.schema import Fraction, NonNegInt, PosFloat, PosInt, Schema, check_choice

METRICS = ("slo_attainment", "slo_ttft_attainment", "slo_tpot_attainment", "slo_e2el_attainment")
_SUMMARY_KEYS = (*METRICS, "request_goodput", "request_throughput", "completed", "dropped", "p99_ttft_ms",
                 "p99_tpot_ms", "mean_e2el_ms")


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
    requests_per_instance: bool = False  # true: num_requests per instance (compare clusters of different sizes)
    policies: Annotated[list[str | dict[str, Any]], Field(min_length=1)] | None = None
    clusters: Annotated[list[str | dict[str, Any]], Field(min_length=1)] | None = None
    workers: PosInt | None = None
    max_evaluations: PosInt = 40
    points_per_round: Annotated[PosInt, Field(le=64)] = 1
    metric: Literal["slo_attainment", "slo_ttft_attainment", "slo_tpot_attainment", "slo_e2el_attainment"] = (
        "slo_attainment")

    def checked(self) -> CapacityConfig:
        """Relations between keys, one line each (pydantic would report the whole mapping as the input)."""
        if self.rate_min >= self.rate_max:
            raise ConfigError(f"capacity.rate_min: expected a value below capacity.rate_max ({self.rate_max:g}), "
                              f"got {self.rate_min:g}")
        if self.rate_start is not None and not self.rate_min <= self.rate_start <= self.rate_max:
            raise ConfigError(f"capacity.rate_start: expected a value in [rate_min, rate_max] = [{self.rate_min:g}, "
                              f"{self.rate_max:g}], got {self.rate_start:g}")
        return self


# ---------------------------------------------------------------------------------------------- one search
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


def make_point(rate: float, results: list[dict[str, Any]], metric: str) -> Point:
    def mean(key: str) -> float:
        vals = [float(r[key]) for r in results if r.get(key) is not None and math.isfinite(float(r[key]))]
        return sum(vals) / len(vals) if vals else float("nan")

    per_seed = [float(r.get(metric) or 0.0) for r in results]
    return Point(rate, sum(per_seed) / len(per_seed), per_seed, mean("request_goodput"),
                 mean("request_throughput"), mean("p99_ttft_ms"), mean("p99_tpot_ms"))


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
        seen = {_rkey(p.rate) for p in self.points}
        out = sorted({_rkey(min(max(r, c.rate_min), c.rate_max)) for r in rates} - seen)
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


def _rkey(rate: float) -> float:
    """Rates equal to 12 significant digits are the same evaluation (log-spacing round-off)."""
    return float(f"{rate:.12g}")


# ---------------------------------------------------------------------------------------------- running
def evaluate(cfg: dict[str, Any]) -> dict[str, Any]:
    """One simulation (runs in a worker process): the figures the search and the curve need."""
    from llmsim.simulation.from_config import run_from_config

    s = run_from_config(cfg).summary
    return {k: s.get(k) for k in _SUMMARY_KEYS}


def cpu_count() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


class _Inline(Executor):
    """workers=1: run in this process (no fork, same results; tests and profiling use it)."""

    def map(self, fn: Callable[..., Any], *iterables: Any, timeout: float | None = None,  # type: ignore[override]
            chunksize: int = 1) -> Any:
        return [fn(*args) for args in zip(*iterables)]


@dataclass
class Job:
    """A search plus how to turn a rate into its per-seed run configs."""

    search: RateSearch
    configs: Callable[[float], list[dict[str, Any]]]
    metric: str = "slo_attainment"
    info: dict[str, Any] = field(default_factory=dict)


class Runner:
    """Simulations on a process pool, cached by config, counted, under an optional budget of runs.

    Searches advance in rounds: every active job asks for its next rates, all their seeds run as one batch,
    then results are recorded and ``on_round`` may stop jobs. Lockstep rounds make decisions independent of
    which simulation finishes first, hence deterministic on any number of workers.
    """

    def __init__(self, workers: int | None = None, fn: Callable[[dict[str, Any]], dict[str, Any]] = evaluate,
                 budget: int | None = None) -> None:
        self.workers = workers or cpu_count()
        self.fn = fn
        self.budget = budget
        self.cache: dict[str, dict[str, Any]] = {}
        self.runs = 0
        self.requests = 0
        self._pool: Executor | None = None

    def __enter__(self) -> Runner:
        self._pool = _Inline() if self.workers == 1 else ProcessPoolExecutor(max_workers=self.workers)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._pool = None

    def new_runs(self, cfgs: list[dict[str, Any]]) -> int:
        return len({_ckey(c) for c in cfgs} - set(self.cache))

    def map(self, cfgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Results in order; configs already run (or repeated in the batch) run once."""
        keys = [_ckey(c) for c in cfgs]
        todo = {k: c for k, c in zip(keys, cfgs) if k not in self.cache}
        if todo:
            assert self._pool is not None, "Runner used outside its `with` block"
            for k, r in zip(todo, self._pool.map(self.fn, list(todo.values()), chunksize=1)):
                self.cache[k] = r
            self.runs += len(todo)
            self.requests += sum(int(c["workload"].get("num_requests") or c["workload"].get("max_requests") or 0)
                                 for c in todo.values())
        return [self.cache[k] for k in keys]

    def drive(self, jobs: list[Job], on_round: Callable[[list[Job]], None] | None = None) -> None:
        """Run every job's search to the end (jobs earlier in the list win when the budget runs short)."""
        while True:
            batch: list[tuple[Job, float, list[dict[str, Any]]]] = []
            for job in jobs:
                for rate in job.search.next_rates():
                    batch.append((job, rate, job.configs(rate)))
            if not batch:
                return
            batch = self._within_budget(batch)
            results = self.map([c for _, _, cfgs in batch for c in cfgs])
            i = 0
            for job, rate, cfgs in batch:
                job.search.record(make_point(rate, results[i:i + len(cfgs)], job.metric))
                i += len(cfgs)
            if on_round is not None:
                on_round(jobs)

    def _within_budget(self, batch: list[tuple[Job, float, list[dict[str, Any]]]],
                       ) -> list[tuple[Job, float, list[dict[str, Any]]]]:
        if self.budget is None:
            return batch
        left = self.budget - self.runs
        kept, seen = [], set(self.cache)
        for job, rate, cfgs in batch:
            need = {_ckey(c) for c in cfgs} - seen
            if job.search.done or len(need) > left:
                if not job.search.done:
                    job.search.stop(f"budget of {self.budget} runs exhausted")
                continue
            left -= len(need)
            seen |= need
            kept.append((job, rate, cfgs))
        return kept


def _ckey(cfg: dict[str, Any]) -> str:
    return json.dumps(cfg, sort_keys=True, default=str)


# ---------------------------------------------------------------------------------------------- configs
def rate_mode(workload: dict[str, Any], num_requests: int, seed: int) -> tuple[str, float]:
    """("rate", 1) for Poisson / Gamma synthetic streams, else ("rate_scale", base req/s at scale 1)."""
    if workload.get("kind") == "synthetic" and (workload.get("arrival") or {}).get("process") in ("poisson", "gamma"):
        return "rate", 1.0
    from llmsim.workload import build_workload

    wl = {k: v for k, v in workload.items() if k not in ("rate_scale", "max_requests", "num_requests", "duration")}
    wl["max_requests" if wl.get("kind") != "synthetic" else "num_requests"] = num_requests
    times = [r.arrival for r in build_workload(wl, seed)]
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    if not span > 0:
        raise ConfigError(f"workload: capacity needs a stream whose first {num_requests} arrivals span some time, "
                          f"got {len(times)} arrival(s) over {span:g} s")
    return "rate_scale", (len(times) - 1) / span


def run_config(base: dict[str, Any], cluster: dict[str, Any], policy: dict[str, Any], rate: float, seed: int,
               num_requests: int, mode: tuple[str, float]) -> dict[str, Any]:
    """The plain run config of one evaluation (cluster, policy, rate in req/s, seed, size), outputs off."""
    cfg = copy.deepcopy(base)
    cfg["seed"] = seed
    cfg["cluster"] = copy.deepcopy(cluster)
    cfg["policy"] = copy.deepcopy(policy)
    wl = cfg["workload"]
    key, base_rate = mode
    wl[key] = float(rate) if key == "rate" else float(rate) / base_rate
    if wl.get("kind") == "synthetic":
        wl["num_requests"] = num_requests
        wl.pop("duration", None)
    else:
        wl["max_requests"] = num_requests
    cfg["output"] = {"save": False, "plots": False, "progress": False, "format": "csv"}
    return cfg


def parse_policies(cap: CapacityConfig, base: dict[str, Any]) -> list[dict[str, Any]]:
    """Router names (or {name, kwargs}); the policy group's kwargs go with its own router only."""
    from llmsim.routing import ROUTERS
    from llmsim.schema import PolicyConfig

    own = base.get("policy") or {"name": "round_robin", "kwargs": {}}
    out = []
    for k, p in enumerate(cap.policies or [own["name"]]):
        where = f"capacity.policies[{k}]"
        spec = PolicyConfig.parse(p, where) if isinstance(p, Mapping) else PolicyConfig(name=p)
        check_choice(spec.name, ROUTERS.names(), f"{where}" if isinstance(p, str) else f"{where}.name")
        kwargs = dict(spec.kwargs) or (dict(own.get("kwargs") or {}) if spec.name == own["name"] else {})
        out.append({"name": spec.name, "kwargs": kwargs})
    return out


def cluster_presets() -> list[str]:
    return sorted(p.stem for p in (conf_dir() / "cluster").glob("*.yaml"))


def parse_clusters(cap: CapacityConfig, base: dict[str, Any], label: str | None) -> list[tuple[str, dict]]:
    """(label, cluster dict) per cluster: conf/cluster presets by name, inline mappings, or the cluster group."""
    import yaml

    from llmsim.schema import ClusterConfig

    if not cap.clusters:
        return [(label or describe_cluster(base["cluster"]), base["cluster"])]
    out = []
    for k, c in enumerate(cap.clusters):
        where = f"capacity.clusters[{k}]"
        if isinstance(c, str):
            check_choice(c, cluster_presets(), where)
            data = yaml.safe_load((conf_dir() / "cluster" / f"{c}.yaml").read_text())
            ClusterConfig.parse(data, where)
            out.append((c, {"instances": [dict(i) for i in data["instances"]]}))
        else:
            ClusterConfig.parse(c, where)
            out.append((describe_cluster(c), {"instances": [dict(i) for i in c["instances"]]}))
    return out


def describe_cluster(cluster: dict[str, Any]) -> str:
    parts = []
    for inst in cluster["instances"]:
        tp = f" tp{inst['tp']}" if inst.get("tp", 1) != 1 else ""
        parts.append(f"{inst.get('count', 1)}x {inst.get('model', 'llama-2-7b')}@{inst.get('gpu', 'a100-80gb')}{tp}")
    return " + ".join(parts)


def base_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The llmsim run groups of a composed config, validated; raw workload and cluster kept as given."""
    from llmsim.schema import RunConfig
    from llmsim.simulation.from_config import resolve_workload_path
    from llmsim.workload.schema import parse_workload

    run = {k: v for k, v in cfg.items() if k not in ("capacity", "deploy", "prices")}
    base = RunConfig.parse(run).model_dump()
    base["workload"] = resolve_workload_path(dict(run["workload"]))
    parse_workload(base["workload"])
    base["cluster"] = {"instances": [dict(i) for i in run["cluster"]["instances"]]}
    slo = base.get("slo") or {}
    if not any(v is not None for v in slo.values()):
        raise ConfigError("slo: set at least one target (slo.ttft_ms, slo.tpot_ms or slo.e2el_ms); "
                          "capacity is measured against them")
    return base


def check_metric(metric: str, base: dict[str, Any]) -> None:
    target = metric.removeprefix("slo_").removesuffix("_attainment")
    if metric != "slo_attainment" and base["slo"].get(f"{target}_ms") is None:
        raise ConfigError(f"capacity.metric: {metric} needs slo.{target}_ms to be set")


def preflight(cfg: dict[str, Any]) -> None:
    """A 20-request run in this process: a bad cluster, router or workload fails here in one line, before
    any worker starts (and the imports and profiles it loads are inherited by forked workers)."""
    from llmsim.simulation.from_config import run_from_config

    small = copy.deepcopy(cfg)
    wl = small["workload"]
    wl["num_requests" if wl.get("kind") == "synthetic" else "max_requests"] = 20
    run_from_config(small)


# ---------------------------------------------------------------------------------------------- the app
def search_all(base: dict[str, Any], cap: CapacityConfig, label: str | None = None,
               fn: Callable[[dict[str, Any]], dict[str, Any]] = evaluate) -> tuple[list[Job], Runner]:
    """Every (cluster, policy) search, interleaved over one process pool; returns the jobs and the runner."""
    cap = cap.checked()
    check_metric(cap.metric, base)
    policies = parse_policies(cap, base)
    clusters = parse_clusters(cap, base, label)
    mode = rate_mode(base["workload"], cap.num_requests, cap.seed0)
    jobs = []
    for name, cluster in clusters:
        size = sum(int(i.get("count", 1)) for i in cluster["instances"])
        n_req = cap.num_requests * (size if cap.requests_per_instance else 1)
        for pol in policies:
            def configs(rate: float, cluster: dict = cluster, pol: dict = pol, n: int = n_req) -> list[dict]:
                return [run_config(base, cluster, pol, rate, cap.seed0 + k, n, mode) for k in range(cap.seeds)]

            if fn is evaluate:
                preflight(configs(cap.rate_min)[0])
            jobs.append(Job(RateSearch(cap), configs, cap.metric, {
                "cluster": name, "cluster_desc": describe_cluster(cluster), "instances": size, "policy": pol["name"],
                "policy_kwargs": pol["kwargs"], "requests_per_run": n_req,
                "base_rate": mode[1] if mode[0] == "rate_scale" else None}))
    workers = min(cap.workers or cpu_count(), cap.seeds * cap.points_per_round * len(jobs))
    with Runner(workers, fn) as runner:
        runner.drive(jobs)
    return jobs, runner


def result_rows(jobs: list[Job], cap: CapacityConfig) -> list[dict[str, Any]]:
    rows = []
    for job in jobs:
        s = job.search
        lo, hi = s.bracket()
        cap_pt = next((p for p in s.points if p.rate == s.capacity), None)
        rows.append({
            **job.info, "capacity_rps": s.capacity, "rate_unit": "req/s", "bracket": [lo, hi],
            "goodput_at_capacity": None if cap_pt is None else cap_pt.goodput, "target": cap.target,
            "metric": cap.metric, "seeds": cap.seeds, "num_requests": cap.num_requests,
            "tolerance": cap.tolerance, "evaluations": len(s.points), "runs": len(s.points) * cap.seeds,
            "monotone": not s.violations(), "note": s.summary_note(),
            "curve": [{"rate": p.rate, "attainment": p.attainment, "per_seed": p.per_seed, "goodput": p.goodput,
                       "throughput": p.throughput, "p99_ttft_ms": p.p99_ttft_ms, "p99_tpot_ms": p.p99_tpot_ms}
                      for p in s.curve()],
        })
    return rows


def run_capacity(cfg: dict[str, Any], out_dir: str | Path, quiet: bool = False,
                 cluster_label: str | None = None) -> list[dict[str, Any]]:
    """The whole app on a plain config: the ``capacity`` group + the run groups of ``llmsim``."""
    cap = CapacityConfig.parse(cfg.get("capacity")).checked()
    base = base_config(cfg)
    t0 = time.perf_counter()
    jobs, runner = search_all(base, cap, cluster_label)
    rows = result_rows(jobs, cap)
    wall = time.perf_counter() - t0
    for r in rows:
        r["wall_s"], r["total_runs"] = wall, runner.runs
    write_outputs(rows, Path(out_dir))
    if not quiet:
        print_table(rows, runner, wall)
        for r in rows:
            if not r["monotone"]:
                print(f"warning: {r['cluster']} / {r['policy']}: {r['note']}", file=sys.stderr)
    return rows


def hydra_app(config_name: str, prog: str, body: Callable[[dict[str, Any], str, str | None], None]) -> None:
    """A Hydra app over conf/ whose config errors are one line on stderr and exit status 2."""
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from llmsim.errors import LLMSimError

    @hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name=config_name)
    def _main(cfg: DictConfig) -> None:
        hc = HydraConfig.get()
        out_dir = hc.runtime.output_dir
        try:
            plain = OmegaConf.to_container(cfg, resolve=True)
            body(plain, out_dir, hc.runtime.choices.get("cluster"))  # type: ignore[arg-type]
        except (LLMSimError, OmegaConfBaseException) as e:
            print(f"{prog}: error: {' '.join(str(e).split())}", file=sys.stderr)
            raise SystemExit(2) from None
        print(f"outputs: {out_dir}")

    _main()


def _app(cfg: dict[str, Any], out_dir: str, cluster_label: str | None) -> None:
    run_capacity(cfg, out_dir, cluster_label=cluster_label)


def main() -> None:
    hydra_app("capacity", "llmsim-capacity", _app)


if __name__ == "__main__":
    main()
