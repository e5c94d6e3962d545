"""Env throughput benchmark: steps/s of a random mask-respecting policy on each registered id.

``python -m experiments.bench env [--ids ...] [--steps N] [--json]``; wall time includes resets (workload
generation), as in training. One JSON object per env id with ``--json``. ``cpu_steps_per_s`` divides by
the process's CPU time instead of the wall time: on a loaded machine it stays near the quiet figure
(within the cost of shared caches) while the wall-clock rate drops with the CPU share the process gets.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np

from experiments.harness.timing import positive_int, print_json
from llmsim import envs  # registers the ids
from llmsim.compiled import engine_name


def bench_env(env_id: str, steps: int, seed: int = 0, **kwargs) -> dict:
    """``steps`` env steps of a random mask-respecting policy on ``env_id``: wall and CPU time, steps per second."""
    env = gym.make(env_id, **kwargs).unwrapped
    rng = np.random.default_rng(seed)
    n = 0
    episodes = 0
    t0, c0 = time.perf_counter(), time.process_time()
    env.reset(seed=seed)
    while n < steps:
        valid = np.flatnonzero(env.action_masks())
        a = int(valid[rng.integers(len(valid))])
        _, _, term, trunc, _ = env.step(a)
        n += 1
        if term or trunc:
            episodes += 1
            env.reset()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"env_id": env_id, "engine": engine_name(), "steps": n,
            "wall_s": round(wall, 4), "steps_per_s": round(n / wall, 1),
            "cpu_s": round(cpu, 4), "cpu_steps_per_s": round(n / cpu, 1) if cpu > 0 else None,
            "episodes": episodes}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench env", description=__doc__.splitlines()[0])
    ap.add_argument("--ids", nargs="*", default=list(envs.ENV_IDS), help="env ids (default: all registered)")
    ap.add_argument("--steps", type=positive_int, default=10_000, help="env steps per id (default 10000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="one JSON object per env id")
    args = ap.parse_args(argv)
    unknown = [i for i in args.ids if i not in envs.ENV_IDS]
    if unknown:
        ap.error(f"--ids: unknown env id {unknown[0]!r}; expected one of {', '.join(envs.ENV_IDS)}")
    for env_id in args.ids:
        r = bench_env(env_id, args.steps, args.seed)
        if args.json:
            print_json({k: r[k] for k in ("env_id", "engine", "steps", "wall_s", "steps_per_s", "cpu_s",
                                          "cpu_steps_per_s")})
        else:
            print(f"{env_id:28s} {r['steps']:>8d} steps {r['wall_s']:>8.2f} s "
                  f"{r['steps_per_s']:>10.1f} steps/s "
                  f"({r['cpu_steps_per_s']:>8.1f} per CPU-s) "
                  f"({r['episodes']} episodes, {r['engine']} engine)", flush=True)
    return 0

