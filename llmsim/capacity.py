"""Capacity search: the highest arrival rate at which a cluster keeps SLO attainment at or above a target.

    llmsim-capacity capacity.policies=[round_robin,jsq] capacity.target=0.9 slo.ttft_ms=500 slo.tpot_ms=50
    python -m llmsim.capacity ...          # the same

This is the "goodput" / capacity figure of DistServe and Vidur: for each policy, attainment (the share of
requests meeting every SLO, drops counting as misses) is measured as the mean over ``capacity.seeds`` workload
seeds, first at ``rate_min``, then doubling until it falls below the target (or ``rate_max`` is reached), then
by bisection in log-rate until the bracket is narrower than ``tolerance`` (relative). Seeds run in parallel
across ``workers`` processes; the policies' searches interleave on the same pool. Attainment need not be
monotone in rate with few seeds; bisection still returns a rate whose measured attainment met the target,
next to one that did not, within the tolerance.

The rate is the synthetic workload's ``rate`` (Poisson / Gamma) or, for a trace, its ``rate_scale``
(capacity is then reported as a multiple of the trace's own rate). Outputs in the run directory:
``capacity.json`` (one object per policy with ``policy``, ``cluster``, ``capacity_rps``, ``target`` and the
attainment curve), ``capacity.csv`` (every evaluated point) and ``capacity.png``.
"""

from __future__ import annotations

import copy
import json
import math
import sys
import time
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from llmsim.errors import ConfigError
from llmsim.schema import Fraction, NonNegInt, PosFloat, PosInt, Schema

_CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")


class CapacityConfig(Schema):
    """``capacity`` group: what to search and how precisely."""

    where: ClassVar[str] = "capacity"
    target: Fraction = 0.9
    seeds: PosInt = 3
    seed0: NonNegInt = 0
    rate_min: PosFloat = 0.25
    rate_max: PosFloat = 256.0
    tolerance: Fraction = 0.05
    num_requests: PosInt = 1000
    policies: list[str] | None = None
    workers: PosInt | None = None
    max_evaluations: PosInt = 40
    metric: str = Field(default="slo_attainment")


@dataclass
class Search:
    """One policy's search: evaluated points and the bracket."""

    policy: str
    points: list[dict[str, Any]] = field(default_factory=list)
    capacity: float = 0.0
    bracket: tuple[float, float] = (0.0, math.inf)
    note: str = ""


def _rate_key(workload: dict[str, Any]) -> str:
    if workload.get("kind") == "synthetic":
        process = (workload.get("arrival") or {}).get("process")
        if process not in ("poisson", "gamma"):
            raise ConfigError(f"capacity: the synthetic workload's arrival process must be poisson or gamma to set "
                              f"its rate, got {process!r}")
        return "rate"
    return "rate_scale"


def run_config(base: dict[str, Any], policy: str, rate: float, seed: int, num_requests: int) -> dict[str, Any]:
    """The plain run config of one evaluation (policy, rate, seed, size), outputs off."""
    cfg = copy.deepcopy(base)
    cfg["seed"] = seed
    cfg["policy"] = {"name": policy, "kwargs": dict((base.get("policy") or {}).get("kwargs") or {})} \
        if policy != (base.get("policy") or {}).get("name") else copy.deepcopy(base.get("policy"))
    wl = cfg["workload"]
    wl[_rate_key(wl)] = float(rate)
    if wl.get("kind") == "synthetic":
        wl["num_requests"] = num_requests
        wl.pop("duration", None)
    else:
        wl["max_requests"] = num_requests
    cfg["output"] = {"save": False, "plots": False, "progress": False, "format": "csv"}
    return cfg


def evaluate(cfg: dict[str, Any]) -> dict[str, Any]:
    """One simulation (runs in a worker process): the figures the search and the curve need."""
    from llmsim.cli import run_from_config

    s = run_from_config(cfg).summary
    return {k: s.get(k) for k in ("slo_attainment", "request_goodput", "request_throughput", "completed",
                                  "dropped", "p99_ttft_ms", "p99_tpot_ms", "mean_e2el_ms")}


class CapacitySearch:
    """Bisection per policy over one shared executor (seeds of one rate run in parallel)."""

    def __init__(self, base: dict[str, Any], cap: CapacityConfig, executor: Executor,
                 progress: Callable[[str], None] | None = None) -> None:
        if not (base.get("slo") or {}) or not any(v is not None for v in base["slo"].values()):
            raise ConfigError("capacity: set at least one SLO target (slo.ttft_ms, slo.tpot_ms or slo.e2el_ms); "
                              "attainment is measured against them")
        if cap.rate_min >= cap.rate_max:
            raise ConfigError(f"capacity.rate_min ({cap.rate_min:g}) must be below capacity.rate_max "
                              f"({cap.rate_max:g})")
        _rate_key(base["workload"])
        self.base = base
        self.cap = cap
        self.pool = executor
        self.say = progress or (lambda msg: None)

    def attainment(self, search: Search, rate: float) -> float:
        c = self.cap
        cfgs = [run_config(self.base, search.policy, rate, c.seed0 + k, c.num_requests) for k in range(c.seeds)]
        results = list(self.pool.map(evaluate, cfgs))
        values = [float(r.get(c.metric) or 0.0) for r in results]
        mean = sum(values) / len(values)
        search.points.append({"policy": search.policy, "rate": rate, "attainment": mean, "per_seed": values,
                              "goodput": sum(float(r["request_goodput"] or 0) for r in results) / len(results)})
        self.say(f"{search.policy}: rate {rate:.4g} -> attainment {mean:.3f}")
        return mean

    def run(self, policy: str) -> Search:
        c = self.cap
        s = Search(policy)
        target = c.target
        lo = c.rate_min
        if self.attainment(s, lo) < target:
            s.note = f"attainment below target already at rate_min={lo:g}"
            s.capacity, s.bracket = 0.0, (0.0, lo)
            return s
        hi = None
        while hi is None and len(s.points) < c.max_evaluations:
            nxt = min(lo * 2.0, c.rate_max)
            if self.attainment(s, nxt) >= target:
                lo = nxt
                if nxt >= c.rate_max:
                    s.note = f"target still met at rate_max={c.rate_max:g}; capacity is at least that"
                    s.capacity, s.bracket = lo, (lo, math.inf)
                    return s
            else:
                hi = nxt
        if hi is None:
            s.note = "max_evaluations reached while growing the rate"
            s.capacity, s.bracket = lo, (lo, math.inf)
            return s
        while hi / lo - 1.0 > c.tolerance and len(s.points) < c.max_evaluations:
            mid = math.sqrt(lo * hi)
            if self.attainment(s, mid) >= target:
                lo = mid
            else:
                hi = mid
        s.capacity, s.bracket = lo, (lo, hi)
        return s


def search_all(base: dict[str, Any], cap: CapacityConfig, progress: Callable[[str], None] | None = None,
               ) -> list[Search]:
    """Every policy's search, interleaved over one process pool."""
    policies = cap.policies or [(base.get("policy") or {}).get("name", "round_robin")]
    workers = cap.workers or _cpu_count()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        finder = CapacitySearch(base, cap, pool, progress)
        with ThreadPoolExecutor(max_workers=len(policies)) as threads:
            return list(threads.map(finder.run, policies))


def _cpu_count() -> int:
    import os

    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def describe_cluster(base: dict[str, Any]) -> str:
    parts = []
    for inst in base["cluster"]["instances"]:
        tp = f" tp{inst['tp']}" if inst.get("tp", 1) != 1 else ""
        parts.append(f"{inst.get('count', 1)}x {inst.get('model', 'llama-2-7b')}@{inst.get('gpu', 'a100-80gb')}{tp}")
    return " + ".join(parts)


def write_outputs(searches: list[Search], base: dict[str, Any], cap: CapacityConfig, out: Path) -> list[dict]:
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    cluster = describe_cluster(base)
    unit = "x trace rate" if _rate_key(base["workload"]) == "rate_scale" else "req/s"
    rows = [{
        "policy": s.policy, "cluster": cluster, "capacity_rps": s.capacity, "rate_unit": unit,
        "bracket": [s.bracket[0], None if math.isinf(s.bracket[1]) else s.bracket[1]], "target": cap.target,
        "metric": cap.metric, "seeds": cap.seeds, "num_requests": cap.num_requests, "evaluations": len(s.points),
        "note": s.note, "curve": sorted(({"rate": p["rate"], "attainment": p["attainment"],
                                          "per_seed": p["per_seed"]} for p in s.points), key=lambda p: p["rate"]),
    } for s in searches]
    (out / "capacity.json").write_text(json.dumps(rows, indent=2) + "\n")
    pd.DataFrame([p for s in searches for p in s.points]).to_csv(out / "capacity.csv", index=False)
    plot_capacity(rows, out / "capacity.png", unit)
    return rows


def plot_capacity(rows: list[dict], path: Path, unit: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for k, row in enumerate(rows):
        color = f"C{k}"
        xs = [p["rate"] for p in row["curve"]]
        ys = [p["attainment"] for p in row["curve"]]
        ax.plot(xs, ys, "o-", color=color, label=f"{row['policy']}: capacity {row['capacity_rps']:.3g} {unit}")
        if row["capacity_rps"] > 0:
            ax.axvline(row["capacity_rps"], color=color, ls=":", lw=1)
    target = rows[0]["target"] if rows else 0.9
    ax.axhline(target, color="gray", ls="--", lw=1, label=f"target {target:.0%}")
    ax.set_xscale("log")
    ax.set_xlabel(f"arrival rate ({unit})")
    ax.set_ylabel("SLO attainment (share of requests)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"Capacity at {target:.0%} SLO attainment: {rows[0]['cluster'] if rows else ''}", fontsize=10)
    ax.legend(fontsize=8, loc="lower left")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def print_table(rows: list[dict], wall_s: float) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"Capacity at {rows[0]['target']:.0%} {rows[0]['metric']} ({rows[0]['cluster']})")
    for col in ("policy", f"capacity ({rows[0]['rate_unit']})", "bracket", "evaluations", "note"):
        t.add_column(col)
    for r in rows:
        lo, hi = r["bracket"]
        bracket = f"[{lo:.4g}, {'inf' if hi is None else f'{hi:.4g}'}]"
        t.add_row(r["policy"], f"{r['capacity_rps']:.4g}", bracket, str(r["evaluations"]), r["note"])
    Console().print(t)
    print(f"wall {wall_s:.1f} s")


def run_capacity(cfg: dict[str, Any], out_dir: str | Path, quiet: bool = False) -> list[dict]:
    """The whole app on a plain config: ``capacity`` group + the run groups of ``llmsim``."""
    from llmsim.schema import RunConfig

    cfg = dict(cfg)
    cap = CapacityConfig.parse(cfg.pop("capacity", None))
    base = RunConfig.parse(cfg).model_dump()
    base["workload"] = dict(cfg["workload"])
    base["cluster"] = {"instances": [dict(i) for i in cfg["cluster"]["instances"]]}
    from llmsim.cli import resolve_workload_path

    base["workload"] = resolve_workload_path(base["workload"])
    t0 = time.perf_counter()
    say = (lambda m: None) if quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    searches = search_all(base, cap, say)
    rows = write_outputs(searches, base, cap, Path(out_dir))
    if not quiet:
        print_table(rows, time.perf_counter() - t0)
    return rows


def main() -> None:
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from llmsim.errors import LLMSimError

    @hydra.main(version_base="1.3", config_path=_CONF_DIR, config_name="capacity")
    def _main(cfg: DictConfig) -> None:
        out_dir = HydraConfig.get().runtime.output_dir
        try:
            plain = OmegaConf.to_container(cfg, resolve=True)
            run_capacity(plain, out_dir)
        except (LLMSimError, OmegaConfBaseException) as e:
            print(f"llmsim-capacity: error: {' '.join(str(e).split())}", file=sys.stderr)
            raise SystemExit(2) from None
        print(f"outputs: {out_dir}")

    _main()


if __name__ == "__main__":
    main()
