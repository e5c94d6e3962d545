"""``python -m experiments.bench {sim,env,train,decisions,qlm_plan,faults,skew} [options]``: the benchmarks, one entry.

* ``sim``: the simulator alone (``single``: 10,000 requests on one instance; ``million``: 1,000,000 on 16), wall
  time, simulated requests per second, iterations per second and peak RSS, each case in a fresh process;
  ``--prefix-cost`` measures the cost of prefix caching with no reuse in paired runs (experiments/bench/sim.py).
* ``env``: steps per second of every registered env id under a random mask-respecting policy (bench/env.py).
* ``train``: Double DQN training speed (``--num-envs 1,2,4`` a scaling table; ``--encoder`` the graph encoder
  against PyG) (bench/train.py).
* ``decisions``: per-decision latency of the live router, heuristics and exported policies (bench/decisions.py).
* ``qlm_plan``: solve time of QLM's MILP plan generator against queue size and instance count (bench/qlm_plan.py).
* ``faults``: load through the live router over emulated backends in their own processes, with a backend killed
  (SIGKILL) or frozen (SIGSTOP): completed / clean / unclean errors, hung, served twice, router overhead
  (bench/faults.py).
* ``skew``: not a speed benchmark: replayed TTFT / TPOT / E2E with and without the skewed-decode term of the profiles
  that have one, on a ShareGPT-like synthetic workload (bench/skew_effect.py).

``python -m experiments.bench NAME --help`` lists each one's options; ``--json`` prints one JSON object per result.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

BENCHES = {"sim": "experiments.bench.sim", "env": "experiments.bench.env", "train": "experiments.bench.train",
           "decisions": "experiments.bench.decisions", "qlm_plan": "experiments.bench.qlm_plan",
           "faults": "experiments.bench.faults", "skew": "experiments.bench.skew_effect"}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the named benchmark's ``main`` with the rest of the arguments (its module is imported only then: ``sim``
    must not import the envs, ``env`` needs gymnasium, ``train`` and ``decisions`` torch)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    if args[0] not in BENCHES:
        print(f"python -m experiments.bench: error: unknown benchmark {args[0]!r}; expected one of "
              f"{', '.join(BENCHES)}", file=sys.stderr)
        return 2
    return int(importlib.import_module(BENCHES[args[0]]).main(args[1:]) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
