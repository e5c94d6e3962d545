"""Build a pluggable part (observation, reward, ...) from a name, a ``{"kind": ...}`` dict or an instance."""

from __future__ import annotations

from typing import Any

from llmsim.errors import ConfigError


def build_part(spec: Any, registry: dict[str, type], base: type, default: str, what: str, **kwargs: Any) -> Any:
    if isinstance(spec, base):
        return spec
    if spec is None:
        spec = default
    if isinstance(spec, dict):
        kw = dict(spec)
        if "kind" not in kw:
            raise ConfigError(f"{what}: a mapping needs a 'kind' key, one of {sorted(registry)}; got {spec!r}")
        spec = kw.pop("kind")
        kw.update(kwargs)
        kwargs = kw
    if spec not in registry:
        raise ConfigError(f"unknown {what} {spec!r}; expected one of {sorted(registry)}")
    return registry[spec](**kwargs)
