"""The one registry style of llmsim: a named table of classes (or factories) with one error message.

Every pluggable part - batch policies, routers, profile loaders, env observations, rewards,
predictors, length and arrival presets - lives in a :class:`Registry`. Registering is a decorator
(``@ROUTERS.register`` uses the class's ``name``; ``@ROUTERS.register("alias")`` names it), looking
up an unknown name raises :class:`ConfigError` naming the key and the choices, and ``build`` accepts
the three spellings configs use: a name, a ``{"kind": name, **kwargs}`` mapping, or a ready instance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from llmsim.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """Name -> entry. ``what`` is how errors name the thing ("batch policy", "engine.policy", ...)."""

    def __init__(self, what: str, key: str = "kind") -> None:
        self.what = what
        self.key = key  # the mapping key that names the entry in ``build`` ("kind", "name")
        self._entries: dict[str, T] = {}

    def register(self, entry: Any = None, *, name: str | None = None) -> Any:
        """Decorator or call: ``@reg.register``, ``@reg.register("name")`` or ``reg.register(obj, name=...)``."""
        if isinstance(entry, str):
            return lambda obj: self._add(entry, obj)
        if entry is None:
            return lambda obj: self._add(name or obj.name, obj)
        return self._add(name or entry.name, entry)

    def _add(self, name: str, entry: T) -> T:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{self.what}: a registered entry needs a non-empty name, got {name!r}")
        self._entries[name] = entry
        return entry

    def get(self, name: Any, where: str | None = None) -> T:
        if not isinstance(name, str) or name not in self._entries:
            at = where or self.what
            raise ConfigError(f"{at}: unknown {self.what} {name!r}; expected one of {self.names()}")
        return self._entries[name]

    def build(self, spec: Any, base: type | None = None, default: str | None = None, where: str | None = None,
              **kwargs: Any) -> Any:
        """An instance from a name, a ``{key: name, ...}`` mapping (the rest are kwargs) or an instance."""
        if base is not None and isinstance(spec, base):
            return spec
        if spec is None:
            spec = default
        at = where or self.what
        if isinstance(spec, Mapping):
            kw = dict(spec)
            if self.key not in kw:
                raise ConfigError(f"{at}: a mapping needs a {self.key!r} key, one of {self.names()}; got {spec!r}")
            spec = kw.pop(self.key)
            kw.update(kwargs)
            kwargs = kw
        factory: Callable[..., Any] = self.get(spec, at)  # type: ignore[assignment]
        try:
            return factory(**kwargs)
        except TypeError as e:
            raise ConfigError(f"{at}: {self.what} {spec!r} rejected its options {sorted(kwargs)}: {e}") from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def items(self) -> list[tuple[str, T]]:
        return sorted(self._entries.items())
