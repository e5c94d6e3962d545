"""A teacher's labels for a network to imitate: the past-only rollout's cost of each instance at each decision, on
TRAINING seeds.

    python -m experiments.studies.rollout_labels --seeds 500 501 502 503 --requests 400 --samples 2 --jobs 2 \
        --out runs/rollout_labels

At every decision of an episode (a request to place and more than one instance allowed) the past-only rollout
(experiments/studies/past_only_rollout.py) scores each allowed instance by the mean over ``--samples`` sampled
futures of the episode's mean E2E, following the base heuristic after it; the episode then takes the teacher's
choice, so the states are the ones a policy imitating it visits; with ``--learner CKPT`` it takes a fitted
network's choices instead (DAgger: the teacher labels the states the learner reaches, its mistakes included);
``--horizon H`` prices a decision by the requests arrived and the next H only. ``--reliability POINTS`` measures
instead how repeatable the prices are (two independent sets of futures at the same decisions); ``--control SHARES``
runs the base with each share of its decisions sent at random (share 0: the base itself).
Each episode is one ``labels_<seed>.npz`` with the observation (the env's, here the padded ``instance_set`` one a
set network reads), the allowed instances, the base's choice, the per-instance cost (ms; NaN where not allowed)
and the instance the episode took. experiments/studies/rollout_distill.py fits a network to them. Only seeds below
1000 (training) are taken: validation seeds choose the network, test seeds report.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from experiments.harness.pages import study_out
from experiments.harness.pool import cap_jobs
from experiments.harness.timing import positive_int
from experiments.studies.past_only_rollout import choose
from experiments.studies.rollout_headroom import base_router, label_of
from experiments.studies.validation import seed_drawn, usage_errors
from llmsim.agents.accounting import env_latency_stats
from llmsim.agents.checkpoint import load_q_net
from llmsim.agents.env_setup import make_env
from llmsim.agents.seeds import VALIDATION_SEED0
from llmsim.agents.suite_config import load_suite_file

TESTBED = "workload_router"
BASE = "dedicated_split_spill_by_size"  # the set network's guide (zoo/workload_router): its fallback is the base
OBSERVATION = {"kind": "instance_set", "n_max": 16, "max_wait_s": 10.0}
LABEL_SEED_BASE = 8_000_000  # the sampled futures of label episodes: apart from the past-only study's 7,000,000+


def label_env(scenario: str = "training", requests: int = 400) -> dict[str, Any]:
    """The testbed's ``scenario`` env at ``requests`` per episode with the set network's observation."""
    return {**seed_drawn(TESTBED, [scenario], requests)[scenario], "observation": dict(OBSERVATION)}


def learner_choice(net: Any, obs: np.ndarray, tried: list[int]) -> int:
    """The greedy choice of a set network (its fallback margin included) among the ``tried`` instances."""
    with torch.no_grad():
        q = net(torch.as_tensor(np.asarray(obs, dtype=np.float32))[None])[0].numpy()
    return max(tried, key=lambda i: (q[i], -i))


def label_episode(env_cfg: dict[str, Any], base: Any, seed: int, samples: int, out: Path,
                  learner: Path | None = None, horizon: int | None = None) -> dict[str, Any]:
    """One episode on ``seed`` taking the teacher's choices (or, with a ``learner`` checkpoint, the learner's: the
    states a fitted network visits, as DAgger labels them); its labels written to ``out/labels_<seed>.npz``."""
    net = None if learner is None else load_q_net(learner)
    env = make_env(env_cfg)
    obs, _ = env.reset(seed=seed, options={"workload_seed": seed})
    router = base_router(base, seed)
    n_max = int(env_cfg["observation"]["n_max"])
    xs, masks, bases, costs, taken = [], [], [], [], []
    changed = 0
    while not (env.terminated or env.truncated):
        a = env.heuristic_action(router)  # asked at every step, as in its own run
        allowed = env.action_masks()[: env.n_choices]
        if env.pending is not None and int(allowed.sum()) > 1:
            tried = [int(i) for i in np.flatnonzero(allowed)]
            at = LABEL_SEED_BASE // 1000 + seed * 1000 + len(xs)
            c, cost = choose(env, router, tried, a, samples, at, horizon)
            row = np.full(n_max, np.nan)
            row[tried] = [cost[i] for i in tried]
            xs.append(np.asarray(obs, dtype=np.float32))
            masks.append(np.isin(np.arange(n_max), tried))
            bases.append(a)
            costs.append(row)
            changed += c != a
            a = c if net is None else learner_choice(net, obs, tried)
            taken.append(a)
        obs, *_ = env.step(a)
    out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out / f"labels_{seed}.npz", obs=np.array(xs), allowed=np.array(masks),
                        base=np.array(bases, dtype=np.int64), cost_ms=np.array(costs),
                        taken=np.array(taken, dtype=np.int64))
    return {"seed": seed, "decisions": len(xs), "episode_ms": float(env_latency_stats(env)["mean_e2el_ms"]),
            "changed": changed}


def random_deviation(env_cfg: dict[str, Any], base: Any, seed: int, share: float) -> float:
    """The base's episode on ``seed`` with a ``share`` of its decisions sent to an allowed instance drawn at random
    instead: its mean E2E (ms). Share 0 is the base itself. A control for the teacher, which departs from the base
    at two decisions in three: is its gain knowledge, or only spreading the load?"""
    env = make_env(env_cfg)
    env.reset(seed=seed, options={"workload_seed": seed})
    router = base_router(base, seed)
    rng = np.random.default_rng(seed)
    while not (env.terminated or env.truncated):
        a = env.heuristic_action(router)
        allowed = env.action_masks()[: env.n_choices]
        if env.pending is not None and int(allowed.sum()) > 1 and rng.random() < share:
            a = int(rng.choice(np.flatnonzero(allowed)))
        env.step(a)
    return float(env_latency_stats(env)["mean_e2el_ms"])


def reliability(env_cfg: dict[str, Any], base: Any, seed: int, points: int, samples: int,
                horizon: int | None = None) -> dict[str, Any]:
    """How repeatable the teacher's prices are: at ``points`` decisions spread over the base's episode, two
    independent sets of ``samples`` futures each price every allowed instance. Returns the correlation of the two
    sets' gains over the base's choice (per cent of its cost, over every decision and other instance), how often the
    two pick the same instance, and the mean gain of each set's pick as the other set prices it (what a network
    fitted to one set could keep at best)."""
    env = make_env(env_cfg)
    env.reset(seed=seed, options={"workload_seed": seed})
    router = base_router(base, seed)
    total = int(env_cfg["num_requests"])
    marks = set(np.linspace(0, total - 1, points + 2)[1:-1].astype(int).tolist())
    pairs, same, kept = [], [], []
    k = 0
    while not (env.terminated or env.truncated):
        a = env.heuristic_action(router)
        allowed = env.action_masks()[: env.n_choices]
        if env.pending is not None and int(allowed.sum()) > 1:
            if k in marks:
                tried = [int(i) for i in np.flatnonzero(allowed)]
                at = LABEL_SEED_BASE // 1000 + seed * 1000 + k
                ca, one = choose(env, router, tried, a, samples, at, horizon)
                cb, two = choose(env, router, tried, a, samples, at + 500_000, horizon)
                g1 = {i: 100.0 * (one[a] - one[i]) / one[a] for i in tried}
                g2 = {i: 100.0 * (two[a] - two[i]) / two[a] for i in tried}
                pairs += [(g1[i], g2[i]) for i in tried if i != a]
                same.append(ca == cb)
                kept += [g2[ca], g1[cb]]
            k += 1
        env.step(a)
    x = np.array(pairs)
    return {"seed": seed, "horizon": horizon, "samples": samples, "decisions": len(same),
            "gain_corr": float(np.corrcoef(x[:, 0], x[:, 1])[0, 1]) if len(x) > 2 else None,
            "same_pick": float(np.mean(same)), "cross_kept_gain_pct": float(np.mean(kept)),
            "own_gain_pct": float(np.mean(np.maximum(x.max(axis=1), 0.0))) if len(x) else 0.0}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m experiments.studies.rollout_labels",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="training")
    ap.add_argument("--seeds", type=int, nargs="+", required=True)
    ap.add_argument("--requests", type=positive_int, default=400)
    ap.add_argument("--samples", type=int, default=2, help="sampled futures per decision")
    ap.add_argument("--jobs", type=positive_int, default=2)
    ap.add_argument("--out", type=Path, default=study_out("rollout_labels"),
                    help="a directory for labels_<seed>.npz (default %(default)s)")
    ap.add_argument("--learner", type=Path, default=None, help="a set network's checkpoint whose choices the "
                    "episodes take (DAgger's next round); default: the teacher's")
    ap.add_argument("--reliability", type=int, default=0, metavar="POINTS",
                    help="instead of labels: how repeatable the teacher's prices are, at POINTS decisions per seed")
    ap.add_argument("--control", type=float, nargs="+", default=None, metavar="SHARE",
                    help="instead of labels: the base's episodes with each SHARE of decisions sent at random")
    ap.add_argument("--horizon", type=int, default=None,
                    help="price a decision by the requests arrived and the next HORIZON ones only (default: all)")
    a = ap.parse_args(argv)
    a.jobs = cap_jobs(a.jobs, ap.prog)
    if any(s < 0 or s >= VALIDATION_SEED0 for s in a.seeds):
        ap.error(f"--seeds {a.seeds}: training seeds only (0-{VALIDATION_SEED0 - 1})")
    if a.samples < 1 or (a.horizon is not None and a.horizon < 1):
        ap.error(f"--samples {a.samples} / --horizon {a.horizon}: expected >= 1")
    if a.control is not None and not all(0.0 <= x <= 1.0 for x in a.control):
        ap.error(f"--control {a.control}: expected shares in [0, 1]")
    with usage_errors(ap):
        study(a)


def study(a: argparse.Namespace) -> None:
    """The labels of ``--seeds`` (or with ``--control`` / ``--reliability``, the checks of the teacher)."""
    base = {label_of(h): h for h in load_suite_file(TESTBED).heuristics}[BASE]
    env_cfg = label_env(a.scenario, a.requests)
    if a.control is not None:
        for share in a.control:
            ms = [random_deviation(env_cfg, base, s, share) for s in a.seeds]
            print(json.dumps({"share": share, "mean_ms": float(np.mean(ms)), "per_seed_ms": ms}), flush=True)
        return
    n = len(a.seeds)
    with ProcessPoolExecutor(a.jobs) as pool:
        if a.reliability:
            for row in pool.map(reliability, [env_cfg] * n, [base] * n, a.seeds, [a.reliability] * n,
                                [a.samples] * n, [a.horizon] * n):
                print(json.dumps(row), flush=True)
            return
        for row in pool.map(label_episode, [env_cfg] * n, [base] * n, a.seeds, [a.samples] * n, [a.out] * n,
                            [a.learner] * n, [a.horizon] * n):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
