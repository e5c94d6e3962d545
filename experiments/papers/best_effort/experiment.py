"""``llmsim-reproduce best_effort``: Learned Best-Effort LLM Serving end to end on the simulator.

Trains the hard-deadline router, fine-tunes it with soft deadlines (or takes existing runs: ``--from-runs
hard=DIR,soft=DIR``), then measures the paper's claims against static single-size serving on identical requests
(claims.py). Sizes (experiments/harness/sizes.py): ``full`` (the experiment presets' steps, the paper's grid),
``quick``, ``tiny`` (a seconds-long smoke run). Writes the training runs, results.json, results.md and
availability.png into the output directory.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from experiments.harness.claims import stamp
from experiments.harness.pages import write_results
from experiments.harness.pool import say
from experiments.harness.sizes import pick
from experiments.harness.training import checkpoint_dir, learning_curve
from experiments.harness.zoo_routers import instead_of, policy_lines, shipped
from experiments.papers.best_effort import claims as C
from experiments.papers.best_effort.page import markdown, plot_sweep
from experiments.papers.best_effort.setup import SIZES, make_cells, simulate_cells, train_both
from llmsim.errors import ConfigError


def same_requests(results: list[dict[str, Any]]) -> bool:
    """Whether every policy saw the same arrivals on each (workload, seed): a check on the comparison."""
    first: dict[tuple[Any, int], Any] = {}
    for c in results:
        key = (c["workload"], c["seed"])
        if first.setdefault(key, (c["arrival0"], c["task"])) != (c["arrival0"], c["task"]):
            return False
    return True


def given_runs(from_runs: Any) -> dict[str, Path]:
    """The two runs of ``--from-runs``: exactly hard and soft, so a typo or a missing one is not a crash later."""
    if not isinstance(from_runs, dict) or set(from_runs) != {"hard", "soft"}:
        shown = ",".join(f"{k}={v}" for k, v in from_runs.items()) if isinstance(from_runs, dict) else from_runs
        raise ConfigError(f"--from-runs: best_effort expects hard=DIR,soft=DIR, got {shown!r}")
    return {k: Path(v) for k, v in from_runs.items()}


def use_zoo(ckpts: dict[str, Path], runs: dict[str, Path], size: str) -> dict[str, str]:
    """quick / tiny: the zoo's best_effort router replaces this run's own hard-deadline router (a smoke run) when
    the zoo has it; one line per learned router saying what its own run learned and what the claims measure."""
    zoo = shipped("best_effort") if size != "full" else None
    own = "the claims measure this run's own checkpoint"
    lines = policy_lines({"hard-deadline router": runs["hard"]}, instead_of(zoo, "best_effort") if size != "full"
                         else own)
    lines |= policy_lines({"soft-deadline router": runs["soft"]}, own + " (fine-tuned from this run's hard one)")
    if zoo is not None:
        ckpts["hard"] = zoo.checkpoint
    for line in lines.values():
        say("best_effort", line)
    return lines


def run(quick: bool, out_dir: Path, jobs: int = 1, progress: bool = True, from_runs: dict | None = None,
        size: str | None = None) -> list[dict]:
    """Train (unless ``from_runs`` = {"hard": run dir, "soft": run dir}), measure, write out_dir; the claims."""
    name, sz = pick(SIZES, quick, size)
    out_dir = Path(out_dir)
    t0 = time.perf_counter()
    if from_runs:
        runs = given_runs(from_runs)
    else:
        say("best_effort", f"size {name}: training the hard-deadline router, then the soft one", progress)
        runs = train_both(sz, out_dir, progress)
    t1 = time.perf_counter()
    ckpts = {k: checkpoint_dir(runs[k]) for k in ("hard", "soft")}
    learned = {} if from_runs else use_zoo(ckpts, runs, name)
    results = simulate_cells(make_cells(sz, ckpts), max(1, int(jobs)), progress)
    sweep, windows, hw = C.sweep_table(results, sz.rates), C.window_table(results), C.hw_table(results)
    claims = C.availability_claims(sweep, sz.rates) + C.window_claims(windows) + C.hw_claims(hw) + \
        [C.soft_claim(sweep, sz.rates)]
    note = (f"existing runs ({', '.join(f'{k}={v}' for k, v in runs.items())}), " if from_runs else "") + \
        f"the {name} evaluation grid: rates {list(sz.rates)} req/s"
    claims = stamp(claims, "runs" if from_runs else name, note, seeds=list(sz.seeds),
                   **({"learned": list(learned.values())} if learned else {}))
    report = {"size_name": name, "size": asdict(sz), "runs": {k: str(v) for k, v in runs.items()},
              "checkpoints": {k: str(v) for k, v in ckpts.items()}, "claims": claims, "sweep": sweep,
              "windows": windows, "hardware_utility": hw,
              "learning_curves": {k: learning_curve(v) for k, v in runs.items()},
              "same_requests": same_requests(results),
              "wall_s": {"train": t1 - t0, "evaluate": time.perf_counter() - t1}}
    write_results(out_dir, report, markdown(report))
    plot_sweep(report["sweep"], tuple(report["size"]["rates"]), out_dir / "availability.png")
    return claims
