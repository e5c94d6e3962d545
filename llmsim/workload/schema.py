"""The ``workload`` config group's schema: one model per source ``kind`` (the arrival ``process`` and length
``dist`` models of generated streams are in :mod:`llmsim.workload.stream_schema`).

Dispatch on ``kind`` is done by hand (not a pydantic tagged union) so an error names the key as the user wrote
it (``workload.window``), never a union branch. Every model forbids unknown keys and non-finite numbers; see
:mod:`llmsim.schema` for the message format.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, StrictBool, field_validator, model_validator

from llmsim.errors import ConfigError
from llmsim.resources import conf_dir
from llmsim.schema import Float, Int, NonNegFloat, PosFloat, PosInt, Schema, TokenCount, check_choice, show
from llmsim.workload.stream_schema import Cv, parse_arrival, parse_length, parse_pair
from llmsim.workload.traces import BURSTGPT_DOWNLOAD, shared_column

MixWeights = dict[str, NonNegFloat]


# ---------------------------------------------------------------------------------------------- sources
class _Common(Schema):
    rate_scale: PosFloat = 1.0
    window: Any = None
    max_requests: PosInt | None = None

    @field_validator("window", mode="before")
    @classmethod
    def _window(cls, w: Any) -> Any:
        return _parse_window(w)


def _parse_window(w: Any) -> tuple[float, float | None] | None:
    if w is None:
        return None
    if isinstance(w, Mapping):
        unknown = set(w) - {"start", "end"}
        if unknown:
            raise ValueError(f"window keys start and end only, not {sorted(unknown)}")
        start, end = w.get("start", 0.0), w.get("end")
    elif isinstance(w, list | tuple) and len(w) == 2:
        start, end = w
    else:
        raise ValueError("a window [start_s, end_s] or {start, end}")
    s = _window_num(start if start is not None else 0.0, "start")
    e = None if end is None else _window_num(end, "end")
    if e is not None and e <= s:
        raise ValueError("a window end > its start (a window [start_s, end_s])")
    return s, e


def _window_num(v: Any, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"a number of seconds as the window {name}")
    f = float(v)
    if not (f == f and abs(f) != float("inf")) or f < 0:
        raise ValueError(f"a finite window {name} >= 0")
    return f


class SyntheticSource(_Common):
    kind: Literal["synthetic"]
    arrival: dict[str, Any]
    rate: PosFloat | None = None
    lengths: str | dict[str, Any] | None = None
    prompt: Any = None  # a length model (checked by parse_length) or a bare token count
    output: Any = None  # a length model (checked by parse_length) or a bare token count
    num_requests: PosInt | None = None
    duration: PosFloat | None = None
    task_mix: MixWeights | None = None
    tenant_mix: MixWeights | None = None
    slo_class_mix: MixWeights | None = None
    model_mix: MixWeights | None = None


OnError = Literal["raise", "skip"]
Path_ = Annotated[str, Field(min_length=1)]


class _Trace(_Common):
    """What every trace replay shares: a malformed row raises or is skipped (``on_error``), and a prompt longer than
    ``max_prompt`` tokens is skipped and counted (``prompt_over_max_prompt``): a trace's rows are what they are, so
    a row that cannot fit the model's context is left out and reported, never shortened."""

    on_error: OnError = "raise"
    max_prompt: TokenCount | None = None


class AzureSource(_Trace):
    kind: Literal["azure"]
    path: Path_


Labels = Annotated[str, Field(min_length=1)] | Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]


HashBlock = Annotated[Int, Field(ge=1, le=2**20)]  # tokens per prefix-block id


class BurstGPTSource(_Trace):
    kind: Literal["burstgpt"]
    path: Path_ | None = None  # required: checked by parse_workload, whose message says where to download it
    model: Labels | None = None
    log_type: Labels | None = None
    time_origin: Literal["first_row", "midnight"] = "first_row"
    sessions: StrictBool = False  # prefix-block ids from Session ID conversations (llmsim.workload.sessions)
    hash_block: HashBlock = 16
    max_sessions: PosInt = 4096


Unit = Annotated[Float, Field(gt=-1, lt=1)]
DayValues = Annotated[list[NonNegFloat], Field(min_length=1, max_length=1440)]


class ZipfSpec(Schema):
    """Truncated Zipf: P(k) ~ k^-theta on [min, max]."""

    theta: Annotated[Float, Field(gt=0, le=10)] | None = None
    min: TokenCount | None = None
    max: TokenCount | None = None


class ServiceSpec(Schema):
    """Overrides of a BurstGPT-like service's defaults (both models); see llmsim.workload.burstgpt_like."""

    profile: DayValues | None = None
    cv: Cv | Annotated[list[Cv], Field(min_length=1, max_length=1440)] | None = None
    rate_noise: Annotated[Float, Field(ge=0, le=3)] | None = None
    request: ZipfSpec | None = None
    response: Annotated[list[Annotated[list[NonNegFloat], Field(min_length=3, max_length=3)]],
                        Field(min_length=1)] | None = None
    corr: Unit | None = None


BURSTGPT_MODELS = ("ChatGPT", "GPT-4")
BURSTGPT_SERVICES = ("conversation", "api")
LOG_TYPES = {"Conversation log": "conversation", "API log": "api", "conversation": "conversation", "api": "api"}


class BurstGPTLikeSource(_Common):
    kind: Literal["burstgpt_like"]
    rate: PosFloat = 1.0
    model: str | dict[str, NonNegFloat] = "ChatGPT"
    mix: dict[str, NonNegFloat] | None = None
    log_type: str | None = None
    start_hour: Annotated[Float, Field(ge=0, lt=24)] = 0.0
    period_s: Annotated[Float, Field(gt=0, le=86400)] = 1200.0
    diurnal: StrictBool = True
    conversation: ServiceSpec | None = None
    api: ServiceSpec | None = None
    max_prompt: TokenCount | None = None
    max_output: TokenCount | None = None
    num_requests: PosInt | None = None
    duration: PosFloat | None = None

    @field_validator("model")
    @classmethod
    def _model(cls, v: Any) -> Any:
        names = [v] if isinstance(v, str) else list(v)
        if not names or any(n not in BURSTGPT_MODELS for n in names):
            raise ValueError(f"one of {list(BURSTGPT_MODELS)} or a mapping of them to weights")
        if isinstance(v, dict) and not sum(v.values()) > 0:
            raise ValueError("model weights with a positive sum")
        return v

    @field_validator("mix")
    @classmethod
    def _mix(cls, v: Any) -> Any:
        if v is not None and (not v or any(k not in BURSTGPT_SERVICES for k in v) or not sum(v.values()) > 0):
            raise ValueError(f"a mapping of {list(BURSTGPT_SERVICES)} to weights with a positive sum")
        return v

    @field_validator("log_type")
    @classmethod
    def _log_type(cls, v: Any) -> Any:
        if v is not None and v not in LOG_TYPES:
            raise ValueError(f"one of {list(LOG_TYPES)}")
        return v

    @model_validator(mode="after")
    def _bounded(self) -> BurstGPTLikeSource:
        if self.mix is not None and self.log_type is not None:
            raise ValueError("either 'mix' or 'log_type', not both")
        if self.num_requests is None and self.duration is None and self.max_requests is None:
            raise ValueError("'num_requests', 'duration' or 'max_requests' (the stream is endless)")
        return self


class MooncakeSource(_Trace):
    kind: Literal["mooncake"]
    path: Path_
    jitter_s: NonNegFloat = 0.0


Share = Annotated[Float, Field(ge=0, le=1)]


class PromptPoolSpec(Schema):
    """``count`` shared prompts of ``tokens`` tokens, Zipf(``zipf``) popularity (0: uniform), used with
    probability ``prob`` (llmsim.workload.prefix.PromptPool)."""

    count: PosInt
    tokens: TokenCount
    zipf: Annotated[Float, Field(ge=0, le=10)] = 1.0
    prob: Share = 1.0


class SharedPrefixSource(_Common):
    """Chat sessions sharing system prompts / few-shot templates (llmsim.workload.prefix.SharedPrefixWorkload)."""

    kind: Literal["shared_prefix"]
    arrival: dict[str, Any]  # session starts
    rate: PosFloat | None = None
    lengths: str | dict[str, Any] | None = None  # (user message, output) pairs
    user: Any = None  # a length model (checked by parse_length) or a bare token count
    output: Any = None  # a length model (checked by parse_length) or a bare token count
    turns: Any = 1  # turns per session: a length model or a bare count
    think_time: NonNegFloat = 30.0
    reuse: Share = 1.0
    system: PromptPoolSpec | None = None
    fewshot: PromptPoolSpec | None = None
    max_prompt: TokenCount = 32768
    hash_block: HashBlock = 16
    num_requests: PosInt | None = None
    duration: PosFloat | None = None


class CsvColumns(Schema):
    arrival: Annotated[str, Field(min_length=1)]
    prompt: Annotated[str, Field(min_length=1)]
    output: Annotated[str, Field(min_length=1)]
    task: str | None = None
    tenant: str | None = None
    slo_class: str | None = None


class CsvSource(_Trace):
    kind: Literal["csv"]
    path: Path_
    columns: CsvColumns
    arrival_unit: Literal["s", "ms", "us", "datetime"] = "s"
    extra: dict[str, str] | list[str] | None = None
    filters: dict[str, str | list[str]] | None = None
    delimiter: Annotated[str, Field(min_length=1, max_length=1)] = ","


SOURCES: dict[str, type[_Common]] = {
    "synthetic": SyntheticSource, "azure": AzureSource, "burstgpt": BurstGPTSource,
    "burstgpt_like": BurstGPTLikeSource, "mooncake": MooncakeSource, "csv": CsvSource,
    "shared_prefix": SharedPrefixSource,
}


def _presets_of(kind: str) -> list[str]:
    """The conf/workload presets of ``kind`` (for the hint below); none if conf/ cannot be read."""
    try:
        found = []
        for f in sorted((conf_dir() / "workload").glob("*.yaml")):
            data = yaml.safe_load(f.read_text())
            if isinstance(data, Mapping) and data.get("kind") == kind:
                found.append(f.stem)
        return found
    except Exception:  # a hint must never hide the real error
        return []


def _check_switched_kind(cfg: Mapping[str, Any], kind: str, where: str) -> None:
    """``workload.kind=X`` on the command line keeps the other keys of the selected preset: say so, in one line.

    Only when every unknown key belongs to another kind (a plain typo gets the schema's own message), and not
    for one key that is close to a key of this kind (``num_requests`` added to a trace preset: ``max_requests``).
    """
    own = SOURCES[kind].model_fields
    unknown = sorted(set(cfg) - set(own))
    owners = [k for k, m in SOURCES.items() if k != kind and unknown and set(unknown) <= set(m.model_fields)]
    if not owners or (len(unknown) == 1 and difflib.get_close_matches(unknown[0], list(own), n=1)):
        return
    presets = _presets_of(kind)
    keys = repr(unknown[0]) if len(unknown) == 1 else str(unknown)
    use = (f"select a preset of that kind instead ({' or '.join(f'{where}={p}' for p in presets)}) or drop "
           if presets else "drop ")
    raise ConfigError(
        f"{where}: unknown key{'s' if len(unknown) > 1 else ''} {keys} for kind {kind!r}; "
        f"{'they are keys' if len(unknown) > 1 else 'it is a key'} of kind {owners[0]!r}: setting {where}.kind on "
        f"the command line keeps the rest of the selected preset, so {use}"
        + ("them with " if len(unknown) > 1 else "it with ") + " ".join(f"~{where}.{k}" for k in unknown)
    )


def parse_workload(cfg: Any, where: str = "workload") -> _Common:
    """The validated source model of a workload config (nested arrival / length models checked too)."""
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"{where}: expected a mapping with a 'kind' key, got {show(cfg)}")
    if "kind" not in cfg:
        raise ConfigError(f"{where}.kind: missing required key; expected one of {sorted(SOURCES)}")
    kind = check_choice(cfg["kind"], SOURCES, f"{where}.kind")
    _check_switched_kind(cfg, kind, where)
    if kind == "burstgpt" and not cfg.get("path"):
        raise ConfigError(f"{where}.path: missing; {BURSTGPT_DOWNLOAD} and pass {where}.path=/path/to/BurstGPT_1.csv")
    src = SOURCES[kind].parse(cfg, where)
    if isinstance(src, SyntheticSource):
        _check_synthetic(src, where)
    elif isinstance(src, SharedPrefixSource):
        _check_shared_prefix(src, where)
    elif isinstance(src, CsvSource):
        shared = shared_column(src.columns.arrival, src.columns.prompt, src.columns.output)
        if shared is not None:
            raise ConfigError(f"{where}.{shared}")
    return src


def _check_arrival(arrival: dict[str, Any], rate: float | None, where: str) -> None:
    """The arrival model, with ``rate`` as the shortcut of ``arrival.rate`` (poisson / gamma only)."""
    arrival = dict(arrival)
    if rate is not None:
        process = arrival.get("process")
        if process not in ("poisson", "gamma"):
            raise ConfigError(f"{where}.rate: only applies to a poisson or gamma arrival process, got "
                              f"{process or arrival.get('preset')!r}")
        arrival["rate"] = rate
    parse_arrival(arrival, f"{where}.arrival")


def _check_shared_prefix(src: SharedPrefixSource, where: str) -> None:
    _check_arrival(src.arrival, src.rate, where)
    _check_lengths(src, "user", where)
    parse_length(src.turns, f"{where}.turns")


def _check_synthetic(src: SyntheticSource, where: str) -> None:
    _check_arrival(src.arrival, src.rate, where)
    _check_lengths(src, "prompt", where)


def _check_lengths(src: Any, first: str, where: str) -> None:
    """``lengths`` (a pair model) or both ``<first>`` and ``output`` (one length model each), not both ways."""
    head = getattr(src, first)
    if src.lengths is not None:
        if head is not None or src.output is not None:
            raise ConfigError(f"{where}: give either 'lengths' or '{first}' + 'output', not both")
        parse_pair(src.lengths, f"{where}.lengths")
    elif head is None or src.output is None:
        raise ConfigError(f"{where}: expected 'lengths' or both '{first}' and 'output' length models")
    else:
        parse_length(head, f"{where}.{first}")
        parse_length(src.output, f"{where}.output")


__all__ = ["SOURCES", "parse_workload"]
