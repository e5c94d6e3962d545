"""RouteBalance reproduction: sizes, the policy of every label, the cluster and the workloads.

Everything runs on the 13-instance testbed of ``envs/routebalance_tasks.py`` (docs/routebalance_testbed.md) with
its labelled workload (seed 5, the paper's re-run seed). The reproducer's own choices (the paper gives none):

* **RouteBalance weight grid.** The paper sweeps 16 simplex tuples, 4 of them named (the RouteBalance paper's §6.1
  and §6.2); the other 12 are not given, so ``WEIGHT_GRID`` picks 12 that cover the quality-heavy edge,
  the middle and the w_lat = 0 edge. Written (qual, cost, lat).
* **Scoring cost of the baselines** (docs/route_baselines.md). The frontier's BEST-Route cells run "enhanced"
  (concurrent, 32 threads) at 431 ms per DeBERTa forward, the paper's figure. Avengers-Pro (one MiniLM embedding
  + a k-means lookup, as cheap as RouteBalance's own estimator, which is not charged either) scores at 0 ms.
  "As published" serial BEST-Route uses an *effective* single-server time of 67 ms: a strict 431 ms server
  serves 2.3 req/s and is overloaded at every rate of the grid (the docs' warning; ~67 ms reproduces the paper's
  63 s at 30 req/s by construction). The strict 431 ms server is run once at 6 req/s on ``STRICT_N`` requests to
  show that.
* **A noisy RouteBalance** (``rbn:``): the oracle estimator knows the true labels, so a second frontier uses
  the ``noisy`` estimator with ``NOISY`` (quality sd 0.5: best-model accuracy ~39 %, between the paper's kNN
  34.8 % and BEST-Route's classifier 39.2 %) to compare routers of similar accuracy.
* **72B sensitivity** (``slow72``): the testbed's 72B decodes ~28 % faster than the paper's nominal TPOT;
  ``SLOW72`` = 47.4 / 34.1 scales its step time in a small side experiment.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmsim.envs.routebalance_tasks import (
    MAX_TOKENS,
    MODELS,
    PRICES,
    TIERS,
    request_cost,
    routebalance_instances,
    routebalance_workload,
)
from llmsim.routing.model_choice import fit_cluster_table
from llmsim.routing.routebalance.estimators import make_estimator, predict_batch

RB_TICK, BR_TICK, SERIAL_TICK = 0.004, 0.01, 0.05
BR_SCORING_MS, SERIAL_EFFECTIVE_MS, STRICT_MS, STRICT_N = 431.0, 67.0, 431.0, 600
SLOW72 = 47.4 / 34.1
NOISY = {"quality_sd": 0.5, "length_sigma": 0.5}
PRESETS = {"cost": (0.1, 0.8, 0.1), "uniform": (1 / 3, 1 / 3, 1 / 3), "mid": (0.6, 0.2, 0.2),
           "quality": (0.8, 0.1, 0.1), "latency": (0.1, 0.1, 0.8)}
WEIGHT_GRID = ((0.5, 0.25, 0.25), (0.7, 0.15, 0.15), (0.9, 0.05, 0.05), (0.6, 0.1, 0.3), (0.6, 0.3, 0.1),
               (0.4, 0.4, 0.2), (0.4, 0.2, 0.4), (0.2, 0.4, 0.4), (0.5, 0.5, 0.0), (0.5, 0.0, 0.5),
               (0.3, 0.6, 0.1))
BR_T = (0.0, 0.3, 0.5, 0.6, 0.7, 0.8)
AP_PW = (0.25, 0.39, 0.53, 0.70, 0.80)
ARMS = ("arm1", "arm2", "arm3", "arm4", "arm1_profile", "arm1_mm", "arm2_mm", "arm1_knn", "arm2_knn", "arm3_knn",
        "arm4_knn", "arm1_xgb")
# the budget study (the RouteBalance paper's §6.4, Table 8): % of prompts with a budget (nested: 30 of the 45, 45 of
# the 75), lambda 16
BUDGET_MIXES, BUDGET_RATE, BUDGET_FLOOR_TOKENS = (75, 45, 30), 16.0, 128
# the batching ablation (the RouteBalance paper's Figure 4): arms of panel (a) and the fixed batch sizes of panel (b)
BATCH_ARMS: dict[str, dict[str, Any]] = {"default": {}, "lptoff": {"lpt": False},
                                         "adaptoff": {"batching": "fixed", "max_batch_size": 32}}
BATCH_SIZES = (1, 4, 16, 32)
SECTIONS = ("main", "budget", "batching")
TELEMETRY = "llmsim.simulation.telemetry"  # the XGBoost TPOT head's training telemetry


@dataclass(frozen=True)
class Size:
    """How much to run (the first rate of ``iso_rates`` that is also in ``rates`` is the isolation default)."""

    requests: int
    rates: tuple[float, ...]
    seeds: tuple[int, ...]
    weights: tuple[str, ...]          # RouteBalance labels of the frontier (oracle)
    noisy_weights: tuple[str, ...]    # the same with the noisy estimator
    knn_weights: tuple[str, ...]      # the same with the registered knn estimator (the paper's frontier)
    br_t: tuple[float, ...]
    ap_pw: tuple[float, ...]
    dispatchers: tuple[str, ...]
    iso_rates: tuple[float, ...]
    extra_seeds: tuple[int, ...]      # repeat the headline cells (uniform, quality, BR t=0.5) on these seeds
    nonstat: bool = True
    arms: tuple[str, ...] = ARMS
    budget_weights: tuple[str, ...] = ("uniform", "quality")  # budget study (kNN RouteBalance)
    budget_mixes: tuple[int, ...] = BUDGET_MIXES
    batch_rates: tuple[float, ...] = (8.0, 16.0, 24.0)        # batching ablation panel (b)
    batch_sizes: tuple[int, ...] = BATCH_SIZES
    batch_arm_rates: tuple[float, ...] = ()                   # panel (a); () = ``rates``

    @property
    def arm_rates(self) -> tuple[float, ...]:
        return tuple(sorted(self.batch_arm_rates or self.rates))


def _w(t: tuple[float, ...]) -> str:
    return "w=" + ",".join(f"{x:g}" for x in t)


ALL_WEIGHTS = tuple(PRESETS) + tuple(_w(t) for t in WEIGHT_GRID)
SIZES = {
    "full": Size(3534, (6.0, 8.0, 10.0, 12.0, 18.0, 24.0, 30.0), (5,), ALL_WEIGHTS, ALL_WEIGHTS, ALL_WEIGHTS, BR_T,
                 AP_PW,
                 ("sq", "rr"), (12.0, 18.0, 24.0, 30.0), (6, 7)),
    "quick": Size(1200, (6.0, 12.0, 18.0, 30.0), (5,), tuple(PRESETS) + ("w=0.5,0.5,0", "w=0.9,0.05,0.05"),
                  ("cost", "uniform", "quality"), tuple(PRESETS), (0.0, 0.5, 0.8), (0.25, 0.53, 0.8), ("sq", "rr"),
                  (12.0, 30.0), ()),
    "tiny": Size(120, (12.0, 30.0), (5,), ("cost", "uniform", "quality"), ("quality",), ("quality",), (0.0, 0.5),
                 (0.53,),
                 ("sq",), (12.0,), (), nonstat=False, arms=("arm1", "arm2", "arm3", "arm4", "arm1_knn"),
                 budget_weights=("uniform",), budget_mixes=(75,), batch_rates=(16.0,), batch_sizes=(1,),
                 batch_arm_rates=(12.0,)),
}


def weights_of(name: str) -> tuple[float, float, float]:
    if name in PRESETS:
        return PRESETS[name]  # type: ignore[return-value]
    if not name.startswith("w="):
        raise ValueError(f"unknown weights {name!r}")
    a, b, c = (float(x) for x in name[2:].split(","))
    return (a, b, c)


def _rb(weights: tuple[float, float, float], **kw: Any) -> tuple[str, dict[str, Any], float]:
    return "routebalance", {"weights": list(weights), "prices": {m: list(p) for m, p in PRICES.items()}, **kw}, \
        RB_TICK


ARM_KW: dict[str, dict[str, Any]] = {
    "arm1": {},                                                       # full objective, live telemetry T
    "arm2": {"weights": (0.5, 0.5, 0.0), "tiebreak": "queue"},         # w_lat = 0 + reactive queue tiebreak
    "arm3": {"weights": (0.5, 0.5, 0.0), "tiebreak": "latency"},       # w_lat = 0 + predictive tiebreak
    "arm4": {"latency": "static"},                                     # static per-tier TPOT prior, no telemetry
    "arm1_profile": {"tpot_prior": "profile"},                         # the testbed's own per-tier TPOT as prior
    "arm1_mm": {"quality_norm": "minmax"},                             # the paper's public code's June re-run configs
    "arm2_mm": {"weights": (0.5, 0.5, 0.0), "quality_norm": "minmax"},
    "arm1_knn": {"estimator": "knn"},                                  # learned quality / length (if registered)
    "arm2_knn": {"weights": (0.5, 0.5, 0.0), "estimator": "knn"},
    "arm3_knn": {"weights": (0.5, 0.5, 0.0), "tiebreak": "latency", "estimator": "knn"},
    "arm4_knn": {"latency": "static", "estimator": "knn"},
    "arm1_xgb": {"tpot_prior": "xgboost"},                             # learned TPOT head (if registered)
}


def policy(label: str) -> tuple[str, dict[str, Any], float | None]:
    """(router name, kwargs, central_queue_tick) of a label:

    ``rb:<weights>`` / ``rbn:<weights>`` RouteBalance (oracle / noisy estimator), ``arm<k>[_x]`` an isolation arm,
    ``br:<t>:<sq|rr>`` enhanced BEST-Route, ``brser:<t>:<rr|sq>`` serial (effective 67 ms), ``brstrict:<t>:rr``
    a strict 431 ms serial scorer, ``ap:<p_w>:<sq|rr>`` Avengers-Pro, ``pt:<rr|sq|random>`` passthrough."""
    kind, _, rest = label.partition(":")
    if kind == "rb":
        return _rb(weights_of(rest))
    if kind == "rbk":
        return _rb(weights_of(rest), estimator="knn")
    if kind == "rbn":
        return _rb(weights_of(rest), estimator="noisy", estimator_kwargs=dict(NOISY))
    if kind == "rbb":  # rbb:<weights>:<mix %>:<f|n>: kNN RouteBalance, budgets on mix % of prompts, filter on/off
        w, _, flt = rest.split(":")
        return _rb(weights_of(w), estimator="knn", budget_filter=flt == "f")
    if kind == "bat":  # bat:<default|lptoff|adaptoff|bs<k>>: kNN RouteBalance, uniform weights
        kw = dict(BATCH_ARMS[rest]) if rest in BATCH_ARMS else {"batching": "fixed", "max_batch_size": int(rest[2:])}
        return _rb(PRESETS["uniform"], estimator="knn", **kw)
    if kind in ARM_KW:
        kw = dict(ARM_KW[kind])
        w = kw.pop("weights", PRESETS["uniform"])
        return _rb(w, **kw)
    if kind in ("br", "brser", "brstrict"):
        t, disp = rest.split(":")
        kw = {"threshold": float(t), "dispatcher": _disp(disp), "prices": {m: list(p) for m, p in PRICES.items()}}
        if kind == "br":
            return "best_route", {**kw, "scoring_ms": BR_SCORING_MS, "scoring": "concurrent"}, BR_TICK
        ms = SERIAL_EFFECTIVE_MS if kind == "brser" else STRICT_MS
        return "best_route", {**kw, "scoring_ms": ms, "scoring": "serial"}, SERIAL_TICK
    if kind == "ap":
        pw, disp = rest.split(":")
        return "avengers_pro", {"p_w": float(pw), "dispatcher": _disp(disp), "table": ap_table(),
                                "prices": {m: list(p) for m, p in PRICES.items()}}, None
    if kind == "pt":
        return {"rr": "round_robin", "sq": "jsq", "random": "random"}[rest], {}, None
    raise ValueError(f"unknown label {label!r}")


def _disp(d: str) -> str:
    return {"sq": "shortest_queue", "rr": "round_robin", "random": "random"}[d]


_TABLE: dict[str, Any] = {}


def telemetry_sample() -> list:
    """``llmsim.simulation.telemetry.telemetry_rows()`` with its defaults, cached per process: the XGBoost TPOT
    head's training rows (``tpot_prior: xgboost``; given to the router by cells.run_cell)."""
    if "tel" not in _TABLE:
        _TABLE["tel"] = importlib.import_module(TELEMETRY).telemetry_rows()
    return _TABLE["tel"]


def knn_estimator() -> Any:
    """The registered ``knn`` estimator (k = 10) trained on :func:`train_sample`, once per process. RouteBalance
    calls its ``predict_batch`` once per batch window (one neighbour search, as the paper's batched KNN); the
    features are task, prompt length and the prompt embedding, never the request's labels."""
    if "knn" not in _TABLE:
        _TABLE["knn"] = make_estimator("knn", 0, {"train": train_sample(), "k": 10})
    return _TABLE["knn"]


def train_sample() -> list:
    """The 14,919-request train split stand-in (seed 1005; the evaluation uses seed 5), cached per process."""
    if "train" not in _TABLE:
        _TABLE["train"] = routebalance_workload(12.0, n=14919, seed=1005)
    return _TABLE["train"]


def ap_table() -> dict[str, Any]:
    """Avengers-Pro's per-cluster table, fitted on a train-split-sized sample of another seed (docs)."""
    if "t" not in _TABLE:
        _TABLE["t"] = fit_cluster_table(train_sample(), {m: tuple(p) for m, p in PRICES.items()})
    return _TABLE["t"]


def instances(slow72: bool = False) -> list:
    """The 13 instances; ``slow72`` scales the 72B tier's step time to the paper's nominal TPOT."""
    if not slow72:
        return routebalance_instances()
    big = [t for t in TIERS if t.model == "qwen2.5-72b"]
    return routebalance_instances(tiers=big, step_time_scale=SLOW72) + \
        routebalance_instances(tiers=[t for t in TIERS if t.model != "qwen2.5-72b"])


def workload(rate: float, n: int, seed: int, process: str = "poisson") -> list:
    """``process``: poisson at ``rate``; gamma (burstiness 0.3 at ``rate``); square6/30 or square6/40."""
    if process == "poisson":
        return routebalance_workload(rate, n=n, seed=seed)
    if process == "gamma":
        return routebalance_workload(rate, n=n, seed=seed, process="gamma", burstiness=0.3)
    if process.startswith("square"):
        lo, hi = (float(x) for x in process[len("square"):].split("/"))
        return routebalance_workload(rate, n=n, seed=seed, process="square", square=(lo, hi))
    raise ValueError(f"unknown arrival process {process!r}")


def assign_budgets(reqs: list, mix_pct: int, seed: int) -> None:
    """Give ``mix_pct`` % of ``reqs`` a cost budget (``extra.cost_budget``, USD) ~ Uniform[l_in c_in(3B) + 128
    c_out(3B), l_in c_in(72B) + 128 c_out(72B)] (the RouteBalance paper's §6.4 and its public code's
    build_budget_dataset.py; l_in = the prompt's tokens). Nested: one seeded order and one draw per request, so a
    smaller mix is a subset of a larger one."""
    rng = np.random.default_rng([seed, 3])
    order = rng.permutation(len(reqs))
    u = rng.random(len(reqs))
    (i3, o3), (i72, o72) = PRICES["qwen2.5-3b"], PRICES["qwen2.5-72b"]
    for k in order[: round(len(reqs) * mix_pct / 100)].tolist():
        r = reqs[k]
        lo = (r.prompt_tokens * i3 + BUDGET_FLOOR_TOKENS * o3) / 1e6
        hi = (r.prompt_tokens * i72 + BUDGET_FLOOR_TOKENS * o72) / 1e6
        r.extra = {**(r.extra or {}), "cost_budget": lo + float(u[k]) * (hi - lo)}


def budget_metrics(reqs: list, insts: list, df: Any, stats: dict[str, float]) -> dict[str, float]:
    """The budget study's per-cell figures over the budgeted requests that completed: shares clamped (max_tokens
    lowered below 1024), cut (the served model's answer was longer than the clamp, so generation stopped at
    the budget), exhausted (cut, or the budget did not pay for the prompt and one output token: the RouteBalance
    paper's public code), filtered (the admission filter removed some candidate) and fallback (no candidate fitted);
    their mean quality and cost; and ``quality_cut0``, the mean quality of all completed requests if a cut answer
    scored 0 (the other bound of served-text quality; the label quality scores it as if complete)."""
    by_id = {r.id: r for r in reqs}
    rows = [(by_id[int(i)], insts[int(k)].model) for i, k in zip(df["id"], df["instance"])]
    rows = [(r, m) for r, m in rows if (r.extra or {}).get("cost_budget") is not None]
    n = max(len(rows), 1)
    cap = [r.output_cap() or MAX_TOKENS for r, _ in rows]
    cut = [r.output_for(m) > c for (r, m), c in zip(rows, cap)]
    nocover = [(r.prompt_tokens * PRICES[m][0] + PRICES[m][1]) / 1e6 > r.extra["cost_budget"] for r, m in rows]
    lost = sum(r.quality_by_model[m] for (r, m), c in zip(rows, cut) if c)  # what cut answers would score if 0
    b = max(stats.get("budgeted", 0), 1)
    return {"budgeted": len(rows), "clamped_share": sum(c < MAX_TOKENS for c in cap) / n,
            "cut_share": sum(cut) / n, "exhausted_share": sum(x or y for x, y in zip(cut, nocover)) / n,
            "filtered_share": stats.get("filtered", 0) / b, "fallback_share": stats.get("budget_fallbacks", 0) / b,
            "budget_quality": float(np.mean([r.quality_by_model[m] for r, m in rows])) if rows else float("nan"),
            "budget_cost": float(np.mean([request_cost(r, m) for r, m in rows])) if rows else float("nan"),
            "quality_cut0": float(np.mean([r.quality_by_model[m] for r, m in
                                           ((by_id[int(i)], insts[int(k)].model) for i, k in zip(df["id"],
                                                                                                df["instance"]))])
                                  - lost / max(len(df), 1)),
            "over_budget": sum(request_cost(r, m) > r.extra["cost_budget"] + 1e-12 and not x
                               for (r, m), x in zip(rows, nocover))}


def best_model_accuracy(reqs: list, estimator: Any) -> float:
    """Share of requests where the estimator's argmax quality is the true best model (the RouteBalance
    paper's §6.8)."""
    ok = 0
    for r, (q, _) in zip(reqs, predict_batch(estimator, reqs, [list(MODELS)] * len(reqs))):
        if q is None:
            return float("nan")
        ok += int(np.argmax(q) == np.argmax([r.quality_by_model[m] for m in MODELS]))
    return ok / max(len(reqs), 1)

