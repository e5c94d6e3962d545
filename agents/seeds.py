"""Which workload seeds are for what: training below 1000, validation 1000-1999, test from 2000.

A router is tuned on what it is judged by unless the seeds are kept apart. Training draws its episodes below
``VALIDATION_SEED0``; checkpoint and preset choice (training's in-run evaluation, a sweep over presets) reads
validation seeds; ``llmsim-evaluate`` and the unseen-traffic suite report on test seeds. After a test result has
been looked at, new tuning needs new test seeds (take the next unused block from ``TEST_SEED0``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmsim.errors import ConfigError

VALIDATION_SEED0 = 1000  # training uses seeds below this
TEST_SEED0 = 2000  # validation uses [VALIDATION_SEED0, TEST_SEED0); reports use seeds from here
DEFAULT_TEST_SEEDS = tuple(range(TEST_SEED0, TEST_SEED0 + 5))
DEFAULT_VALIDATION_SEEDS = tuple(range(VALIDATION_SEED0, VALIDATION_SEED0 + 5))
SPLITS = ("training", "validation", "test")


def split_of(seed: int) -> str:
    """``training``, ``validation`` or ``test``."""
    if seed < VALIDATION_SEED0:
        return "training"
    return "validation" if seed < TEST_SEED0 else "test"


def seed_splits(seeds: Sequence[int]) -> dict[str, list[int]]:
    """The seeds grouped by split (only the splits present)."""
    out: dict[str, list[int]] = {}
    for s in seeds:
        out.setdefault(split_of(int(s)), []).append(int(s))
    return {k: out[k] for k in SPLITS if k in out}


def resolve_seeds(seeds: Any, first: int = TEST_SEED0) -> list[int]:
    """A list of seeds as given, or a count n meaning the n seeds from ``first`` (the test seeds by default)."""
    given = seeds
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        seeds = list(range(first, first + seeds)) if seeds > 0 else None
    if not isinstance(seeds, Sequence) or isinstance(seeds, str) or not seeds or \
            not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise ConfigError(f"seeds: expected a non-empty list of non-negative integers (or a count >= 1), "
                          f"got {given!r}")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds: expected distinct seeds, got {list(seeds)}")
    return [int(s) for s in seeds]


def split_note(seeds: Sequence[int]) -> str:
    """One line saying which split the seeds belong to, and a warning when any is a training seed."""
    parts = [f"{k} {_span(v)}" for k, v in seed_splits(seeds).items()]
    note = "seeds: " + "; ".join(parts)
    if split_of(min(seeds)) == "training":
        note += (f" -- WARNING: seeds below {VALIDATION_SEED0} are training seeds: these rows are not held out")
    elif split_of(max(seeds)) == "validation":
        note += " (validation seeds: for checkpoint and preset choice; report test seeds >= 2000)"
    return note


def _span(seeds: Sequence[int]) -> str:
    s = sorted(seeds)
    return f"{s[0]}-{s[-1]}" if len(s) > 1 and s == list(range(s[0], s[-1] + 1)) else ", ".join(map(str, s))
