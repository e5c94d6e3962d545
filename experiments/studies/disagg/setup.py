"""The P/D disaggregation study's setup: sizes, the ShareGPT chatbot workload, one simulation (a cell), the SLOs
from the unloaded cluster, and the rate grid and capacity searches (experiment.py drives them).

DistServe (OSDI 2024) and Splitwise (ISCA 2024) claim that putting prefill and decode on different GPUs raises
goodput (the highest rate at which >= 90 % of requests meet both a TTFT and a TPOT SLO) or throughput per cost.
The study measures the same figure in llmsim on DistServe's chatbot setting:

* **Setting.** OPT-13B on A100-80GB (TP 1), ShareGPT (prompt, output) pairs resampled jointly from
  ``../shared/traces/sharegpt_lengths`` keeping only pairs that fit OPT-13B's 2,048-token context (filtered, not
  clipped, as DistServe filters), Poisson arrivals, the ``jsq`` router for both stages, KV over ``infiniband``.
* **Layouts.** N = 4 GPUs: 4 x mixed vs P:D = 1:3, 2:2, 3:1; N = 8: 8 x mixed vs 2:6, 4:4 (full size), each
  under both batch policies: ``vllm_v0`` (whole-prompt prefill, the vLLM DistServe compared with) and
  ``chunked`` (chunked prefill, today's vLLM default).
* **SLOs.** From the colocated cluster's unloaded latencies (p90 TTFT and p90 TPOT of 4 x mixed, vllm_v0, at
  0.1 req/s per GPU) x 1.5 (tight), 3 (base), 6 (loose): an SLO-scale sweep in DistServe's spirit.
* **Measured.** Attainment of TTFT, TPOT and both on a rate grid (per GPU) and the capacity search
  (:class:`llmsim.planning.search.RateSearch` driven by :class:`llmsim.planning.runner.Runner`) per (layout,
  policy, SLO); then, for the best layout at the base SLO, the KV link (nvlink, ethernet vs infiniband) and
  blocking sends.

One simulation yields the attainment of every SLO variant (the SLOs only re-score its requests), so all searches
share one cache of runs. Runs the engine refuses (an ``LLMSimError`` inside ``simulate``) count as attainment 0 and
are listed on the page with their message (see the report's "engine problems").
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmsim import simulate
from llmsim.cluster import InstanceConfig
from llmsim.engine.config import EngineConfig
from llmsim.errors import ConfigError, LLMSimError
from llmsim.planning.runner import Job
from llmsim.planning.search import CapacityConfig, RateSearch
from llmsim.workload.arrivals import PoissonArrivals
from llmsim.workload.lengths import Empirical
from llmsim.workload.synthetic import SyntheticWorkload

SLO_FACTORS = {"tight": 1.5, "base": 3.0, "loose": 6.0}  # x the colocated cluster's unloaded p90 TTFT / TPOT
SCALES = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 24.0, 32.0)  # SLO-scale sweep
TARGET = 0.9  # DistServe's goodput: >= 90 % of requests meet both SLOs
DEFAULT_LINK = ("infiniband", "overlap")

MODEL, GPU, ROUTER = "opt-13b", "a100-80gb", "jsq"
CONTEXT = 2048                        # OPT-13B's positions: ShareGPT pairs longer than this are left out
POLICIES = ("vllm_v0", "chunked")
UNLOADED_RATE_PER_GPU = 0.1           # req/s per GPU: no queueing, batches of one or two
LINK_VARIANTS = (("nvlink", "overlap"), ("ethernet", "overlap"), ("infiniband", "blocking"))


@dataclass(frozen=True)
class Size:
    """How much to run: layouts per cluster size ("mixed" or "P:D"), requests per GPU per run, seeds, the rate
    grid (req/s per GPU) and the capacity search's tolerance / evaluation budget."""

    layouts: dict[int, tuple[str, ...]]
    req_per_gpu: int
    seeds: tuple[int, ...]
    grid: tuple[float, ...]
    tolerance: float
    max_evals: int
    link_policies: tuple[str, ...]
    slos: tuple[str, ...] = ("tight", "base", "loose")
SIZES = {
    "full": Size({4: ("mixed", "1:3", "2:2", "3:1"), 8: ("mixed", "2:6", "4:4")}, 500, (0, 1),
                 (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5), 0.05, 12, POLICIES),
    "quick": Size({4: ("mixed", "1:3", "2:2", "3:1")}, 250, (0,), (1.0, 2.0, 3.0), 0.05, 10, ("vllm_v0",)),
    "tiny": Size({4: ("mixed", "2:2")}, 40, (0,), (1.0,), 0.3, 3, ("vllm_v0",), ("base",)),
}


def lengths_path() -> Path:
    """ShareGPT length pairs: ``$LLMSIM_TRACES/sharegpt_lengths`` else ../shared/traces (as the presets read)."""
    root = os.environ.get("LLMSIM_TRACES") or str(Path(__file__).resolve().parents[4] / "shared" / "traces")
    return Path(root) / "sharegpt_lengths" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"


@lru_cache(maxsize=1)
def sharegpt_pairs() -> tuple[tuple[int, int], ...]:
    """(prompt, output) pairs with prompt + output <= CONTEXT: the chatbot requests OPT-13B can serve whole."""
    path = lengths_path()
    if not path.is_file():
        raise ConfigError(f"{path}: ShareGPT lengths not found (set LLMSIM_TRACES to the shared traces directory)")
    df = pd.read_csv(path, usecols=["num_prefill_tokens", "num_decode_tokens"])
    ok = (df.num_prefill_tokens > 0) & (df.num_decode_tokens > 0) & (
        df.num_prefill_tokens + df.num_decode_tokens <= CONTEXT)
    return tuple(zip(df.num_prefill_tokens[ok].astype(int), df.num_decode_tokens[ok].astype(int)))


def requests_of(rate: float, n: int, seed: int) -> list:
    """Poisson arrivals at ``rate`` req/s with ShareGPT pairs (common random numbers across rates and layouts)."""
    return list(SyntheticWorkload(PoissonArrivals(rate), Empirical(list(sharegpt_pairs())), seed=seed,
                                  num_requests=n))


def roles_of(layout: str, n: int) -> list[str]:
    """Instance roles of a layout: ``mixed`` (n colocated) or ``P:D`` prefill and decode instances."""
    if layout == "mixed":
        return ["mixed"] * n
    p, d = (int(x) for x in layout.split(":"))
    if p + d != n:
        raise ConfigError(f"layout {layout!r}: P + D must be {n}")
    return ["prefill"] * p + ["decode"] * d


def score(df: Any, n_req: int, duration: float, slos: dict[str, list[float]]) -> dict[str, float]:
    """Attainment (TTFT, TPOT, both) and goodput of every SLO variant, as llmsim.metrics.recorder.slo_summary counts
    them: drops are misses, a one-token request has no TPOT and meets any TPOT target."""
    ttft = df["ttft_ms"].to_numpy(float) if len(df) else np.zeros(0)
    tpot = df["tpot_ms"].to_numpy(float) if len(df) else np.zeros(0)
    out: dict[str, float] = {}
    for name, (t_ttft, t_tpot) in slos.items():
        a = np.isnan(ttft) | (ttft <= t_ttft)
        b = np.isnan(tpot) | (tpot <= t_tpot)
        out[f"att_ttft_{name}"] = float(a.sum() / n_req)
        out[f"att_tpot_{name}"] = float(b.sum() / n_req)
        out[f"att_{name}"] = float((a & b).sum() / n_req)
        out[f"goodput_{name}"] = float((a & b).sum() / duration) if duration > 0 else math.nan
    return out


def run_cell(cfg: dict[str, Any]) -> dict[str, Any]:
    """One simulation (module-level: run in worker processes). An engine refusal is recorded, not raised."""
    n_req = int(cfg["workload"]["num_requests"])
    reqs = requests_of(cfg["rate"], n_req, cfg["seed"])
    eng = EngineConfig(policy=cfg["policy"])
    insts = [InstanceConfig(model=MODEL, gpu=GPU, engine=eng, role=r) for r in roles_of(cfg["layout"], cfg["n"])]
    t0 = time.perf_counter()
    try:
        res = simulate(insts, reqs, ROUTER, seed=cfg["seed"], on_unservable="drop", kv_link=cfg["link"],
                       kv_transfer=cfg["transfer"])
    except LLMSimError as e:
        zero = {f"{k}_{s}": 0.0 for s in cfg["slos"] for k in ("att", "att_ttft", "att_tpot", "goodput")}
        return {**zero, "error": str(e), "request_throughput": 0.0, "p99_ttft_ms": math.nan,
                "p99_tpot_ms": math.nan, "request_goodput": 0.0, "wall_s": time.perf_counter() - t0}
    s, df = res.summary, res.requests
    thr = float(s["request_throughput"])
    duration = len(df) / thr if thr > 0 else 0.0
    out = score(df, n_req, duration, cfg["slos"])
    unit = cfg.get("unit")
    if unit:
        sweep = score(df, n_req, duration, {f"x{s:g}": [s * unit[0], s * unit[1]] for s in SCALES})
        out["scale_att"] = [sweep[f"att_x{s:g}"] for s in SCALES]
    keep = ("completed", "dropped", "request_throughput", "mean_ttft_ms", "p90_ttft_ms", "p99_ttft_ms",
            "mean_tpot_ms", "p90_tpot_ms", "p99_tpot_ms", "preemptions", "kv_transfers", "kv_transfer_gb",
            "mean_kv_transfer_ms", "p99_kv_transfer_ms", "mean_kv_transfer_wait_ms")
    multi = int((df["output_tokens"] > 1).sum()) if len(df) else 0
    return {**out, **{k: s.get(k) for k in keep}, "multi_token": multi, "error": None,
            "request_goodput": out.get("goodput_base", math.nan), "wall_s": time.perf_counter() - t0}


def cell(n: int, layout: str, policy: str, rate: float, seed: int, sz: Size, slos: dict[str, list[float]],
         link: tuple[str, str] = DEFAULT_LINK, unit: list[float] | None = None) -> dict[str, Any]:
    """The config of one run (also its cache key in the capacity Runner); ``unit`` (the unloaded p90 TTFT and
    TPOT) asks for the SLO-scale sweep too (grid runs)."""
    return {"n": n, "layout": layout, "policy": policy, "rate": float(f"{rate:.12g}"), "seed": seed,
            "link": link[0], "transfer": link[1], "slos": slos, "unit": unit,
            "workload": {"num_requests": sz.req_per_gpu * n}}


def unloaded_slos(sz: Size) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """The SLO variants: SLO_FACTORS x the p90 TTFT and p90 TPOT of 4 x mixed (vllm_v0) at a negligible rate."""
    cfg = cell(4, "mixed", "vllm_v0", UNLOADED_RATE_PER_GPU * 4, 0, sz, {})
    cfg["workload"] = {"num_requests": max(200, sz.req_per_gpu)}
    r = run_cell(cfg)
    if r["error"]:
        raise ConfigError(f"unloaded calibration run failed: {r['error']}")
    base = {"rate": cfg["rate"], "requests": cfg["workload"]["num_requests"], "p90_ttft_ms": r["p90_ttft_ms"],
            "p90_tpot_ms": r["p90_tpot_ms"], "mean_ttft_ms": r["mean_ttft_ms"], "mean_tpot_ms": r["mean_tpot_ms"]}
    slos = {k: [round(f * r["p90_ttft_ms"]), round(f * r["p90_tpot_ms"], 1)] for k, f in SLO_FACTORS.items()
            if k in sz.slos}
    return slos, base


def grid_rows(runner: Any, sz: Size, slos: dict[str, list[float]], unit: list[float]) -> list[dict[str, Any]]:
    """Every layout x policy x grid rate x seed through the runner, with the SLO-scale sweep."""
    cfgs = [cell(n, lay, pol, g * n, s, sz, slos, unit=unit) for n, lays in sz.layouts.items() for lay in lays
            for pol in POLICIES for g in sz.grid for s in sz.seeds]
    return [{**{k: c[k] for k in ("n", "layout", "policy", "rate", "seed", "link", "transfer")}, **r}
            for c, r in zip(cfgs, runner.map(cfgs))]


def search_jobs(sz: Size, slos: dict[str, list[float]], arms: list[tuple[int, str, str, tuple[str, str]]],
                slo_names: tuple[str, ...], unit: list[float]) -> list[Any]:
    """One capacity search (llmsim.planning.search.RateSearch) per arm x SLO variant, on the combined attainment."""
    jobs = []
    for n, lay, pol, link in arms:
        cap = CapacityConfig(target=TARGET, seeds=len(sz.seeds), rate_min=0.1 * n, rate_max=16.0 * n,
                             rate_start=2.0 * n, growth=1.5, tolerance=sz.tolerance, max_evaluations=sz.max_evals,
                             num_requests=sz.req_per_gpu * n)

        for name in slo_names:
            def configs(rate: float, n: int = n, lay: str = lay, pol: str = pol, link: tuple = link) -> list[dict]:
                return [cell(n, lay, pol, rate, s, sz, slos, link, unit) for s in sz.seeds]

            jobs.append(Job(RateSearch(cap), configs, f"att_{name}", {
                "n": n, "layout": lay, "policy": pol, "link": link[0], "transfer": link[1], "slo": name}))
    return jobs


def search_rows(jobs: list[Any]) -> list[dict[str, Any]]:
    """Capacity (req/s and per GPU), bracket, note and curve of every finished search."""
    rows = []
    for job in jobs:
        s = job.search
        lo, hi = s.bracket()
        rows.append({**job.info, "capacity_rps": s.capacity, "per_gpu": s.capacity / job.info["n"],
                     "bracket": [lo, hi], "evaluations": len(s.points), "monotone": not s.violations(),
                     "note": s.summary_note(),
                     "curve": [{"rate": p.rate, "attainment": p.attainment, "per_seed": p.per_seed}
                               for p in s.curve()]})
    return rows


def best_layouts(caps: list[dict[str, Any]]) -> dict[tuple[int, str], str]:
    """Per (N, policy): the disaggregated layout with the highest base-SLO capacity (ties: fewer prefill GPUs)."""
    out: dict[tuple[int, str], tuple[float, int, str]] = {}
    for r in caps:
        if r["slo"] == "base" and r["layout"] != "mixed" and (r["link"], r["transfer"]) == DEFAULT_LINK:
            rank = (r["capacity_rps"], -int(r["layout"].split(":")[0]), r["layout"])
            out[(r["n"], r["policy"])] = max(out.get((r["n"], r["policy"]), rank), rank)
    return {k: v[2] for k, v in out.items()}


if __name__ == "__main__":  # a part of a study: running it alone would do nothing
    raise SystemExit("python -m experiments.studies.disagg.setup: a part of the disagg study, not a study; "
                     "run the study with llmsim-reproduce disagg")
