"""What the perf room's tests share: the committed tiny configs and the real ones in ../shared (skipped if absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import SHARED

CONFIGS = Path(__file__).resolve().parent / "configs"
REAL_CONFIGS = SHARED / "profiles_raw" / "llmservingsim" / "configs" / "model"
needs_real_configs = pytest.mark.skipif(
    not REAL_CONFIGS.is_dir(), reason=f"real Hugging Face configs {REAL_CONFIGS} absent (../shared is only in the "
    "dev/CI workspace)")


def tiny(name: str) -> str:
    """Path of a committed tiny config (tests/perf/configs/<name>.json)."""
    return str(CONFIGS / f"{name}.json")
