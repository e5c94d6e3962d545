"""What a claim row is and how its verdict is given (docs/reproduce.md), for every paper and study.

A run of an experiment returns one row per headline claim: ``paper, claim, paper_value, measured, verdict`` first,
then whatever explains it (unit, note, kind, seeds, setting, ...). ``llmsim-reproduce`` writes the rows to
claims.json / claims.md and the reproduction report only reads them, so the row keys, the verdicts and the
tolerance live here, once.

Verdict rules. Gains are per cent vs a baseline, positive = better; the band around a paper value p is
``tol(p) = max(TOL_ABS, TOL_REL * |p|)``:

* ``at_least`` (a method improves by p): reproduced if measured >= p - tol (within the band or beyond it, same
  sign); partly if it has p's sign but falls short of the band; not if it is 0, of the other sign or missing.
* ``about`` (a point value, e.g. a heuristic's gain): reproduced if |measured - p| <= tol; partly if same sign
  but outside the band; not otherwise.
* ``at_most`` (an upper bound, e.g. "heuristics gain <= 2.6 %"): reproduced if measured <= p + tol; partly
  if measured <= p + 2 tol; not otherwise.
* ``order`` (values claimed in a strict order): of the n (n - 1) / 2 pairs, reproduced if all are in the
  claimed order, partly if more than half are, not otherwise (a tie or a missing value counts as out of order).
"""

from __future__ import annotations

import math
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PROG = "llmsim-reproduce"
KEYS = ("paper", "claim", "paper_value", "measured", "verdict")
VERDICTS = ("reproduced", "partly", "not")
TOL_ABS = 1.0   # percentage points: below this, seed-to-seed noise of a 5-seed mean is of the same size
TOL_REL = 0.25  # of the paper's value: a quarter either way is "the same result" for a simulated testbed
RULES_TEXT = (f"tol(p) = max({TOL_ABS} pp, {TOL_REL:.0%} of |p|). at_least: reproduced if measured >= p - tol, "
              "partly if same sign, else not. about: reproduced if |measured - p| <= tol, partly if same sign. "
              "at_most: reproduced if measured <= p + tol, partly if <= p + 2 tol. order: reproduced if every pair "
              "is in the claimed order, partly if more than half are.")


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


def source_commit() -> str | None:
    """The source commit (read-only git), for the record; None outside a checkout."""
    try:
        root = Path(__file__).resolve().parents[2]
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10)
        return (out.stdout.strip() or None) if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


# ---------------------------------------------------------------------- verdicts
def tolerance(paper: float) -> float:
    """The band around a paper value within which a measurement counts as the same number."""
    return max(TOL_ABS, TOL_REL * abs(paper))


def gain_verdict(paper: float, measured: float | None, kind: str = "at_least") -> str:
    """Verdict of a numeric claim (module docstring): ``kind`` is at_least, about or at_most."""
    if missing(measured):
        return "not"
    assert measured is not None
    tol = tolerance(paper)
    same_sign = measured * paper > 0 or (paper == 0 and abs(measured) <= tol)
    if kind == "at_least":
        ahead = measured - paper if paper >= 0 else paper - measured  # how far beyond p, in p's direction
        if same_sign and ahead >= -tol:
            return "reproduced"
        return "partly" if same_sign else "not"
    if kind == "about":
        if abs(measured - paper) <= tol:
            return "reproduced"
        return "partly" if same_sign else "not"
    if kind == "at_most":
        if measured <= paper + tol:
            return "reproduced"
        return "partly" if measured <= paper + 2 * tol else "not"
    raise ValueError(f"gain_verdict: kind {kind!r} is not one of at_least, about, at_most")


def pairs_in_order(values: Sequence[float | None], descending: bool = True) -> tuple[int, int]:
    """(pairs in the claimed order, all pairs) of ``values`` listed in the claimed order."""
    n, good = len(values), 0
    for i in range(n):
        for j in range(i + 1, n):
            a, b = values[i], values[j]
            if not missing(a) and not missing(b) and ((a > b) if descending else (a < b)):  # type: ignore[operator]
                good += 1
    return good, n * (n - 1) // 2


def order_verdict(values: Sequence[float | None], descending: bool = True) -> str:
    """Verdict of an ordering claim: ``values`` listed in the claimed order (largest first if ``descending``)."""
    good, total = pairs_in_order(values, descending)
    if total == 0 or good == total:
        return "reproduced"
    return "partly" if 2 * good > total else "not"


def share_verdict(good: int, total: int) -> str:
    """Verdict of "at every point": reproduced if all ``total`` points hold, partly if more than half do."""
    if total and good == total:
        return "reproduced"
    return "partly" if 2 * good > total else "not"


# ---------------------------------------------------------------------- rows
def claim_row(paper: str, claim: str, paper_value: Any, measured: Any, verdict: str, *, digits: int | None = 2,
              **extra: Any) -> dict[str, Any]:
    """One claim with the required keys first; ``extra`` (unit, note, seeds, ...) after them. A float measurement
    is rounded to ``digits`` (None: as given) and NaN becomes None."""
    if verdict not in VERDICTS:
        raise ValueError(f"verdict {verdict!r} is not one of {VERDICTS}")
    if isinstance(measured, float) and digits is not None:
        measured = None if math.isnan(measured) else round(measured, digits)
    return {"paper": paper, "claim": claim, "paper_value": paper_value, "measured": measured, "verdict": verdict,
            **extra}


def noted_row(paper: str, claim: str, paper_value: Any, measured: Any, verdict: str, note: str = "",
              unit: str = "", **extra: Any) -> dict[str, Any]:
    """:func:`claim_row` with ``note`` and ``unit`` only when they say something (rows without empty keys)."""
    if note:
        extra["note"] = note
    if unit:
        extra["unit"] = unit
    return claim_row(paper, claim, paper_value, measured, verdict, **extra)


def stamp(rows: Sequence[dict[str, Any]], setting: str, note: str | None, **extra: Any) -> list[dict[str, Any]]:
    """Every row of a run with the setting it was measured in (``setting``, ``setting_note``) and ``extra``."""
    return [{**r, "setting": setting, "setting_note": note, **extra} for r in rows]
