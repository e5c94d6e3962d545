"""Choose a learned router's light-load gate (envs/load_gate.py) on VALIDATION seeds.

    python -m experiments.studies.load_gate --env qos_edge --checkpoint zoo:qos_edge --router qos_lookahead \\
        --below 2 2.5 3 --smooth-s 0 10 30 --seeds 1000 1001 1002 1003 --requests 1000 --jobs 2

Every candidate (below, smooth_s) runs on the testbed's unseen-traffic scenarios that are drawn from a seed (rates,
length mixes, cluster sizes, bursts: conf/suite/<testbed>.yaml), never on its trace windows, whose arrivals do not
change with the seed. Each cell is the candidate's gain over the gate's own heuristic (the reference the learned
router lost to at light load) in % of the heuristic's primary metric, mean over seeds. The rule: the candidate with
the best worst scenario (to 0.1 point), then the best mean gain. Test seeds (>= 2000) are refused: what is chosen
here is reported on them afterwards.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from llmsim.agents.episodes import evaluate
from llmsim.errors import ConfigError
from llmsim.resources import conf_dir


def scenarios(testbed: str) -> dict[str, dict[str, Any]]:
    """The suite's seed-drawn scenarios of ``testbed``: name -> env overrides."""
    suite = yaml.safe_load((conf_dir() / "suite" / f"{testbed}.yaml").read_text())
    return {name: dict(s.get("env") or {}) for name, s in suite["scenarios"].items() if not s.get("trace")}


def gains(env: dict[str, Any], checkpoint: str, router: str, candidates: list[tuple[float, float]],
          seeds: list[int], jobs: int, metric: str) -> dict[str, float]:
    """Mean gain (%) over seeds of each candidate and of the ungated network over ``router`` on one env."""
    specs: list[Any] = [router, {"checkpoint": checkpoint, "label": "network", "load_gate": "none"}]
    specs += [{"checkpoint": checkpoint, "label": f"below={b} smooth_s={s}",
               "load_gate": {"router": router, "below": b, "smooth_s": s}} for b, s in candidates]
    rows = evaluate(env, specs, seeds=seeds, jobs=jobs)
    ref = {r["seed"]: r[metric] for r in rows if r["policy"] == router}
    out: dict[str, list[float]] = {}
    for r in rows:
        if r["policy"] != router:
            out.setdefault(r["policy"], []).append(100.0 * (r[metric] / ref[r["seed"]] - 1.0))
    return {k: float(np.mean(v)) for k, v in out.items()}


def choose(table: dict[str, dict[str, float]]) -> str:
    """The candidate with the best worst scenario (to 0.1 point), then the best mean gain."""
    cands = [c for c in next(iter(table.values())) if c != "network"]
    return max(cands, key=lambda c: (round(min(t[c] for t in table.values()), 1),
                                     float(np.mean([t[c] for t in table.values()]))))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m experiments.studies.load_gate", description=__doc__.split("\n")[0])
    ap.add_argument("--env", default="qos_edge", help="testbed (conf/env/<name>.yaml, conf/suite/<name>.yaml)")
    ap.add_argument("--checkpoint", default="zoo:qos_edge")
    ap.add_argument("--router", default="qos_lookahead", help="the gate's heuristic")
    ap.add_argument("--below", type=float, nargs="+", default=[2.0, 2.5, 3.0])
    ap.add_argument("--smooth-s", type=float, nargs="+", default=[0.0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1000, 1001, 1002, 1003])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--metric", default="avg_qos", help="the primary metric (higher is better)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="also write the table (markdown) here")
    a = ap.parse_args(argv)
    if any(not 1000 <= s < 2000 for s in a.seeds):
        raise SystemExit(f"--seeds {a.seeds}: validation seeds only (1000-1999); test seeds report the choice")
    base = yaml.safe_load((conf_dir() / "env" / f"{a.env}.yaml").read_text())
    candidates = [(b, s) for b in a.below for s in a.smooth_s]
    table: dict[str, dict[str, float]] = {}
    try:
        for name, over in scenarios(a.env).items():
            env = {**base, "num_requests": a.requests, **over}
            table[name] = gains(env, a.checkpoint, a.router, candidates, a.seeds, a.jobs, a.metric)
            print(name, {k: f"{v:+.1f}" for k, v in table[name].items()}, flush=True)
    except ConfigError as e:
        raise SystemExit(f"load_gate: {e}") from None
    cols = list(table)
    lines = [f"| candidate (gain over {a.router}, %) | " + " | ".join(cols) + " | worst | mean |",
             "|---" * (len(cols) + 3) + "|"]
    for c in next(iter(table.values())):
        vals = [table[s][c] for s in cols]
        lines.append(f"| {c} | " + " | ".join(f"{v:+.1f}" for v in vals) + f" | {min(vals):+.1f} | "
                     f"{np.mean(vals):+.1f} |")
    text = "\n".join(lines) + f"\n\nchosen: {choose(table)} (seeds {a.seeds}, {a.requests} requests)\n"
    print(text)
    if a.out:
        a.out.write_text(text)


if __name__ == "__main__":
    main()
