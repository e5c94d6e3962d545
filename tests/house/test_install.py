"""The wheel installs and runs from any directory, under one import name; the editable install finds the same files.

The wheel is built from a copy of the source tree (so the test leaves the checkout untouched), installed
without dependencies into a fresh venv that sees this venv's site-packages through a path entry (so the
dependencies are not downloaded again; this venv's editable-install hook is not a site directory there, so it
cannot leak the checkout in), and ``llmsim`` runs from an empty temporary directory.

One import name: the wheel installs ``llmsim`` only (envs, agents, profiles and the live router are
``llmsim.envs``, ``llmsim.agents``, ``llmsim.profiles``, ``llmsim.serving``), so it coexists with packages that own
the top-level names ``agents`` (openai-agents) or ``envs``: a stand-in wheel that installs a top-level ``agents``
package goes into the same venv, and both import side by side.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.helpers import REPO

TOP_LEVEL = {"llmsim"}


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["MPLBACKEND"] = "Agg"
    return env


def _build_wheel(tmp: Path) -> Path:
    src = tmp / "src"
    shutil.copytree(REPO, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "outputs", "multirun", "*.egg-info", "__pycache__", ".hypothesis",
        ".pytest_cache", ".ruff_cache", "runs"))
    out = tmp / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out)], check=True, capture_output=True, text=True, timeout=300, env=_clean_env())
    (wheel,) = out.glob("llmsim-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = _build_wheel(tmp)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "_llmsim_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True, text=True, timeout=300, env=_clean_env())
    return venv


@pytest.mark.timeout(600)
def test_wheel_runs_llmsim_from_another_directory(wheel_venv, tmp_path) -> None:
    where = subprocess.run(
        [str(wheel_venv / "bin" / "python"), "-c",
         "import llmsim, llmsim.envs, llmsim.profiles; from llmsim.resources import conf_dir, profile_data_dir; "
         "print(llmsim.__file__); print(conf_dir()); print(profile_data_dir())"],
        cwd=tmp_path, capture_output=True, text=True, env=_clean_env(), timeout=120)
    assert where.returncode == 0, where.stderr
    for line in where.stdout.split():
        assert str(wheel_venv) in line and str(REPO) not in line, where.stdout
    p = subprocess.run([str(wheel_venv / "bin" / "llmsim"), "workload.num_requests=40", "output.plots=false",
                        f"hydra.run.dir={tmp_path}/run"],
                       cwd=tmp_path, capture_output=True, text=True, env=_clean_env(), timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["completed"] == 40


@pytest.mark.timeout(600)
def test_reproduce_from_a_wheel_says_what_it_needs(wheel_venv, tmp_path) -> None:
    """The reproductions are not in the wheel: ``llmsim-reproduce`` says so in one line and exits 2."""
    p = subprocess.run([str(wheel_venv / "bin" / "llmsim-reproduce"), "qlm", "--quick"], cwd=tmp_path,
                       capture_output=True, text=True, env=_clean_env(), timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "experiments/" in lines[0] and "checkout" in lines[0], p.stderr


@pytest.mark.timeout(600)
def test_wheel_contents(wheel_venv) -> None:
    import zipfile

    (wheel,) = (wheel_venv.parent / "dist").glob("llmsim-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == TOP_LEVEL, top
    assert "llmsim/conf/config.yaml" in names
    assert {"cluster", "engine", "workload", "policy"} <= {n.split("/")[2] for n in names
                                                           if n.startswith("llmsim/conf/") and n.count("/") == 3}
    assert sum(n.startswith("llmsim/profiles/data/") for n in names) >= 20
    assert {"llmsim/envs/__init__.py", "llmsim/agents/__init__.py", "llmsim/serving/__init__.py",
            "llmsim/profiles/__init__.py"} <= set(names)
    assert not any(n.startswith(("tests/", "notebooks/", "conf/", "experiments/", "llmsim/experiments/"))
                   for n in names)


def _standin_agents_wheel(tmp: Path) -> Path:
    """A wheel named like openai-agents that installs a top-level ``agents`` package (what openai-agents does)."""
    src = tmp / "standin"
    (src / "agents").mkdir(parents=True)
    (src / "agents" / "__init__.py").write_text("WHO = 'openai-agents stand-in'\n")
    (src / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = '
                                        '"setuptools.build_meta"\n[project]\nname = "openai-agents"\n'
                                        'version = "0.0.1"\n[tool.setuptools]\npackages = ["agents"]\n')
    out = tmp / "standin-dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out)], check=True, capture_output=True, text=True, timeout=300, env=_clean_env())
    (wheel,) = out.glob("openai_agents-*.whl")
    return wheel


@pytest.mark.timeout(600)
def test_llmsim_coexists_with_a_top_level_agents_package(wheel_venv, tmp_path) -> None:
    """``pip install llmsim`` and ``pip install openai-agents`` in one venv: neither overwrites the other's files,
    and ``import agents`` (theirs) and ``import llmsim.agents`` (ours) both work, from any directory."""
    py = wheel_venv / "bin" / "python"
    p = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q",
                        str(_standin_agents_wheel(tmp_path))], capture_output=True, text=True, timeout=300,
                       env=_clean_env())
    assert p.returncode == 0, p.stderr
    code = ("import agents, llmsim.agents, llmsim.envs; "
            "assert agents.WHO == 'openai-agents stand-in', agents.__file__; "
            "assert llmsim.agents.__file__ != agents.__file__; print(agents.__file__, llmsim.agents.__file__)")
    q = subprocess.run([str(py), "-c", code], cwd=tmp_path, capture_output=True, text=True, env=_clean_env(),
                       timeout=120)
    assert q.returncode == 0, q.stderr[-2000:]
    theirs, ours = q.stdout.split()
    assert "/llmsim/agents/" in ours and "/llmsim/" not in theirs


def test_editable_install_uses_the_checkout() -> None:
    """The README's commands use an editable install: the same lookups return the repository's files."""
    from llmsim.resources import conf_dir, profile_data_dir, repo_root

    assert conf_dir() == (REPO / "conf").resolve()
    assert profile_data_dir() == (REPO / "profiles" / "data").resolve()
    assert repo_root() == REPO
