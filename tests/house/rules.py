"""The house rules, as checks over source files (tests/house/test_rules.py runs them per room).

* size: no file over 500 lines, no function over 60;
* imports at the top: an import inside a function is allowed only for an optional dependency, with a comment on
  its line that says ``optional`` (``import torch  # optional: the rl extra``);
* no private access: ``obj._x`` only on ``self`` / ``cls``, and no ``from module import _name``;
* one import name: the shipped packages are imported as ``llmsim.envs``, ``llmsim.agents``, ``llmsim.serving``,
  ``llmsim.profiles`` and ``llmsim.cli``, never as top-level ``envs`` / ``agents`` / ... / ``cli``;
* library code and shipped configs cite papers by name, never "spec 001" or "issue 17".
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 60
BARE_TOP = ("envs", "agents", "serving", "profiles", "cli")
# "spec 001", "spec 4", "issue 17", "issue #17", "spec001", "shared/specs/003"
NAMEDTUPLE_API = {"_asdict", "_replace", "_fields", "_make", "_field_defaults"}  # public despite the underscore
CITATION = re.compile(r"\b(?:spec|issue)s?\s?#?\d{1,3}\b|\bspec_?0\d\d|shared/specs/0\d\d", re.IGNORECASE)

# rooms: a name and the folders / files it covers (paths relative to the repository)
LIBRARY_ROOMS = {
    "llmsim-root": ["llmsim/*.py"],
    "engine": ["llmsim/engine"],
    "cluster": ["llmsim/cluster"],
    "state": ["llmsim/state"],
    "routing": ["llmsim/routing"],
    "workload": ["llmsim/workload"],
    "perf": ["llmsim/perf"],
    "metrics": ["llmsim/metrics"],
    "simulation": ["llmsim/simulation"],
    "planning": ["llmsim/planning"],
    "emulator": ["llmsim/emulator"],
    "cli": ["cli"],
    "envs": ["envs"],
    "agents": ["agents"],
    "serving": ["serving"],
    "profiles": ["profiles"],
}
ROOMS = {**LIBRARY_ROOMS, "experiments": ["experiments"]}


def room_files(room: str) -> list[Path]:
    out: list[Path] = []
    for pattern in ROOMS[room]:
        if pattern.endswith("*.py"):
            out += sorted(REPO.glob(pattern))
        elif (REPO / pattern).is_dir():
            out += sorted((REPO / pattern).rglob("*.py"))
    return [p for p in out if "__pycache__" not in p.parts]


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name


def size_violations(path: Path) -> list[str]:
    text = path.read_text()
    out = []
    n = text.count("\n")
    if n > MAX_FILE_LINES:
        out.append(f"{_rel(path)}: {n} lines (max {MAX_FILE_LINES})")
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = node.end_lineno - node.lineno + 1  # type: ignore[operator]
            if length > MAX_FUNCTION_LINES:
                out.append(f"{_rel(path)}:{node.lineno}: {node.name} has {length} lines (max {MAX_FUNCTION_LINES})")
    return out


def inner_imports(path: Path) -> list[str]:
    text = path.read_text()
    lines = text.splitlines()
    out = []
    for node in ast.walk(ast.parse(text, str(path))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Import | ast.ImportFrom):
                span = " ".join(lines[sub.lineno - 1: sub.end_lineno])  # type: ignore[misc]
                if "optional" not in span.split("#", 1)[-1] or "#" not in span:
                    out.append(f"{_rel(path)}:{sub.lineno}: {ast.unparse(sub)}")
    return sorted(set(out))


def private_accesses(path: Path) -> list[str]:
    """``file:line: expression`` for every private attribute of a non-self object, and private imports."""
    out = []
    where = _rel(path)
    for n in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__"):
            if n.attr in NAMEDTUPLE_API:
                continue
            if isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"):
                continue
            if isinstance(n.value, ast.Call) and getattr(n.value.func, "id", "") == "super":
                continue
            out.append(f"{where}:{n.lineno}: {ast.unparse(n)}")
        elif isinstance(n, ast.ImportFrom):
            out += [f"{where}:{n.lineno}: from {n.module} import {a.name}"
                    for a in n.names if a.name.startswith("_") and not a.name.startswith("__")]
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "setattr") \
                and len(n.args) >= 2 and isinstance(n.args[1], ast.Constant) and str(n.args[1].value)[:1] == "_" \
                and not str(n.args[1].value).startswith("__"):
            out.append(f"{where}:{n.lineno}: {ast.unparse(n)}")
    return out


def bare_top_imports(path: Path) -> list[str]:
    out = []
    for n in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(n, ast.Import):
            names = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
            names = [n.module]
        out += [f"{_rel(path)}:{n.lineno}: import {m}" for m in names if m.split(".")[0] in BARE_TOP]
    return out


def citations(path: Path) -> list[str]:
    return [f"{_rel(path)}:{i}: {line.strip()[:100]}" for i, line in enumerate(path.read_text().splitlines(), 1)
            if CITATION.search(line)]
