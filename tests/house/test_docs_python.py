"""Every ```python block of docs/*.md is Python a reader can paste: it parses, and each name it imports from
llmsim (or experiments) exists, so a renamed function cannot leave a page pointing at nothing. The README's blocks
are run in full by test_readme.py; signature listings (``f(a, b) -> T``) belong in plain ``` blocks."""

from __future__ import annotations

import ast
import importlib
import re

import pytest

from tests.helpers import REPO

PAGES = sorted((REPO / "docs").glob("*.md"))
OURS = ("llmsim", "experiments")


def python_blocks() -> list[tuple[str, str]]:
    """(``page:line``, source) of every ```python block."""
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
            out.append((f"docs/{page.name}:{text[: m.start()].count(chr(10)) + 1}", m.group(1)))
    return out


BLOCKS = python_blocks()


def missing_imports(tree: ast.AST) -> list[str]:
    """The ``from M import N`` names of our packages that do not resolve (a module or an attribute of M)."""
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(OURS):
            continue
        mod = importlib.import_module(node.module)
        for alias in node.names:
            if hasattr(mod, alias.name):
                continue
            try:
                importlib.import_module(f"{node.module}.{alias.name}")
            except ModuleNotFoundError:
                bad.append(f"{node.module}.{alias.name}")
    return bad


def test_there_are_blocks() -> None:
    assert len(BLOCKS) >= 20


@pytest.mark.parametrize(("where", "src"), BLOCKS, ids=[w for w, _ in BLOCKS])
def test_python_block_parses_and_its_imports_exist(where: str, src: str) -> None:
    try:
        tree = ast.parse(src, filename=where)
    except SyntaxError as e:
        pytest.fail(f"{where}: not Python (block line {e.lineno}: {e.msg}); a signature listing goes in a plain "
                    "``` block")
    assert missing_imports(tree) == [], where


def test_a_renamed_name_is_found() -> None:
    assert missing_imports(ast.parse("from llmsim.workload import build_workload, no_such_name")) == [
        "llmsim.workload.no_such_name"]
