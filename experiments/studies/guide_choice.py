"""Choose a learned router's guide heuristic on VALIDATION seeds: every registered heuristic of a testbed's suite.

    python -m experiments.studies.guide_choice --env workload_router --seeds 1000 1001 1002 1003 --jobs 2

A router started from its guide by imitation and kept near it by a fallback can only clear bars set by the best
heuristic of each scenario if its guide is close to that best everywhere. Every heuristic the suite lists
(conf/suite/<testbed>.yaml ``heuristics``) runs on the suite's seed-drawn scenarios (rates, length mixes, cluster
sizes, hardware; never its trace windows, which are test data) over the same validation seeds, every request
counted (``mean_e2el_ms``, ``p99_e2el_ms`` include the dropped and cut-off ones). Each cell is the heuristic's gap to
the best heuristic of that scenario (lowest mean E2E; the suite's reference for its bars), in % of the best's metric,
both averaged over the seeds first. The rule: the heuristic with the
smallest worst-case gap of the mean, then the smallest mean gap, over all heuristics and over the stateless ones:
``kind`` says which are a function of the ``ClusterState`` and the request alone (what a set observation can carry
as a guide column), which keep a state of their own (a turn, a random stream, a table) and which hold requests at
the router (a router that never waits cannot follow them). ``--guides`` adds a set network's guides computed from
the observation (agents/nets.py: ``dedicated_split``, or
``dedicated_split_spill:RATIO[:FEATURE[:LOAD[:LIGHT_LOAD]]]`` for a spill rule), acting alone, to the same table
(never a reference). Test seeds (>= 2000) are refused.

    python -m experiments.studies.guide_choice --requests 400 --guides dedicated_split dedicated_split_spill:1.1
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from experiments.harness.pages import out_file, write_text
from experiments.harness.pool import cap_jobs
from experiments.harness.timing import positive_int
from experiments.studies.validation import (
    name_path,
    named_paths,
    router_name,
    seed_drawn,
    usage_errors,
    validation_seed,
)
from llmsim.agents.episodes import evaluate
from llmsim.agents.nets import SPILL, SPLIT_GUIDES, Spill
from llmsim.agents.suite_config import load_suite_file
from llmsim.agents.transfer import ObservationGuide, e2e_all_ms, watch_episodes
from llmsim.envs.randomize import SlotEnv
from llmsim.errors import ConfigError

# the default scenarios: the suite's seed-drawn ones a guide must hold on (rates around training, mixes, sizes, GPUs)
DEFAULT_SCENARIOS = ("rate_0.5x", "training", "rate_1.5x", "short", "long", "bimodal", "instances_8", "instances_16",
                     "hetero")
# heuristics that keep a state across decisions (a turn, a random stream, a session or prefix table, a batch):
# no function of ClusterState and the request reproduces them
STATEFUL = {"round_robin", "random", "power_of_two", "dedicated_small_large", "session_affinity", "prefix_aware",
            "vllm_data_parallel", "routebalance", "best_route"}
# heuristics that hold requests at the router (a central queue in their own order)
HOLDING = {"earliest_available", "max_capacity", "edf", "shepherd", "qlm"}
LEARNED = "ckpt:"  # the label prefix of a checkpoint compared with the heuristics (--checkpoints)
GUIDE = "guide:"  # ... and of an observation guide acting alone (--guides)
N_MAX = 16  # the instance_set observation's slots the guides read (the WorkloadRouter presets')


def kind(policy: str) -> str:
    """stateless, stateful or holds (see STATEFUL, HOLDING)."""
    if policy.startswith(LEARNED):
        return "learned"
    if policy.startswith(GUIDE):
        return "guide"
    return "holds" if policy in HOLDING else "stateful" if policy in STATEFUL else "stateless"


def seed_means(rows: list[dict[str, Any]], metric: str) -> dict[str, float]:
    """Per policy: its mean ``metric`` over the seeds."""
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r["policy"], []).append(float(r[metric]))
    return {p: float(np.mean(v)) for p, v in by.items()}


def scenario_gaps(rows: list[dict[str, Any]], learned: set[str]) -> dict[str, dict[str, float]]:
    """Per policy: mean E2E and p99 E2E over the seeds, and their gaps (%) to the scenario's best heuristic, the one
    with the lowest mean E2E (the suite's reference for every bar; ``learned`` policies are not candidates)."""
    mean, p99 = seed_means(rows, "mean_e2el_ms"), seed_means(rows, "p99_e2el_ms")
    ref = min((p for p in mean if p not in learned), key=mean.get)
    return {p: {"mean": 100.0 * (mean[p] / mean[ref] - 1.0), "p99": 100.0 * (p99[p] / p99[ref] - 1.0),
                "value": mean[p], "p99_value": p99[p]} for p in mean}


def choose(table: dict[str, dict[str, dict[str, float]]], key: str = "mean") -> str:
    """The heuristic with the smallest worst-case gap (to 0.1 point), then the smallest mean gap."""
    pols = [p for p in next(iter(table.values())) if kind(p) not in ("learned", "guide")]
    return min(pols, key=lambda p: (round(max(t[p][key] for t in table.values()), 1),
                                    float(np.mean([t[p][key] for t in table.values()]))))


def markdown(table: dict[str, dict[str, dict[str, float]]]) -> str:
    """Rows: heuristics (worst-case mean gap first); columns: scenarios (mean gap %, p99 gap %)."""
    names = list(table)
    pols = sorted(next(iter(table.values())), key=lambda p: (max(t[p]["mean"] for t in table.values()), p))
    lines = ["| heuristic | kind | worst mean gap | mean gap | worst p99 gap | " + " | ".join(names) + " |",
             "|---" * (5 + len(names)) + "|"]
    for p in pols:
        m = [table[n][p]["mean"] for n in names]
        q = [table[n][p]["p99"] for n in names]
        cells = [f"{table[n][p]['mean']:+.1f} / {table[n][p]['p99']:+.1f}" for n in names]
        lines.append(f"| {p} | {kind(p)} | {max(m):+.1f} | {np.mean(m):+.1f} | "
                     f"{max(q):+.1f} | " + " | ".join(cells) + " |")
    best = {n: min((p for p in table[n] if kind(p) not in ("learned", "guide")), key=lambda p: table[n][p]["mean"])
            for n in names}
    lines.append("| best (mean E2E, s) | | | | | " + " | ".join(
        f"{best[n]} {table[n][best[n]]['value'] / 1000:.2f}" for n in names) + " |")
    return "\n".join(lines)


def guide_policy(spec: str) -> ObservationGuide:
    """``dedicated_split`` or ``dedicated_split_spill[:RATIO[:FEATURE[:LOAD[:LIGHT_LOAD]]]]`` as an observation
    guide."""
    name, *rule = spec.split(":")
    try:
        spill = Spill(float(rule[0]), *rule[1:2], *map(float, rule[2:4])) if rule else SPILL
    except (TypeError, ValueError) as e:
        raise ConfigError(f"--guides {spec!r}: expected NAME or NAME:RATIO[:FEATURE[:LOAD[:LIGHT_LOAD]]] "
                          f"({e})") from None
    if name not in SPLIT_GUIDES:
        raise ConfigError(f"--guides {spec!r}: expected one of {list(SPLIT_GUIDES)}")
    return ObservationGuide(name, spill)


def guide_rows(env: dict[str, Any], guides: list[str], seeds: list[int]) -> list[dict[str, Any]]:
    """Each observation guide's episodes on ``env`` (in this process), as evaluation rows with every request
    counted in the mean."""
    slot_env = SlotEnv({**env, "observation": {"kind": "instance_set", "n_max": N_MAX}}, scenarios=[{}])
    rows = []
    for spec in guides:
        for r in watch_episodes(guide_policy(spec), slot_env, seeds)[0]:
            rows.append({"policy": GUIDE + spec, "mean_e2el_ms": e2e_all_ms(r), "p99_e2el_ms": r["p99_e2el_ms"]})
    return rows


def run(testbed: str, names: list[str], seeds: list[int], requests: int, jobs: int,
        heuristics: list[str] | None, checkpoints: dict[str, str] | None = None,
        dump: Path | None = None, guides: list[str] | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """scenario -> heuristic -> {mean, p99: gap % to the scenario's best heuristic, value: mean E2E ms}; the table
    so far is written to ``dump`` (JSON) after each scenario."""
    learned = {LEARNED + k: v for k, v in (checkpoints or {}).items()}
    pols: list[Any] = list(heuristics or load_suite_file(testbed).heuristics)
    pols += [{"checkpoint": path, "label": label} for label, path in learned.items()]
    for spec in guides or []:
        guide_policy(spec)  # a bad spec fails before anything runs
    table: dict[str, dict[str, dict[str, float]]] = {}
    for name, env in seed_drawn(testbed, names, requests).items():
        t0 = time.perf_counter()
        rows = evaluate(env, pols, seeds=seeds, jobs=jobs) + guide_rows(env, guides or [], seeds)
        others = set(learned) | {GUIDE + g for g in guides or []}
        table[name] = scenario_gaps(rows, others)
        best = min((p for p in table[name] if p not in others), key=lambda p: table[name][p]["value"])
        print(f"{name}: best {best} ({table[name][best]['value'] / 1000:.2f} s), {time.perf_counter() - t0:.0f} s "
              "wall", flush=True)
        if dump is not None:
            write_text(dump, json.dumps(table, indent=1))
    return table


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m experiments.studies.guide_choice", description=__doc__.split("\n")[0])
    ap.add_argument("--env", default="workload_router", help="testbed (conf/env/<name>.yaml, conf/suite/<name>.yaml)")
    ap.add_argument("--scenarios", nargs="+", default=list(DEFAULT_SCENARIOS))
    ap.add_argument("--heuristics", type=router_name, nargs="+", default=None, help="default: the suite's list")
    ap.add_argument("--checkpoints", type=name_path, nargs="+", default=[], metavar="NAME=PATH",
                    help="learned routers to compare with the heuristics (gap to the best heuristic; never a guide)")
    ap.add_argument("--guides", nargs="+", default=[], metavar="GUIDE[:RATIO[:FEATURE[:LOAD[:LIGHT_LOAD]]]]",
                    help="observation guides acting alone (agents/nets.py), compared with the heuristics")
    ap.add_argument("--seeds", type=validation_seed, nargs="+", default=[1000, 1001, 1002, 1003])
    ap.add_argument("--requests", type=positive_int, default=1000,
                    help="per episode at 4 instances (scaled as the suite)")
    ap.add_argument("--jobs", type=positive_int, default=1)
    ap.add_argument("--out", type=out_file, default=None, help="also write the table (markdown) here, and\
 the numbers to <out>.json")
    a = ap.parse_args(argv)
    a.jobs = cap_jobs(a.jobs, ap.prog)
    with usage_errors(ap):
        ckpts = named_paths(ap, a.checkpoints)
        table = run(a.env, a.scenarios, a.seeds, a.requests, a.jobs, a.heuristics, ckpts,
                    None if a.out is None else a.out.with_suffix(".json"), a.guides)
    text = markdown(table)
    stateless = {n: {p: v for p, v in t.items() if kind(p) == "stateless"} for n, t in table.items()}
    text += (f"\n\nbest single guide (worst-case mean gap, then mean gap): {choose(table)}; "
             f"stateless: {choose(stateless)}")
    print(text)
    if a.out is not None:
        write_text(a.out, text + "\n")


if __name__ == "__main__":
    main()
