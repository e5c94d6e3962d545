"""Error types whose messages name the file, row or key at fault and what was expected, and the file readers
that raise them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml


class LLMSimError(Exception):
    """Base class for every error llmsim raises on bad input."""


class ConfigError(LLMSimError, ValueError):
    """An impossible or malformed configuration (unknown key, model that does not fit, ...)."""


class TraceError(LLMSimError, ValueError):
    """A malformed trace file or row."""


class ProfileError(LLMSimError, ValueError):
    """A missing, corrupt or unknown profile."""


def read_text_file(path: str | Path, error: type[LLMSimError] = ConfigError) -> str:
    """The UTF-8 text of ``path``, or one line of ``error`` naming the file: missing, unreadable or not UTF-8."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text (byte {e.start}); expected a UTF-8 text file") from None
    except OSError as e:
        raise error(f"{path}: cannot read it ({e.strerror or type(e).__name__})") from None


def load_yaml_file(path: str | Path, error: type[LLMSimError] = ConfigError) -> Any:
    """The YAML in ``path``, or one line of ``error`` naming the file and the line at fault (not a parser trace)."""
    text = read_text_file(path, error)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise error(f"{path}: not valid YAML{at}: {getattr(e, 'problem', None) or 'parse error'}") from None


def load_json_file(path: str | Path, error: type[LLMSimError] = ConfigError) -> Any:
    """The JSON in ``path``, or one line of ``error`` naming the file and the line at fault."""
    text = read_text_file(path, error)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
