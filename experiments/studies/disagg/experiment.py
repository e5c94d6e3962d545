"""``llmsim-reproduce disagg``: prefill/decode disaggregation vs colocation at equal GPU count (setup.py says what
is measured and how; claims.py and page.py what comes of it).

Sizes (experiments/harness/sizes.py): ``full``, ``quick`` (N = 4 only, 1 seed, fewer requests), ``tiny`` (seconds).
Writes results.json and results.md (the page copied to docs/results/disaggregation.md) into the output directory.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from experiments.harness.claims import stamp
from experiments.harness.pages import run_command, write_results
from experiments.harness.sizes import pick, seeds_setting
from experiments.studies.disagg.claims import claims
from experiments.studies.disagg.page import markdown
from experiments.studies.disagg.setup import (
    DEFAULT_LINK,
    GPU,
    LINK_VARIANTS,
    MODEL,
    POLICIES,
    ROUTER,
    SIZES,
    Size,
    best_layouts,
    grid_rows,
    lengths_path,
    run_cell,
    search_jobs,
    search_rows,
    sharegpt_pairs,
    unloaded_slos,
)
from llmsim.planning.progress import SearchProgress
from llmsim.planning.runner import Runner


def simulate_all(sz: Size, jobs: int, progress: bool) -> dict[str, Any]:
    """Calibrate the SLOs, run the grid, every capacity search, then the link / transfer variants."""
    shown = SearchProgress("llmsim-reproduce disagg", enabled=progress)
    shown.phase("calibrating the SLOs on the unloaded colocated cluster")
    slos, unloaded = unloaded_slos(sz)
    arms = [(n, lay, pol, DEFAULT_LINK) for n, lays in sz.layouts.items() for lay in lays for pol in POLICIES]
    with shown, Runner(max(1, int(jobs)), run_cell, progress=shown) as runner:
        unit = [unloaded["p90_ttft_ms"], unloaded["p90_tpot_ms"]]
        shown.phase("the rate grid")
        grid = grid_rows(runner, sz, slos, unit)
        main_jobs = search_jobs(sz, slos, arms, tuple(slos), unit)
        shown.phase(f"{len(main_jobs)} capacity searches")
        runner.drive(main_jobs)
        caps = search_rows(main_jobs)
        best = best_layouts(caps)
        link_arms = [(n, lay, pol, lk) for (n, pol), lay in sorted(best.items()) if n == min(sz.layouts)
                     and pol in sz.link_policies for lk in LINK_VARIANTS]
        link_jobs = search_jobs(sz, slos, link_arms, ("base",) if "base" in slos else tuple(slos)[:1], unit)
        shown.phase(f"{len(link_jobs)} KV link searches")
        runner.drive(link_jobs)
        caps += search_rows(link_jobs)
        keys = ("n", "layout", "policy", "rate", "seed", "link", "transfer")
        errors = [{k: c[k] for k in keys} | {"error": r["error"]}
                  for c, r in ((json.loads(k), v) for k, v in runner.cache.items()) if r.get("error")]
        total_runs = runner.runs
    return {"slos": slos, "unloaded": unloaded, "grid": grid, "capacity": caps,
            "best": {f"{n}/{pol}": lay for (n, pol), lay in best.items()}, "errors": errors, "runs": total_runs}


def run(quick: bool, out_dir: Path, jobs: int = 1, progress: bool = True, size: str | None = None) -> list[dict]:
    """Run every part at the size, write results.json / results.md; the claim rows."""
    name, sz = pick(SIZES, quick, size)
    t0 = time.perf_counter()
    sims = simulate_all(sz, jobs, progress)
    pairs = sharegpt_pairs()
    report = {"size_name": name, "size": asdict(sz) | {"layouts": {str(k): v for k, v in sz.layouts.items()}},
              "model": MODEL, "gpu": GPU, "router": ROUTER,
              "command": run_command(f"experiments.studies.disagg.run(size={name!r}, jobs={jobs})"), "jobs": jobs,
              "lengths": {"path": str(lengths_path()), "pairs": len(pairs),
                          "mean_prompt": float(np.mean([p for p, _ in pairs])),
                          "mean_output": float(np.mean([o for _, o in pairs]))}, **sims}
    report["claims"] = claims(report)
    report["wall_s"] = time.perf_counter() - t0
    write_results(Path(out_dir), report, markdown(report))
    note = (f"{MODEL} on {GPU}, ShareGPT lengths, Poisson; llmsim's own SLOs, not DistServe's testbed" +
            ("" if name == "full" else "; NOT the full setting (fewer layouts, requests and seeds)"))
    return stamp(report["claims"], seeds_setting(name, len(sz.seeds)), note, out_dir=str(out_dir))


if __name__ == "__main__":  # a part of a study: running it alone would do nothing
    raise SystemExit("python -m experiments.studies.disagg.experiment: a part of the disagg study, not a study; "
                     "run the study with llmsim-reproduce disagg")
