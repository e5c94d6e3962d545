"""How much better than the best heuristic can a router be? A clairvoyant one-step rollout over it, on VALIDATION
seeds.

    python -m experiments.studies.rollout_headroom --scenarios training short --seeds 1000 1001 --requests 200 --jobs 2

The rollout algorithm (Bertsekas' "rollout": one step of policy iteration from a base policy): at every decision
with a request to place, each instance the mask allows is tried, followed by the base heuristic to the end of the
episode, and the one with the lowest mean E2E (every request counted, as evaluation counts them) is taken. The
simulation is deterministic, so each try replays the episode from its start (the same seed) with the decisions taken
so far: the rollout knows the future arrivals and lengths of its own episode. It is no realisable router; it
measures the headroom above a heuristic that one step of lookahead with perfect knowledge can find, and it is never
worse than its base (the base's own choice is always among the tries). The base heuristic keeps its own state as in
its own run: it is asked at every step, and its answer is overridden by the rollout's. Waiting and dropping are not
tried (a base that never holds requests; a base that holds them is refused). Test seeds (>= 2000) are refused.

``--every N`` tries only every N-th decision (a lower bound on the full rollout's gain, for full-size episodes);
``--sensitivity POINTS`` measures instead how much one changed decision moves the episode's mean E2E, which says how
much of the rollout's gain is a choice among nearly equal futures that only a clairvoyant search can make.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from experiments.harness.pages import out_file, write_text
from experiments.harness.pool import cap_jobs
from experiments.harness.timing import positive_int
from experiments.studies.guide_choice import HOLDING
from experiments.studies.validation import seed_drawn, usage_errors, validation_seed
from llmsim.agents.accounting import env_latency_stats
from llmsim.agents.env_setup import make_env
from llmsim.agents.episodes import evaluate
from llmsim.agents.suite_config import load_suite_file
from llmsim.envs.routing_env import RoutingEnv
from llmsim.errors import ConfigError, load_json_file
from llmsim.routing import make_router


def label_of(h: Any) -> str:
    return h if isinstance(h, str) else h.get("label") or h["name"]


def base_router(spec: Any, seed: int) -> Any:
    return make_router(spec, seed=seed) if isinstance(spec, str) else make_router(spec["name"], seed=seed,
                                                                                  **spec.get("kwargs", {}))


Visit = Callable[[RoutingEnv, int, int], None]


def replay(env_cfg: dict[str, Any], base: Any, seed: int, prefix: list[int],
           visit: Visit | None = None) -> tuple[RoutingEnv, list[int], list[list[int]]]:
    """One episode: the decisions of ``prefix`` at the first decision points (a request to place and more than one
    instance allowed), the base heuristic after them; ``visit(env, base_action, action)`` sees each decision before
    it is taken. Returns the ended env, the instance chosen at each decision and the instances allowed there."""
    env = make_env(env_cfg)
    env.reset(seed=seed, options={"workload_seed": seed})
    router = base_router(base, seed)
    chosen: list[int] = []
    allowed: list[list[int]] = []
    while not (env.terminated or env.truncated):
        a = env.heuristic_action(router)  # asked at every step, so its state is the one of its own run
        mask = env.action_masks()[: env.n_choices]
        if env.pending is not None and int(mask.sum()) > 1:
            c = prefix[len(chosen)] if len(chosen) < len(prefix) else a
            if visit is not None:
                visit(env, a, c)
            allowed.append([int(i) for i in np.flatnonzero(mask)])
            chosen.append(c)
            a = c
        env.step(a)
    return env, chosen, allowed


def play(env_cfg: dict[str, Any], base: Any, seed: int,
         prefix: list[int]) -> tuple[float, list[int], list[list[int]]]:
    """:func:`replay`'s episode as its mean E2E (ms, every request counted), choices and allowed instances."""
    env, chosen, allowed = replay(env_cfg, base, seed, prefix)
    return float(env_latency_stats(env)["mean_e2el_ms"]), chosen, allowed


def rollout(env_cfg: dict[str, Any], base: Any, seed: int, every: int = 1) -> dict[str, Any]:
    """The rollout policy's episode on ``seed``: its mean E2E, the base's, and the decisions it changed. The episode
    found so far passes through decision k with the choices made before it, so its allowed instances there are the
    ones to try. ``every`` > 1 tries only every ``every``-th decision and keeps the episode's choice at the others:
    a sparser rollout (a lower bound on the full one's gain) at a fraction of the cost, for long episodes."""
    base_ms, plan, allowed = play(env_cfg, base, seed, [])
    best_ms, decided, changed, k = base_ms, [], 0, 0
    while k < len(plan):
        if k % every:
            decided.append(plan[k])
            k += 1
            continue
        tries = {plan[k]: best_ms}  # the base's own choice: the episode found so far
        for a in allowed[k]:
            if a not in tries:
                tries[a] = play(env_cfg, base, seed, [*decided, a])[0]
        a = min(tries, key=lambda x: (tries[x], x != plan[k]))
        changed += a != plan[k]
        decided.append(a)
        if a != plan[k]:
            best_ms, plan, allowed = play(env_cfg, base, seed, decided)
        k += 1
    return {"seed": seed, "base_ms": base_ms, "rollout_ms": best_ms, "decisions": len(plan), "changed": changed,
            "every": every, "choices": decided}


def sensitivity(env_cfg: dict[str, Any], base: Any, seed: int, points: int = 10) -> dict[str, Any]:
    """How much one decision moves the episode: at ``points`` decisions spread evenly over it, each other allowed
    instance instead of the base's choice (the base before and after), as the change of the episode's mean E2E in
    per cent. Where single changes move the mean by a few per cent either way, a clairvoyant search finds gains by
    choosing among nearly equal trajectories, which a router that does not know the future cannot do."""
    ms, plan, allowed = play(env_cfg, base, seed, [])
    if not plan:
        raise ConfigError(f"seed {seed}: no decision with more than one instance allowed; nothing to change")
    step = max(1, len(plan) // points)
    shifts = [{"k": k, "instance": a, "pct": 100.0 * (play(env_cfg, base, seed, [*plan[:k], a])[0] / ms - 1.0)}
              for k in range(step // 2, len(plan), step) for a in allowed[k] if a != plan[k]]
    d = np.array([x["pct"] for x in shifts])
    return {"seed": seed, "base_ms": ms, "n": len(d), "sd_pct": float(d.std()), "min_pct": float(d.min()),
            "max_pct": float(d.max()), "share_better": float(np.mean(d < 0)), "shifts": shifts}


def placements(env_cfg: dict[str, Any], base: Any, seed: int, choices: list[int]) -> list[dict[str, Any]]:
    """Each decision of the episode ``choices`` make: the request, the loads (running + waiting) of the base's
    instance, of the chosen one and of the least loaded, and whether the choice left the base's half of the
    instances (the dedicated split's groups)."""
    out: list[dict[str, Any]] = []

    def visit(env: RoutingEnv, a: int, c: int) -> None:
        req = env.pending
        load = [s.num_running + s.num_waiting for s in env.state().instances]
        half = env.n_choices // 2
        out.append({"k": len(out), "output": req.output_tokens, "prompt": req.prompt_tokens, "base_load": load[a],
                    "load": load[c], "least": min(load), "changed": c != a, "other_half": (a >= half) != (c >= half)})

    replay(env_cfg, base, seed, choices, visit)
    return out


def explain(rows: list[dict[str, Any]], testbed: str, requests: int) -> str:
    """Per scenario: the decisions the rollout changed against all of them (markdown)."""
    heuristics = {label_of(h): h for h in load_suite_file(testbed).heuristics}
    if not all("choices" in e for row in rows for e in row.get("episodes", [])):
        raise ConfigError("--explain: expected the --out file of a rollout (episodes with their choices)")
    lines = ["| scenario | decisions | n | output mean / share > 250 | load base / chosen / least | to the least "
             "loaded | other half | position (quartiles of k) |", "|---" * 8 + "|"]
    for row in rows:
        env_cfg = seed_drawn(testbed, [row["scenario"]], row.get("requests", requests))[row["scenario"]]
        ps = [p for e in row["episodes"] for p in placements(env_cfg, heuristics[row["base"]], e["seed"], e["choices"])]
        for which, sel in (("all", ps), ("changed", [p for p in ps if p["changed"]])):
            if not sel:
                continue
            out = np.array([p["output"] for p in sel], dtype=float)
            q = np.percentile([p["k"] for p in sel], [25, 50, 75])
            lines.append(
                f"| {row['scenario']} | {which} | {len(sel)} | {out.mean():.0f} / {np.mean(out > 250):.2f} | "
                f"{np.mean([p['base_load'] for p in sel]):.1f} / {np.mean([p['load'] for p in sel]):.1f} / "
                f"{np.mean([p['least'] for p in sel]):.1f} | {np.mean([p['load'] == p['least'] for p in sel]):.2f} | "
                f"{np.mean([p['other_half'] for p in sel]):.2f} | {q[0]:.0f}, {q[1]:.0f}, {q[2]:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m experiments.studies.rollout_headroom",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--env", default="workload_router")
    ap.add_argument("--scenarios", nargs="+", default=["training", "short", "long"])
    ap.add_argument("--base", default=None, help="the base heuristic's label in the suite's list (default: each "
                    "scenario's best non-holding heuristic on these seeds)")
    ap.add_argument("--seeds", type=validation_seed, nargs="+", default=[1000, 1001])
    ap.add_argument("--requests", type=positive_int, default=200,
                    help="per episode at 4 instances (scaled as the suite)")
    ap.add_argument("--every", type=int, default=1, help="try only every N-th decision (default 1: all of them); "
                    "a lower bound on the full rollout's gain, for the suite's full-size episodes")
    ap.add_argument("--sensitivity", type=int, default=0, metavar="POINTS",
                    help="instead of the rollout: how much one changed decision moves the episode, at POINTS decisions")
    ap.add_argument("--jobs", type=positive_int, default=2)
    ap.add_argument("--out", type=out_file, default=None, help="also write the rows here (JSON)")
    ap.add_argument("--explain", type=Path, default=None, metavar="ROWS_JSON",
                    help="instead: which decisions the rollout of an --out file changed (with its --requests)")
    a = ap.parse_args(argv)
    a.jobs = cap_jobs(a.jobs, ap.prog)
    if a.every < 1 or a.sensitivity < 0:
        ap.error(f"--every {a.every} / --sensitivity {a.sensitivity}: expected >= 1 / >= 0 (0: the rollout)")
    with usage_errors(ap):
        if a.explain is not None:
            print(explain(load_json_file(a.explain), a.env, a.requests))
            return
        heuristics = {label_of(h): h for h in load_suite_file(a.env).heuristics}
        rows = []
        for name, env_cfg in seed_drawn(a.env, a.scenarios, a.requests).items():
            row, lines = scenario_row(a, name, env_cfg, heuristics)
            rows.append(row)
            for line in lines:
                print(json.dumps(line), flush=True)
            if a.out is not None:
                write_text(a.out, json.dumps(rows, indent=1))


def best_and_base(env_cfg: dict[str, Any], heuristics: dict[str, Any], seeds: list[int], jobs: int,
                  base: str | None = None) -> tuple[dict[str, float], str, str]:
    """Each heuristic's mean E2E (ms, over ``seeds``), the best of them, and the rollout's base: ``base``, or the
    best that never holds requests (a holding one is refused: the rollout tries instances only)."""
    if base is not None and base not in heuristics:
        raise ConfigError(f"--base {base!r}: not in the suite's heuristics; expected one of {', '.join(heuristics)}")
    evals = evaluate(env_cfg, list(heuristics.values()), seeds=seeds, jobs=jobs)
    means = {p: float(np.mean([r["mean_e2el_ms"] for r in evals if r["policy"] == p])) for p in heuristics}
    base = base or min((p for p in means if name_of(heuristics[p]) not in HOLDING), key=means.get)
    if name_of(heuristics[base]) in HOLDING:
        raise ConfigError(f"--base {base}: holds requests; the rollout tries instances only")
    return means, min(means, key=means.get), base


def scenario_row(a: argparse.Namespace, name: str, env_cfg: dict[str, Any],
                 heuristics: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One scenario's row (the rollout's, or with ``--sensitivity`` the one-decision shifts') and its printed lines."""
    means, best, base = best_and_base(env_cfg, heuristics, a.seeds, a.jobs, a.base)
    n = len(a.seeds)
    with ProcessPoolExecutor(a.jobs) as pool:
        if a.sensitivity:
            outs = list(pool.map(sensitivity, [env_cfg] * n, [heuristics[base]] * n, a.seeds, [a.sensitivity] * n))
            return ({"scenario": name, "requests": a.requests, "base": base, "episodes": outs},
                    [{"scenario": name, "base": base, **{k: v for k, v in o.items() if k != "shifts"}} for o in outs])
        outs = list(pool.map(rollout, [env_cfg] * n, [heuristics[base]] * n, a.seeds, [a.every] * n))
    ro = float(np.mean([o["rollout_ms"] for o in outs]))
    row = {"scenario": name, "requests": a.requests, "every": a.every, "best": best, "best_ms": means[best],
           "base": base, "base_ms": means[base], "rollout_ms": ro,
           "gain_vs_best_pct": 100.0 * (1.0 - ro / means[best]), "episodes": outs}
    return row, [{k: v for k, v in row.items() if k != "episodes"}]


def name_of(h: Any) -> str:
    return h if isinstance(h, str) else h["name"]


if __name__ == "__main__":
    main()
