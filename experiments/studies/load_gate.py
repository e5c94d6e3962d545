"""Choose a learned router's load gate (envs/load_gate.py) on VALIDATION seeds and held-out traces.

    python -m experiments.studies.load_gate --env qos_edge --checkpoint zoo:qos_edge --router qos_lookahead \\
        --below 1.5 --smooth-s 30 --margin 0 1 2 --margin-below 0 3 --margin-burst 0 0.5 --seeds 1000 1001 1002 \\
        --requests 1000 --jobs 2 --trace ../shared/traces/mooncake/synthetic_trace.jsonl --windows 0 340 680 1023 \\
        --bucket-s 0 3 [--costless 0 1] [--informed 0 1]

Every candidate (below, smooth_s, margin, margin_below, margin_burst, costless, informed: envs/load_gate.py
``LoadGate``) runs on the testbed's unseen-traffic scenarios that are drawn from a seed (rates, length mixes,
cluster sizes, bursts: conf/suite/<testbed>.yaml), never on its trace windows, whose arrivals do not change with the
seed, and on the windows of a held-out Mooncake-format trace (``--trace``: the arrival times, contents from the
seed), as recorded and with its arrivals quantised to ``--bucket-s`` buckets the way the Mooncake conversation
trace records them (every request of a bucket arriving at its start). A trace the suite reads is refused: its
windows are test data.
Each cell is the candidate's gain over the gate's own heuristic (the reference the learned router lost to) in % of
the heuristic's primary metric, mean over seeds, positive when better (a higher QoS or utility, a lower latency
with ``--metric mean_e2el_ms``). The rule: the candidate with the best worst scenario (to 0.1
point), then the best mean gain. Test seeds (>= 2000) are refused: what is chosen here is reported on them
afterwards.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from experiments.harness.pages import out_file, write_text
from experiments.harness.pool import cap_jobs
from experiments.harness.timing import positive_int
from experiments.studies.validation import (
    router_name,
    seed_drawn,
    suite_traces,
    testbed_env,
    usage_errors,
    validation_seed,
)
from llmsim.agents.episodes import evaluate
from llmsim.agents.suite_config import load_suite_file, merge
from llmsim.errors import ConfigError, TraceError

# below, smooth_s, margin, margin_below, margin_burst, costless, informed
Candidate = tuple[float, float, float, float | None, float | None, bool, bool]


def bucketed(path: Path, bucket_s: float, into: Path) -> Path:
    """A copy of the Mooncake JSONL trace ``path`` whose timestamps are floored to ``bucket_s`` (0: ``path``); a file
    that cannot be read, or a row that is not a JSON object with a numeric ``timestamp``, is a TraceError naming it."""
    if bucket_s <= 0.0:
        return path
    out = into / f"{path.stem}_bucket{bucket_s:g}s.jsonl"
    step = round(bucket_s * 1000)
    try:
        with path.open() as src, out.open("w") as dst:
            for n, line in enumerate(src, 1):
                if line.strip():
                    dst.write(json.dumps(bucketed_row(line, step, path, n)) + "\n")
    except OSError as e:
        raise TraceError(f"--trace {path}: cannot be read ({e.strerror or e})") from None
    return out


def bucketed_row(line: str, step: int, path: Path, n: int) -> dict[str, Any]:
    """One row of :func:`bucketed`, its timestamp (ms) floored to ``step``."""
    try:
        row = json.loads(line)
        return {**row, "timestamp": row["timestamp"] // step * step}
    except (ValueError, TypeError, KeyError) as e:
        raise TraceError(f"--trace {path} line {n}: expected a JSON object with a numeric 'timestamp' "
                         f"({type(e).__name__}: {e})") from None


def trace_scenarios(path: Path, windows: list[float], buckets: list[float], testbed: str,
                    into: Path) -> dict[str, dict[str, Any]]:
    """Env overrides of each window (consecutive edges in s) of a held-out Mooncake trace at each bucket size."""
    if path.name in suite_traces(testbed):
        raise ConfigError(f"--trace {path}: the suite's windows of this trace are test data; use a held-out trace")
    if not path.is_file():
        raise TraceError(f"--trace {path}: no such file (expected a held-out Mooncake JSONL trace)")
    out: dict[str, dict[str, Any]] = {}
    for b in buckets:
        src = bucketed(path, b, into)
        for lo, hi in zip(windows, windows[1:]):
            trace = {"kind": "mooncake", "path": str(src), "window": [lo, hi]}
            tag = f"_b{b:g}s" if b else ""
            out[f"{path.stem}{tag}_{lo:g}-{hi:g}"] = {"arrival": {"kind": "trace", "trace": trace}}
    return out


def label(c: Candidate) -> str:
    return (f"below={c[0]:g} smooth_s={c[1]:g}" + (f" margin={c[2]:g}" if c[2] else "")
            + (f" margin_below={c[3]:g}" if c[2] and c[3] is not None else "")
            + (f" margin_burst={c[4]:g}" if c[2] and c[4] is not None else "") + (" costless" if c[5] else "")
            + (" informed" if c[6] and not c[5] else ""))


def gate(router: str, c: Candidate) -> dict[str, Any]:
    """The ``load_gate`` mapping of candidate ``c`` (``margin_burst``, ``costless`` and ``informed`` only where set:
    the shipped gate's form)."""
    out: dict[str, Any] = {"router": router, "below": c[0], "smooth_s": c[1], "margin": c[2], "margin_below": c[3]}
    if c[4] is not None:
        out["margin_burst"] = c[4]
    if c[5]:
        out["costless"] = True
    return {**out, "informed": True} if c[6] and not c[5] else out


# row metrics of llmsim-evaluate (docs/evaluation.md) where higher is better, and where lower is
HIGHER_BETTER = ("avg_qos", "within_l", "utility", "deadline_met", "slo_attainment")
LOWER_BETTER = ("mean_e2el_ms", "p99_e2el_ms", "mean_ttft_ms", "p99_ttft_ms", "makespan_s", "latency_per_token_ms")


def gains(env: dict[str, Any], checkpoint: str, router: str, candidates: list[Candidate],
          seeds: list[int], jobs: int, metric: str) -> dict[str, float]:
    """Mean gain (%) over seeds of each candidate and of the ungated network over ``router`` on one env."""
    specs: list[Any] = [router, {"checkpoint": checkpoint, "label": "network", "load_gate": "none"}]
    specs += [{"checkpoint": checkpoint, "label": label(c), "load_gate": gate(router, c)} for c in candidates]
    rows = evaluate(env, specs, seeds=seeds, jobs=jobs)
    ref = {r["seed"]: r.get(metric) for r in rows if r["policy"] == router}
    if any(not v for v in ref.values()):  # not measured on this env (None), or 0: no gain can be relative to it
        raise ConfigError(f"--metric {metric}: {router} scored {sorted(ref.values(), key=str)} on this env; "
                          f"a gain needs a measured, non-zero reference; choose a metric the env measures (see --help)")
    out: dict[str, list[float]] = {}
    for r in rows:
        if r["policy"] != router:
            ratio = r[metric] / ref[r["seed"]]  # a gain is positive when better, whichever way the metric points
            out.setdefault(r["policy"], []).append(100.0 * (ratio - 1.0 if metric in HIGHER_BETTER else 1.0 - ratio))
    return {k: float(np.mean(v)) for k, v in out.items()}


def choose(table: dict[str, dict[str, float]]) -> str:
    """The candidate with the best worst scenario (to 0.1 point), then the best mean gain."""
    cands = [c for c in next(iter(table.values())) if c != "network"]
    return max(cands, key=lambda c: (round(min(t[c] for t in table.values()), 1),
                                     float(np.mean([t[c] for t in table.values()]))))


def markdown(table: dict[str, dict[str, float]], router: str) -> str:
    """Candidates as rows, scenarios as columns, then the worst and the mean."""
    cols = list(table)
    lines = [f"| candidate (gain over {router}, %) | " + " | ".join(cols) + " | worst | mean |",
             "|---" * (len(cols) + 3) + "|"]
    for c in next(iter(table.values())):
        vals = [table[s][c] for s in cols]
        lines.append(f"| {c} | " + " | ".join(f"{v:+.1f}" for v in vals) + f" | {min(vals):+.1f} | "
                     f"{np.mean(vals):+.1f} |")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m experiments.studies.load_gate", description=__doc__.split("\n")[0])
    ap.add_argument("--env", default="qos_edge", help="testbed (conf/env/<name>.yaml, conf/suite/<name>.yaml)")
    ap.add_argument("--checkpoint", default="zoo:qos_edge")
    ap.add_argument("--router", type=router_name, default="qos_lookahead", help="the gate's heuristic")
    ap.add_argument("--below", type=float, nargs="+", default=[2.0, 2.5, 3.0])
    ap.add_argument("--smooth-s", type=float, nargs="+", default=[0.0])
    ap.add_argument("--margin", type=float, nargs="+", default=[0.0], help="the gate's margin (0: none)")
    ap.add_argument("--margin-below", type=float, nargs="+", default=[0.0],
                    help="the load up to which the margin applies (0: any load)")
    ap.add_argument("--margin-burst", type=float, nargs="+", default=[0.0],
                    help="the share of bunched decisions from which the margin applies (0: however they come)")
    ap.add_argument("--costless", type=int, nargs="+", choices=(0, 1), default=[0],
                    help="1: the heuristic also decides wherever its choice costs nothing by its own estimate")
    ap.add_argument("--informed", type=int, nargs="+", choices=(0, 1), default=[0],
                    help="1: the heuristic is told every decision (costless implies it)")
    ap.add_argument("--seeds", type=validation_seed, nargs="+", default=[1000, 1001, 1002, 1003])
    ap.add_argument("--requests", type=positive_int, default=1000)
    ap.add_argument("--trace", type=Path, default=None, help="a held-out Mooncake JSONL trace (arrival times)")
    ap.add_argument("--windows", type=float, nargs="+", default=[0.0, 340.0, 680.0, 1023.0],
                    help="edges (s) of the --trace windows")
    ap.add_argument("--bucket-s", type=float, nargs="+", default=[0.0, 3.0],
                    help="arrival buckets of the --trace windows (0: as recorded)")
    ap.add_argument("--metric", default="avg_qos", choices=HIGHER_BETTER + LOWER_BETTER,
                    help="the primary metric (a gain is positive when better: higher for the first five, lower for "
                    "latencies; avg_qos / within_l are measured on QoSEdge, utility / deadline_met on BestEffort, "
                    "slo_attainment with an env slo)")
    ap.add_argument("--jobs", type=positive_int, default=1)
    ap.add_argument("--out", type=out_file, default=None, help="also write the table (markdown) here")
    return ap


def main(argv: list[str] | None = None) -> None:
    ap = parser()
    a = ap.parse_args(argv)
    a.jobs = cap_jobs(a.jobs, ap.prog)
    candidates = list(dict.fromkeys((b, s, m, (mb or None) if m else None, (mr or None) if m else None, bool(c),
                                     bool(i) or bool(c))
                                    for b in a.below for s in a.smooth_s for m in a.margin for mb in a.margin_below
                                    for mr in a.margin_burst for c in a.costless for i in a.informed))
    table: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp, usage_errors(ap):
        scen = seed_drawn(a.env, requests=a.requests)
        if a.trace is not None:
            base = testbed_env(a.env, load_suite_file(a.env))
            scen |= {name: merge(base, {"num_requests": a.requests, **over})
                     for name, over in trace_scenarios(a.trace, a.windows, a.bucket_s, a.env, Path(tmp)).items()}
        for name, env in scen.items():
            table[name] = gains(env, a.checkpoint, a.router, candidates, a.seeds, a.jobs, a.metric)
            print(name, {k: f"{v:+.1f}" for k, v in table[name].items()}, flush=True)
    text = markdown(table, a.router) + f"\n\nchosen: {choose(table)} (seeds {a.seeds}, {a.requests} requests)\n"
    print(text)
    if a.out:
        write_text(a.out, text)


if __name__ == "__main__":
    main()
