"""The layering of the house, enforced: data flows one way, and no import circle hides anywhere.

* import-linter contracts (``.importlinter`` at the repo root, also runnable as ``lint-imports``): the simulator's
  rooms form layers (``llmsim.engine`` below ``llmsim.cluster`` below ``llmsim.simulation`` ...), the envs sit above
  them, learning and the live router above the envs; no sibling modules of any package import each other in a
  circle, type-only (``TYPE_CHECKING``) imports included; the simulator imports no torch or gymnasium.
* at run time too: importing the simulator loads neither gymnasium, torch nor the learning code, and no library
  module imports ``experiments`` (the reproductions are not part of the installed packages).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.house import rules


@pytest.mark.timeout(300)
def test_import_contracts_hold() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe, "import-linter is not installed: pip install -e '.[dev]' (it is in the dev extra)"
    p = subprocess.run([exe, str(REPO / ".importlinter"), "--no-cache", "--no-logo"], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "3 kept, 0 broken" in p.stdout, p.stdout[-2000:]


@pytest.mark.parametrize("module", ["llmsim", "llmsim.cluster", "llmsim.simulation", "llmsim.event_loop",
                                    "llmsim.routing", "llmsim.workload"])
def test_the_simulator_imports_without_envs_or_torch(module: str) -> None:
    code = (f"import sys, {module}; bad = [m for m in sys.modules if m.split('.')[0] in ('gymnasium', 'torch', "
            "'experiments') or m.startswith(('llmsim.envs', 'llmsim.agents', 'llmsim.serving'))]; assert not bad, bad")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]


SIMULATOR_FORBIDDEN = ("hydra", "omegaconf", "torch", "gymnasium", "stable_baselines3", "torch_geometric")


def test_no_file_of_the_simulator_imports_hydra_or_learning() -> None:
    """The simulator is the llmsim/ folder itself (its links to the layers above aside): no file in it imports
    Hydra, OmegaConf or learning code, at the top or inside a function; the commands live in llmsim.cli (cli/)."""
    files = [p for room, patterns in rules.LIBRARY_ROOMS.items() if all(q.startswith("llmsim/") for q in patterns)
             for p in rules.room_files(room)]
    assert len(files) > 100, len(files)  # the rooms were found
    found = []
    for path in files:
        for n in ast.walk(ast.parse(path.read_text(), str(path))):
            mods = [a.name for a in n.names] if isinstance(n, ast.Import) else \
                [n.module or ""] if isinstance(n, ast.ImportFrom) else []
            found += [f"{path.relative_to(REPO)}:{n.lineno}: {m}" for m in mods
                      if m.split(".")[0] in SIMULATOR_FORBIDDEN]
    assert not found, found


def test_no_library_module_imports_experiments() -> None:
    found = []
    for room in rules.LIBRARY_ROOMS:
        for path in rules.room_files(room):
            for n in ast.walk(ast.parse(path.read_text(), str(path))):
                mods = [a.name for a in n.names] if isinstance(n, ast.Import) else \
                    [n.module or ""] if isinstance(n, ast.ImportFrom) else []
                found += [f"{path.relative_to(REPO)}:{n.lineno}" for m in mods if m.split(".")[0] == "experiments"]
    # the one exception: the llmsim-reproduce launcher, which runs the checkout's experiments when they are there
    assert found == ["cli/reproduce.py:" + str(_launcher_line())], found


def _launcher_line() -> int:
    for i, line in enumerate((REPO / "cli" / "reproduce.py").read_text().splitlines(), 1):
        if "from experiments.reproduce import" in line:
            return i
    return -1
