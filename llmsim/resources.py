"""Where llmsim's shipped files are: the Hydra configs (conf/) and the profile data (profiles/data/).

Both are package data, found through :mod:`importlib.resources`, so an installed wheel works from any
directory; nothing is looked up relative to the current directory or the repository. In a source checkout
(editable install) the same calls return the repository's ``conf/`` and ``profiles/data/``.

The repository keeps its fixed layout (top-level ``conf/``); the wheel ships it as ``llmsim/conf`` (the
``llmsim/conf`` entry in the source tree is a symlink to ``../conf``, which setuptools follows when it
builds the wheel).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from llmsim.errors import LLMSimError


@cache
def conf_dir() -> Path:
    """The directory of the Hydra config groups (``config.yaml``, ``cluster/``, ``workload/``, ...)."""
    path = Path(str(resources.files("llmsim") / "conf"))
    if not (path / "config.yaml").is_file():
        raise LLMSimError(f"llmsim's config directory is missing or incomplete ({path}); reinstall llmsim")
    return path.resolve()


@cache
def profile_data_dir() -> Path:
    """The directory of the shipped profiles, ``<gpu>/<model>[-tpN].yaml``."""
    path = Path(str(resources.files("llmsim") / "profiles" / "data"))
    if not path.is_dir():
        raise LLMSimError(f"llmsim's profile data is missing ({path}); reinstall llmsim")
    return path.resolve()


def repo_root() -> Path | None:
    """The source checkout this llmsim runs from, or None for an installed wheel (for repo-relative paths
    written in conf/, such as ``../shared/traces``)."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() and (root / "conf").is_dir() else None


def experiments_dir() -> Path | None:
    """The source checkout's ``experiments/`` folder (reproductions, studies, benchmarks), or None when llmsim is
    installed from a wheel, which does not ship it."""
    path = Path(__file__).resolve().parents[1] / "experiments"
    return path if (path / "reproduce.py").is_file() else None
