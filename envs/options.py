"""Checks for the plug-ins' numeric options (observations, rewards): one line naming the key at construction, since a
zero scale or limit would otherwise divide by zero at the first reset or completion, and a negative one would flip a
feature or a term without a word."""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

from llmsim.errors import ConfigError


def positive(key: str, value: Any, integer: bool = False) -> Any:
    """``value`` unchanged if it is a finite number > 0 (an integer with ``integer``); else one line naming ``key``."""
    kind = Integral if integer else Real
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value) or not value > 0:
        raise ConfigError(f"{key}: expected a positive {'integer' if integer else 'number'}, got {value!r}")
    return value


def non_negative(key: str, value: Any) -> Any:
    """``value`` unchanged if it is a finite number >= 0; else one line naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or not value >= 0:
        raise ConfigError(f"{key}: expected a number >= 0, got {value!r}")
    return value
