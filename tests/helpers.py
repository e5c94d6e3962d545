"""What tests share: the repository's paths and the Hypothesis example scaling (fixtures live in conftest.py).

No test module imports another test module; a room's own shared builders live in ``tests/<room>/helpers.py``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from hypothesis import settings

from llmsim.compiled import in_use as compiled_in_use

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
BASE_EXAMPLES = 100  # what examples(n) is relative to: dev and ci run n, fuzz 20 n
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or "ci"


def examples(n: int) -> int:
    """``n`` examples under dev / ci, proportionally more under fuzz (tests state their cost, profiles scale)."""
    return max(1, math.ceil(n * settings.get_profile(HYPOTHESIS_PROFILE).max_examples / BASE_EXAMPLES))


def hang_limit(seconds: float) -> pytest.MarkDecorator:
    """pytest-timeout mark for a Hypothesis test, scaled like :func:`examples`.

    The thread method ends the (xdist worker) process: with the default signal method, Hypothesis takes
    the timeout's failure for a failing example and goes on shrinking, replaying the hanging example.
    """
    return pytest.mark.timeout(examples(seconds), method="thread")


def shared_present() -> bool:
    """``../shared`` is there with something in it (an empty folder of that name, e.g. left in a temporary
    directory beside a clone, has none of the data)."""
    return SHARED.is_dir() and any(SHARED.iterdir())


def need_shared() -> Path:
    """``../shared`` (real traces and measurements), or skip with the reason."""
    if not shared_present():
        pytest.skip(f"../shared is absent ({SHARED}): real data is only available in the dev/CI workspace")
    return SHARED


def assert_frames_identical(a, b) -> None:
    """Two SimResults are the same run: every table equal, every summary value equal (NaN equals NaN)."""
    assert a.requests.equals(b.requests)
    assert a.dropped.equals(b.dropped)
    assert a.timeline.equals(b.timeline)
    assert a.instances.equals(b.instances)
    assert a.summary.keys() == b.summary.keys()
    for k, v in a.summary.items():
        w = b.summary[k]
        assert v == w or (v != v and w != w), k


# a test that patches the engine's classes (a compiled build's classes take no patches) runs on the Python engine only
python_engine_only = pytest.mark.skipif(
    compiled_in_use() is not None,
    reason="patches the engine's classes, which the compiled engine in use (python -m llmsim.compile status) does not "
           "allow; CI runs the Python engine",
)
