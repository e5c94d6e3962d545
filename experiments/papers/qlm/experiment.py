"""``llmsim-reproduce qlm``: QLM ("One Queue Is All You Need") evaluated on the simulator.

Runs the paper's section 8 experiments on the workloads of ``experiments/papers/qlm/setup.py`` (W_A multi-model, W_B
single-model, W_C mega prompts, a heterogeneous A10/A100 cluster), against vLLM (FCFS, round robin), EDF and
SHEPHERD on identical requests and clusters, plus QLM with each operation removed, the SLO-relaxation sweep and
the wall time of a 10,000-request QLM run; then gives each headline claim a verdict (claims.py).

Sizes (experiments/harness/sizes.py): ``full`` (3 seeds), ``quick`` (1 seed, coarse grids), ``tiny`` (seconds).
Writes results.json, results.md and qlm.png into the output directory.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from experiments.harness.claims import stamp
from experiments.harness.pages import write_results
from experiments.harness.pool import run_cells, say
from experiments.harness.sizes import pick, seeds_setting
from experiments.papers.qlm import claims as C
from experiments.papers.qlm.page import markdown, plot
from experiments.papers.qlm.setup import ABLATIONS, BASELINES, SIZES, Cell, Size, refused_ops, run_cell

HETERO = ("qlm", "qlm_no_load_balancing", "vllm", "random")
METRICS = ("attainment", "att_ls", "att_batch", "throughput", "goodput", "model_swaps", "warm_swaps", "wall_s",
           "evicted", "parked", "prefetched")


# ---------------------------------------------------------------------- the grid
def make_cells(name: str, refused: tuple[str, ...]) -> list[Cell]:
    """Every experiment's cells at a size; a QLM ablation of only refused operations is a placeholder (seed -1)."""
    sz = SIZES[name]
    grid: list[tuple[str, tuple[str, ...], tuple[float, ...]]] = [
        ("wa_tail", BASELINES, sz.tail_shares), ("wa_ls", BASELINES, sz.ls_shares[1:]),
        ("wb_rate", BASELINES, sz.wb_rates), ("wb_ls", BASELINES, sz.ls_shares[1:]),
        ("wc", BASELINES, sz.mega_shares[1:]), ("hetero", HETERO, sz.a10_shares),
        ("abl_wa", ABLATIONS, (0.0,)), ("abl_wb", ABLATIONS, (0.0,)),
        ("relax", BASELINES, tuple(x for x in sz.slo_scales if x != 1.0)), ("cache0", ("qlm", "vllm"), (0.0,))]
    cells = [Cell("speed", "qlm", 0.0, sz.seeds[0], name, refused)]
    for exp, labels, xs in grid:
        for x in xs:
            for lab in labels:
                if lab.startswith("qlm_no_") and set(lab[len("qlm_no_"):].split("+")) <= set(refused):
                    cells.append(Cell(exp, lab, x, -1, name))  # a placeholder: recorded as missing
                    continue
                cells += [Cell(exp, lab, x, s, name, refused if lab.startswith("qlm") else ()) for s in sz.seeds]
    return cells


def simulate_cells(cells: list[Cell], jobs: int, progress: bool) -> list[dict[str, Any]]:
    """The placeholders as error rows, then every cell simulated (the slowest submitted first)."""
    todo = [c for c in cells if c.seed >= 0]
    out = [{**asdict(c), "error": "an operation the QLM router refused"} for c in cells if c.seed < 0]
    cost = {"speed": 100, "shepherd": 10}
    todo.sort(key=lambda c: -(cost.get(c.exp, 1) * cost.get(c.label, 1)))
    return out + run_cells(run_cell, todo, jobs, progress, "qlm")


# ---------------------------------------------------------------------- aggregation
def aggregate(results: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """{exp: {label: {x: {metric: mean over seeds, 'seeds': n, 'error': ...}}}}."""
    agg: dict[str, Any] = {}
    for r in results:
        agg.setdefault(r["exp"], {}).setdefault(r["label"], {}).setdefault(str(r["x"]), []).append(r)
    out: dict[str, Any] = {}
    for exp, labs in agg.items():
        out[exp] = {}
        for lab, xs in labs.items():
            out[exp][lab] = {}
            for x, rs in xs.items():
                ok = [r for r in rs if "error" not in r]
                d = {m: C.mean([r.get(m, math.nan) for r in ok]) for m in METRICS}
                d["seeds"] = len(ok)
                if len(ok) < len(rs):
                    d["error"] = next(r["error"] for r in rs if "error" in r)
                out[exp][lab][x] = d
    return out


def view(agg: dict[str, Any], sz: Size) -> dict[str, dict[str, dict[float, dict[str, float]]]]:
    """Per experiment {label: {x: metrics}}, with each sweep's default point taken from the run that has it (the
    default settings of W_A (tail / LS / relax / W_C) and W_B (LS / ablation) are shared between experiments)."""
    def get(exp: str, lab: str, x: float) -> dict[str, float]:
        return agg.get(exp, {}).get(lab, {}).get(str(float(x)), {"error": "not run"})

    ls0, tail0, rate0 = sz.ls_shares[0], sz.tail_shares[0], sz.wb_rates[0]
    wa0 = {lab: get("wa_tail", lab, tail0) for lab in BASELINES}
    wb0 = {lab: get("wb_rate", lab, rate0) for lab in BASELINES}
    v: dict[str, Any] = {
        "wa_tail": {lab: {x: get("wa_tail", lab, x) for x in sz.tail_shares} for lab in BASELINES},
        "wa_ls": {lab: {x: (wa0[lab] if x == ls0 else get("wa_ls", lab, x)) for x in sz.ls_shares}
                  for lab in BASELINES},
        "wb_rate": {lab: {x: get("wb_rate", lab, x) for x in sz.wb_rates} for lab in BASELINES},
        "wb_ls": {lab: {x: (wb0[lab] if x == ls0 else get("wb_ls", lab, x)) for x in sz.ls_shares}
                  for lab in BASELINES},
        "wc": {lab: {x: (wa0[lab] if x == 0.0 else get("wc", lab, x)) for x in sz.mega_shares}
               for lab in BASELINES},
        "hetero": {lab: {x: get("hetero", lab, x) for x in sz.a10_shares} for lab in HETERO},
        "relax": {lab: {x: (wa0[lab] if x == 1.0 else get("relax", lab, x)) for x in sz.slo_scales}
                  for lab in BASELINES},
    }
    v["cache0"] = {lab: {0.0: get("cache0", lab, 0.0)} for lab in ("qlm", "vllm")}
    for exp, base in (("abl_wa", wa0), ("abl_wb", wb0)):
        v[exp] = {"qlm": {0.0: base["qlm"]}, **{lab: {0.0: get(exp, lab, 0.0)} for lab in ABLATIONS}}
    return v


# ---------------------------------------------------------------------- entry point
def run(quick: bool, out_dir: Path, jobs: int = 1, progress: bool = True, size: str | None = None) -> list[dict]:
    """Run every experiment of the size, write results.json / results.md / qlm.png; the claim rows."""
    name, sz = pick(SIZES, quick, size)
    out_dir = Path(out_dir)
    t0 = time.perf_counter()
    say("qlm", f"size {name}: probing which QLM operations the router supports", progress)
    refused = refused_ops()
    results = simulate_cells(make_cells(name, refused), max(1, int(jobs)), progress)
    speed = next(r for r in results if r["exp"] == "speed")
    speed["instances"] = sz.speed_instances
    tables = view(aggregate([r for r in results if r["exp"] != "speed"]), sz)
    claims = C.wa_claims(tables, sz) + C.wb_claims(tables, sz) + C.wc_hetero_claims(tables, sz) + \
        C.ablation_claims(tables) + C.relax_speed_claims(tables, speed)
    claims = stamp(claims, seeds_setting(name, len(sz.seeds)), "simulated A100/A10 cluster; every workload, SLO and "
                   "cluster constant is the reproducer's own (docs/results/qlm.md)")
    report = {"size_name": name, "size": asdict(sz), "refused_ops": list(refused), "claims": claims,
              "tables": {e: {lab: {str(x): c for x, c in cells.items()} for lab, cells in t.items()}
                         for e, t in tables.items()},
              "speed": speed, "wall_s": time.perf_counter() - t0, "runs": results}
    write_results(out_dir, report, markdown(report))
    plot(tables, out_dir / "qlm.png")
    return claims
