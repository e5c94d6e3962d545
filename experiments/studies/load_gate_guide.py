"""Choose the WorkloadRouter guide's load gate on VALIDATION seeds: a balancer while the cluster is light, the split
with its load spill once requests queue, at two episode lengths.

    python -m experiments.studies.load_gate_guide --jobs 2 --out docs/results/load_gate_guide.md

The spill split (``dedicated_small_large`` with the load spill) is far ahead once queues build (1,000 requests per
episode at the training rate) and 5-20 % behind the load balancers while every request is admitted at once (400
requests per episode, light rates): ``load_gated`` (llmsim/routing/gated.py) uses a balancer at or below a cluster
load and the split above it. Each gate runs with the heuristics that were ever best on the suite's seed-drawn
scenarios and with the split alone; the rule, as for the spill: the smallest worst-case gap of the mean to the best
heuristic over both lengths, then the smallest mean gap. Test seeds (>= 2000) are refused.
"""

from __future__ import annotations

import argparse
from typing import Any

from experiments.harness.pages import out_file, write_text
from experiments.harness.pool import cap_jobs
from experiments.harness.timing import positive_int
from experiments.studies.guide_choice import markdown, run
from experiments.studies.spill_load import REFERENCES, SCENARIOS, choose
from experiments.studies.validation import usage_errors, validation_seed

SPLIT = {"name": "dedicated_small_large", "kwargs": {"within": "least_latency", "spill": 1.0, "spill_load": 1.5}}
LIGHT = ("least_work_left", "min_min")  # the balancers the observation carries a pick of (GUIDE_COLUMNS)
# (feature, below): queued requests per seat (0: nobody waits), or busy seats
GATES = (*(("waiting_per_seat", b) for b in (0.0, 0.01, 0.03, 0.1)),
         *(("running_per_seat", b) for b in (0.05, 0.1, 0.15, 0.25)))


def candidates() -> list[Any]:
    gated = [{"name": "load_gated", "kwargs": {"light": light, "busy": SPLIT, "feature": f, "below": b},
              "label": f"gate {light} {f} {b}"} for light in LIGHT for f, b in GATES]
    return [*REFERENCES, {**SPLIT, "label": "gate none (split alone)"}, *gated]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m experiments.studies.load_gate_guide",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=validation_seed, nargs="+", default=[1000, 1001, 1002])
    ap.add_argument("--requests", type=positive_int, nargs="+", default=[400, 1000])
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    ap.add_argument("--jobs", type=positive_int, default=1)
    ap.add_argument("--out", type=out_file, default=None, help="also write the tables (markdown) here")
    args = ap.parse_args(argv)
    args.jobs = cap_jobs(args.jobs, ap.prog)
    with usage_errors(ap):
        tables = {n: run("workload_router", args.scenarios, args.seeds, n, args.jobs, candidates())
                  for n in args.requests}
    text = "\n\n".join(f"### {n} requests per episode\n\n{markdown(t)}" for n, t in tables.items())
    text += "\n\n| gate | worst mean gap (both lengths) | mean gap |\n|---|---|---|\n" + "\n".join(
        f"| {p} | {w:+.1f} | {m:+.1f} |" for p, w, m in choose(tables, prefix="gate "))
    print(text)
    if args.out is not None:
        write_text(args.out, text + "\n")


if __name__ == "__main__":
    main()
