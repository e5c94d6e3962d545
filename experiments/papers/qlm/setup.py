"""QLM reproduction: the workloads W_A / W_B / W_C, the clusters, the policies and one simulation (a cell).

Every number here is the reproducer's own choice (the paper gives none; docs/results/qlm.md lists them):

* **W_A, multi-model.** 8 models on 4 A100-80GB instances (#models > #instances). 3 head models take
  1 - ``tail_share`` of the arrivals (50 / 30 / 20 %), 5 tail models (62.5 % of the models, "> 50 %") share
  ``tail_share`` equally. Each instance may load any of the 8 (``InstanceConfig.models``) and starts with a head
  model.
* **W_B, single-model.** Mistral-7B on 4 A100-80GB.
* **W_C** = W_A plus ``mega_share`` mega prompts (3,000 prompt + 1,000 output tokens: the whole 4,096-token context
  of the catalog, a large share of a 13B model's KV cache).
* **Heterogeneous.** Mistral-7B on A100-80GB and A10 instances (A10 share 0 / 25 / 50 %), 30 requests/s per 4
  instances.
* **Classes.** latency_sensitive (end-to-end SLO 20 s, paper "< 30 s") and batch (300 s, "several minutes").
* **Lengths.** ShareGPT-like log-normals: prompt median 250 tokens (sigma 0.9, 8-2,048), output median 180
  (sigma 0.8, 4-1,024), the same for both classes.
* **Arrivals.** Gamma inter-arrival times with CV 2 ("bursty arrival rates"), a fixed request count.
* **Cluster.** The same for every policy in a comparison: a 64 GB host-memory model cache per instance (LRU; QLM's
  warm start prefetches into it), 2 GB/s storage, vLLM-V0 engines with swap preemption and 16 GB CPU swap space
  (so that QLM's GPU-CPU state swapping has somewhere to go).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from llmsim import InstanceConfig, simulate
from llmsim.engine.config import EngineConfig
from llmsim.errors import ConfigError
from llmsim.request import Request
from llmsim.routing import make_router
from llmsim.schema import SLO

A100, A10 = "a100-80gb", "a10"
HEAD = ("mistral-7b", "llama-3-8b", "vicuna-13b")
HEAD_W = (0.5, 0.3, 0.2)
TAIL = ("llama-2-7b", "llama-2-13b", "qwen2.5-7b", "qwen2.5-14b", "vicuna-7b")
MODELS = HEAD + TAIL
WB_MODEL = "mistral-7b"
LS, BATCH = "latency_sensitive", "batch"
SLO_S = {LS: 20.0, BATCH: 300.0}
HOST_CACHE_GB = 64.0
SWAP_SPACE_GB = 16.0
PROMPT = (250.0, 0.9, 8, 2048)   # log-normal median, sigma, clip low, clip high
OUTPUT = (180.0, 0.8, 4, 1024)
MEGA = (3000, 1000)
ARRIVAL_CV = 2.0
OPS = ("pulling", "load_balancing", "eviction", "state_swapping", "warm_start")
LATE_OPS = ("eviction", "state_swapping", "warm_start")  # the ones a router without engine support refuses


@dataclass(frozen=True)
class Size:
    """How much to run: request counts, seeds and the sweep grids (defaults first)."""

    requests: int                      # per W_A / W_B / W_C run
    seeds: tuple[int, ...]
    instances: int
    wa_rate: float                     # offered W_A load, requests/s for the whole cluster
    wb_rates: tuple[float, ...]        # W_B arrival-rate sweep (the first is the default)
    tail_shares: tuple[float, ...]     # W_A share of arrivals to tail models (the first is the default)
    ls_shares: tuple[float, ...]       # latency-sensitive share (the first is the default)
    mega_shares: tuple[float, ...]
    a10_shares: tuple[float, ...]
    slo_scales: tuple[float, ...]
    speed_requests: int
    speed_instances: int


SIZES = {
    "full": Size(3000, (0, 1, 2), 4, 2.0, (60.0, 10.0, 20.0, 30.0, 45.0, 90.0, 150.0), (0.2, 0.05, 0.1, 0.4),
                 (0.2, 0.05, 0.5), (0.0, 0.02, 0.05, 0.1), (0.0, 0.25, 0.5),
                 (1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 11.0, 16.0, 32.0), 10_000, 8),
    "quick": Size(1500, (0,), 4, 2.0, (60.0, 10.0, 30.0, 90.0, 150.0), (0.2, 0.05, 0.4), (0.2, 0.05, 0.5), (0.0, 0.05),
                  (0.0, 0.25, 0.5), (1.0, 2.0, 5.0, 11.0, 16.0, 32.0), 2_000, 8),
    "tiny": Size(60, (0,), 2, 2.0, (4.0,), (0.2,), (0.2,), (0.0,), (0.0,), (1.0, 16.0), 60, 2),
}


# ---------------------------------------------------------------------- workloads
def model_mix(tail_share: float) -> dict[str, float]:
    """W_A's model shares: the head models split 1 - tail_share 50/30/20, the tail models tail_share equally."""
    mix = {m: (1.0 - tail_share) * w for m, w in zip(HEAD, HEAD_W)}
    mix.update({m: tail_share / len(TAIL) for m in TAIL})
    return mix


def _lognormal(rng: np.random.Generator, spec: tuple[float, float, int, int], n: int) -> np.ndarray:
    med, sigma, lo, hi = spec
    return np.clip(np.round(rng.lognormal(np.log(med), sigma, n)), lo, hi).astype(int)


def make_requests(n: int, rate: float, seed: int, mix: dict[str, float] | None, ls_share: float,
                  mega_share: float = 0.0) -> list[Request]:
    """``n`` requests at ``rate``/s (Gamma inter-arrivals, CV 2); ``mix`` = {model: weight} or None (any model).

    Arrivals, lengths, classes, models and mega prompts use independent child streams of ``seed``: the same seed
    gives the same arrival times whatever the mixes."""
    s_arr, s_len, s_cls, s_mod, s_mega = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(5))
    k = 1.0 / ARRIVAL_CV ** 2
    arrivals = np.cumsum(s_arr.gamma(k, 1.0 / (rate * k), n))
    prompt, output = _lognormal(s_len, PROMPT, n), _lognormal(s_len, OUTPUT, n)
    mega = s_mega.random(n) < mega_share
    prompt[mega], output[mega] = MEGA
    ls = s_cls.random(n) < ls_share
    models: list[str | None] = [None] * n
    if mix:
        names = list(mix)
        w = np.array([mix[m] for m in names], dtype=float)
        models = [names[i] for i in s_mod.choice(len(names), size=n, p=w / w.sum())]
    return [Request(i, float(a), int(p), int(o), slo_class=LS if c else BATCH, model=m)
            for i, (a, p, o, c, m) in enumerate(zip(arrivals, prompt, output, ls, models))]


def slo(scale: float = 1.0) -> SLO:
    return SLO.parse({"classes": {c: {"e2el_ms": s * scale * 1000.0} for c, s in SLO_S.items()}})


# ---------------------------------------------------------------------- clusters
def engine() -> EngineConfig:
    return EngineConfig(preemption="swap", swap_space_gb=SWAP_SPACE_GB)


def wa_cluster(n: int, cache_gb: float = HOST_CACHE_GB) -> list[InstanceConfig]:
    """n A100s, each able to load every W_A model, starting with the head models in turn."""
    out = []
    for i in range(n):
        first = HEAD[i % len(HEAD)]
        out.append(InstanceConfig(model=first, gpu=A100, models=tuple(m for m in MODELS if m != first),
                                  host_cache_gb=cache_gb, engine=engine(), name=f"a100-{i}"))
    return out


def wb_cluster(n: int) -> list[InstanceConfig]:
    return [InstanceConfig(model=WB_MODEL, gpu=A100, engine=engine(), name=f"a100-{i}") for i in range(n)]


def hetero_cluster(n: int, a10_share: float) -> list[InstanceConfig]:
    """n Mistral-7B instances, the last round(n * a10_share) on A10s (tp 1), the others on A100-80GB.

    Single-model so that placement is the only difference (requests name no model)."""
    k = int(round(n * a10_share))
    return [InstanceConfig(model=WB_MODEL, gpu=A10 if i >= n - k else A100, engine=engine(),
                           name=f"{A10 if i >= n - k else A100}-{i}") for i in range(n)]


HETERO_MIX = None
HETERO_RATE = 30.0  # requests/s per 4 instances: above the all-A100 capacity, throughput = capacity


# ---------------------------------------------------------------------- policies
def _out_prior() -> tuple[float, float]:
    """Mean and std of the output-length distribution (what a profiled prior would give)."""
    rng = np.random.default_rng(12345)
    x = _lognormal(rng, OUTPUT, 200_000)
    return float(x.mean()), float(x.std())


OUT_MEAN, OUT_STD = _out_prior()
BASELINES = ("vllm", "edf", "shepherd", "qlm")
ABLATIONS = (*(f"qlm_no_{op}" for op in OPS), "qlm_no_eviction+state_swapping")


def policy(label: str, scale: float = 1.0, ops_off: tuple[str, ...] = ()) -> tuple[str, dict[str, Any]]:
    """(registered router name, kwargs) of a policy label: vllm (FCFS, round robin), vllm_jsq, random, edf,
    shepherd, qlm (every operation on, less ``ops_off``), qlm_no_<op>[+<op>...]."""
    slo_s = {c: s * scale for c, s in SLO_S.items()}
    if label in ("vllm", "round_robin"):
        return "round_robin", {}
    if label in ("vllm_jsq", "random"):
        return label.replace("vllm_", ""), {}
    if label == "edf":
        return "edf", {"slo_s": slo_s}
    if label == "shepherd":
        return "shepherd", {"slo_s": slo_s, "output_tokens": int(OUT_MEAN)}
    if label == "qlm" or label.startswith("qlm_no_"):
        off = set(ops_off) | (set(label[len("qlm_no_"):].split("+")) if label.startswith("qlm_no_") else set())
        if not off <= set(OPS):
            raise ValueError(f"unknown QLM operation in {label!r}")
        return "qlm", {"slo_s": slo_s, "output_mean": OUT_MEAN, "output_std": OUT_STD,
                       "ops": {op: op not in off for op in OPS}}
    raise ValueError(f"unknown policy label {label!r}")


# ---------------------------------------------------------------------- one simulation
@dataclass(frozen=True)
class Cell:
    """One simulation: experiment, policy label, the swept value x, workload seed; ops_off = refused QLM ops."""

    exp: str
    label: str
    x: float
    seed: int
    size: str
    ops_off: tuple[str, ...] = ()


def setup(c: Cell) -> tuple[list, list, float]:
    """(instances, requests, SLO scale) of a cell."""
    sz = SIZES[c.size]
    n, ls0, tail0 = sz.requests, sz.ls_shares[0], sz.tail_shares[0]
    wa_rate = sz.wa_rate
    if c.exp == "wa_tail":
        return wa_cluster(sz.instances), make_requests(n, wa_rate, c.seed, model_mix(c.x), ls0), 1.0
    if c.exp == "wa_ls":
        return wa_cluster(sz.instances), make_requests(n, wa_rate, c.seed, model_mix(tail0), c.x), 1.0
    if c.exp in ("relax", "abl_wa"):
        scale = c.x if c.exp == "relax" else 1.0
        return wa_cluster(sz.instances), make_requests(n, wa_rate, c.seed, model_mix(tail0), ls0), scale
    if c.exp == "cache0":
        return wa_cluster(sz.instances, 0.0), make_requests(n, wa_rate, c.seed, model_mix(tail0), ls0), 1.0
    if c.exp == "wc":
        reqs = make_requests(n, wa_rate, c.seed, model_mix(tail0), ls0, mega_share=c.x)
        return wa_cluster(sz.instances), reqs, 1.0
    rate = sz.wb_rates[0] * sz.instances / 4.0
    if c.exp == "wb_rate":
        return wb_cluster(sz.instances), make_requests(n, c.x * sz.instances / 4.0, c.seed, None, ls0), 1.0
    if c.exp == "wb_ls":
        return wb_cluster(sz.instances), make_requests(n, rate, c.seed, None, c.x), 1.0
    if c.exp == "abl_wb":
        return wb_cluster(sz.instances), make_requests(n, rate, c.seed, None, ls0), 1.0
    if c.exp == "hetero":
        reqs = make_requests(n, HETERO_RATE * sz.instances / 4.0, c.seed, HETERO_MIX, ls0)
        return hetero_cluster(sz.instances, c.x), reqs, 1.0
    if c.exp == "speed":
        m = sz.speed_instances
        return wb_cluster(m), make_requests(sz.speed_requests, sz.wb_rates[0] * m / 4.0, c.seed, None, ls0), 1.0
    raise ValueError(f"unknown experiment {c.exp!r}")


def run_cell(c: Cell) -> dict[str, Any]:
    """Simulate one cell; its metrics (attainment counts dropped requests as missed)."""
    insts, reqs, scale = setup(c)
    name, kw = policy(c.label, scale, c.ops_off)
    out: dict[str, Any] = {**asdict(c), "n": len(reqs)}
    t0 = time.perf_counter()
    try:
        router = make_router(name, seed=c.seed, **kw)
        res = simulate(insts, reqs, router, slo=slo(scale), seed=c.seed)
    except ConfigError as e:  # an operation the router refuses: a missing row, never a faked one
        return {**out, "error": " ".join(str(e).split())}
    out["wall_s"] = time.perf_counter() - t0
    df, s = res.requests, res.summary
    lim = df["slo_class"].map({k: v * scale for k, v in SLO_S.items()})
    met = (df["finish"] - df["arrival"]) <= lim
    span = float(df["finish"].max() - min(r.arrival for r in reqs)) if len(df) else math.nan
    for cls, key in ((LS, "att_ls"), (BATCH, "att_batch")):
        total = sum(r.slo_class == cls for r in reqs)
        out[key] = float(met[df["slo_class"] == cls].sum()) / total if total else math.nan
    out.update(attainment=float(met.sum()) / len(reqs), throughput=len(df) / span, goodput=float(met.sum()) / span,
               completed=len(df), dropped=int(s.get("dropped", 0)), model_swaps=s.get("model_swaps", 0),
               warm_swaps=s.get("warm_swaps", 0), swap_seconds=s.get("swap_seconds", 0.0))
    if hasattr(router, "stats"):
        out["router_stats"] = {k: v for k, v in dict(router.stats).items() if isinstance(v, (int, float))}
        out.update({k: out["router_stats"].get(k, math.nan) for k in ("evicted", "parked", "prefetched")})
    return out


def refused_ops() -> tuple[str, ...]:
    """The QLM operations the router refuses now (each probed alone at construction)."""
    out = []
    for op in LATE_OPS:
        try:
            make_router("qlm", slo_s=SLO_S, ops={op: True})
        except ConfigError:
            out.append(op)
    return tuple(out)
