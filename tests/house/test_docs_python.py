"""Every ```python block of docs/*.md is Python a reader can paste: it parses, and each name it imports from
llmsim (or experiments) exists, so a renamed function cannot leave a page pointing at nothing. The README's blocks
are run in full by test_readme.py; signature listings (``f(a, b) -> T``) belong in plain ``` blocks."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess

import pytest
from ruff.__main__ import find_ruff_bin

from tests.helpers import REPO

PAGES = sorted((REPO / "docs").glob("*.md"))
OURS = ("llmsim", "experiments")
# Blocks that are fragments on purpose use names their page's text defines; any other undefined name (a block
# reading ``cfg`` it never built) fails when pasted.
FRAGMENT_NAMES = {"docs/envs.md": {"gamma", "info", "tau", "r", "terminated", "V", "s_next"},
                  "docs/export.md": {"obs", "mask", "obs_batch", "masks"}}


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


def undefined_names(src: str) -> set[str]:
    """Names ``src`` reads but never defines or imports (ruff's undefined-name check)."""
    p = subprocess.run([find_ruff_bin(), "check", "--isolated", "--select", "F821", "--output-format", "json", "-"],
                       input=src, capture_output=True, text=True, timeout=60)
    return {re.search(r"`(.*)`", d["message"]).group(1) for d in json.loads(p.stdout)}


@pytest.mark.parametrize(("where", "src"), BLOCKS, ids=[w for w, _ in BLOCKS])
def test_python_block_defines_what_it_uses(where: str, src: str) -> None:
    allowed = FRAGMENT_NAMES.get(where.split(":")[0], set())
    assert undefined_names(src) <= allowed, f"{where}: uses names it never defines (paste it and it fails)"


def test_an_undefined_name_is_found() -> None:
    assert undefined_names("import gymnasium as gym\nenv = gym.make('x', predictor=cfg.predictor)\n") == {"cfg"}


def test_a_renamed_name_is_found() -> None:
    assert missing_imports(ast.parse("from llmsim.workload import build_workload, no_such_name")) == [
        "llmsim.workload.no_such_name"]
