"""A network that imitates the past-only rollout: fitted to its labels (TRAINING seeds), its fallback margin and its
gain chosen and measured on VALIDATION seeds against the best heuristic of each scenario.

    python -m experiments.studies.rollout_distill --labels runs/rollout_labels --out runs/rollout_distill \
        --folds 4 --scenarios training long short rate_0.5x rate_1.5x --seeds 1000 1001 1002 --jobs 2

The network is the shipped WorkloadRouter policy's (agents/nets.py ``SetQNetwork``: one encoder shared by every
instance, pooled heads, the split-with-spill guide computed from the observation), so the result is a checkpoint
that runs wherever that one does (any number of instances up to 16, ONNX export, the live router). Its Q-values
are fitted to the teacher's per-instance costs as the gain over the base heuristic's choice, in per cent of the
episode's mean E2E (experiments/studies/rollout_labels.py; the base is the network's guide): Q(a) - Q(base) ->
100 x (cost(base) - cost(a)) / cost(base), least squares over the allowed instances. The last ``--folds``
labelled episodes are each held out of a fit in turn to say how well the fit generalises (how much of the
teacher's gain its choices keep on decisions it did not see). The greedy policy then takes the guide's choice
unless the learned gain over it exceeds the fallback margin (in the same per cent); each margin of ``--margins`` is
a checkpoint ``<out>/margin_<m>`` and is evaluated with every heuristic of the suite on each scenario and
validation seed, every request counted. ``--checkpoints DIR`` evaluates saved ones again (another size), and
``--explain`` says where in the episode the teacher departs from its base.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from experiments.harness.pages import study_out, write_text
from experiments.harness.pool import cap_jobs
from experiments.harness.timing import non_negative_int, positive_int
from experiments.studies.rollout_headroom import label_of
from experiments.studies.rollout_labels import OBSERVATION, TESTBED, label_env
from experiments.studies.validation import seed_drawn, usage_errors, validation_seed
from llmsim.agents.accounting import request_latencies
from llmsim.agents.checkpoint import CheckpointPolicy, save_checkpoint
from llmsim.agents.env_setup import make_env
from llmsim.agents.episodes import evaluate
from llmsim.agents.nets import SPILL_GUIDE, SetQNetwork, Spill
from llmsim.agents.policy import run_episode
from llmsim.agents.suite_config import load_suite_file
from llmsim.errors import ConfigError
from llmsim.state.cluster_state import LAYOUT_VERSION

N_MAX = int(OBSERVATION["n_max"])
GUIDE_SPILL = Spill(1.0, load=1.5, min_group=2)  # dedicated_split_spill_by_size, the labels' base
ACTIONS = {"n": N_MAX + 2, "kind": "instance_wait", "choices": N_MAX, "wait": N_MAX, "drop": N_MAX + 1}


def load_labels(folder: Path) -> dict[str, np.ndarray]:
    """Every ``labels_<seed>.npz`` of ``folder`` stacked, with the episode (seed) of each decision."""
    files = sorted(folder.glob("labels_*.npz"), key=lambda f: int(f.stem.split("_")[1]))
    if not files:
        raise ConfigError(f"--labels {folder}: no labels_<seed>.npz (experiments/studies/rollout_labels.py)")
    parts = [dict(np.load(f)) for f in files]
    out = {k: np.concatenate([p[k] for p in parts]) for k in ("obs", "allowed", "base", "cost_ms")}
    out["episode"] = np.concatenate([np.full(len(p["base"]), int(f.stem.split("_")[1])) for p, f in zip(parts, files)])
    return out


def gain_pct(cost_ms: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Per decision and instance: how much lower the teacher's cost is than at the base's choice (% of it)."""
    at_base = cost_ms[np.arange(len(base)), base][:, None]
    return 100.0 * (at_base - cost_ms) / at_base


def fit(net: SetQNetwork, obs: np.ndarray, allowed: np.ndarray, base: np.ndarray, target: np.ndarray,
        steps: int = 3000, batch: int = 256, lr: float = 1e-3, seed: int = 0) -> float:
    """Least squares of Q(a) - Q(base) on the target gains over the allowed instances; the last loss."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    x = torch.as_tensor(obs)
    m = torch.as_tensor(allowed)
    b = torch.as_tensor(base)
    y = torch.as_tensor(np.nan_to_num(target), dtype=torch.float32)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    loss = torch.zeros(())
    for _ in range(steps):
        i = torch.as_tensor(rng.integers(0, len(x), size=min(batch, len(x))))
        q = net.q_values(x[i])[:, :N_MAX]
        rel = q - q.gather(1, b[i].unsqueeze(1))
        err = torch.where(m[i], rel - y[i], torch.zeros_like(rel))
        loss = (err ** 2).sum() / m[i].sum().clamp(min=1)
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.eval()
    return float(loss.detach())


def new_net(obs_dim: int, hidden: list[int], seed: int = 0, seen_range: bool = False) -> SetQNetwork:
    """The set network the labels are fitted to, its initial weights drawn from ``seed``; with ``seen_range`` it
    defers to its guide outside the labels' states (agents/seen_range.py), the same weights either way."""
    torch.manual_seed(seed)
    return SetQNetwork(obs_dim, N_MAX + 2, hidden, SPILL_GUIDE, hold=False, spill=GUIDE_SPILL,
                       seen_range=seen_range)


def kept_gain(net: SetQNetwork, obs: np.ndarray, allowed: np.ndarray, target: np.ndarray) -> dict[str, float]:
    """On decisions not fitted: the teacher's mean gain per decision at the network's own choice, at the teacher's
    (the most there is) and how often the two agree."""
    with torch.no_grad():
        q = net.q_values(torch.as_tensor(obs))[:, :N_MAX].numpy()
    pick = np.where(allowed, q, -np.inf).argmax(axis=1)
    best = np.where(allowed, np.nan_to_num(target, nan=-np.inf), -np.inf).argmax(axis=1)
    rows = np.arange(len(pick))
    return {"decisions": len(pick), "net_gain_pct": float(target[rows, pick].mean()),
            "teacher_gain_pct": float(target[rows, best].mean()), "agree": float(np.mean(pick == best))}


def by_quarter(data: dict[str, np.ndarray], target: np.ndarray) -> list[dict[str, float]]:
    """Where in the episode the teacher departs from its base: per quarter of each episode's decisions, the share it
    changes, its mean gain at its own pick (per cent of the episode's cost), and how often it and the base send the
    request to the last half of the instances (the dedicated split's large group)."""
    start = np.r_[0, np.flatnonzero(np.diff(data["episode"])) + 1]
    k = np.arange(len(target)) - np.repeat(start, np.diff(np.r_[start, len(target)]))
    size = np.repeat(np.diff(np.r_[start, len(target)]), np.diff(np.r_[start, len(target)]))
    gain = np.where(data["allowed"], np.nan_to_num(target, nan=-np.inf), -np.inf)
    pick = np.where(gain.max(axis=1) > 0, gain.argmax(axis=1), data["base"])
    n = data["obs"][:, -N_MAX:].sum(axis=1).astype(int)  # the instances (the observation's slot mask)
    large = pick >= n - np.maximum(n // 2, 1)
    base_large = data["base"] >= n - np.maximum(n // 2, 1)
    rows = []
    for q in range(4):
        sel = (4 * k >= q * size) & (4 * k < (q + 1) * size)
        rows.append({"quarter": q + 1, "changed": float(np.mean(pick[sel] != data["base"][sel])),
                     "gain_pct": float(np.maximum(gain[sel].max(axis=1), 0.0).mean()),
                     "teacher_large": float(np.mean(large[sel])), "base_large": float(np.mean(base_large[sel]))})
    return rows


def held_out(data: dict[str, np.ndarray], target: np.ndarray, folds: list[int], hidden: list[int],
             steps: int) -> dict[str, Any]:
    """Each episode of ``folds`` left out of a fit in turn: :func:`kept_gain` on it, and the mean over folds."""
    rows = []
    for ep in folds:
        held = data["episode"] == ep
        probe = new_net(data["obs"].shape[1], hidden)
        fit(probe, data["obs"][~held], data["allowed"][~held], data["base"][~held], target[~held], steps)
        rows.append({"episode": ep, **kept_gain(probe, data["obs"][held], data["allowed"][held], target[held])})
    keys = ("net_gain_pct", "teacher_gain_pct", "agree")
    return {"folds": rows, **({k: float(np.mean([r[k] for r in rows])) for k in keys} if rows else {})}


def save(net: SetQNetwork, out: Path, margin: float, info: dict[str, Any]) -> Path:
    """``net`` at fallback ``margin`` as a checkpoint in ``out/margin_<m>`` (the shipped set policy's layout)."""
    net.fallback_margin.fill_(float(margin))
    env_cfg = {**label_env(), "num_requests": 1000}
    meta = {"agent": "ddqn", "label": f"rollout_distilled_m{margin:g}", "observation":
            {"kind": "instance_set", "shape": [net.obs_dim], "state_layout_version": LAYOUT_VERSION},
            "actions": ACTIONS, "env": env_cfg, "fallback_margin": float(margin), "updates": int(info["steps"]),
            "distilled": info}
    return save_checkpoint(out / f"margin_{margin:g}", net, meta)


def by_policy(evals: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """policy -> its per-seed mean and p99 E2E (ms, every request counted), in seed order."""
    by: dict[str, dict[str, list[float]]] = {}
    for r in evals:
        d = by.setdefault(r["policy"], {"mean": [], "p99": [], "unseen": []})
        d["mean"].append(float(r["mean_e2el_ms"]))
        d["p99"].append(float(r["p99_e2el_ms"]))
        d["unseen"].append(r.get("unseen_decisions", 0) / max(1, r["num_requests"]))
    return by


def best_heuristic(name: str, env_cfg: dict[str, Any], seeds: list[int], jobs: int,
                   cache: Path | None) -> dict[str, Any]:
    """The scenario's best heuristic (lowest mean over ``seeds``) and its per-seed results, kept in ``cache`` (a
    JSON file) under the scenario, its size and the seeds, so another network's validation does not rerun them."""
    key = f"{name}|{env_cfg.get('num_requests')}|{','.join(map(str, seeds))}"
    known = json.loads(cache.read_text()) if cache is not None and cache.is_file() else {}
    if key not in known:
        heuristics = list(load_suite_file(TESTBED).heuristics)
        by = by_policy(evaluate(env_cfg, heuristics, seeds=seeds, jobs=jobs))
        best = min((label_of(h) for h in heuristics), key=lambda p: np.mean(by[p]["mean"]))
        known[key] = {"best": best, **by[best]}
        if cache is not None:
            write_text(cache, json.dumps(known, indent=1, sort_keys=True))
    return known[key]


def validate(ckpts: dict[float, Path], scenarios: list[str], seeds: list[int], requests: int,
             jobs: int, cache: Path | None = None) -> list[dict[str, Any]]:
    """Per scenario: the best heuristic's mean and p99 E2E on ``seeds`` and each margin's gains over it (%)."""
    rows = []
    for name, env_cfg in seed_drawn(TESTBED, scenarios, requests).items():
        ref = best_heuristic(name, env_cfg, seeds, jobs, cache)
        specs = [{"checkpoint": str(p), "label": f"margin_{m:g}"} for m, p in ckpts.items()]
        by = by_policy(evaluate(env_cfg, specs, seeds=seeds, jobs=jobs))
        row = {"scenario": name, "requests": env_cfg["num_requests"], "best": ref["best"],
               "best_ms": float(np.mean(ref["mean"])), "best_p99_ms": float(np.mean(ref["p99"]))}
        for m in ckpts:
            d = by[f"margin_{m:g}"]
            gains = [100.0 * (1 - a / b) for a, b in zip(d["mean"], ref["mean"])]
            row[f"margin_{m:g}"] = {"gain_pct": float(np.mean(gains)), "per_seed": gains,
                                    "p99_gain_pct": float(100.0 * (1 - np.mean(d["p99"]) / row["best_p99_ms"])),
                                    "unseen_share": float(np.mean(d["unseen"]))}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def by_arrival(ckpts: dict[float, Path], scenario: str, seeds: list[int], requests: int,
               parts: int) -> list[dict[str, Any]]:
    """Each checkpoint's mean E2E (s, every request counted) over each of ``parts`` equal slices of the episode's
    requests in arrival order: which requests a policy's choices help and which they make pay later."""
    env_cfg = {**seed_drawn(TESTBED, [scenario], requests)[scenario], "observation": dict(OBSERVATION)}
    rows = []
    for m, path in ckpts.items():
        for seed in seeds:
            env = make_env(env_cfg)
            run_episode(CheckpointPolicy(path), env, seed, seed)
            e2e = request_latencies(env.episode_requests, env.driver.drops, float(env.driver.now))["e2e"]
            rows.append({"margin": m, "scenario": scenario, "seed": seed, "mean_s": float(e2e.mean()),
                         "slices_s": [float(x.mean()) for x in np.array_split(e2e, parts)]})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m experiments.studies.rollout_distill",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--labels", type=Path, default=study_out("rollout_labels"),
                    help="rollout_labels' --out directory (default %(default)s)")
    ap.add_argument("--out", type=Path, default=study_out("rollout_distill"),
                    help="a directory for the checkpoints and validation_<requests>.json (default %(default)s)")
    ap.add_argument("--hidden", type=positive_int, nargs="+", default=[64, 64], help="units per hidden layer")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--folds", type=int, default=1, help="episodes held out in turn to measure the fit (the last N)")
    ap.add_argument("--margins", type=float, nargs="+", default=[0.0, 0.05, 0.1, 0.2, 0.5, 1000.0])
    ap.add_argument("--scenarios", nargs="+", default=["training", "long", "short", "rate_0.5x", "rate_1.5x"])
    ap.add_argument("--seeds", type=validation_seed, nargs="+", default=[1000, 1001, 1002])
    ap.add_argument("--requests", type=positive_int, default=400)
    ap.add_argument("--jobs", type=positive_int, default=2)
    ap.add_argument("--heuristics-cache", type=Path, default=None,
                    help="a JSON file keeping each scenario's best heuristic on these seeds (reused when present)")
    ap.add_argument("--seen-slack", type=float, default=None,
                    help="give the network a seen range (the labels' states widened by this share of each feature's "
                         "range on each side): outside it the guide decides")
    ap.add_argument("--explain", action="store_true", help="instead of fitting: where in the episode the teacher "
                    "departs from its base (per quarter of the labelled decisions)")
    ap.add_argument("--by-arrival", type=non_negative_int, default=0, metavar="PARTS",
                    help="with --checkpoints: each one's mean E2E per PARTS slices of the requests in arrival order "
                         "(the first of --scenarios)")
    ap.add_argument("--checkpoints", type=Path, default=None,
                    help="instead of fitting: validate the margin_<m> checkpoints of this directory (--out holds "
                         "the result)")
    return ap


def main(argv: list[str] | None = None) -> None:
    ap = parser()
    a = ap.parse_args(argv)
    a.jobs = cap_jobs(a.jobs, ap.prog)
    if a.folds < 0 or a.steps < 1 or (a.seen_slack is not None and not 0.0 <= a.seen_slack < float("inf")):
        ap.error(f"--folds {a.folds} / --steps {a.steps} / --seen-slack {a.seen_slack}: expected >= 0 / "
                 f">= 1 / a finite share >= 0")
    with usage_errors(ap):
        study(a)


def margin_checkpoints(folder: Path) -> dict[float, Path]:
    """margin -> checkpoint of the ``margin_<m>`` folders a fit wrote in ``folder``: none is an error, never an
    evaluation of the heuristics alone."""
    if not folder.is_dir():
        raise ConfigError(f"--checkpoints {folder}: no such directory (expected rollout_distill's --out, holding "
                          "margin_<m> checkpoints)")
    out = {}
    for p in sorted(folder.glob("margin_*")):
        try:
            out[float(p.name.split("_", 1)[1])] = p
        except ValueError:
            raise ConfigError(f"--checkpoints {folder}: {p.name}: expected margin_<number>") from None
    if not out:
        raise ConfigError(f"--checkpoints {folder}: no margin_<m> checkpoint in it (rollout_distill's --out holds "
                          "them after a fit)")
    return out


def study(a: argparse.Namespace) -> None:
    """Validate the ``--checkpoints`` given, or fit a network to the labels and validate its margins."""
    if a.checkpoints is not None:
        ckpts = margin_checkpoints(a.checkpoints)
        if a.by_arrival > 0:
            by_arrival(ckpts, a.scenarios[0], a.seeds, a.requests, a.by_arrival)
            return
        rows = validate(ckpts, a.scenarios, a.seeds, a.requests, a.jobs, a.heuristics_cache)
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / f"validation_{a.requests}.json").write_text(json.dumps({"rows": rows}, indent=1))
        return
    data = load_labels(a.labels)
    target = gain_pct(data["cost_ms"], data["base"])
    if a.explain:
        for row in by_quarter(data, target):
            print(json.dumps(row))
        return
    episodes = sorted(set(data["episode"].tolist()))
    folds = episodes[max(0, len(episodes) - a.folds):] if len(episodes) > 1 else []
    report: dict[str, Any] = {"episodes": episodes, "decisions": int(len(target)),
                              "held_out": held_out(data, target, folds, a.hidden, a.steps)}
    print(json.dumps(report), flush=True)
    net = new_net(data["obs"].shape[1], a.hidden, seen_range=a.seen_slack is not None)
    report["loss"] = fit(net, data["obs"], data["allowed"], data["base"], target, a.steps)
    if a.seen_slack is not None:
        net.fit_seen_range(torch.as_tensor(data["obs"]), a.seen_slack)
        report["seen_slack"] = a.seen_slack
    ckpts = {m: save(net, a.out, m, {**report, "steps": a.steps}) for m in a.margins}
    rows = validate(ckpts, a.scenarios, a.seeds, a.requests, a.jobs, a.heuristics_cache)
    (a.out / f"validation_{a.requests}.json").write_text(json.dumps({"fit": report, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
