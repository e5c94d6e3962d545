"""How much an experiment runs: one of three sizes, chosen the same way for every paper and study.

* ``full``: the paper's setting (or as close as the simulator gets); hours for the papers that train.
* ``quick``: a small setting that finishes in minutes and says it is not the paper's.
* ``tiny``: seconds, for the test suite only; its numbers mean nothing.

Each experiment declares what a size is for it (its own ``Size`` dataclass, one instance per name); the harness
only picks one: ``--size NAME`` (a run's ``size=``), else ``$LLMSIM_REPRODUCE_SIZE`` (what the test suite sets),
else ``--quick`` (quick) or nothing (full).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TypeVar

from llmsim.errors import ConfigError

SIZE_ENV = "LLMSIM_REPRODUCE_SIZE"
SIZE_NAMES = ("tiny", "quick", "full")
T = TypeVar("T")


def size_name(quick: bool, size: str | None = None) -> str:
    """The size a run uses (module docstring); an unknown name is a ConfigError naming where it came from."""
    given = size or os.environ.get(SIZE_ENV)
    name = given or ("quick" if quick else "full")
    if name not in SIZE_NAMES:
        where = "--size" if size else SIZE_ENV
        raise ConfigError(f"{where}={name!r}: unknown size; expected one of {', '.join(SIZE_NAMES)}")
    return name


def pick(sizes: Mapping[str, T], quick: bool, size: str | None = None) -> tuple[str, T]:
    """(name, the experiment's own size record) of the size a run uses."""
    name = size_name(quick, size)
    return name, sizes[name]


def seeds_setting(name: str, seeds: int) -> str:
    """The ``setting`` of a run's rows: e.g. ``quick size (1 seed)``."""
    return f"{name} size ({seeds} seed{'s' if seeds > 1 else ''})"
