"""Shared fixtures and the Hypothesis profiles of the suite.

Hypothesis profiles (property tests in tests/test_properties.py):

- ``ci`` (the default, so the README's test command and CI run the same thing): derandomised, so a run is
  a pure function of the code; no example database; a failure prints the blob to reproduce it with
  ``@reproduce_failure``.
- ``dev``: random examples, replaying failures found before from ``.hypothesis/`` (git-ignored).
- ``fuzz``: 20x the examples of ``ci``, random, for a long local search before a release or after touching
  the engine, cluster or fast path.

    .venv/bin/python -m pytest -n 2                                          # ci (what CI runs)
    HYPOTHESIS_PROFILE=dev .venv/bin/python -m pytest -n 2                   # new random examples each run
    HYPOTHESIS_PROFILE=fuzz .venv/bin/python -m pytest tests/test_properties.py -n 2

Tests scale their example counts with :func:`examples`, so a profile changes every property test, not only
the ones without an explicit count; their time limits (:func:`hang_limit`) scale the same way.
"""

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.helpers import BASE_EXAMPLES as _BASE_EXAMPLES
from tests.helpers import HYPOTHESIS_PROFILE, REPO, SHARED, examples, hang_limit, shared_present  # noqa: F401 (old imports)

os.environ.setdefault("MPLBACKEND", "Agg")

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("dev", max_examples=_BASE_EXAMPLES, **_COMMON)
settings.register_profile("ci", max_examples=_BASE_EXAMPLES, derandomize=True, database=None, print_blob=True,
                          **_COMMON)
settings.register_profile("fuzz", max_examples=20 * _BASE_EXAMPLES, print_blob=True, **_COMMON)
settings.load_profile(HYPOTHESIS_PROFILE)


@pytest.fixture
def shared_dir() -> Path:
    if not shared_present():
        pytest.skip(f"../shared is absent ({SHARED}): real data is only available in the dev/CI workspace")
    return SHARED


@pytest.fixture
def one_torch_thread():
    """torch on one thread for the test: PyG's scatter on tiny graphs is ~50x slower with OpenMP threads on a busy
    machine, and the parity checks compare single-thread results."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
