"""What the predictor trainers' command lines print: the report as JSON or as a table, the command, the files saved."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any


def print_report(report: dict[str, Any], module: str, argv: Sequence[str] | None, as_json: bool, saved: bool,
                 fmt: Callable[[dict[str, Any]], str]) -> int:
    """Print ``report`` as JSON or as ``fmt``'s table, with the command that made it (and the files saved)."""
    report["command"] = f"python -m {module} " + " ".join(sys.argv[1:] if argv is None else argv)
    print(json.dumps(report, indent=1) if as_json else fmt(report))
    if saved and not as_json:
        print("saved: " + ", ".join(report["saved"]))
    return 0
