"""``python -m llmsim.profiles <verb>``: the profiles room's one command line, a verb per job.

Each verb is a module of this package with ``add_arguments(parser)`` and ``run(args) -> exit status``;
``python -m llmsim.profiles <verb> --help`` prints that module's description and flags. Exit status: 0 done
(or a check found no difference), 1 a check found a difference, 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from types import ModuleType

from llmsim.profiles import build, calibrate, estimate_report, measure, replay, validate

PROG = "python -m llmsim.profiles"
# verb -> (module, one-line help), in the order a newcomer meets them
VERBS: dict[str, tuple[ModuleType, str]] = {
    "build": (build, "derive profiles/data from ../shared/profiles_raw, or check it (the default)"),
    "validate": (validate, "check (or --write) profiles/VALIDATION.md: the profiles against held-out measurements"),
    "estimate": (estimate_report, "how good estimated profiles are (VALIDATION.md section 9), or write them"),
    "replay": (replay, "replay a recorded vLLM run through the simulator and compare its latencies"),
    "calibrate": (calibrate, "fit a profile's per-sequence CPU overhead to a recorded run (profiles/fits)"),
    "measure": (measure, "time a model's operators on this machine with PyTorch (pip install 'llmsim[rl]')"),
}
EXAMPLES = f"""examples:
  {PROG} build                      check profiles/data against a fresh build (--write updates it)
  {PROG} validate                   check profiles/VALIDATION.md (--write regenerates it)
  {PROG} replay --requests run.jsonl --model llama-3.1-8b --gpu rtx-pro-6000
  {PROG} replay --requests run.jsonl --model path/to/config.json --gpu rtx-pro-6000   (TP / DP / EP from meta.json)
  {PROG} measure --model llama-2-7b --device cuda --gpu-name a10     (needs pip install 'llmsim[rl]')
"""


def parser() -> argparse.ArgumentParser:
    """The command line: one sub-parser per verb, each described by its module's docstring."""
    ap = argparse.ArgumentParser(
        prog=PROG,
        description="Measured (model, GPU) profiles: derive, check, validate, replay, calibrate and measure them "
        "(docs/profiles.md).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = ap.add_subparsers(dest="verb", metavar="VERB", required=True)
    for name, (module, summary) in VERBS.items():
        sub = verbs.add_parser(
            name, help=summary, description=module.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        module.add_arguments(sub)
        sub.set_defaults(run=module.run, prog=sub.prog)
    return ap


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the verb; its exit status (0 ok, 1 check found a difference, 2 bad input)."""
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except OSError as e:  # an unreadable input or unwritable output: one line naming the path, not a traceback
        print(f"{args.prog}: error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 2
