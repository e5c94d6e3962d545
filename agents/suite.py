"""The unseen-traffic suite: ``llmsim-evaluate suite=unseen env=<testbed> checkpoints=[...]``.

Per testbed, conf/suite/<testbed>.yaml lists scenarios the routers were not trained on (other rates, length mixes,
real trace windows, bursts, cluster sizes, hardware). Each is an env config: the env group's with the suite's
``base`` and the scenario's ``env`` merged on top. Every policy (the checkpoints given and every heuristic that
applies) runs on every scenario over the same test seeds (2000 on), so they are paired: same requests, same seeds.
The reference of a scenario is the best heuristic on the suite's primary metric, chosen on those seeds; gains over
it get a bootstrap interval (llmsim.agents.suite_stats), learned policies get the must-hold bars' verdicts, and
suite.json / suite.md / suite.png are written (llmsim.agents.suite_report). A scenario whose trace file is absent
is skipped with the reason; a checkpoint that cannot run on a scenario (another observation layout) is recorded as
such, and misses every bar there. All episodes of all scenarios share one pool of ``jobs`` workers.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from llmsim.agents.episodes import Task, check_policy, policy_env_cfg, run_tasks
from llmsim.agents.seeds import TEST_SEED0, resolve_seeds, seed_splits
from llmsim.agents.suite_config import (
    SuiteChoice,
    SuiteFile,
    choose_size,
    chosen_scenarios,
    load_suite_file,
    merge,
    trace_files,
)
from llmsim.agents.suite_report import write_suite
from llmsim.agents.suite_stats import bar_gains, bar_verdict, scenario_result
from llmsim.errors import ConfigError

WHOLE_WINDOW = 10**7  # requests per episode when a trace window runs whole (the env takes what the window holds)


@dataclass
class ScenarioRun:
    """A scenario ready to run: its env config and paired seeds."""

    name: str
    about: str
    env: dict[str, Any]
    seeds: list[int]


def build_scenarios(env_base: Mapping[str, Any], suite: SuiteFile,
                    choice: SuiteChoice) -> tuple[list[ScenarioRun], dict[str, str]]:
    """The chosen scenarios as env configs with their seeds, and the skipped ones with the reason."""
    size = choose_size(suite, choice)
    runs, skipped = [], {}
    for name, sc in chosen_scenarios(suite, choice.only).items():
        env = merge(merge(env_base, suite.base), sc.env)
        if sc.trace:
            env["num_requests"] = size.trace_requests or WHOLE_WINDOW
        else:
            env["num_requests"] = max(1, round(size.num_requests * sc.requests_scale))
        missing = [p for p in trace_files(env) if not Path(p).is_file()]
        if missing:
            skipped[name] = (f"trace file {missing[0]} not found (set LLMSIM_TRACES to the folder holding "
                             "azure_llm_2023/ and mooncake/)")
            continue
        seeds = resolve_seeds(size.trace_seeds if sc.trace else size.seeds, TEST_SEED0)
        runs.append(ScenarioRun(name, sc.about, env, seeds))
    if not runs:
        raise ConfigError(f"suite: no scenario left to run ({'; '.join(f'{k}: {v}' for k, v in skipped.items())})")
    return runs, skipped


def check_scenario(run: ScenarioRun, specs: Sequence[Any]) -> tuple[list[Any], dict[str, dict], dict[str, str]]:
    """The specs that run on this scenario, their descriptions by label, and the checkpoints that cannot (reason).
    A heuristic that fails here is a suite file error and stops the suite."""
    ok, described, incompatible = [], {}, {}
    for spec in specs:
        try:
            desc = check_policy(run.env, spec, run.seeds[0])
        except ConfigError as e:
            if not isinstance(spec, dict) or spec.get("kind") != "checkpoint":
                raise ConfigError(f"suite scenario {run.name}: {e}") from None
            incompatible[str(spec.get("label") or spec["path"])] = str(e)
            continue
        if desc["label"] in described:
            raise ConfigError(f"policies: label {desc['label']!r} used twice; give each policy its own label")
        ok.append(spec)
        described[desc["label"]] = desc
    return ok, described, incompatible


def plan(runs: Sequence[ScenarioRun], specs: Sequence[Any],
         progress: bool) -> tuple[list[Task], dict[str, dict], dict[str, dict[str, str]]]:
    """Every (scenario, policy, seed) task in scenario order, the policies' descriptions, and what cannot run."""
    tasks: list[Task] = []
    described: dict[str, dict] = {}
    incompatible: dict[str, dict[str, str]] = {}
    for run in tqdm(runs, desc="checking policies", unit="scenario", file=sys.stderr, disable=not progress,
                    leave=False):
        ok, desc, bad = check_scenario(run, specs)
        described.update({k: v for k, v in desc.items() if k not in described})
        if bad:
            incompatible[run.name] = bad
        for spec in ok:
            cfg = policy_env_cfg(run.env, spec)
            tasks += [Task(len(tasks) + i, spec, cfg, s, 0, run.name) for i, s in enumerate(run.seeds)]
    return tasks, described, incompatible


def analyse(rows: Sequence[Mapping[str, Any]], runs: Sequence[ScenarioRun], suite: SuiteFile,
            heuristics: Sequence[str], learned: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per scenario results (reference, stats, gains) and, per learned policy, the bars' verdicts."""
    by_scen = {r.name: [x for x in rows if x.get("scenario") == r.name] for r in runs}
    labels = [*learned, *heuristics]
    results = {name: scenario_result(rs, heuristics, labels, suite.primary, suite.bootstrap, suite.bootstrap_seed,
                                     name) for name, rs in by_scen.items()}
    refs = {name: res["reference"] for name, res in results.items()}
    bars = {}
    for p in learned:
        verdicts = []
        for bar in suite.bars:
            b = bar.model_dump()
            per = bar_gains(by_scen, p, b, heuristics, refs)
            verdicts.append({**bar_verdict(b, per), "metric": bar.metric, "at_least_pct": bar.at_least_pct,
                             "scope": bar.scope, "gains": per})
        bars[p] = verdicts
    return results, bars


def run_suite(env_base: Mapping[str, Any], choice: SuiteChoice, checkpoints: Sequence[Any],
              heuristics: Sequence[Any], jobs: int, out_dir: Path, *, progress: bool = True, plots: bool = True,
              quiet: bool = False, config: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Run the suite of ``env_base``'s testbed and write suite.json / .md / .png to ``out_dir``; returns the rows."""
    t0 = time.perf_counter()
    testbed = str(env_base.get("id", "routing"))
    suite = load_suite_file(testbed)
    runs, skipped = build_scenarios(env_base, suite, choice)
    if not heuristics:
        raise ConfigError("suite: no heuristics to choose the reference from (baselines=none); give some")
    specs = [*checkpoints, *heuristics]
    if progress:
        print(f"llmsim-evaluate suite={choice.name} ({choice.size}): {testbed}, {len(runs)} scenarios"
              f"{f' ({len(skipped)} skipped)' if skipped else ''}, {len(specs)} policies, jobs={jobs}",
              file=sys.stderr, flush=True)
    tasks, described, incompatible = plan(runs, specs, progress)
    rows = run_tasks(tasks, jobs, progress, desc=f"suite {testbed}")
    learned = [d["label"] for d in described.values() if d["kind"] != "router"]
    heur = [d["label"] for d in described.values() if d["kind"] == "router"]
    results, bars = analyse(rows, runs, suite, heur, learned)
    seeds = sorted({s for r in runs for s in r.seeds})
    body = {"suite": choice.name, "size": choice.size, "testbed": testbed, "primary": suite.primary,
            "better": suite.better, "slo_metric": suite.slo_metric, "seeds": seeds, "seed_splits": seed_splits(seeds),
            "scenarios": [{"name": r.name, "about": r.about, "env": r.env, "seeds": r.seeds} for r in runs],
            "skipped": skipped, "incompatible": incompatible, "policies": list(described.values()),
            "learned": learned, "heuristics": heur, "not_applicable": suite.not_applicable, "results": results,
            "bars": bars, "jobs": jobs, "wall_s": time.perf_counter() - t0, "config": dict(config or {}),
            "rows": rows}
    md = write_suite(body, out_dir, plots=plots)
    if not quiet:
        print(md, end="")
    return rows
