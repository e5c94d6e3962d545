"""The layering of the project, enforced: llmsim <- envs <- agents, no import cycles, no private access.

* import-linter contracts (``.importlinter`` at the repo root, also runnable as ``lint-imports``): ``llmsim``
  imports nothing from ``envs`` or ``agents``, ``envs`` nothing from ``agents``; the sibling modules of
  ``llmsim`` and of ``envs`` form no import cycle, type-only (``TYPE_CHECKING``) and function-level imports
  included. Two known cycles in files owned elsewhere are listed there as ignored imports.
* an AST check that no module outside ``llmsim`` (the packages ``envs``, ``agents`` and ``profiles``; the
  tests are white-box and exempt) reads or writes a private name (``obj._x``) of anything but ``self`` /
  ``cls``, or imports a private name from ``llmsim``. Observations and rewards read the public
  :class:`llmsim.state.cluster_state.ClusterState`; a policy trained on them must not depend on simulator internals.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE_LLMSIM = ("envs", "agents", "profiles")


def test_import_contracts_hold() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe, "import-linter is not installed: pip install -e '.[dev]' (it is in the dev extra)"
    p = subprocess.run([exe, "--config", str(ROOT / ".importlinter"), "--no-cache", "--no-logo"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "2 kept, 0 broken" in p.stdout, p.stdout[-2000:]


def private_accesses(path: Path) -> list[str]:
    """``file:line: expression`` for every private attribute of a non-self object, and private llmsim imports."""
    out = []
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    for n in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__"):
            if isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"):
                continue
            out.append(f"{where}:{n.lineno}: {ast.unparse(n)}")
        elif isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "llmsim":
            out += [f"{where}:{n.lineno}: from {n.module} import {a.name}"
                    for a in n.names if a.name.startswith("_")]
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "setattr") \
                and len(n.args) >= 2 and isinstance(n.args[1], ast.Constant) and str(n.args[1].value)[:1] == "_" \
                and not str(n.args[1].value).startswith("__"):
            out.append(f"{where}:{n.lineno}: {ast.unparse(n)}")
    return out


def test_no_private_access_outside_llmsim() -> None:
    files = [p for pkg in OUTSIDE_LLMSIM for p in sorted((ROOT / pkg).rglob("*.py"))]
    assert len(files) > 10  # the scan really looked at the packages
    found = [line for f in files for line in private_accesses(f)]
    assert not found, "private names used outside llmsim (use the public API / ClusterState):\n" + "\n".join(found)


def test_private_access_checker_finds_violations(tmp_path: Path) -> None:
    """The AST check is not vacuous: it flags the patterns the envs used to contain."""
    bad = tmp_path / "probe.py"
    bad.write_text("def f(env, c):\n    x = c._arrivals_done\n    y = env.cluster.instances[0]._busy\n"
                   "    z = getattr(c, '_queue')\n    return self._ok, x, y, z\nfrom llmsim.cluster import _INF\n")
    found = private_accesses(bad)
    assert len(found) == 4, found
    assert any("_arrivals_done" in f for f in found) and any("_INF" in f for f in found)


@pytest.mark.parametrize("module", ["llmsim", "llmsim.cluster.cluster", "llmsim.state.cluster_state", "llmsim.event_loop"])
def test_llmsim_imports_without_envs(module: str) -> None:
    """At run time too: importing the simulator pulls in neither gymnasium nor the envs."""
    code = (f"import sys, {module}; bad = [m for m in sys.modules if m.split('.')[0] in ('envs', 'agents', "
            "'gymnasium', 'torch')]; assert not bad, bad")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
