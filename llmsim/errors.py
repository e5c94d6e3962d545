"""Error types whose messages name the file, row or key at fault and what was expected, and the file readers
that raise them."""

from __future__ import annotations

import json
import re
import tempfile
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


MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKey(yaml.YAMLError):
    """A key given twice in one YAML mapping: its text and its (1-based) line."""

    def __init__(self, key: str, line: int) -> None:
        super().__init__(f"line {line}: key {key[:60]!r} given twice in one mapping; give each key once")
        self.key, self.line = key, line


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader (plain data only), but a key given twice in one mapping is a :class:`DuplicateKey`:
    PyYAML keeps the later one without a word, so a file saying two things would be half ignored. Keys that a merge
    (``<<: *anchor``) brings may be overridden; ``1`` and ``'1'`` are different keys, ``yes`` and ``true`` the same."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    again = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: the constructor refuses it with its own message
                    continue
                if again:
                    text = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key)
                    raise DuplicateKey(text, key_node.start_mark.line + 1)
        return super().construct_mapping(node, deep)


def load_yaml_file(path: str | Path, error: type[LLMSimError] = ConfigError) -> Any:
    """The YAML in ``path``, or one line of ``error`` naming the file and the line at fault (not a parser trace),
    a key given twice in one mapping included (:class:`UniqueKeyLoader`)."""
    text = read_text_file(path, error)
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader: plain data only
    except yaml.YAMLError as e:
        raise error(yaml_error_line(e, path)) from None


def yaml_error_line(e: yaml.YAMLError, path: str | Path | None = None) -> str:
    """One line for a YAML error, naming the file (``path``, else the one the parser names) and the line: a key
    given twice (ours, or OmegaConf's "found duplicate key") in one wording, else what the parser expected."""
    mark = getattr(e, "problem_mark", None)
    where = path if path is not None else (mark.name if mark is not None else "YAML")
    if isinstance(e, DuplicateKey):
        return f"{where}: {e}"
    problem = " ".join(str(getattr(e, "problem", None) or "parse error").split())
    twice = re.fullmatch(r"found duplicate key (.+)", problem)
    if twice and mark is not None:
        return f"{where}: {DuplicateKey(twice[1], mark.line + 1)}"
    at = f" at line {mark.line + 1}" if mark is not None else ""
    return f"{where}: not valid YAML{at}: {problem}"


class DuplicateJSONKey(ValueError):
    """A key given twice in one JSON object (``json`` would keep the later value)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` of a JSON file or line read by the project: a key given twice is an error, not the
    later one (the rare case only pays for finding the key)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise DuplicateJSONKey(k)
            seen.add(k)
    return out


def load_json_file(path: str | Path, error: type[LLMSimError] = ConfigError) -> Any:
    """The JSON in ``path``, or one line of ``error`` naming the file and the line at fault (or the key given twice
    in one object)."""
    text = read_text_file(path, error)
    try:
        return json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as e:
        # some of json's messages end in "at" ("Unterminated string starting at"): the position follows once
        raise error(f"{path}: not valid JSON ({e.msg.removesuffix(' at')} at line {e.lineno})") from None
    except DuplicateJSONKey as e:
        raise error(f"{path}: key {e.key[:60]!r} given twice in one object; give each key once") from None


def unwritable_folder(path: str | Path) -> str | None:
    """Why no file can be made at ``path`` (its nearest existing folder takes no new file), or None: an output
    option is checked before a long run, not found out after it (missing folders are made then)."""
    folder = next(d for d in Path(path).absolute().parents if d.exists())
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        return f"cannot write a file in {folder} ({e.strerror or e})"
    return None
