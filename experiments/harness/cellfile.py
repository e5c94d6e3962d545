"""Per-cell checkpoints: each finished cell's result row, one JSON line in ``OUT/cells.jsonl``, so a stopped run
resumes where it stopped (``llmsim-reproduce NAME --out OUT --resume``; docs/reproduce.md).

The file's first line is a header with the run's *setting* (experiment, size, options and a digest of the code and
the Python / numpy versions); every other line is ``{"key": ..., "row": ...}``. A cell's key is a hash of the cell
function's name and the cell's fields, so a resumed run keeps exactly the rows of cells it would compute again. Rows
are stored in a typed JSON (tuples, non-string dict keys, numpy scalars and arrays tagged; never pickle) that
decodes to values equal in type and content, so a resumed run's outputs are byte-identical to an uninterrupted one.
A row that holds anything else is not stored (counted on stderr; that cell runs again on a resume).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
import os
import platform
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np

import experiments
import llmsim
from llmsim.errors import ConfigError

CELLS_FILE = "cells.jsonl"
FORMAT = 1
TAG = "$t"
_ACTIVE: list[CellFile] = []


class Unstorable(TypeError):
    """A value the typed JSON cannot hold exactly."""


# ---------------------------------------------------------------------- the typed JSON
def encode(x: Any) -> Any:
    """``x`` as JSON-able data that :func:`decode` turns back into an equal value of the same types."""
    t = type(x)
    if x is None or t in (bool, int, float, str):
        return x
    if t is list:
        return [encode(v) for v in x]
    if t is tuple:
        return {TAG: "tuple", "v": [encode(v) for v in x]}
    if t is dict:
        if all(type(k) is str for k in x) and TAG not in x:
            return {k: encode(v) for k, v in x.items()}
        return {TAG: "dict", "v": [[encode(k), encode(v)] for k, v in x.items()]}
    if isinstance(x, (np.generic, np.ndarray)) and x.dtype.kind in "biuf":
        if isinstance(x, np.ndarray):
            return {TAG: "ndarray", "dtype": x.dtype.str, "shape": list(x.shape), "v": x.ravel().tolist()}
        return {TAG: "np", "dtype": x.dtype.str, "v": x.item()}
    raise Unstorable(f"a {t.__module__}.{t.__qualname__}")


def decode(x: Any) -> Any:
    """The value :func:`encode` was given."""
    if type(x) is list:
        return [decode(v) for v in x]
    if type(x) is not dict:
        return x
    tag = x.get(TAG)
    if tag is None:
        return {k: decode(v) for k, v in x.items()}
    if tag == "tuple":
        return tuple(decode(v) for v in x["v"])
    if tag == "dict":
        return {decode(k): decode(v) for k, v in x["v"]}
    if tag == "np":
        return np.dtype(x["dtype"]).type(x["v"])
    if tag == "ndarray":
        return np.array(x["v"], dtype=np.dtype(x["dtype"])).reshape(x["shape"])
    raise ValueError(f"unknown tag {tag!r}")


def _canon(x: Any) -> Any:
    """A cell as JSON-able data for its key: the typed JSON plus dataclasses, enums and paths (one way only)."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {TAG: f"{type(x).__module__}.{type(x).__qualname__}",
                "v": {f.name: _canon(getattr(x, f.name)) for f in dataclasses.fields(x)}}
    if isinstance(x, enum.Enum):
        return {TAG: f"{type(x).__module__}.{type(x).__qualname__}", "v": _canon(x.value)}
    if isinstance(x, Path):
        return {TAG: "path", "v": str(x)}
    if type(x) in (list, tuple):
        return {TAG: type(x).__name__, "v": [_canon(v) for v in x]}
    if type(x) is dict:
        return {TAG: "dict", "v": [[_canon(k), _canon(v)] for k, v in x.items()]}
    return encode(x)


def cell_key(fn: Callable[..., Any], cell: Any) -> str:
    """A stable key of ``fn`` applied to ``cell`` (Unstorable when the cell holds a value without a stable form)."""
    name = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"
    text = json.dumps([name, _canon(cell)], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


# ---------------------------------------------------------------------- the setting
@functools.cache
def code_digest() -> str:
    """A digest of every source and data file of the llmsim and experiments packages: cells computed by other code
    are not kept."""
    h = hashlib.sha256()
    for pkg in (llmsim, experiments):
        root = Path(pkg.__file__).parent
        for p in sorted(root.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
                h.update(f"{pkg.__name__}/{p.relative_to(root).as_posix()}\0".encode())
                h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()[:16]


def run_setting(experiment: str, size: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """What a run's cells depend on besides their own fields (the cells file's header)."""
    return {"experiment": experiment, "size": size, "options": {k: str(v) for k, v in sorted(options.items())},
            "code": code_digest(), "python": platform.python_version(), "numpy": np.__version__}


# ---------------------------------------------------------------------- the file
class CellFile:
    """An open cells file: the rows kept from an earlier run (``--resume``) and the handle new rows go to."""

    def __init__(self, path: Path, resume: bool, rows: dict[str, Any], handle: IO[str]) -> None:
        self.path, self.resume, self.rows, self.handle = path, resume, rows, handle
        self.pid = os.getpid()  # a forked worker inherits the handle but must not write to it

    def add(self, key: str, row: Any) -> bool:
        """Append ``row`` (flushed); False when it cannot be stored exactly."""
        try:
            line = json.dumps({"key": key, "row": encode(row)}, separators=(",", ":"))
        except (Unstorable, ValueError):
            return False
        self.handle.write(line + "\n")
        self.handle.flush()
        return True


def _header(setting: Mapping[str, Any]) -> str:
    return json.dumps({"llmsim_cells": FORMAT, "setting": dict(setting)}, separators=(",", ":")) + "\n"


def _differs(path: Path, there: Mapping[str, Any], here: Mapping[str, Any]) -> str:
    keys = [k for k in sorted({*there, *here}) if there.get(k) != here.get(k)]
    parts = "; ".join(f"{k}: {there.get(k)!r} there, {here.get(k)!r} here" for k in keys)
    return (f"{path}: its cells are of another setting ({parts}); resume with the same setting and code, or use "
            "another --out")


def _read(path: Path, setting: Mapping[str, Any], label: str) -> tuple[list[str], dict[str, Any]]:
    """The valid row lines of an earlier run's file and their rows by key; refuses another setting or a bad line.
    A cut-off last line (the run was killed while writing it) is skipped with a note."""
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        print(f"[{label}] note: {path}: skipped a cut-off last line (the run was stopped while writing it)",
              file=sys.stderr, flush=True)
        lines = lines[:-1]
    if not lines:
        return [], {}
    try:
        there = json.loads(lines[0])["setting"]
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"{path}: line 1: not a cells file header (expected {{\"llmsim_cells\": {FORMAT}, "
                          "\"setting\": ...}); move it away to start again") from None
    if there != json.loads(json.dumps(dict(setting))):
        raise ConfigError(_differs(path, there, setting))
    rows: dict[str, Any] = {}
    for n, line in enumerate(lines[1:], 2):
        try:
            body = json.loads(line)
            rows[str(body["key"])] = decode(body["row"])
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"{path}: line {n}: not a cell row ({type(e).__name__}: {e}); expected "
                              "{\"key\": ..., \"row\": ...}") from None
    return lines[1:], rows


def refuse_earlier(path: Path) -> None:
    """A new run (no ``--resume``) does not overwrite the cells an earlier one recorded in ``path``."""
    if path.is_file() and len(path.read_text().splitlines()) > 1:
        raise ConfigError(f"{path}: holds the cells of an earlier run; add --resume to keep them, or remove it "
                          "(or use another --out) to start again")


@contextmanager
def recording(path: Path, setting: Mapping[str, Any], resume: bool, label: str) -> Iterator[CellFile]:
    """Within the block, :func:`experiments.harness.pool.run_cells` keeps and records its cells in ``path``.
    Without ``resume`` an existing file with rows is refused (they would be lost); with it, its rows of the same
    setting are kept."""
    kept_lines: list[str] = []
    rows: dict[str, Any] = {}
    if path.is_file():
        if resume:
            kept_lines, rows = _read(path, setting, label)
        else:
            refuse_earlier(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(_header(setting) + "".join(kept_lines))
    os.replace(tmp, path)
    with path.open("a") as handle:
        store = CellFile(path, resume, rows, handle)
        _ACTIVE.append(store)
        try:
            yield store
        finally:
            _ACTIVE.remove(store)


def active() -> CellFile | None:
    """The cells file of the run in progress, if any (none in a worker process forked from that run)."""
    return _ACTIVE[-1] if _ACTIVE and _ACTIVE[-1].pid == os.getpid() else None
