"""Numeric comparison of generated profile files and reports with their committed versions.

The builders are deterministic on one machine (byte-identical output), but not bit-for-bit across machines:
scipy's NNLS, BLAS and pandas' medians may differ in the last bits of a float, and rounding to 4 significant
digits can turn such a difference into one unit of the 4th digit (0.1345 vs 0.1346). Committed files are
therefore compared *numerically*: same structure, same strings, every number within

    |a - b| <= max(REL_TOL * max(|a|, |b|), ABS_TOL)

REL_TOL = 2e-3 is two units of the 4th significant digit for a mantissa near 1 (where one unit is 1e-3
relative; near 9.99 one unit is 1e-4), so a last-digit flip always passes, while any real change of the data
or of the fits (which move numbers by 0.5 % or more) fails. ABS_TOL = 1e-12 only lets an exact zero match a
value below a picosecond or byte.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import yaml

from llmsim.errors import UniqueKeyLoader

REL_TOL = 2e-3
ABS_TOL = 1e-12


@dataclass(frozen=True)
class Mismatch:
    """One difference: where, the committed value, the new value and (for numbers) the relative difference."""

    where: str
    committed: Any
    new: Any
    rel: float | None = None

    def __str__(self) -> str:
        if self.rel is not None:
            return f"{self.where}: committed {self.committed!r}, new {self.new!r} (rel diff {self.rel:.1e})"
        return f"{self.where}: committed {self.committed!r}, new {self.new!r}"


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def rel_diff(a: float, b: float) -> float:
    scale = max(abs(a), abs(b))
    return 0.0 if a == b else (math.inf if scale == 0 or not math.isfinite(scale) else abs(a - b) / scale)


def numbers_close(a: float, b: float, rel: float = REL_TOL, abs_tol: float = ABS_TOL) -> bool:
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    return abs(a - b) <= max(rel * max(abs(a), abs(b)), abs_tol)


def compare_docs(
    committed: Any, new: Any, rel: float = REL_TOL, abs_tol: float = ABS_TOL, where: str = ""
) -> list[Mismatch]:
    """All differences between two parsed YAML documents: keys (and their order), list lengths, strings,
    booleans and nulls must be equal; numbers equal within ``rel`` / ``abs_tol``. Empty list = they agree."""
    here = where or "<top>"
    if _is_num(committed) and _is_num(new):
        if numbers_close(float(committed), float(new), rel, abs_tol):
            return []
        return [Mismatch(here, committed, new, rel_diff(float(committed), float(new)))]
    if isinstance(committed, dict) and isinstance(new, dict):
        if list(committed) != list(new):
            return [Mismatch(f"{here} keys", list(committed), list(new))]
        out: list[Mismatch] = []
        for k in committed:
            out += compare_docs(committed[k], new[k], rel, abs_tol, f"{where}.{k}" if where else str(k))
        return out
    if isinstance(committed, list) and isinstance(new, list):
        if len(committed) != len(new):
            return [Mismatch(f"{here} length", len(committed), len(new))]
        out = []
        for i, (a, b) in enumerate(zip(committed, new)):
            out += compare_docs(a, b, rel, abs_tol, f"{where}[{i}]")
        return out
    if type(committed) is not type(new) or committed != new:
        return [Mismatch(here, committed, new)]
    return []


def compare_profile_texts(committed: str, new: str, rel: float = REL_TOL, abs_tol: float = ABS_TOL) -> list[Mismatch]:
    """:func:`compare_docs` on two profile YAML texts (a text that is not valid YAML is one mismatch)."""
    try:
        a, b = yaml.load(committed, Loader=UniqueKeyLoader), yaml.load(new, Loader=UniqueKeyLoader)
    except yaml.YAMLError as e:  # (a key given twice included)
        return [Mismatch("<yaml>", "valid YAML", f"not valid YAML: {str(e).splitlines()[0]}")]
    return compare_docs(a, b, rel, abs_tol)


_NUM = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _printed_unit(s: str) -> float:
    """One unit of the last printed digit of a rounded number (``1.80e-04`` -> 1e-6, ``-18.5`` -> 0.1);
    0 for an integer (counts and token capacities are compared by the relative tolerance only)."""
    mant, _, exp = s.lower().partition("e")
    if "." not in mant and not exp:
        return 0.0
    decimals = len(mant.partition(".")[2])
    return 10.0 ** (-decimals + (int(exp) if exp else 0))


def compare_report_texts(committed: str, new: str, rel: float = REL_TOL, units: int = 2) -> list[Mismatch]:
    """Compare two generated text reports (e.g. profiles/VALIDATION.md) line by line: the text between the
    numbers must be equal; each number must agree within ``rel`` or, for a number printed with decimals, within
    ``units`` units of its last printed digit (a report prints rounded values, e.g. ``-18.5`` vs ``-18.6``, so
    a tiny change of the underlying value may flip that digit)."""
    a_lines, b_lines = committed.splitlines(), new.splitlines()
    if len(a_lines) != len(b_lines):
        return [Mismatch("line count", len(a_lines), len(b_lines))]
    out: list[Mismatch] = []
    for i, (a, b) in enumerate(zip(a_lines, b_lines), 1):
        if a == b:
            continue
        if _NUM.split(a) != _NUM.split(b):
            out.append(Mismatch(f"line {i}", a, b))
            continue
        for x, y in zip(_NUM.findall(a), _NUM.findall(b)):
            fx, fy = float(x), float(y)
            tol = units * max(_printed_unit(x), _printed_unit(y))
            if not (numbers_close(fx, fy, rel, 0.0) or abs(fx - fy) <= tol * (1 + 1e-9)):
                out.append(Mismatch(f"line {i}", a, b, rel_diff(fx, fy)))
                break
    return out
