"""The one registry style of llmsim: a named table of classes (or factories) with one error message.

Every pluggable part - batch policies, routers, profile loaders, env observations, rewards,
predictors, length and arrival presets - lives in a :class:`Registry`. Registering is a decorator
(``@ROUTERS.register`` uses the class's ``name``; ``@ROUTERS.register("alias")`` names it), looking
up an unknown name raises :class:`ConfigError` naming the key and the choices, and ``build`` accepts
the three spellings configs use: a name, a ``{"kind": name, **kwargs}`` mapping, or a ready instance.

``register_lazy(name, "module:attribute")`` registers an entry of llmsim's own whose module is imported only when
the entry is first looked up (a router whose module needs scipy stays off ``import llmsim``'s path); its name is
listed like any other.

``plugins`` names an entry-point group (``[project.entry-points."llmsim.routers"]`` in a package's
pyproject.toml): a name not registered is looked up there, loaded and registered on first use. That is how a
layer above llmsim (the envs' exported-policy router, ``onnx``) plugs in without llmsim importing it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from llmsim.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """Name -> entry. ``what`` is how errors name the thing ("batch policy", "engine.policy", ...)."""

    def __init__(self, what: str, key: str = "kind", plugins: str | None = None) -> None:
        self.what = what
        self.key = key  # the mapping key that names the entry in ``build`` ("kind", "name")
        self.plugins = plugins  # entry-point group consulted for names not registered (None: none)
        self._entries: dict[str, T] = {}
        self._lazy: dict[str, str] = {}  # name -> "module:attribute" of llmsim's own, imported on first use

    def register(self, entry: Any = None, *, name: str | None = None) -> Any:
        """Decorator or call: ``@reg.register``, ``@reg.register("name")`` or ``reg.register(obj, name=...)``."""
        if isinstance(entry, str):
            return lambda obj: self._add(entry, obj)
        if entry is None:
            return lambda obj: self._add(name or obj.name, obj)
        return self._add(name or entry.name, entry)

    def register_lazy(self, name: str, target: str) -> None:
        """Register ``name`` as ``module:attribute``, imported when ``name`` is first looked up."""
        if not isinstance(name, str) or not name or ":" not in target:
            raise ConfigError(f"{self.what}: a lazy entry needs a name and a 'module:attribute', got {name!r}, "
                              f"{target!r}")
        self._lazy[name] = target

    def _load_lazy(self, name: str) -> None:
        module, attr = self._lazy.pop(name).split(":")
        entry = getattr(importlib.import_module(module), attr)  # registers itself on import, or is added here
        if name not in self._entries:
            self._add(name, entry)

    def _add(self, name: str, entry: T) -> T:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{self.what}: a registered entry needs a non-empty name, got {name!r}")
        self._entries[name] = entry
        return entry

    def get(self, name: Any, where: str | None = None) -> T:
        if isinstance(name, str) and name not in self._entries and name in self._lazy:
            self._load_lazy(name)
        if isinstance(name, str) and name not in self._entries and self.plugins:
            self._load_plugin(name, where or self.what)
        if not isinstance(name, str) or name not in self._entries:
            at = where or self.what
            extra = [p for p in self.plugin_names() if p not in self._entries]
            raise ConfigError(f"{at}: unknown {self.what} {name!r}; expected one of {sorted(self.names() + extra)}")
        return self._entries[name]

    def plugin_names(self) -> list[str]:
        """Names the ``plugins`` entry-point group offers (installed packages' metadata; nothing imported)."""
        if not self.plugins:
            return []
        return sorted({ep.name for ep in entry_points(group=self.plugins)})

    def _load_plugin(self, name: str, at: str) -> None:
        """Load and register entry point ``name`` of the ``plugins`` group, if one is installed."""
        eps = [ep for ep in entry_points(group=self.plugins) if ep.name == name]
        if not eps:
            return
        try:
            entry = eps[0].load()
        except Exception as e:  # an optional dependency of the plugin missing, typically
            raise ConfigError(f"{at}: {self.what} {name!r} is provided by {eps[0].value} (entry point group "
                              f"{self.plugins!r}), which failed to load: {type(e).__name__}: {e}") from None
        if name not in self._entries:
            self._add(name, entry)

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
        return sorted({*self._entries, *self._lazy})

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._lazy

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def items(self) -> list[tuple[str, T]]:
        """Every entry, lazy ones imported."""
        for name in list(self._lazy):
            self._load_lazy(name)
        return sorted(self._entries.items())
