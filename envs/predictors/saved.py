"""A saved learned predictor's files: the JSON that describes it and the xgboost model files it names, read as data.

Both learned predictors (the output-length buckets and the QoS buckets) save a small JSON plus xgboost's own model
files (UBJ or JSON) beside it. Loading parses those two formats only: nothing is unpickled. The sha256 the JSON
records finds a model file from another save; it proves nothing of who wrote either, so safety never rests on it.
Every problem is one ConfigError line naming the file and what was expected.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmsim.envs.exported import file_sha256
from llmsim.errors import ConfigError

MODEL_FILE_SUFFIXES = (".ubj", ".json")  # xgboost's own formats: the only model files the loader parses


def one_line(e: BaseException, limit: int = 300) -> str:
    """An exception's text on one line (a library's multi-line parse error included), cut at ``limit``."""
    return " ".join(str(e).split())[:limit]


def is_model_file_name(name: Any) -> bool:
    """A bare file name (no folder) of an xgboost model file, as a saved predictor's JSON may name one."""
    return isinstance(name, str) and bool(name) and Path(name).name == name and name.endswith(MODEL_FILE_SUFFIXES)


def read_json(p: Path, hint: str) -> Any:
    """The parsed JSON at ``p`` (not yet checked); ``hint`` says which file was expected there."""
    if not p.is_file():
        raise ConfigError(f"{p}: no such predictor file; expected {hint}")
    try:
        return json.loads(p.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{p}: not a predictor file: expected JSON ({hint}), got {one_line(e)}") from None


def load_xgboost(p: Path, model_file: str, sha256: Any, new_model: Callable[[], Any]) -> Any:
    """The xgboost model ``model_file`` beside the JSON ``p``, parsed by xgboost into ``new_model()``; its recorded
    ``sha256`` is checked first, so that a model file from another save is named as such."""
    mp = p.with_name(model_file)
    if not mp.is_file():
        raise ConfigError(f"{mp}: missing model file (named by {p}); expected the xgboost model saved with it")
    if file_sha256(mp) != sha256:
        raise ConfigError(f"{mp}: does not match {p} (sha256 differs); expected the model file saved with it")
    model = new_model()
    try:
        model.load_model(str(mp))
    except Exception as e:  # noqa: BLE001 - any parse error of the library is a bad file
        raise ConfigError(f"{mp}: not a readable xgboost model (named by {p}): {one_line(e)}") from None
    return model
