"""Choose the dedicated split's spill rule on VALIDATION seeds: ratio and load, at two episode lengths.

    python -m experiments.studies.spill_load --jobs 2 --out docs/results/spill_load.md
    python -m experiments.studies.spill_load --light-load --requests 2000 --jobs 2   # a light request's own load
    python -m experiments.studies.spill_load --queued --requests 400 1000 2000 --jobs 2   # no spill into a queue
    python -m experiments.studies.spill_load --by-size --requests 2000 1000 400 --jobs 2  # the spill by cluster size
    python -m experiments.studies.spill_load --batch-seats --requests 2000 1000 --jobs 2  # seats the KV cache holds
    python -m experiments.studies.spill_load --by-work --requests 2000 1000 --jobs 2  # groups sized by the work
    python -m experiments.studies.spill_load --heavy-share --requests 2000 1000 --jobs 2  # balance when mostly heavy
    python -m experiments.studies.spill_load --heavy-share --balance 0.5 --requests 1000 --jobs 2 \
        --checkpoints recent_mix=RUN/best shipped=zoo/workload_router/checkpoint   # learned routers beside them

The spill sends a request to the other group's best instance when (1 + s_other) x ratio x (1 + load x busy) <
1 + s_own (``dedicated_small_large`` with ``within: least_latency``, ``spill``, ``spill_load``; agents/nets.py
``Spill``), s being the request's estimated latency and busy the other instance's share of busy seats. Each
candidate runs with the heuristics that were ever best on the suite's scenarios (guide_choice.py's table), over the
suite's seed-drawn scenarios at 400 and 1,000 requests per episode; the rule: the smallest worst-case gap of the
mean to the best heuristic over both lengths, then the smallest mean gap. Test seeds (>= 2000) are refused.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from experiments.harness.pages import out_file, write_text
from experiments.harness.pool import cap_jobs
from experiments.harness.timing import positive_int
from experiments.studies.guide_choice import LEARNED, markdown, run
from experiments.studies.validation import PROXY_RATES, name_path, named_paths, usage_errors, validation_seed

SCENARIOS = ("rate_0.25x", "rate_0.5x", "rate_0.75x", "training", "rate_1.25x", "rate_1.5x", "rate_2x", "short",
             "long", "bimodal", "burstgpt", "instances_2", "instances_8", "instances_16", "hetero")
REFERENCES = ("least_kv", "least_work_left", "decode_balancer", "min_min", "max_capacity", "dedicated_small_large")
# (ratio, load) candidates; (1.1, 0) is the spill guide before the load
RULES = ((1.1, 0.0), (1.0, 0.5), (1.0, 1.0), (1.0, 1.5), (1.0, 2.0), (1.1, 0.5), (1.1, 1.0))


# with --light-only: the shipped rule, and rules that let only the light requests spill (``spill_heavy: false``)
LIGHT_ONLY_RULES = ((1.0, 0.0), (1.0, 0.5), (1.0, 1.0), (1.0, 1.5), (1.1, 0.0))


# with --light-load: (load of a light request's spill, of a heavy one's), ratio 1.0, seats that count the KV cache
LIGHT_LOAD_RULES = ((1.5, 1.5), (3.0, 3.0), (6.0, 1.5), (6.0, 3.0), (4.0, 2.0), (10.0, 3.0), (10.0, 1.5),
                    (20.0, 1.5), (10.0, 2.0), (20.0, 2.0))


# with --queued: (ratio, load) of rules that never spill into an instance where requests wait, KV-counted seats
QUEUED_RULES = ((1.0, 0.0), (1.1, 0.0), (1.0, 0.5), (1.0, 1.5))


# the shipped router's guide: the split by estimated latency with the load spill
SHIPPED = {"within": "least_latency", "spill": 1.0, "spill_load": 1.5}


# with --by-size: the split without a spill, with the shipped one, and with it only where each group has two
# instances or more, and two balancers, at 2, 4 and 8 instances
BY_SIZE_SCENARIOS = ("instances_2", "training", "instances_8")


# with --batch-seats: the shipped spill (by cluster size) with an instance's seats capped at the batch its KV cache
# holds, with and without a spill into a queue; on the seed-drawn scenarios and the conversation-length proxies
# (experiments/studies/validation.py PROXY_RATES), which stand for the suite's conversation windows
BATCH_SCENARIOS = (*SCENARIOS, *PROXY_RATES)


# with --heavy-share: the shipped spill balancing by KV demand while the recent heavy share is above each of these
HEAVY_SHARES = (0.5, 0.6, 0.7, 0.8)


def candidates(light_only: bool = False, light_load: bool = False, queued: bool = False,
               by_size: bool = False, batch_seats: bool = False, by_work: bool = False,
               heavy_share: bool = False, shares: tuple[float, ...] = HEAVY_SHARES) -> list[Any]:
    split = "dedicated_small_large"
    refs = [*REFERENCES, {"name": split, "kwargs": {"within": "least_work_left"}, "label": "split_lwl"}]
    shipped = {**SHIPPED, "spill_min_group": 2}  # the guide shipped now: the spill by cluster size
    if heavy_share:
        return [*refs, {"name": split, "kwargs": shipped, "label": "spill shipped"},
                *({"name": split, "kwargs": {**shipped, "balance_heavy": h}, "label": f"spill, balance above {h}"}
                  for h in shares)]
    if by_work:
        plain = {"within": "least_latency"}
        return [*refs, {"name": split, "kwargs": plain, "label": "split, no spill"},
                {"name": split, "kwargs": {**plain, "large": "by_work"}, "label": "split by work, no spill"},
                {"name": split, "kwargs": shipped, "label": "spill shipped"},
                {"name": split, "kwargs": {**shipped, "large": "by_work"}, "label": "spill shipped, split by work"}]
    if batch_seats:
        return [*refs, {"name": split, "kwargs": {"within": "least_latency"}, "label": "split, no spill"},
                {"name": split, "kwargs": shipped, "label": "spill shipped"},
                {"name": split, "kwargs": {**shipped, "batch_seats": True}, "label": "spill batch seats"},
                {"name": split, "kwargs": {**shipped, "spill_queued": False}, "label": "spill not into a queue"},
                {"name": split, "kwargs": {**shipped, "batch_seats": True, "spill_queued": False},
                 "label": "spill batch seats, not into a queue"}]
    if by_size:
        return ["min_min", "least_work_left",
                {"name": split, "kwargs": {"within": "least_latency"}, "label": "split, no spill"},
                {"name": split, "kwargs": SHIPPED, "label": "spill shipped"},
                {"name": split, "kwargs": shipped, "label": "spill where groups >= 2"}]
    if queued:  # with the suite's load gate, the best heuristic of the lightest rate at 2,000 requests
        kv = {"within": "least_latency", "kv_aware": True}
        gated = {"name": "load_gated", "label": "gated_min_min_split", "kwargs": {
            "light": "min_min", "feature": "waiting_per_seat", "below": 0.01,
            "busy": {"name": split, "kwargs": SHIPPED}}}
        return [*refs, gated, {"name": split, "kwargs": {**SHIPPED, "kv_aware": True}, "label": "spill shipped"},
                *({"name": split, "kwargs": {**kv, "spill": r, "spill_load": k, "spill_queued": False},
                   "label": f"spill {r} load {k} not into a queue"} for r, k in QUEUED_RULES)]
    if light_load:
        kv = {"within": "least_latency", "spill": 1.0, "kv_aware": True}
        return [*refs, *({"name": split, "kwargs": {**kv, "spill_load": h, "spill_load_light": v},
                          "label": f"spill 1.0 load {h} light {v}"} for v, h in LIGHT_LOAD_RULES)]
    rules = [(r, k, True) for r, k in RULES] if not light_only else [
        (1.0, 1.5, True), *((r, k, False) for r, k in LIGHT_ONLY_RULES)]
    return [*refs, *({"name": split, "kwargs": {"within": "least_latency", "spill": r, "spill_load": k,
                                                "spill_heavy": h},
                      "label": f"spill {r} load {k}" + ("" if h else " light only")} for r, k, h in rules)]


def choose(tables: dict[int, dict[str, dict[str, dict[str, float]]]],
           prefix: tuple[str, ...] = ("spill", LEARNED)) -> list[tuple[str, float, float]]:
    """Per candidate labelled ``prefix...`` (a spill rule or a learned router): (label, worst mean gap over every
    scenario and length, mean gap), best first."""
    rules = [p for p in next(iter(next(iter(tables.values())).values())) if p.startswith(prefix)]
    gaps = {p: [t[p]["mean"] for table in tables.values() for t in table.values()] for p in rules}
    return sorted(((p, max(g), float(np.mean(g))) for p, g in gaps.items()), key=lambda x: (round(x[1], 1), x[2]))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m experiments.studies.spill_load", description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=validation_seed, nargs="+", default=[1000, 1001, 1002])
    ap.add_argument("--requests", type=positive_int, nargs="+", default=[400, 1000])
    ap.add_argument("--scenarios", nargs="+", default=None, help="default: the seed-drawn ones (--by-size: "
                    f"{', '.join(BY_SIZE_SCENARIOS)})")
    ap.add_argument("--jobs", type=positive_int, default=1)
    ap.add_argument("--out", type=out_file, default=None, help="also write the tables (markdown) here")
    ap.add_argument("--light-only", action="store_true",
                    help="the shipped rule against rules that let only the light requests spill")
    ap.add_argument("--light-load", action="store_true",
                    help="rules whose light requests spill by a load of their own (KV-counted seats)")
    ap.add_argument("--queued", action="store_true",
                    help="the shipped rule against rules that never spill into a queue (KV-counted seats)")
    ap.add_argument("--by-size", action="store_true",
                    help="the split with and without the shipped spill at 2, 4 and 8 instances")
    ap.add_argument("--batch-seats", action="store_true",
                    help="the shipped spill with seats the KV cache holds, and not into a queue, with conversation "
                         "proxies")
    ap.add_argument("--by-work", action="store_true",
                    help="the split with its large group sized by the heavy requests' share of the work")
    ap.add_argument("--heavy-share", action="store_true",
                    help="the shipped spill balancing by KV demand while most recent requests are heavy")
    ap.add_argument("--balance", type=float, nargs="+", default=list(HEAVY_SHARES),
                    help="with --heavy-share: the heavy shares to balance above")
    ap.add_argument("--checkpoints", type=name_path, nargs="+", default=[], metavar="NAME=PATH",
                    help="learned routers beside the candidates (gap to the best candidate; never a reference)")
    args = ap.parse_args(argv)
    args.jobs = cap_jobs(args.jobs, ap.prog)
    pols = candidates(args.light_only, args.light_load, args.queued, args.by_size, args.batch_seats, args.by_work,
                      heavy_share=args.heavy_share, shares=tuple(args.balance))
    ckpts = named_paths(ap, args.checkpoints)
    names = args.scenarios or list(BY_SIZE_SCENARIOS if args.by_size else BATCH_SCENARIOS
                                   if args.batch_seats or args.by_work or args.heavy_share else SCENARIOS)
    with usage_errors(ap):
        tables = {n: run("workload_router", names, args.seeds, n, args.jobs, pols, ckpts) for n in args.requests}
    text = "\n\n".join(f"### {n} requests per episode\n\n{markdown(t)}" for n, t in tables.items())
    text += "\n\n| spill rule | worst mean gap (both lengths) | mean gap |\n|---|---|---|\n" + "\n".join(
        f"| {p} | {w:+.1f} | {m:+.1f} |" for p, w, m in choose(tables))
    print(text)
    if args.out is not None:
        write_text(args.out, text + "\n")


if __name__ == "__main__":
    main()
