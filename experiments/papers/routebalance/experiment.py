"""``llmsim-reproduce routebalance``: RouteBalance evaluated on the simulator's 13-instance testbed.

Runs the paper's section 6 experiments on the labels of ``setup.py``: the quality / cost / latency frontier over
RouteBalance's weight sweep and the baselines' knob sweeps at every arrival rate (Fig. 2, Table 3), mean E2E vs
rate against enhanced (concurrent) and as-published (serial) BEST-Route, the four-arm isolation (Table 7) plus
learned-predictor arms where registered, non-stationary arrivals and tails (Table 13), extra seeds and a
slower-72B sensitivity run; also the budget study and the batching ablation with the kNN estimator; then gives
each headline claim a verdict (claims.py, study_claims.py).

Sizes (experiments/harness/sizes.py): ``full`` (N = 3,534 per cell, 7 rates), ``quick`` (1,200 requests, 4
rates), ``tiny`` (seconds). Sections: ``main`` (the frontier and everything with it), ``budget``, ``batching``; all
by default, a subset with ``--sections budget,batching`` (``run(sections=...)``). Writes results.json, results.md
and routebalance.png (main only) into the output directory.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from experiments.harness.claims import stamp
from experiments.harness.pages import write_results
from experiments.harness.pool import say
from experiments.harness.sizes import pick
from experiments.papers.routebalance import claims as C
from experiments.papers.routebalance import setup as S
from experiments.papers.routebalance.cells import Results, load_predictors, make_cells, simulate_cells
from experiments.papers.routebalance.page import markdown, plot
from experiments.papers.routebalance.study_claims import batching_claims, budget_claims
from llmsim.errors import ConfigError


def sections_of(value: str | None) -> tuple[str, ...]:
    """``--sections``: a comma-separated subset of main, budget, batching (default all)."""
    if not value:
        return S.SECTIONS
    got = tuple(x.strip() for x in value.split(",") if x.strip())
    bad = [x for x in got if x not in S.SECTIONS]
    if bad or not got:
        raise ConfigError(f"--sections={value!r}: expected a comma-separated subset of {list(S.SECTIONS)}")
    return tuple(x for x in S.SECTIONS if x in got)


def claims(R: Results, sz: S.Size, sections: tuple[str, ...] = S.SECTIONS) -> list[dict[str, Any]]:
    """Every claim of the sections that ran."""
    rates = sorted(sz.rates)
    r12 = 12.0 if 12.0 in rates else rates[0]
    iso = sorted(set(sz.iso_rates) | ({18.0} if sz.nonstat else set()))
    rows = []
    if "main" in sections:
        rows += (C.quality_claims(R, r12) + C.cost_claims(R) + C.latency_claims(R, rates) + C.iso_claims(R, iso)
                 + C.mix_tail_claims(R, rates) + C.nonstat_claims(R) + C.dominance_claims(R, r12))
    if "budget" in sections:
        rows += budget_claims(R, sz)
    if "batching" in sections:
        rows += batching_claims(R, sz)
    return rows


def run(quick: bool, out_dir: Path, jobs: int = 1, progress: bool = True, size: str | None = None,
        sections: str | None = None) -> list[dict]:
    """Run every cell of the size and sections, write results.json / results.md / routebalance.png; the rows."""
    name, sz = pick(S.SIZES, quick, size)
    secs = sections_of(sections)
    out_dir = Path(out_dir)
    t0 = time.perf_counter()
    say("routebalance", f"size {name}, sections {','.join(secs)}: fitting the baselines' tables once", progress)
    S.ap_table()  # fit once before forking
    if "main" not in secs:
        S.knn_estimator()
    results = simulate_cells(make_cells(name, secs), max(1, int(jobs)), progress)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "runs.json").write_text(json.dumps(results, default=str) + "\n")  # kept if the claims step fails
    R = Results(results, sz.seeds[0])
    rows = stamp(claims(R, sz, secs), f"{name} size (N = {sz.requests} per cell, seed {sz.seeds[0]}, sections "
                 f"{','.join(secs)})", "simulated 13-instance testbed, parametric task model, oracle estimator unless "
                 "stated (docs/results/routebalance.md)")
    report = {"size_name": name, "size": asdict(sz), "sections": list(secs), "claims": rows,
              "wall_s": time.perf_counter() - t0, "predictors": load_predictors() or "imported", "runs": results}
    write_results(out_dir, report, markdown(report, R, sz, secs))
    if "main" in secs:
        plot(R, sz, out_dir / "routebalance.png")
    return rows
