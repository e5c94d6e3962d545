"""Capacity search: the highest arrival rate at which a cluster keeps SLO attainment at or above a target.

    llmsim-capacity capacity.policies=[round_robin,jsq] capacity.target=0.9 slo.ttft_ms=500 slo.tpot_ms=50
    llmsim-capacity capacity.clusters=[a100x4,v100x4]      # several conf/cluster presets in one search
    python -m llmsim.cli.planning capacity ...                     # the same

This is the "goodput" / capacity figure of DistServe and Vidur. For each (cluster, policy), attainment (the
share of requests meeting every SLO, drops counting as misses; ``capacity.metric`` picks a per-target share
instead) is the mean over ``capacity.seeds`` workload seeds. The same seeds are used at every rate (common
random numbers: a Poisson stream at rate 2r is the stream at rate r with its gaps halved), so the curve is
smooth in rate and bisection is not thrown off by seed noise.

Search, per (cluster, policy) (:class:`llmsim.planning.search.RateSearch`): evaluate ``rate_start`` (default:
the geometric middle of [rate_min, rate_max]), grow or shrink the rate by ``growth`` until the target is met at
one rate and missed at a higher one, then bisect in log-rate until the bracket is within ``tolerance``
(relative). ``points_per_round`` > 1 evaluates that many rates per step (k-section), which keeps many cores
busy and samples more of the curve.

Why not plain bisection on the last two points: attainment need not be monotone in rate (few seeds, batching
effects). The bracket is therefore always rebuilt from *every* evaluated point by the first-crossing rule:
``hi`` is the lowest rate that missed the target and ``lo`` the highest rate below it that met it, so a
capacity is never reported above a rate that already failed. Points that meet the target above ``hi`` make
the curve non-monotone: the result says so (``monotone: false`` and a note naming the rates) and the table
flags it. All searches step in lockstep rounds whose simulations run on one process pool
(:mod:`llmsim.planning.runner`), so the result does not depend on the number of workers or on timing (same config
and seeds, same JSON). Progress is on stderr from the first second (:mod:`llmsim.planning.progress`).

The rate is the synthetic workload's ``rate`` (Poisson / Gamma). Other workloads (traces, phased or MMPP
arrivals) are scaled with ``rate_scale``; their base rate (requests / span of a run's first arrivals, as many
as it replays, at scale 1) turns every rate into req/s. Outputs in the run directory: ``capacity.json`` (one object
per cluster x policy), ``capacity.csv`` (every evaluated rate) and ``capacity.png``; see docs/capacity.md.
"""

from __future__ import annotations

import copy
import functools
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from llmsim.errors import ConfigError, LLMSimError, load_yaml_file
from llmsim.planning.capacity_report import goodput_note, print_table, write_outputs
from llmsim.planning.progress import SearchProgress
from llmsim.planning.runner import Job, Runner, cpu_count, evaluate
from llmsim.planning.search import CapacityConfig, RateSearch
from llmsim.resources import conf_dir
from llmsim.routing import ROUTERS
from llmsim.schema import ClusterConfig, PolicyConfig, RunConfig, check_choice
from llmsim.simulation.from_config import resolve_workload_path
from llmsim.workload import build_workload
from llmsim.workload.schema import parse_workload

PREFLIGHT_REQUESTS = 20  # a bad cluster, router or workload fails in a run this small, before any worker starts
def rate_mode(workload: dict[str, Any], num_requests: int, seed: int) -> tuple[str, float]:
    """("rate", 1) for Poisson / Gamma synthetic streams, else ("rate_scale", base req/s at scale 1)."""
    if workload.get("kind") == "synthetic" and (workload.get("arrival") or {}).get("process") in ("poisson", "gamma"):
        return "rate", 1.0
    wl = {k: v for k, v in workload.items() if k not in ("rate_scale", "max_requests", "num_requests", "duration")}
    wl["max_requests" if wl.get("kind") != "synthetic" else "num_requests"] = num_requests
    times = [r.arrival for r in build_workload(wl, seed)]
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    if not span > 0:
        raise ConfigError(f"workload: capacity needs a stream whose first {num_requests} arrivals span some time, "
                          f"got {len(times)} arrival(s) over {span:g} s")
    return "rate_scale", (len(times) - 1) / span


def rate_modes(workload: dict[str, Any], seed: int) -> Callable[[int], tuple[str, float]]:
    """:func:`rate_mode` by request count, each computed once: a trace or phased stream's base rate depends on how
    many of its arrivals a run replays, so runs of different sizes (``requests_per_instance``, a deploy cluster of
    n replicas) each need the base rate of their own size for their rates to be req/s."""

    @functools.cache
    def mode(num_requests: int) -> tuple[str, float]:
        return rate_mode(workload, num_requests, seed)

    return mode


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
    if not cap.clusters:
        return [(label or describe_cluster(base["cluster"]), base["cluster"])]
    out = []
    for k, c in enumerate(cap.clusters):
        where = f"capacity.clusters[{k}]"
        if isinstance(c, str):
            check_choice(c, cluster_presets(), where)
            data = load_yaml_file(conf_dir() / "cluster" / f"{c}.yaml")
            ClusterConfig.parse(data, where)
            out.append((c, {"instances": [dict(i) for i in data["instances"]]}))
        else:
            ClusterConfig.parse(c, where)
            out.append((describe_cluster(c), {"instances": [dict(i) for i in c["instances"]]}))
    return out


def group_label(choice: str | None, cluster: dict[str, Any]) -> str | None:
    """The cluster group's choice when ``cluster`` is conf/cluster/<choice>.yaml as written, else None (the rows
    then describe the cluster): an override such as cluster.instances=[...] keeps the group's name in Hydra's
    choices, but the rows must not call another cluster by it."""
    path = conf_dir() / "cluster" / f"{choice}.yaml"
    return choice if choice and path.is_file() and load_yaml_file(path) == cluster else None


def describe_cluster(cluster: dict[str, Any]) -> str:
    parts = []
    for inst in cluster["instances"]:
        tp = f" tp{inst['tp']}" if inst.get("tp", 1) != 1 else ""
        parts.append(f"{inst.get('count', 1)}x {inst.get('model', 'llama-2-7b')}@{inst.get('gpu', 'a100-80gb')}{tp}")
    return " + ".join(parts)


def base_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The llmsim run groups of a composed config, validated; raw workload and cluster kept as given."""
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


def preflight(cfg: dict[str, Any], decode_skew: bool = True) -> None:
    """A 20-request run in this process: a bad cluster, router or workload fails here in one line, before
    any worker starts (and the imports and profiles it loads are inherited by forked workers)."""
    small = copy.deepcopy(cfg)
    wl = small["workload"]
    wl["num_requests" if wl.get("kind") == "synthetic" else "max_requests"] = PREFLIGHT_REQUESTS
    evaluate(small, decode_skew)


def given_keys(cap: CapacityConfig, cluster: int, policy: int) -> dict[str, str]:
    """Where the preflight's ``cluster`` and ``policy`` came from, when not from their groups: an error in them
    names the ``capacity`` key the user wrote."""
    keys = {"cluster": f"capacity.clusters[{cluster}]"} if cap.clusters else {}
    given = (cap.policies or [None])[policy]
    if isinstance(given, Mapping) and given.get("kwargs"):
        keys["policy"] = f"capacity.policies[{policy}]"
    return keys


def rekeyed(err: LLMSimError, keys: dict[str, str]) -> LLMSimError:
    """``err`` with its leading key (``cluster...`` or ``policy...``) renamed as in ``keys``."""
    msg = str(err)
    for old, new in keys.items():
        if msg.startswith(old) and msg[len(old):len(old) + 1] in (".", ":", " ", "["):
            return type(err)(new + msg[len(old):])
    return err


def search_all(base: dict[str, Any], cap: CapacityConfig, label: str | None = None,
               fn: Callable[[dict[str, Any]], dict[str, Any]] = evaluate,
               progress: SearchProgress | None = None) -> tuple[list[Job], Runner]:
    """Every (cluster, policy) search, interleaved over one process pool; returns the jobs and the runner."""
    progress = progress if progress is not None else SearchProgress("", enabled=False)
    cap = cap.checked()
    check_metric(cap.metric, base)
    policies = parse_policies(cap, base)
    clusters = parse_clusters(cap, base, label)
    modes = rate_modes(base["workload"], cap.seed0)
    simulating = fn is evaluate
    if simulating and not cap.decode_skew:
        fn = functools.partial(evaluate, decode_skew=False)  # (picklable: the workers run it)
    jobs = []
    for i, (name, cluster) in enumerate(clusters):
        size = sum(int(i.get("count", 1)) for i in cluster["instances"])
        n_req = cap.num_requests * (size if cap.requests_per_instance else 1)
        mode = modes(n_req)
        for j, pol in enumerate(policies):
            def configs(rate: float, cluster: dict = cluster, pol: dict = pol, n: int = n_req,
                        mode: tuple[str, float] = mode) -> list[dict]:
                return [run_config(base, cluster, pol, rate, cap.seed0 + k, n, mode) for k in range(cap.seeds)]

            if simulating:
                progress.phase(f"preflight ({PREFLIGHT_REQUESTS} requests on {name} / {pol['name']})")
                try:
                    preflight(configs(cap.rate_min)[0], cap.decode_skew)
                except LLMSimError as e:
                    raise rekeyed(e, given_keys(cap, i, j)) from None
            jobs.append(Job(RateSearch(cap), configs, cap.metric, {
                "cluster": name, "cluster_desc": describe_cluster(cluster), "instances": size, "policy": pol["name"],
                "policy_kwargs": pol["kwargs"], "requests_per_run": n_req,
                "base_rate": mode[1] if mode[0] == "rate_scale" else None, "decode_skew": cap.decode_skew},
                label=f"{name} / {pol['name']}"))
    workers = min(cap.workers or cpu_count(), cap.seeds * cap.points_per_round * len(jobs))
    progress.phase(f"searching {len(jobs)} cluster x policy pair{'s' * (len(jobs) > 1)} on {workers} worker(s)")
    with Runner(workers, fn, progress=progress) as runner:
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
            "goodput_at_capacity": None if cap_pt is None else cap_pt.goodput,
            "run_s_at_capacity": None if cap_pt is None else cap_pt.duration_s, "target": cap.target,
            "metric": cap.metric, "seeds": cap.seeds, "num_requests": cap.num_requests,
            "tolerance": cap.tolerance, "evaluations": len(s.points), "runs": len(s.points) * cap.seeds,
            "monotone": not s.violations(), "note": s.summary_note(),
            "curve": [{"rate": p.rate, "attainment": p.attainment, "per_seed": p.per_seed, "goodput": p.goodput,
                       "throughput": p.throughput, "p99_ttft_ms": p.p99_ttft_ms, "p99_tpot_ms": p.p99_tpot_ms,
                       "run_s": p.duration_s} for p in s.curve()],
        })
        rows[-1]["goodput_note"] = goodput_note(rows[-1])
    return rows


def run_capacity(cfg: dict[str, Any], out_dir: str | Path, quiet: bool = False,
                 cluster_label: str | None = None) -> list[dict[str, Any]]:
    """The whole app on a plain config: the ``capacity`` group + the run groups of ``llmsim``. Progress goes to
    stderr unless ``quiet``; outputs are written to ``out_dir`` (created then) once the search is done."""
    cap = CapacityConfig.parse(cfg.get("capacity")).checked()
    base = base_config(cfg)
    with SearchProgress("llmsim-capacity", enabled=not quiet) as progress:
        t0 = time.perf_counter()
        jobs, runner = search_all(base, cap, cluster_label, progress=progress)
        rows = result_rows(jobs, cap)
        wall = time.perf_counter() - t0
        progress.phase("writing capacity.json, capacity.csv and capacity.png")
        for r in rows:
            r["wall_s"], r["total_runs"] = wall, runner.runs
        write_outputs(rows, Path(out_dir))
    if not quiet:
        print_table(rows, runner, wall)
        for r in rows:
            if not r["monotone"]:
                print(f"warning: {r['cluster']} / {r['policy']}: {r['note']}", file=sys.stderr)
    return rows


if __name__ == "__main__":  # the app's old module command: say where it went rather than exit silently
    print("python -m llmsim.planning.capacity: error: the app is `llmsim-capacity` (or `python -m llmsim.cli.planning "
          "capacity`)", file=sys.stderr)
    raise SystemExit(2)
