"""RouteBalance reproduction: the cells (one simulation each), their metrics, the grid of a size, and the lookup of
finished cells the claims and the page read."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from experiments.harness.pool import run_cells
from experiments.papers.routebalance import setup as S
from llmsim import simulate
from llmsim.envs.routebalance_tasks import request_cost
from llmsim.errors import ConfigError, LLMSimError
from llmsim.routing import make_router

TIERS = ("qwen2.5-3b", "qwen2.5-7b", "qwen2.5-14b", "qwen2.5-72b")
SHORT = {"qwen2.5-3b": "3B", "qwen2.5-7b": "7B", "qwen2.5-14b": "14B", "qwen2.5-72b": "72B"}
PREDICTORS = "llmsim.routing.routebalance.predictors"


@dataclass(frozen=True)
class Cell:
    """One simulation: experiment, policy label, rate, workload seed, arrival process, 72B slowed or not."""

    exp: str
    label: str
    rate: float
    seed: int
    n: int
    process: str = "poisson"
    slow72: bool = False


def load_predictors() -> str:
    """Import the learned-predictor module if it exists (it registers ``knn`` etc.); '' or why not."""
    try:
        __import__(PREDICTORS)
        return ""
    except ModuleNotFoundError as e:
        if e.name == PREDICTORS:
            return f"{PREDICTORS} does not exist yet"
        return f"{PREDICTORS} failed to import: {e}"
    except Exception as e:  # a half-written module: a missing arm, not a crash
        return f"{PREDICTORS} failed to import: {type(e).__name__}: {e}"


def telemetry_missing() -> str:
    """'' if the XGBoost head's telemetry module imports, else why not."""
    try:
        __import__(S.TELEMETRY)
        return ""
    except Exception as e:
        return f"{S.TELEMETRY} (the XGBoost TPOT head's training telemetry) is not available: {type(e).__name__}: {e}"


def metrics(reqs: list, insts: list, df: Any) -> dict[str, Any]:
    """Quality (ground truth of the served model), cost (USD), throughput, E2E stats, tier mix of a run."""
    if not len(df):
        return {"completed": 0}
    by_id = {r.id: r for r in reqs}
    model = [insts[int(i)].model for i in df["instance"]]
    served = [by_id[int(i)] for i in df["id"]]
    e2e = (df["finish"] - df["arrival"]).to_numpy(float)
    span = float(df["finish"].max() - min(r.arrival for r in reqs))
    out = {"completed": len(df), "quality": float(np.mean([r.quality_by_model[m] for r, m in zip(served, model)])),
           "cost": float(np.mean([request_cost(r, m) for r, m in zip(served, model)])),
           "throughput": len(df) / span, "e2e": float(e2e.mean()), "p50": float(np.percentile(e2e, 50)),
           "p95": float(np.percentile(e2e, 95)), "p99": float(np.percentile(e2e, 99)),
           "ttft": float((df["first_token"] - df["arrival"]).mean()),
           "router_wait": float((df["routed_time"] - df["arrival"]).mean())}
    out.update({f"mix_{SHORT[t]}": model.count(t) / len(model) for t in TIERS})
    return out


def run_cell(c: Cell) -> dict[str, Any]:
    """Simulate one cell; a refused configuration (missing estimator, unknown option) is an error row."""
    out: dict[str, Any] = asdict(c)
    try:
        name, kw, tick = S.policy(c.label)
        if name == "routebalance" and (kw.get("estimator") == "knn" or kw.get("tpot_prior") == "xgboost"):
            why = load_predictors() or (telemetry_missing() if kw.get("tpot_prior") == "xgboost" else "")
            if why:
                return {**out, "error": why}
        insts, reqs = S.instances(c.slow72), S.workload(c.rate, c.n, c.seed, c.process)
        if c.label.startswith("rbb:"):
            S.assign_budgets(reqs, int(c.label.split(":")[2]), c.seed)
        t0 = time.perf_counter()
        if kw.get("estimator") == "knn":
            kw["estimator"] = S.knn_estimator()
        if kw.get("tpot_prior") == "xgboost":  # telemetry_rows' defaults, collected once per process
            kw["tpot_kwargs"] = {"train": S.telemetry_sample()}
        router = make_router(name, seed=c.seed, **kw)
        res = simulate(insts, reqs, router, central_queue_tick=tick, seed=c.seed)
    except (ConfigError, LLMSimError) as e:
        return {**out, "error": " ".join(str(e).split())}
    out["wall_s"] = time.perf_counter() - t0
    out.update(metrics(reqs, insts, res.requests))
    out["dropped"] = int(res.summary.get("dropped", 0))
    if hasattr(router, "mean_decision_ms"):
        out["decision_ms"] = router.mean_decision_ms
        out["per_window"] = router.stats["decisions"] / max(router.stats["batches"], 1)
    if c.label.startswith("rbb:"):
        out.update(S.budget_metrics(reqs, insts, res.requests, router.stats))
    if kw.get("estimator") not in (None, "oracle"):
        out["best_model_acc"] = S.best_model_accuracy(reqs, router.estimator)
    if getattr(router, "tpot_head", None) is not None:
        out["tpot_head_calls"] = int(getattr(router.tpot_head, "calls", 0))
    return out


def make_cells(name: str, sections: tuple[str, ...] = S.SECTIONS) -> list[Cell]:
    sz = S.SIZES[name]
    n, s0 = sz.requests, sz.seeds[0]
    extra = study_cells(sz, sections)
    if "main" not in sections:
        return extra
    grid = [f"rb:{w}" for w in sz.weights] + [f"rbn:{w}" for w in sz.noisy_weights]
    grid += [f"rbk:{w}" for w in sz.knn_weights]
    grid += [f"br:{t:g}:{d}" for t in sz.br_t for d in sz.dispatchers]
    grid += [f"ap:{p:g}:{d}" for p in sz.ap_pw for d in sz.dispatchers] + ["pt:rr", "pt:sq", "pt:random"]
    cells = [Cell("grid", lab, r, s, n) for lab in grid for r in sz.rates for s in sz.seeds]
    cells += [Cell("serial", "brser:0:rr", r, s0, n) for r in sz.rates]
    cells.append(Cell("serial", "brstrict:0:rr", min(sz.rates), s0, min(n, S.STRICT_N)))
    iso = sorted(set(sz.iso_rates) | ({18.0} if sz.nonstat else set()))
    cells += [Cell("iso", arm, r, s0, n) for arm in sz.arms for r in iso]
    if sz.nonstat:
        for proc in ("gamma", "square6/30", "square6/40"):
            for lab in ("rb:uniform", "arm4", "ap:0.53:sq", "br:0.5:sq", "brser:0:rr"):
                cells.append(Cell("nonstat", lab, 18.0, s0, n, proc))
        cells += [Cell("nonstat", lab, 23.0, s0, n) for lab in ("rb:uniform", "arm4")]
    for s in sz.extra_seeds:
        cells += [Cell("seeds", lab, r, s, n) for lab in ("rb:uniform", "rb:quality", "rb:cost", "br:0.5:sq")
                  for r in (12.0, 30.0)]
    slow = ("rb:uniform", "rb:quality", "arm2", "arm3", "arm4", "br:0.5:sq", "pt:rr")
    cells += [Cell("slow72", lab, r, s0, n, slow72=True) for lab in slow for r in (12.0, max(sz.rates))]
    return cells + extra


def study_cells(sz: S.Size, sections: tuple[str, ...]) -> list[Cell]:
    """The budget study (weights x mix x filter on/off, plus no budget) and the batching ablation cells."""
    n, s0 = sz.requests, sz.seeds[0]
    cells = []
    if "budget" in sections:
        labs = [f"rbb:{w}:0:f" for w in sz.budget_weights]
        labs += [f"rbb:{w}:{m}:{f}" for w in sz.budget_weights for m in sz.budget_mixes for f in ("f", "n")]
        cells += [Cell("budget", lab, S.BUDGET_RATE, s0, n) for lab in labs]
    if "batching" in sections:
        want = {(f"bat:{arm}", r) for arm in S.BATCH_ARMS for r in sz.arm_rates}
        want |= {(f"bat:bs{b}", r) for b in sz.batch_sizes for r in sz.batch_rates}
        want |= {("bat:default", r) for r in sz.batch_rates}
        cells += [Cell("batching", lab, r, s0, n) for lab, r in sorted(want)]
    return cells


def simulate_cells(cells: list[Cell], jobs: int, progress: bool) -> list[dict[str, Any]]:
    """Every cell, the slowest (serial BEST-Route, high rates) submitted first."""
    todo = sorted(cells, key=lambda c: -(5 if c.label.startswith("brs") else 1) * c.rate)
    return run_cells(run_cell, todo, jobs, progress, "routebalance")


class Results:
    """Cells by (exp, label, rate, process, slow72, seed); ``get`` falls back from 'iso'/'serial' to 'grid'."""

    def __init__(self, rows: list[dict[str, Any]], seed: int) -> None:
        self.rows, self.seed = rows, seed
        self.idx = {(r["exp"], r["label"], float(r["rate"]), r["process"], r["slow72"], r["seed"]): r for r in rows}

    def get(self, label: str, rate: float, exp: str = "grid", process: str = "poisson", slow72: bool = False,
            seed: int | None = None) -> dict[str, Any]:
        s = self.seed if seed is None else seed
        for e in (exp, "grid", "iso", "serial", "seeds"):
            r = self.idx.get((e, label, float(rate), process, slow72, s))
            if r is not None:
                return r
        return {"error": "not run"}

    def m(self, label: str, rate: float, key: str, **kw: Any) -> float:
        x = self.get(label, rate, **kw).get(key, math.nan)
        return math.nan if x is None else float(x)

    def labels(self, prefix: str, exp: str = "grid") -> list[str]:
        return sorted({r["label"] for r in self.rows if r["exp"] == exp and r["label"].startswith(prefix)
                       and "error" not in r})


def rel(a: float, b: float) -> float:
    """a / b - 1 in per cent."""
    if math.isnan(a) or math.isnan(b) or b == 0:
        return math.nan
    return (a / b - 1.0) * 100.0


def best(R: Results, prefix: str, rate: float, key: str, lowest: bool = False) -> tuple[float, str]:
    """Best value of ``key`` over the labels with ``prefix`` at ``rate`` (grid), and the label."""
    vals = [(R.m(lab, rate, key), lab) for lab in R.labels(prefix)]
    vals = [v for v in vals if not math.isnan(v[0])]
    if not vals:
        return math.nan, "none"
    return (min if lowest else max)(vals)
