"""``llmsim-reproduce prefix``: the KV-reuse study (not a paper; the expectations are the study's own).

Three parts, all on one homogeneous cluster type (setup.py):

1. **Hit rate vs the published figure.** The Mooncake conversation trace has 36.6 % of its 512-token blocks as
   hits with an infinite cache. We report the workload-level ideal (``ideal_prefix_hit_rate``, block- and
   token-weighted), the engine's hit rate with an unbounded KV cache on one instance, and with the profile's own
   capacity on 1 and 4 instances (round robin vs prefix-aware).
2. **Routing comparison.** TTFT, throughput and cluster hit rate of six routers on the Mooncake trace (jittered
   within its 3 s buckets, rate-scaled) and on ``conf/workload/multi_turn.yaml``, on 4 and 16 instances, at a load
   chosen by a short round-robin rate scan (setup.choose_rate).
3. **Verdicts** (claims.py, page.py): who wins where, and the row-level expectations.

Sizes (experiments/harness/sizes.py): ``full``, ``quick`` (a 1,200 s window of the trace, fewer multi-turn requests,
one seed), ``tiny`` (seconds). Writes results.json and results.md (the page copied to
docs/results/prefix_caching.md) into the output directory.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from experiments.harness.claims import stamp
from experiments.harness.pages import run_command, write_results
from experiments.harness.pool import run_cells, say
from experiments.harness.sizes import pick, seeds_setting
from experiments.studies.prefix.claims import claims
from experiments.studies.prefix.page import markdown
from experiments.studies.prefix.setup import (
    GPU,
    MODEL,
    SIZES,
    Size,
    choose_rate,
    context_limits,
    hit_cells,
    ideal_figures,
    mean_rows,
    route_cells,
    run_cell,
    scan_cells,
)


def simulate_all(sz: Size, jobs: int, progress: bool) -> dict[str, Any]:
    """Phase 1: the rate scan and part 1's runs together; phase 2: the routing comparison at the chosen loads."""
    first = run_cells(run_cell, scan_cells(sz) + hit_cells(sz), jobs, progress, "prefix scan + hit rate")
    scan = [r for r in first if r["exp"] == "scan"]
    chosen, why = {}, {}
    for wl in ("mooncake", "multi_turn"):
        for n in sz.clusters:
            x, reason = choose_rate([r for r in scan if r["workload"] == wl and r["n"] == n])
            chosen[(wl, n)], why[f"{wl}/{n}"] = x, reason
    route = run_cells(run_cell, route_cells(sz, chosen), jobs, progress, "prefix routing")
    return {"scan": scan, "hit": [r for r in first if r["exp"] == "hit"], "route": route,
            "chosen": {f"{wl}/{n}": x for (wl, n), x in chosen.items()}, "why": why}


def run(quick: bool, out_dir: Path, jobs: int = 1, progress: bool = True, size: str | None = None) -> list[dict]:
    """Run every part at the size, write results.json / results.md; the claim rows."""
    name, sz = pick(SIZES, quick, size)
    t0 = time.perf_counter()
    say("prefix", f"size {name}: the trace's ideal hit rates (one pass over its prompt blocks)", progress)
    window = ideal_figures(sz.hit_end, progress=progress) if sz.hit_end else None
    ideal = {"trace": ideal_figures(None, fine=window is None, progress=progress), "window": window,
             "limits": context_limits()}
    sims = simulate_all(sz, max(1, int(jobs)), progress)
    table = mean_rows(sims["route"])
    report = {"size_name": name, "date": dt.datetime.now().isoformat(timespec="seconds"), "size": asdict(sz),
              "model": MODEL, "gpu": GPU,
              "command": run_command(f"experiments.studies.prefix.run(size={name!r}, jobs={jobs})"),
              "jobs": jobs, "ideal": ideal, **sims, "table": [{"workload": k[0], "n": k[1], "label": k[2], **v}
                                                              for k, v in table.items()]}
    report["claims"] = claims(report)
    report["wall_s"] = time.perf_counter() - t0
    write_results(Path(out_dir), report, markdown(report))
    note = (f"{MODEL} on {GPU}; no paper: the expectations are the study's own" +
            ("" if name == "full" else "; NOT the full setting (smaller windows and request counts)"))
    return stamp(report["claims"], seeds_setting(name, len(sz.seeds)), note, out_dir=str(out_dir))


if __name__ == "__main__":  # a part of a study: running it alone would do nothing
    raise SystemExit("python -m experiments.studies.prefix.experiment: a part of the prefix study, not a study; "
                     "run the study with llmsim-reproduce prefix")
