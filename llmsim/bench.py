"""Speed and memory benchmarks: ``python -m llmsim.bench sim`` and ``python -m llmsim.bench env``.

``sim`` runs two cases and prints wall time, simulated requests per wall-second, engine iterations
per second and peak RSS (each case in a fresh subprocess so RSS is its own):

* ``single``: 10,000 requests with Azure-conversation-like lengths (the ``azure_conv_like`` lognormal
  fits, mean ~1,155 prompt / ~211 output tokens) at Poisson 4 req/s on one Llama-2-7B / A100-80GB
  instance with the ``vllm_v0`` policy;
* ``million``: 1,000,000 such requests at 64 req/s on 16 instances (round robin).

``--prefix unique`` gives every request its own prefix-block ids (16-token blocks, nothing shared): the cost
of prefix caching with no reuse (``--prefix off`` turns ``engine.enable_prefix_caching`` off; the default
``none`` attaches no ids).

``env`` delegates to ``envs.bench`` (Gymnasium is only imported there).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

CASES = {
    "single": {"requests": 10_000, "rate": 4.0, "instances": 1},
    "million": {"requests": 1_000_000, "rate": 64.0, "instances": 16},
}


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _unique_ids(requests):
    """Every request with its own 16-token block ids: prefix caching at work, nothing to reuse."""
    nxt = 0
    for r in requests:
        n = -(-r.prompt_tokens // 16)
        r.hash_ids = tuple(range(nxt, nxt + n))
        r.hash_block = 16
        nxt += n
        yield r


def run_case(name: str, requests: int | None = None, prefix: str = "none") -> dict:
    from llmsim.cluster import InstanceConfig
    from llmsim.engine import EngineConfig
    from llmsim.sim import simulate
    from llmsim.workload import build_workload

    case = CASES[name]
    n = int(requests or case["requests"])
    wl = build_workload(
        {"kind": "synthetic", "arrival": {"process": "poisson", "rate": case["rate"]},
         "prompt": {"dist": "lognormal", "mu": 6.927557906278317, "sigma": 0.4980678270303568, "min": 1,
                    "max": 4000},
         "output": {"dist": "lognormal", "mu": 4.859812404361672, "sigma": 1.071749622287092, "min": 1,
                    "max": 1000},
         "num_requests": n},
        seed=0,
    )
    engine = EngineConfig(policy="vllm_v0", enable_prefix_caching=prefix != "off")
    insts = [InstanceConfig("llama-2-7b", "a100-80gb", engine=engine) for _ in range(case["instances"])]
    t0 = time.perf_counter()
    res = simulate(insts, _unique_ids(wl) if prefix != "none" else wl, "round_robin", metrics_interval=10.0)
    wall = time.perf_counter() - t0
    s = res.summary
    return {
        "case": name,
        "prefix": prefix,
        "requests": n,
        "instances": case["instances"],
        "wall_s": round(wall, 3),
        "sim_requests_per_s": round(n / wall, 1),
        "iterations_per_s": round(s["iterations"] / wall, 1),
        "iterations": s["iterations"],
        "peak_rss_mb": round(_peak_rss_mb(), 1),
        "simulated_s": round(s["duration"], 1),
        "mean_tpot_ms": round(s["mean_tpot_ms"], 3),
        "completed": s["completed"],
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m llmsim.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["sim", "env"])
    ap.add_argument("--json", action="store_true", help="one JSON object per case")
    ap.add_argument("--case", choices=sorted(CASES), action="append", help="run only these cases")
    ap.add_argument("--requests", type=int, help="override the request count (quick checks)")
    ap.add_argument("--prefix", choices=["none", "unique", "off"], default="none",
                    help="prefix-block ids: none (default), unique per request (caching on, no reuse), or unique "
                         "with caching off")
    ap.add_argument("--inline", action="store_true", help=argparse.SUPPRESS)
    args, rest = ap.parse_known_args(argv)
    if args.what == "env":
        # envs sits above llmsim (layers contract, tests/test_layers.py): run it, never import it
        cmd = [sys.executable, "-m", "envs.bench", *rest, *(["--json"] if args.json else [])]
        raise SystemExit(subprocess.run(cmd).returncode)
    cases = args.case or list(CASES)
    if args.inline:
        for c in cases:
            print(json.dumps(run_case(c, args.requests, args.prefix)))
        return
    for c in cases:
        cmd = [sys.executable, "-m", "llmsim.bench", "sim", "--inline", "--case", c, "--prefix", args.prefix]
        if args.requests:
            cmd += ["--requests", str(args.requests)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        row = json.loads(out)
        if args.json:
            print(json.dumps(row))
        else:
            print(f"{row['case']:>8}: {row['requests']:>9,} requests on {row['instances']:>2} instance(s) in "
                  f"{row['wall_s']:8.2f} s wall = {row['sim_requests_per_s']:>9,.0f} sim req/s, "
                  f"{row['iterations_per_s']:>9,.0f} iterations/s, peak RSS {row['peak_rss_mb']:,.0f} MB "
                  f"({row['simulated_s']:,.0f} s simulated, mean TPOT {row['mean_tpot_ms']:.1f} ms)")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
