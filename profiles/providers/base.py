"""The provider interface: one way of obtaining one part of a profile.

A *part* is one of ``dense``, ``lm_head``, ``prefill_attention``, ``decode_attention``, ``overhead`` and
``memory`` (the sections of a profile YAML). For every part the builder walks an ordered chain of providers
(best source first, see :data:`llmsim.profiles.providers.CHAINS`); the first one that returns a
:class:`PartResult` wins, a provider without data for the (model, GPU, TP) returns ``None``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from llmsim.perf.hardware import GpuSpec
from llmsim.perf.models import ModelSpec

from .raw import Raw

STATUSES = ("measured", "fitted", "transferred", "estimated", "roofline")


@dataclass(frozen=True)
class PartResult:
    """A part's coefficients (a table as a list, or a dict of named coefficients) and its provenance."""

    value: Any
    status: str  # "measured" / "transferred" / "estimated"
    source: str  # human-readable description, written to parts.<part>.source
    sources: frozenset[str] = frozenset()  # keys of llmsim.profiles.providers.raw.SOURCES used
    notes: tuple[str, ...] = ()  # extra lines for provenance.notes
    provider: str = ""  # name of the provider that produced it (set by resolve())

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")


@dataclass
class Context:
    """What a provider is given: the raw-data handle, the model, the GPU and the TP degree.

    ``done`` holds the parts resolved so far (the builder resolves them in a fixed order), ``build_other``
    builds the same model and TP on another GPU (for transfers), ``memo`` caches work shared by several
    providers of one build (e.g. one attention fit gives both attention parts).
    """

    raw: Raw
    model: ModelSpec
    gpu: str  # llmsim GPU name, e.g. "a100-80gb"
    spec: GpuSpec
    tp: int
    build_other: Callable[[str], Any] | None = None
    done: dict[str, PartResult] = field(default_factory=dict)
    _memo: dict[Any, Any] = field(default_factory=dict)

    def memo(self, key: Any, fn: Callable[[], Any]) -> Any:
        if key not in self._memo:
            self._memo[key] = fn()
        return self._memo[key]


class Provider(Protocol):
    """Returns the part for ``ctx`` or ``None`` when it has no data for it (the next provider is tried)."""

    name: str

    def __call__(self, ctx: Context) -> PartResult | None: ...


@dataclass(frozen=True)
class FnProvider:
    """A :class:`Provider` made from a function."""

    name: str
    fn: Callable[[Context], PartResult | None]

    def __call__(self, ctx: Context) -> PartResult | None:
        return self.fn(ctx)


def provider(name: str) -> Callable[[Callable[[Context], PartResult | None]], FnProvider]:
    """Decorator: ``@provider("vidur") def dense(ctx): ...`` makes ``dense`` a named provider."""

    def wrap(fn: Callable[[Context], PartResult | None]) -> FnProvider:
        return FnProvider(name, fn)

    return wrap


def resolve(chain: tuple[Provider, ...], ctx: Context, part: str, skip: frozenset[str] = frozenset()) -> PartResult:
    """The first result of ``chain`` (providers named in ``skip`` are left out)."""
    for p in chain:
        if p.name in skip:
            continue
        r = p(ctx)
        if r is not None:
            return PartResult(r.value, r.status, r.source, frozenset(r.sources), tuple(r.notes), p.name)
    raise LookupError(f"no provider for {part} of {ctx.model.name} on {ctx.gpu} tp{ctx.tp}")
