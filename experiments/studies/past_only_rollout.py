"""Can a router that knows only the past find the clairvoyant rollout's room? A rollout over sampled futures, on
VALIDATION seeds.

    python -m experiments.studies.past_only_rollout --scenarios training long --seeds 1000 1001 --requests 400 \
        --samples 4 --jobs 2

The clairvoyant rollout (experiments/studies/rollout_headroom.py) tries each allowed instance at a decision and
follows the base heuristic to the end of the episode's true future. This one knows what a router knows: the
requests that have arrived (with the env's predicted lengths, which in the WorkloadRouter testbed are the oracle's)
and the cluster's state. At a tried decision it copies the simulation (``copy.deepcopy``: the Python engine),
replaces the requests still to arrive with ``--samples`` futures drawn from the scenario's own workload model on
seeds no episode uses (as many requests as are left, each arrival gap from the sample: a Poisson future is
memoryless), and scores each instance by the mean over the samples of the episode's mean E2E (every request
counted), the same samples for every instance (common random numbers). The lowest wins; ties keep the base's
choice. It is a realisable router, only too slow to serve (seconds per decision): what it gains over the best
heuristic is room that a router can reach without the future, and a teacher a network could imitate.
Test seeds (>= 2000) are refused.
"""

from __future__ import annotations

import argparse
import copy
import json
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from experiments.harness.pages import out_file, write_text
from experiments.harness.pool import cap_jobs
from experiments.harness.timing import positive_int
from experiments.studies.rollout_headroom import base_router, best_and_base, label_of
from experiments.studies.validation import seed_drawn, usage_errors, validation_seed
from llmsim.agents.accounting import env_latency_stats, request_latencies
from llmsim.agents.env_setup import make_env
from llmsim.agents.suite_config import load_suite_file
from llmsim.envs.routing_env import RoutingEnv
from llmsim.request import Request

SAMPLE_SEED_BASE = 7_000_000  # the sampled futures' workload seeds: far from every validation and test seed


def sampled_future(env: RoutingEnv, sample_seed: int) -> list[Request]:
    """The requests still to arrive in ``env``, drawn again: the scenario's workload on ``sample_seed``, from the
    same position in the episode, each arrival gap as sampled, the first one counted from now."""
    k = env.cluster.num_arrived
    drawn = env.workload.requests(sample_seed, env.num_requests)
    sample = drawn[k:]
    before = drawn[k - 1].arrival if k else 0.0
    start = float(env.driver.now)
    for r in sample:
        r.arrival = start + float(r.arrival - before)
    return sample


def finish(env: RoutingEnv, router: Any, first: int, window: int | None = None, stop_early: bool = True) -> float:
    """Take ``first`` at the pending decision, then the base ``router`` to the episode's end: its mean E2E (ms), or
    with ``window`` the mean over the episode's first ``window`` requests only (every request counted). A window's
    price is fixed once each of its requests has finished or been dropped, so the rollout stops there
    (``stop_early``; the same price as running on, at a fraction of the cost where the episode is long)."""
    env.step(first)
    reqs, k = env.episode_requests, 0
    last = len(reqs) if window is None else min(window, len(reqs))
    while not (env.terminated or env.truncated):
        if window is not None and stop_early:
            while k < last and (reqs[k].finish >= 0 or reqs[k].dropped):
                k += 1
            if k == last:
                break
        env.step(env.heuristic_action(router))
    if window is None:
        return float(env_latency_stats(env)["mean_e2el_ms"])
    e2e = request_latencies(env.episode_requests, env.driver.drops, float(env.driver.now))["e2e"]
    return float(e2e[:window].mean() * 1e3)


def choose(env: RoutingEnv, router: Any, allowed: list[int], base_choice: int, samples: int,
           at: int, horizon: int | None = None) -> tuple[int, dict[int, float]]:
    """The instance with the lowest mean over ``samples`` sampled futures of the episode's mean E2E (ties: the
    base's choice); ``at`` (the decision's index) varies the futures from one decision to the next. With
    ``horizon`` the cost counts only the requests that have arrived and the next ``horizon`` ones: the far future,
    which a decision barely moves in expectation, adds only noise to its price."""
    futures = [sampled_future(env, SAMPLE_SEED_BASE + 1000 * at + j) for j in range(samples)]
    window = None if horizon is None else env.cluster.num_arrived + horizon
    cost = dict.fromkeys(allowed, 0.0)
    for future in futures:
        for a in allowed:
            e, r = copy.deepcopy((env, router))
            e.replace_upcoming(copy.deepcopy(future))
            cost[a] += finish(e, r, a, window) / samples
    return min(cost, key=lambda a: (cost[a], a != base_choice)), cost


def past_only_rollout(env_cfg: dict[str, Any], base: Any, seed: int, samples: int, every: int = 1,
                      horizon: int | None = None) -> dict[str, Any]:
    """The rollout router's episode on ``seed`` (every ``every``-th decision tried, the base at the others; each
    priced over ``horizon`` arrivals, or the whole episode): its mean E2E, the base's on the same seed, and the
    decisions it changed."""
    runs = {}
    for mode in ("base", "rollout"):
        env = make_env(env_cfg)
        env.reset(seed=seed, options={"workload_seed": seed})
        router = base_router(base, seed)
        k = changed = 0
        while not (env.terminated or env.truncated):
            a = env.heuristic_action(router)  # asked at every step, as in its own run
            mask = env.action_masks()[: env.n_choices]
            if env.pending is not None and int(mask.sum()) > 1:
                if mode == "rollout" and k % every == 0:
                    c, _ = choose(env, router, [int(i) for i in np.flatnonzero(mask)], a, samples, k, horizon)
                    changed += c != a
                    a = c
                k += 1
            env.step(a)
        runs[mode] = (float(env_latency_stats(env)["mean_e2el_ms"]), k, changed)
    return {"seed": seed, "base_ms": runs["base"][0], "rollout_ms": runs["rollout"][0], "decisions": runs["base"][1],
            "changed": runs["rollout"][2], "every": every, "samples": samples, "horizon": horizon}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m experiments.studies.past_only_rollout",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--env", default="workload_router")
    ap.add_argument("--scenarios", nargs="+", default=["training", "long"])
    ap.add_argument("--seeds", type=validation_seed, nargs="+", default=[1000, 1001])
    ap.add_argument("--requests", type=positive_int, default=400,
                    help="per episode at 4 instances (scaled as the suite)")
    ap.add_argument("--samples", type=int, default=4, help="sampled futures per tried decision")
    ap.add_argument("--every", type=int, default=1, help="try only every N-th decision (default 1: all of them)")
    ap.add_argument("--horizon", type=int, default=None, help="price each decision by the requests arrived and the "
                    "next HORIZON ones only (default: the whole episode)")
    ap.add_argument("--jobs", type=positive_int, default=2)
    ap.add_argument("--out", type=out_file, default=None, help="also write the rows here (JSON)")
    a = ap.parse_args(argv)
    a.jobs = cap_jobs(a.jobs, ap.prog)
    if a.every < 1 or a.samples < 1 or (a.horizon is not None and a.horizon < 1):
        ap.error(f"--every {a.every} / --samples {a.samples} / --horizon {a.horizon}: expected >= 1")
    with usage_errors(ap):
        heuristics = {label_of(h): h for h in load_suite_file(a.env).heuristics}
        rows = []
        for name, env_cfg in seed_drawn(a.env, a.scenarios, a.requests).items():
            means, best, base = best_and_base(env_cfg, heuristics, a.seeds, a.jobs)
            n = len(a.seeds)
            with ProcessPoolExecutor(a.jobs) as pool:
                outs = list(pool.map(past_only_rollout, [env_cfg] * n, [heuristics[base]] * n, a.seeds,
                                     [a.samples] * n, [a.every] * n, [a.horizon] * n))
            ro = float(np.mean([o["rollout_ms"] for o in outs]))
            row = {"scenario": name, "requests": a.requests, "samples": a.samples, "every": a.every,
                   "horizon": a.horizon, "best": best,
                   "best_ms": means[best], "base": base, "base_ms": means[base], "rollout_ms": ro,
                   "gain_vs_best_pct": 100.0 * (1.0 - ro / means[best]), "episodes": outs}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "episodes"}), flush=True)
            if a.out is not None:
                write_text(a.out, json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
