"""Per-decision latency of the live router: building the ClusterState from its backends' scrapes and in-flight
bookkeeping, then running the policy (``python -m experiments.bench decisions``).

Backends carry a realistic load (by default 8 running requests with tokens streamed back and 4 waiting, and a
vLLM scrape each), so the state the policy reads is as large as in a busy deployment. Heuristics are timed on
``--backends`` backends; an exported policy (``--export DIR``) on backends with the models its manifest names;
``--demo-exports`` builds and times full-size exports of the three policy types (flat DDQN 64-64 on 4
instances, best-effort DDQN 256-256, SAC + HAN 64 hidden / 4 heads on 3 experts; agents/imitate.py).
Medians and p99 of wall time over ``--iters`` decisions, one thread (onnxruntime's intra-op threads: 1).

    python -m experiments.bench decisions [--export DIR ...] [--demo-exports] [--backends 4] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from typing import Any

import numpy as np

from experiments.harness.timing import positive_int
from llmsim.errors import ConfigError
from llmsim.request import Request
from llmsim.serving.config import BackendConfig, PolicyConfig
from llmsim.serving.decider import Decider
from llmsim.serving.scrape import BackendMetrics
from llmsim.serving.tracker import Backend, Flight, cluster_state


def loaded_backends(models: list[str], running: int = 8, waiting: int = 4, seed: int = 0) -> list[Backend]:
    rng = np.random.default_rng(seed)
    out = []
    rid = 0
    for k, model in enumerate(models):
        b = Backend(k, BackendConfig(name=f"b{k}", url=f"http://127.0.0.1:{9000 + k}", model=model), model=model,
                    max_model_len=8192, up=True)
        b.record_scrape(BackendMetrics(running=running, waiting=waiting, kv_usage=0.3, num_gpu_blocks=20_000,
                                       block_size=16, generation_tokens=1e5, tpot_sum=1.0, tpot_count=50), 0.0)
        for j in range(running + waiting):
            f = Flight(rid, int(rng.integers(50, 2000)), float(rng.integers(20, 800)), None, 0.0)
            if j < running:
                f.started, f.generated = True, int(rng.integers(1, 300))
            b.flights[rid] = f
            rid += 1
        out.append(b)
    return out


def time_decisions(decider: Decider, backends: list[Backend], iters: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Median, p99 and mean ms of (state assembly + policy) per decision; the decisions' spread over backends."""
    rng = np.random.default_rng(seed)
    prompts = rng.integers(20, 3000, iters)
    lat = np.empty(iters)
    chosen = np.zeros(len(backends) + 3, dtype=np.int64)
    for i in range(iters + 50):
        req = Request(10**6 + i, float(i) * 0.01, int(prompts[i % iters]), 256)
        t = time.perf_counter()
        state = cluster_state(backends, float(i) * 0.01, 1, 10**6 + i, 200.0)
        d = decider.decide(req, state)
        dt = time.perf_counter() - t
        if i >= 50:  # warm-up decisions not timed
            lat[i - 50] = dt
            chosen[d if d >= 0 else len(backends) - d] += 1
    ms = lat * 1e3
    return {"policy": decider.label, "backends": len(backends), "iters": iters,
            "median_ms": round(float(np.median(ms)), 4), "p99_ms": round(float(np.percentile(ms, 99)), 4),
            "mean_ms": round(float(ms.mean()), 4), "decisions": chosen[: len(backends)].tolist()}


def demo_exports(root: str) -> list[str]:
    """Full-size exports of the three policy types, built from demonstration checkpoints under ``root``."""
    import torch  # optional: the rl extra (only --demo-exports trains)

    from llmsim.agents.export import export  # optional: the rl extra, as torch above
    from llmsim.agents.imitate import demo_checkpoint  # optional: the rl extra, as torch above

    torch.set_num_threads(1)
    return [str(export(demo_checkpoint(k, root, full_size=True), check_steps=0))
            for k in ("ddqn_flat", "ddqn_best_effort", "sac_han")]


def bench_decisions(heuristics: list[str], exports: list[str], n_backends: int = 4, iters: int = 2000,
                    seed: int = 0) -> list[dict[str, Any]]:
    rows = []
    for name in heuristics:
        d = Decider(PolicyConfig(heuristic=name, seed=seed))
        rows.append(time_decisions(d, loaded_backends(["llama-3.1-8b"] * n_backends, seed=seed), iters, seed))
    for path in exports:
        d = Decider(PolicyConfig(onnx=path, seed=seed))
        models = list(d.router.manifest["context"]["instance_models"])
        d.check_backends(models)
        row = time_decisions(d, loaded_backends(models, seed=seed), iters, seed)
        row["policy_type"] = d.router.manifest.get("policy", {}).get("type", "?")
        rows.append(row)
    return rows


def print_rows(rows: list[dict[str, Any]]) -> None:
    print(f"{'policy':<44} {'backends':>8} {'median ms':>10} {'p99 ms':>9} {'mean ms':>9}")
    for r in rows:
        label = f"onnx {r['policy_type']}" if "policy_type" in r else r["policy"]
        print(f"{label[:44]:<44} {r['backends']:>8} {r['median_ms']:>10.3f} {r['p99_ms']:>9.3f} {r['mean_ms']:>9.3f}")


def main(argv: list[str] | None = None) -> int:
    """Time the heuristics (and exports) named on the command line; a table or one JSON list."""
    ap = argparse.ArgumentParser(prog="python -m experiments.bench decisions", description=__doc__.splitlines()[0])
    ap.add_argument("--export", action="append", default=[], help="an llmsim-export directory (repeat)")
    ap.add_argument("--demo-exports", action="store_true",
                    help="also build and time full-size exports of the three policy types (the rl extra)")
    ap.add_argument("--heuristic", action="append", default=None, help="llmsim routers to time (repeat; default "
                                                                       "jsq, least_work_left, qos_lookahead)")
    ap.add_argument("--backends", type=positive_int, default=4, help="backends for the heuristics")
    ap.add_argument("--iters", type=positive_int, default=2000, help="decisions timed per policy")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    heur = args.heuristic if args.heuristic is not None else ["jsq", "least_work_left", "qos_lookahead"]
    with tempfile.TemporaryDirectory() as tmp:
        exports = args.export + (demo_exports(tmp) if args.demo_exports else [])
        try:
            rows = bench_decisions(heur, exports, args.backends, args.iters, args.seed)
        except ConfigError as e:  # an unknown router or a directory that is no export: the message names it
            ap.error(str(e))
    if args.json:
        print(json.dumps(rows))
    else:
        print_rows(rows)
    return 0
