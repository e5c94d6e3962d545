"""The profile builder stays readable: no module over 600 lines, no function over 80 lines (AST check; the house
rules in tests/house are stricter), and every part has a provider chain that always ends in a result."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from llmsim.perf.profile_table import OPTIONAL_PARTS
from llmsim.profiles.document import PART_NAMES
from llmsim.profiles.providers import CHAINS
from tests.helpers import REPO

PROFILES = REPO / "profiles"
MODULES = sorted(PROFILES.glob("*.py")) + sorted((PROFILES / "providers").glob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PROFILES)))
def test_profile_module_sizes(path: Path) -> None:
    src = path.read_text()
    assert len(src.splitlines()) <= 600, f"{path.name}: {len(src.splitlines())} lines"
    long = [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(src))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80
    ]
    assert not long, f"{path.name}: functions over 80 lines: {long}"


def test_every_part_has_a_chain_ending_in_a_fallback() -> None:
    assert set(CHAINS) == set(PART_NAMES) | set(OPTIONAL_PARTS)
    for part, chain in CHAINS.items():
        assert chain and all(callable(p) and p.name for p in chain), part
        # always returns a result (the all-reduce's and the skew's last providers say there is no separate one)
        assert chain[-1].name in ("roofline", "vidur", "config", "in-dense-or-tp1", "no-skew-table"), part
