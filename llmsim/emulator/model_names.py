"""Which model names are read from disk: only explicit paths.

A model is named three ways (docs/models.md): a registered name or alias, a Hugging Face id (``org/name``), or the
path of a ``config.json`` (or of the folder holding one). The registry lookup would try any unknown name as a path
relative to the working directory, so a plain name (``my-finetune``, a backend's served name) was read from a
file of that name in whatever folder the server was started in. Here a name is read from disk only when it is an
explicit path (:func:`llmsim.perf.models.looks_like_path`, the rule ``get_model`` itself follows); any other name
is looked up in llmsim's registry and, for an ``org/name`` id, in the local hub cache only.
Shared by the emulator (``--model``) and the live router (its backends' models).
"""

from __future__ import annotations

from llmsim.errors import ConfigError
from llmsim.perf.hf_config import hub_cache_config, hub_cache_dir
from llmsim.perf.models import MODELS, PATH_FORMS, looks_like_path, registered_model

__all__ = ["PATH_FORMS", "looks_like_path", "model_source", "registered"]


def registered(name: str) -> bool:
    """Whether llmsim's registry knows ``name`` (a name, an alias or a Hugging Face id; case-insensitive)."""
    return registered_model(name) is not None


def model_source(name: str) -> str:
    """What to hand :func:`llmsim.perf.models.get_model` for ``name`` so that it reads a file only when ``name`` is
    an explicit path: ``name`` itself (a path, or a name the registry knows), or the cached ``config.json`` of a
    Hugging Face id; else a ConfigError, one line starting "unknown model"."""
    if looks_like_path(name) or registered(name):
        return name
    found = hub_cache_config(name)
    if found is not None:
        return str(found)
    raise ConfigError(f"unknown model {name[:200]!r}: give a registered name ({', '.join(sorted(MODELS))}), a "
                      f"Hugging Face id (org/name) whose config.json is in the local hub cache ({hub_cache_dir()}), "
                      f"or the path of a config.json or its folder ({PATH_FORMS}; a plain name is never read from "
                      "the working directory)")
