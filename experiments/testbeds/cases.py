"""What ``python -m experiments.testbeds.calibrate`` runs: each paper testbed's evaluation workload under its baselines.

A :class:`Job` is one simulation (testbed, policy, seed, and for BestEffort the arrival rate or schedule);
:func:`run_job` builds the cluster with the same builders as the env factories (envs/testbeds.py), routes
with llmsim routers (no env, no learner) and returns the operating point; experiments/testbeds/calibrate.py
averages over seeds and checks the targets.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmsim.cluster import InstanceConfig
from llmsim.envs import testbeds as TB
from llmsim.envs.paper_timing import QOS_EDGE_K
from llmsim.envs.tasks import QOS_EXPERTS, best_effort_mixture, qos_edge_mixture, workload_router_mixture
from llmsim.envs.workloads import MixtureWorkload
from llmsim.metrics.result import SimResult
from llmsim.request import Request
from llmsim.simulation.run import simulate

TESTBEDS = ("workload_router", "workload_router_8", "qos_edge", "best_effort")
# the intelligent router paper's baselines (least_work_left is its JSQ: fewest prompt + decode tokens yet to process)
WR_POLICIES = ("round_robin", "earliest_available", "least_work_left", "max_capacity", "min_min",
               "decode_balancer", "dedicated_small_large")
QOS_POLICIES = ("round_robin", "jsq", "quality_first", "qos_lookahead")
BE_MODELS = ("opt-125m", "opt-1.3b", "opt-6.7b")
BE_RATES: tuple[float | str, ...] = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 40.0,
                                     48.0, "bursty", "bursty2")
BE_QUICK_RATES: tuple[float | str, ...] = (2.0, 48.0, "bursty")
BE_DEADLINE = 0.04  # s per output token (Learned Best-Effort LLM Serving, section 4.2)
QOS_LIMIT = 0.03  # L, s per output token (the QoS-aware edge router's paper)
CAPACITY_ROUTERS = ("earliest_available", "max_capacity")


@dataclass(frozen=True)
class Job:
    testbed: str
    policy: str
    seed: int
    num_requests: int
    rate: float | str | None = None
    gpus: int = 0  # BestEffort: GPUs of the static cluster


def jobs_for(testbed: str, quick: bool) -> list[Job]:
    """The jobs of one testbed: full = the calibration's evaluation workloads, quick = a small smoke run."""
    if testbed in ("workload_router", "workload_router_8"):
        # the 8-instance preset is reported on one seed: its held-queue routers take minutes per run
        k, full_seeds = (2000, (0, 1, 2)) if testbed == "workload_router" else (4000, (0,))
        n, seeds = (300, (0,)) if quick else (k, full_seeds)
        return [Job(testbed, p, s, n) for s in seeds for p in WR_POLICIES]
    if testbed == "qos_edge":
        n, seeds = (500, (0,)) if quick else (5000, (0, 1, 2))
        return [Job(testbed, p, s, n) for s in seeds for p in QOS_POLICIES]
    if testbed == "best_effort":
        n, rates = (200, BE_QUICK_RATES) if quick else (10_000, BE_RATES)
        configs = [(m, 4) for m in BE_MODELS] + [("opt-6.7b", 8)]
        return [Job(testbed, f"static_{m}" + ("" if g == 4 else f"_x{g}"), 0, n, r, g)
                for m, g in configs for r in rates]
    raise ValueError(f"unknown testbed {testbed!r}; expected one of {TESTBEDS}")


def _kv_tokens(inst: InstanceConfig) -> int:
    prof = inst.build_profile()
    bs = inst.engine.block_size
    return prof.kv_capacity_tokens(inst.engine.gpu_memory_utilization) // bs * bs


def _common(res: SimResult, reqs: list[Request]) -> dict[str, Any]:
    """Operating-point metrics shared by every testbed (see docs/testbeds.md for definitions)."""
    df, tl = res.requests, res.timeline
    first, last = min(r.arrival for r in reqs), max(r.arrival for r in reqs)
    win = tl[(tl.time >= first) & (tl.time <= last)]
    kv = float((win.kv_used_blocks / win.kv_total_blocks).mean()) if len(win) else math.nan
    e2e = df.e2el_ms.to_numpy()
    return {
        "completed": int(len(df)), "dropped": int(len(res.dropped)),
        "mean_e2el_ms": float(e2e.mean()) if len(e2e) else math.nan,
        "p99_e2el_ms": float(np.percentile(e2e, 99)) if len(e2e) else math.nan,
        "makespan_s": float(df.finish.max() - first) if len(df) else math.nan,
        "preempted_frac": float((df.preemptions > 0).mean()) if len(df) else math.nan,
        "kv_mean": kv,
        "router_wait_s": float((df.routed_time - df.arrival).mean()) if len(df) else math.nan,
    }


def workload_router_requests(job: Job) -> list[Request]:
    """The WorkloadRouter evaluation workload, each request carrying the oracle's output-length prediction (the
    env's ``predictor: oracle``), so every router reads the same lengths as in the env: without it
    ``least_work_left`` (the paper's JSQ) counted each resident request's output as the mean finished length."""
    rate = 20.0 if job.testbed == "workload_router" else 40.0
    reqs = MixtureWorkload(workload_router_mixture(), {"kind": "poisson", "rate": rate}).requests(job.seed,
                                                                                                 job.num_requests)
    for r in reqs:
        r.predicted_output = float(r.output_tokens)
    return reqs


def _run_workload_router(job: Job) -> dict[str, Any]:
    insts = TB.workload_router_instances(4 if job.testbed == "workload_router" else 8)
    reqs = workload_router_requests(job)
    kw: dict[str, Any] = {}
    if job.policy in CAPACITY_ROUTERS:
        kw = {"kv_tokens": _kv_tokens(insts[0]), "max_num_seqs": insts[0].engine.max_num_seqs}
    # the paper's router acts every 0.02 s (its section 3.1): held requests are decided on that tick
    res = simulate(insts, reqs, job.policy, seed=job.seed, central_queue_tick=0.02, policy_kwargs=kw)
    return _common(res, reqs)


def _run_qos_edge(job: Job) -> dict[str, Any]:
    insts = TB.qos_edge_instances()
    models = list(QOS_EXPERTS)
    reqs = MixtureWorkload(qos_edge_mixture(), {"kind": "poisson", "rate": 5.0}).requests(job.seed, job.num_requests)
    kw: dict[str, Any] = {}
    if job.policy == "quality_first":
        kw = {"models": models, "max_waiting": 10}  # the env masks experts with 10 waiting requests
    elif job.policy == "qos_lookahead":
        profs = [i.build_profile() for i in insts]
        kw = {"models": models, "latency_limit": QOS_LIMIT, "k1": {m: QOS_EDGE_K[m][0] for m in models},
              "k2": {m: QOS_EDGE_K[m][1] for m in models},
              "base": {m: float(getattr(p, "base", 0.0)) for m, p in zip(models, profs)}}
    res = simulate(insts, reqs, job.policy, seed=job.seed, policy_kwargs=kw)
    out = _common(res, reqs)
    df = res.requests
    by_id = {r.id: r for r in reqs}
    lpt = ((df.finish - df.arrival) / df.output_tokens).to_numpy()
    qual = np.array([by_id[i].quality_by_model[models[k]] for i, k in zip(df.id, df.instance)])
    ok = lpt <= QOS_LIMIT
    out.update({
        "qos_mean": float((qual * ok).sum() / len(reqs)),  # dropped requests count as 0
        "violates_L_frac": float(1.0 - ok.mean()) if len(ok) else math.nan,
        "qos_upper_bound": float(np.mean([max(r.quality_by_model.values()) for r in reqs])),
        "latency_per_token_ms": float(lpt.mean() * 1e3) if len(lpt) else math.nan,
    })
    return out


def _run_best_effort(job: Job) -> dict[str, Any]:
    model = job.policy.removeprefix("static_").split("_x")[0]  # static_opt-6.7b_x8: OPT-6.7B on 8 GPUs
    insts = TB.static_instances(model, job.gpus)
    arrival = {"kind": job.rate} if isinstance(job.rate, str) else {"kind": "stable", "rate": float(job.rate)}
    reqs = MixtureWorkload(best_effort_mixture(), arrival).requests(job.seed, job.num_requests)
    res = simulate(insts, reqs, "static_model", seed=job.seed, on_unservable="drop")
    out = _common(res, reqs)
    df = res.requests
    by_id = {r.id: r for r in reqs}
    met = ((df.finish - df.arrival) / df.output_tokens <= BE_DEADLINE).to_numpy()
    acc = np.array([by_id[i].quality_by_model[model] for i in df.id])
    perf = float((acc * met).sum() / len(reqs))  # dropped requests miss their deadline
    out.update({"deadline_met_frac": float(met.sum() / len(reqs)), "performance": perf,
                "hardware_utility": perf / job.gpus, "gpus": job.gpus})
    return out


RUNNERS = {"workload_router": _run_workload_router, "workload_router_8": _run_workload_router,
           "qos_edge": _run_qos_edge, "best_effort": _run_best_effort}


def run_job(job: Job) -> dict[str, Any]:
    """One simulation; the row carries the job's identity and its wall time."""
    t0 = time.perf_counter()
    row = RUNNERS[job.testbed](job)
    row.update({"testbed": job.testbed, "policy": job.policy, "seed": job.seed, "num_requests": job.num_requests})
    if job.rate is not None:
        row["rate"] = job.rate
    row["wall_s"] = time.perf_counter() - t0
    return row
