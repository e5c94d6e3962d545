"""The KV-reuse study's setup: sizes, the Mooncake and multi-turn workloads, one simulation (a cell), the ideal hit
rates of the trace, and the cells of each part (experiment.py runs them, claims.py and page.py read them).

Everything runs on one homogeneous cluster type (``MODEL`` on ``GPU``: the only profiled model with a context long
enough for the Mooncake prompts, up to 126k tokens).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from tqdm import tqdm

from llmsim import simulate
from llmsim.cluster import Cluster, InstanceConfig
from llmsim.engine.config import EngineConfig
from llmsim.engine.prefix_cache import block_keys
from llmsim.routing import make_router
from llmsim.workload.config import build_workload
from llmsim.workload.prefix_hits import ideal_prefix_hits

REPO = Path(__file__).resolve().parents[3]

MODEL, GPU = "llama-3.1-8b", "h100"
UNBOUNDED_BLOCKS = 20_000_000        # 320M tokens of KV: more than the whole trace's 145M prompt tokens
PUBLISHED_HIT = 36.6                 # % of conversation-trace blocks, infinite cache (the traces' data notes)
ROUTERS: dict[str, tuple[str, dict[str, Any]]] = {
    "round_robin": ("round_robin", {}), "jsq": ("jsq", {}), "least_kv": ("least_kv", {}),
    "session_affinity": ("session_affinity", {}), "prefix_precise": ("prefix_aware", {"variant": "precise"}),
    "prefix_approx": ("prefix_aware", {"variant": "approx"})}
QUEUEING_FACTOR = 2.0                # "queueing matters": round robin's mean TTFT >= this x its lightest-load TTFT
STABLE_SHARE = 0.9                   # ... while it still serves >= this share of the offered request rate


@dataclass(frozen=True)
class Size:
    """How much to run. Mooncake loads are rate scales of the trace per 4 instances (x n / 4 for n instances);
    multi-turn loads are sessions/s per instance. ``mc_end`` is the trace window (source seconds; None: all)."""

    mc_end: float | None
    mc_scan_end: float
    mc_scales: tuple[float, ...]
    mt_requests: int
    mt_scan_requests: int
    mt_rates: tuple[float, ...]
    clusters: tuple[int, ...]
    seeds: tuple[int, ...]
    hit_end: float | None             # part 1's trace window
    hit_scale: float                  # part 1's rate scale for one instance (x 4 on four)
SIZES = {
    "full": Size(None, 1200.0, (0.5, 0.75, 1.0, 1.5, 2.0), 20_000, 6_000, (1.0, 2.0, 3.0, 4.0, 5.0), (4, 16),
                 (0, 1), None, 0.25),
    "quick": Size(1200.0, 600.0, (0.5, 1.0, 1.5, 2.0), 6_000, 3_000, (1.0, 2.0, 3.0, 4.0), (4, 16), (0,),
                  1200.0, 0.25),
    "tiny": Size(90.0, 60.0, (0.5, 1.0), 400, 200, (1.0, 2.0), (4,), (0,), 60.0, 0.25),
}


@dataclass(frozen=True)
class Cell:
    """One simulation: experiment (hit / scan / route), workload, instances, router label, load x, seed;
    ``blocks`` overrides the KV capacity (None: the profile's), ``end`` the trace window, ``n_req`` multi-turn."""

    exp: str
    workload: str
    n: int
    label: str
    x: float
    seed: int
    end: float | None = None
    n_req: int = 0
    blocks: int | None = None
    tag: str = ""


def trace_path() -> Path:
    """The Mooncake conversation trace: ``$LLMSIM_TRACES`` as the shipped config reads it, else ../shared/traces."""
    root = os.environ.get("LLMSIM_TRACES") or str(REPO.parent / "shared" / "traces")
    return Path(root) / "mooncake" / "conversation_trace.jsonl"


def multi_turn_cfg(rate: float, n_req: int) -> dict[str, Any]:
    """conf/workload/multi_turn.yaml with the session rate and request count of a cell (nothing else changed)."""
    cfg = yaml.safe_load((REPO / "conf/workload/multi_turn.yaml").read_text())
    cfg.update(rate=rate, num_requests=n_req)
    cfg["arrival"] = {**cfg["arrival"], "rate": rate}
    return cfg


def requests_of(c: Cell) -> list:
    """The cell's requests: the jittered, windowed, rate-scaled trace or the multi-turn preset."""
    if c.workload == "mooncake":
        cfg: dict[str, Any] = {"kind": "mooncake", "path": str(trace_path()), "jitter_s": 3.0, "rate_scale": c.x}
        if c.end is not None:
            cfg["window"] = [0.0, c.end]
        return list(build_workload(cfg, c.seed))
    return list(build_workload(multi_turn_cfg(c.x * c.n, c.n_req), c.seed))


def load_of(c: Cell) -> float:
    """The cell's load in the sweep's unit (trace rate scale or sessions/s), whatever the cluster size."""
    return c.x * c.n if c.workload == "multi_turn" else c.x


def metrics(res: Any, reqs: list) -> dict[str, Any]:
    """Latency, throughput, hit rate and balance of one run."""
    s, df, inst = res.summary, res.requests, res.instances
    span = max(r.arrival for r in reqs) - min(r.arrival for r in reqs)
    fin = inst["finished"].to_numpy(float)
    ttft = df["ttft_ms"].to_numpy(float) if len(df) else np.array([math.nan])
    return {"requests": len(reqs), "completed": int(s["completed"]), "dropped": int(s["dropped"]),
            "dropped_by_reason": dict(s.get("dropped_by_reason") or {}), "truncated": int(s["truncated"]),
            "offered_rps": len(reqs) / span if span > 0 else math.nan,
            "ttft_mean": float(np.mean(ttft)), "ttft_p50": float(np.percentile(ttft, 50)),
            "ttft_p99": float(np.percentile(ttft, 99)), "rps": float(s["request_throughput"]),
            "out_tps": float(s["output_throughput"]), "hit_rate": float(s["prefix_cache_hit_rate"]),
            "queries": int(s["prefix_cache_queries"]), "hits": int(s["prefix_cache_hits"]),
            "evictions": int(inst["prefix_cache_evictions"].sum()), "kv_blocks": int(inst["kv_total_blocks"].iloc[0]),
            "imbalance": float(fin.max() / fin.mean()) if fin.mean() > 0 else math.nan,
            "busy": float(s["mean_busy_fraction"]), "preemptions": int(s["preemptions"])}


def run_cell(c: Cell) -> dict[str, Any]:
    """Simulate one cell (module-level: the pool pickles it)."""
    reqs = requests_of(c)
    eng = EngineConfig(num_gpu_blocks=c.blocks)
    insts = [InstanceConfig(model=MODEL, gpu=GPU, engine=eng) for _ in range(c.n)]
    name, kw = ROUTERS[c.label]
    t0 = time.perf_counter()
    res = simulate(insts, reqs, make_router(name, seed=c.seed, **kw), seed=c.seed, on_unservable="drop")
    return {**asdict(c), "load": load_of(c), "wall_s": time.perf_counter() - t0, **metrics(res, reqs)}


def ideal_figures(end: float | None, fine: bool = True, progress: bool = False) -> dict[str, Any]:
    """The workload-level ideal hit rates of the trace (window ``end``, cut after the seed-0 jitter as the engine
    runs cut it: the same requests in the same order): at its own 512-token ids and, if
    ``fine`` (a Python pass over every 16-token block: ~9M of the whole trace), at the engine's 16."""
    reqs = requests_of(Cell("ideal", "mooncake", 1, "round_robin", 1.0, 0, end))  # the engine runs' requests
    h512, b512 = ideal_prefix_hits(reqs)
    tokens = sum(r.prompt_tokens for r in reqs)
    out = {"requests": len(reqs), "prompt_tokens": tokens, "ideal_512": h512 / b512, "blocks_512": b512,
           "hit_blocks_512": h512, "max_prompt": max(r.prompt_tokens for r in reqs)}
    if fine:
        h16, b16, ruled, cut = ideal_16(reqs, 16, progress)
        out.update(ideal_16=h16 / b16, ideal_16_tokens=16 * h16 / tokens, ideal_16_engine_rule=ruled / tokens,
                   fully_cached_prompts=cut)
    return out


def ideal_16(reqs: list, bs: int, progress: bool = False) -> tuple[int, int, int, int]:
    """(hit blocks, full prompt blocks, hit tokens under the engine's rule, prompts the rule cuts) of an infinite
    cache of ``bs``-token blocks. The first two are ``ideal_prefix_hits(reqs, bs)``'s; the rule (llmsim.engine.kv)
    lets a prompt reuse at most ``(prompt - 1) // bs`` blocks (one token is always computed): the engine's ceiling."""
    seen: set[Any] = set()
    hits = blocks = ruled = cut = 0
    for r in tqdm(reqs, desc="prefix: ideal hit rate", unit="req", disable=not progress, dynamic_ncols=True):
        every = block_keys(r, bs)
        n = r.prompt_tokens // bs
        k = 0
        for key in every[:n]:
            if key not in seen:
                break
            k += 1
        cap = (r.prompt_tokens - 1) // bs
        hits, blocks, cut, ruled = hits + k, blocks + n, cut + (k > cap), ruled + min(k, cap) * bs
        seen.update(every)
    return hits, blocks, ruled, cut


def context_limits() -> dict[str, int]:
    """max_model_len, KV blocks and the longest servable prompt of one instance with the profile's capacity."""
    inst = Cluster([InstanceConfig(model=MODEL, gpu=GPU)], make_router("round_robin")).instances[0]
    return {"max_model_len": int(inst.max_model_len), "kv_blocks": int(inst.kv_total),
            "block_size": int(inst.block_size), "max_servable_prompt": int(inst.limits.max_servable_prompt())}


def hit_cells(sz: Size) -> list[Cell]:
    """Part 1: unbounded vs profile capacity on 1 instance; round robin vs prefix-aware on 4."""
    s1, s4 = sz.hit_scale, 4 * sz.hit_scale
    return [Cell("hit", "mooncake", 1, "round_robin", s1, 0, sz.hit_end, blocks=UNBOUNDED_BLOCKS, tag="unbounded"),
            Cell("hit", "mooncake", 1, "round_robin", s1, 0, sz.hit_end, tag="profile"),
            Cell("hit", "mooncake", 4, "round_robin", s4, 0, sz.hit_end, blocks=UNBOUNDED_BLOCKS, tag="unbounded"),
            *[Cell("hit", "mooncake", 4, lab, s4, 0, sz.hit_end, tag="profile")
              for lab in ("round_robin", "prefix_precise", "prefix_approx")]]


def scan_cells(sz: Size) -> list[Cell]:
    """Round robin over the load grid, per workload and cluster size, on a short window (seed 0)."""
    out = []
    for n in sz.clusters:
        out += [Cell("scan", "mooncake", n, "round_robin", s * n / 4, 0, sz.mc_scan_end) for s in sz.mc_scales]
        out += [Cell("scan", "multi_turn", n, "round_robin", r, 0, n_req=sz.mt_scan_requests * n // 4)
                for r in sz.mt_rates]
    return out


def choose_rate(scan: list[dict[str, Any]]) -> tuple[float, str]:
    """The lowest load of the scan at which round robin queues (mean TTFT >= QUEUEING_FACTOR x its TTFT at the
    lightest load) while still stable (served >= STABLE_SHARE of the offered rate); if none, the highest stable
    load; if none is stable, the lightest. Returns the cell's ``x`` and why it was chosen."""
    rows = sorted(scan, key=lambda r: r["x"])
    base = rows[0]["ttft_mean"]
    stable = [r for r in rows if r["rps"] >= STABLE_SHARE * r["offered_rps"]]
    for r in stable:
        if r["ttft_mean"] >= QUEUEING_FACTOR * base:
            return r["x"], f"first load with RR mean TTFT >= {QUEUEING_FACTOR:g}x the lightest ({base:.0f} ms)"
    if stable:
        return stable[-1]["x"], "no stable load queued that much: the highest stable load"
    return rows[0]["x"], "no load of the scan was stable: the lightest"


def route_cells(sz: Size, chosen: dict[tuple[str, int], float]) -> list[Cell]:
    """Every router at the chosen load of each (workload, cluster size), every seed."""
    out = []
    for (wl, n), x in chosen.items():
        for seed in sz.seeds:
            for lab in ROUTERS:
                if wl == "mooncake":
                    out.append(Cell("route", wl, n, lab, x, seed, sz.mc_end))
                else:
                    out.append(Cell("route", wl, n, lab, x, seed, n_req=sz.mt_requests * n // 4))
    return out


def mean_rows(rows: list[dict[str, Any]]) -> dict[tuple[str, int, str], dict[str, Any]]:
    """Route rows averaged over seeds, keyed (workload, instances, router)."""
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["workload"], r["n"], r["label"]), []).append(r)
    out = {}
    for k, g in groups.items():
        avg = {m: float(np.mean([r[m] for r in g])) for m in ("ttft_mean", "ttft_p50", "ttft_p99", "rps", "out_tps",
                                                            "hit_rate", "imbalance", "load", "offered_rps")}
        out[k] = {**avg, "seeds": [r["seed"] for r in g], "dropped": sum(r["dropped"] for r in g),
                  "requests": int(np.mean([r["requests"] for r in g]))}
    return out


if __name__ == "__main__":  # a part of a study: running it alone would do nothing
    raise SystemExit("python -m experiments.studies.prefix.setup: a part of the prefix study, not a study; "
                     "run the study with llmsim-reproduce prefix")
