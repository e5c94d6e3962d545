"""Emulators shared by a test module: one default, one with a short context and a small KV cache."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import httpx  # noqa: E402

from llmsim.emulator import start_emulator  # noqa: E402
from tests.emulator.helpers import MODEL  # noqa: E402


@pytest.fixture(scope="module")
def emu() -> Any:
    with start_emulator(MODEL, "a100-80gb", speedup=20.0) as h:
        httpx.get(h.url + "/health")  # warm the first-request paths
        yield h


@pytest.fixture(scope="module")
def small() -> Any:
    """A short context (512) and a small KV cache (64 blocks of 16), fast (50x): limits and preemption."""
    with start_emulator(MODEL, "a100-80gb", speedup=50.0, max_model_len=512, num_gpu_blocks=64) as h:
        yield h
