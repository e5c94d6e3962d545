"""The console commands of the agents room: ``llmsim-train``, ``llmsim-evaluate`` and ``llmsim-export``.

Each checks that the packages its app imports are installed before importing the app, so a missing extra is one
line naming the pip command (``--help`` included), not an ImportError traceback. The apps themselves are
agents/train.py, agents/evaluate.py and agents/export.py (``python -m llmsim.agents.train`` etc. run them directly).
"""

from __future__ import annotations

import importlib.util
import sys

# (module, the extra that installs it) per command; evaluating heuristics alone needs no torch (agents/evaluate.py
# asks for it when a checkpoint is given)
NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    "llmsim-train": (("torch", "rl"), ("gymnasium", "rl"), ("stable_baselines3", "rl")),
    "llmsim-evaluate": (("gymnasium", "rl"),),
    "llmsim-export": (("torch", "rl"), ("gymnasium", "rl"), ("onnx", "export"), ("onnxruntime", "export")),
}


def missing(prog: str) -> list[tuple[str, str]]:
    """(module, extra) pairs of ``prog`` that are not installed."""
    return [(m, extra) for m, extra in NEEDS[prog] if importlib.util.find_spec(m) is None]


def require(prog: str) -> None:
    """Exit with status 2 and one line naming the extras when a package ``prog`` needs is missing."""
    gone = missing(prog)
    if not gone:
        return
    extras = sorted({extra for _, extra in gone})
    names = ", ".join(m for m, _ in gone)
    print(f"{prog}: error: {names} {'is' if len(gone) == 1 else 'are'} missing; install the {' and '.join(extras)} "
          f"extra{'s' if len(extras) > 1 else ''}: pip install 'llmsim[{','.join(extras)}]'", file=sys.stderr)
    raise SystemExit(2)


def train() -> None:
    require("llmsim-train")
    from llmsim.agents import train as app  # optional: the rl extra, checked above

    app.main()


def evaluate() -> None:
    require("llmsim-evaluate")
    from llmsim.agents import evaluate as app  # optional: gymnasium (the rl extra), checked above

    app.main()


def export() -> None:
    require("llmsim-export")
    from llmsim.agents import export as app  # optional: the rl and export extras, checked above

    app.main()
