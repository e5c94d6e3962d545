"""What a claims.json row is (``llmsim-reproduce``'s output), shared by the runner and the report.

``experiments.reproduce`` runs the specs and writes these rows; ``experiments.report`` only reads them. Both take
the names of the specs, the row keys, the verdicts and the tolerance from here, so neither imports the other's
module for them.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path
from typing import Any

PROG = "llmsim-reproduce"
SPECS = {"spec000": "experiments.papers.qos_edge", "spec001": "experiments.papers.intelligent_router",
         "spec002": "experiments.papers.best_effort", "spec003": "experiments.papers.qlm",
         "spec004": "experiments.papers.routebalance", "prefix": "experiments.studies.prefix",
         "disagg": "experiments.studies.disagg"}
KEYS = ("paper", "claim", "paper_value", "measured", "verdict")
VERDICTS = ("reproduced", "partly", "not")
TOL_ABS = 1.0   # percentage points: below this, seed-to-seed noise of a 5-seed mean is of the same size
TOL_REL = 0.25  # of the paper's value: a quarter either way is "the same result" for a simulated testbed


def source_commit() -> str | None:
    """The source commit (read-only git), for the record; None outside a checkout."""
    try:
        root = Path(__file__).resolve().parents[2]
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10)
        return (out.stdout.strip() or None) if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def missing(x: Any) -> bool:
    """A claim value that was not measured (None or NaN)."""
    return x is None or (isinstance(x, float) and math.isnan(x))


def format_value(x: Any, unit: str | None, spec: str = ".2f") -> str:
    """A claim value for a table: floats with ``spec`` (claims.md: 2 decimals; the report: 6 significant digits)."""
    if missing(x):
        return "n/a"
    if isinstance(x, float):
        return f"{x:{spec}}{' ' + unit if unit else ''}"
    return str(x)
