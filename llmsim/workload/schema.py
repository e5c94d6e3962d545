"""The ``workload`` config group's schema: one model per ``kind``, per arrival ``process`` and per length ``dist``.

Dispatch on the tag is done by hand (not a pydantic tagged union) so an error names the key as the user wrote
it (``workload.prompt.value``), never a union branch. Every model forbids unknown keys and non-finite numbers;
see :mod:`llmsim.schema` for the message format.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from llmsim.errors import ConfigError
from llmsim.schema import (
    MAX_TOKENS,
    Float,
    NonNegFloat,
    PosFloat,
    PosInt,
    Schema,
    TokenCount,
    _not_bool,
    _show,
    check_choice,
)

MixWeights = dict[str, NonNegFloat]


# ---------------------------------------------------------------------------------------------- arrivals
class PoissonArrival(Schema):
    process: Literal["poisson"]
    rate: PosFloat


Cv = Annotated[float, BeforeValidator(_not_bool), Field(gt=0, le=100)]  # past ~100 most gaps round to zero


class GammaArrival(Schema):
    process: Literal["gamma"]
    rate: PosFloat
    cv: Cv


class PhaseSpec(Schema):
    duration: PosFloat
    rate: NonNegFloat
    cv: Cv = 1.0


class PhasesArrival(Schema):
    process: Literal["phases"]
    phases: Annotated[list[PhaseSpec], Field(min_length=1)]
    repeat: bool = False

    @model_validator(mode="before")
    @classmethod
    def _lists_to_phases(cls, data: Any) -> Any:
        """``[duration_s, rate]`` / ``[duration_s, rate, cv]`` lists are accepted as phases."""
        if isinstance(data, Mapping) and isinstance(data.get("phases"), list | tuple):
            phases = []
            for ph in data["phases"]:
                if isinstance(ph, list | tuple) and len(ph) in (2, 3):
                    ph = dict(zip(("duration", "rate", "cv"), ph))
                phases.append(ph)
            data = {**data, "phases": phases}
        return data


class SquareWaveArrival(Schema):
    process: Literal["square_wave"]
    low: NonNegFloat
    high: PosFloat
    period: PosFloat
    duty: Annotated[float, BeforeValidator(_not_bool), Field(gt=0, lt=1)] = 0.5
    cv: Cv = 1.0


class MmppArrival(Schema):
    """Markov-modulated: phases whose rate is drawn from ``mixture`` rows [weight, low, high]."""

    process: Literal["mmpp"]
    mixture: Annotated[list[Annotated[list[NonNegFloat], Field(min_length=3, max_length=3)]], Field(min_length=1)]
    mean_requests: Annotated[float, BeforeValidator(_not_bool), Field(ge=1)] | None = None
    mean_seconds: PosFloat | None = None

    @model_validator(mode="after")
    def _one_length(self) -> MmppArrival:
        if (self.mean_requests is None) == (self.mean_seconds is None):
            raise ValueError("exactly one of mean_requests or mean_seconds")
        return self


ARRIVALS: dict[str, type[Schema]] = {
    "poisson": PoissonArrival, "gamma": GammaArrival, "phases": PhasesArrival,
    "square_wave": SquareWaveArrival, "mmpp": MmppArrival,
}


def parse_arrival(cfg: Any, where: str = "workload.arrival") -> Schema:
    from llmsim.workload.arrivals import ARRIVAL_PRESETS

    if not isinstance(cfg, Mapping):
        raise ConfigError(f"{where}: expected a mapping like {{process: poisson, rate: 4}}, got {_show(cfg)}")
    if "preset" in cfg:
        if set(cfg) != {"preset"}:
            raise ConfigError(f"{where}: 'preset' cannot be combined with other keys {sorted(set(cfg) - {'preset'})}")
        name = check_choice(cfg["preset"], ARRIVAL_PRESETS, f"{where}.preset")
        return parse_arrival(ARRIVAL_PRESETS[name], f"{where}(preset {name})")
    if "process" not in cfg:
        raise ConfigError(f"{where}.process: missing required key; expected one of {sorted(ARRIVALS)}")
    process = check_choice(cfg["process"], ARRIVALS, f"{where}.process")
    return ARRIVALS[process].parse(cfg, where)


# ---------------------------------------------------------------------------------------------- lengths
class FixedLength(Schema):
    dist: Literal["fixed"]
    value: TokenCount


class UniformLength(Schema):
    dist: Literal["uniform"]
    min: TokenCount
    max: TokenCount

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.min > self.max:
            raise ValueError(f"min <= max (got min {self.min}, max {self.max})")
        return self


class LogNormalLength(Schema):
    """Exactly one parameter pair: (mean, sigma), (mean, p50) or (mu, sigma); clipped to [min, max]."""

    dist: Literal["lognormal"]
    mean: PosFloat | None = None
    sigma: PosFloat | None = None
    p50: PosFloat | None = None
    mu: Float | None = None
    min: TokenCount = 1
    max: TokenCount | None = None

    @model_validator(mode="after")
    def _pair(self) -> LogNormalLength:
        given = {k for k in ("mean", "sigma", "p50", "mu") if getattr(self, k) is not None}
        if given not in ({"mean", "sigma"}, {"mean", "p50"}, {"mu", "sigma"}):
            raise ValueError(f"exactly one of (mean, sigma), (mean, p50) or (mu, sigma); got {sorted(given)}")
        if self.max is not None and self.min > self.max:
            raise ValueError(f"min <= max (got min {self.min}, max {self.max})")
        return self


LENGTHS: dict[str, type[Schema]] = {"fixed": FixedLength, "uniform": UniformLength, "lognormal": LogNormalLength}


def parse_length(cfg: Any, where: str) -> Schema:
    """A length model; a bare token count (``workload.prompt=128``) is shorthand for ``{dist: fixed, value: 128}``.

    The shorthand matters on the command line: Hydra merges ``workload.prompt={dist: fixed, ...}`` into the
    preset's lognormal keys instead of replacing them, while a scalar replaces the whole node.
    """
    if isinstance(cfg, int | float | str) and not isinstance(cfg, bool) and not isinstance(cfg, Mapping):
        try:
            return FixedLength.parse({"dist": "fixed", "value": cfg}, where)
        except ConfigError as e:
            raise ConfigError(str(e).replace(f"{where}.value:", f"{where}:", 1)) from None
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"{where}: expected a token count or a mapping like {{dist: fixed, value: 128}}, "
                          f"got {_show(cfg)}")
    if "dist" not in cfg:
        raise ConfigError(f"{where}.dist: missing required key; expected one of {sorted(LENGTHS)}")
    dist = check_choice(cfg["dist"], LENGTHS, f"{where}.dist")
    return LENGTHS[dist].parse(cfg, where)


class EmpiricalLengths(Schema):
    """(prompt, output) pairs resampled from a file (CSV / JSON / JSONL with two token columns)."""

    dist: Literal["empirical"]
    path: Annotated[str, Field(min_length=1)]
    prompt_column: str | None = None
    output_column: str | None = None
    prompt_min: TokenCount = 1
    prompt_max: TokenCount | None = None
    output_min: TokenCount = 1
    output_max: TokenCount | None = None


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
        raise ValueError(f"a window [start_s, end_s] or {{start, end}}, got {_show(w)}")
    s = _window_num(start if start is not None else 0.0, "start")
    e = None if end is None else _window_num(end, "end")
    if e is not None and e <= s:
        raise ValueError(f"end > start (a window [start_s, end_s]), got start {s:g} and end {e:g}")
    return s, e


def _window_num(v: Any, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"a number of seconds for the window {name}, got {_show(v)}")
    f = float(v)
    if not (f == f and abs(f) != float("inf")) or f < 0:
        raise ValueError(f"a finite window {name} >= 0, got {_show(v)}")
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


class AzureSource(_Common):
    kind: Literal["azure"]
    path: Path_
    on_error: OnError = "raise"


Labels = Annotated[str, Field(min_length=1)] | Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]


HashBlock = Annotated[int, BeforeValidator(_not_bool), Field(ge=1, le=2**20)]  # tokens per prefix-block id


class BurstGPTSource(_Common):
    kind: Literal["burstgpt"]
    path: Path_ | None = None  # required: checked by parse_workload, whose message says where to download it
    model: Labels | None = None
    log_type: Labels | None = None
    time_origin: Literal["first_row", "midnight"] = "first_row"
    on_error: OnError = "raise"
    sessions: bool = False  # prefix-block ids from Session ID conversations (llmsim.workload.sessions)
    hash_block: HashBlock = 16
    max_sessions: PosInt = 4096


Unit = Annotated[float, BeforeValidator(_not_bool), Field(gt=-1, lt=1)]
DayValues = Annotated[list[NonNegFloat], Field(min_length=1, max_length=1440)]


class ZipfSpec(Schema):
    """Truncated Zipf: P(k) ~ k^-theta on [min, max]."""

    theta: Annotated[float, BeforeValidator(_not_bool), Field(gt=0, le=10)] | None = None
    min: TokenCount | None = None
    max: TokenCount | None = None


class ServiceSpec(Schema):
    """Overrides of a BurstGPT-like service's defaults (both models); see llmsim.workload.burstgpt_like."""

    profile: DayValues | None = None
    cv: Cv | Annotated[list[Cv], Field(min_length=1, max_length=1440)] | None = None
    rate_noise: Annotated[float, BeforeValidator(_not_bool), Field(ge=0, le=3)] | None = None
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
    start_hour: Annotated[float, BeforeValidator(_not_bool), Field(ge=0, lt=24)] = 0.0
    period_s: Annotated[float, BeforeValidator(_not_bool), Field(gt=0, le=86400)] = 1200.0
    diurnal: bool = True
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


class MooncakeSource(_Common):
    kind: Literal["mooncake"]
    path: Path_
    jitter_s: NonNegFloat = 0.0
    on_error: OnError = "raise"


Share = Annotated[float, BeforeValidator(_not_bool), Field(ge=0, le=1)]


class PromptPoolSpec(Schema):
    """``count`` shared prompts of ``tokens`` tokens, Zipf(``zipf``) popularity (0: uniform), used with
    probability ``prob`` (llmsim.workload.prefix.PromptPool)."""

    count: PosInt
    tokens: TokenCount
    zipf: Annotated[float, BeforeValidator(_not_bool), Field(ge=0, le=10)] = 1.0
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


class CsvSource(_Common):
    kind: Literal["csv"]
    path: Path_
    columns: CsvColumns
    arrival_unit: Literal["s", "ms", "us", "datetime"] = "s"
    extra: dict[str, str] | list[str] | None = None
    filters: dict[str, str | list[str]] | None = None
    delimiter: Annotated[str, Field(min_length=1, max_length=1)] = ","
    on_error: OnError = "raise"


SOURCES: dict[str, type[_Common]] = {
    "synthetic": SyntheticSource, "azure": AzureSource, "burstgpt": BurstGPTSource,
    "burstgpt_like": BurstGPTLikeSource, "mooncake": MooncakeSource, "csv": CsvSource,
    "shared_prefix": SharedPrefixSource,
}


def _presets_of(kind: str) -> list[str]:
    """The conf/workload presets of ``kind`` (for the hint below); none if conf/ cannot be read."""
    import yaml

    from llmsim.resources import conf_dir

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

    Only when every unknown key belongs to another kind (a plain typo gets the schema's own message).
    """
    unknown = sorted(set(cfg) - set(SOURCES[kind].model_fields))
    owners = [k for k, m in SOURCES.items() if k != kind and unknown and set(unknown) <= set(m.model_fields)]
    if not owners:
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
        raise ConfigError(f"{where}: expected a mapping with a 'kind' key, got {_show(cfg)}")
    if "kind" not in cfg:
        raise ConfigError(f"{where}.kind: missing required key; expected one of {sorted(SOURCES)}")
    kind = check_choice(cfg["kind"], SOURCES, f"{where}.kind")
    _check_switched_kind(cfg, kind, where)
    if kind == "burstgpt" and not cfg.get("path"):
        from llmsim.workload.traces import BURSTGPT_DOWNLOAD

        raise ConfigError(f"{where}.path: missing; {BURSTGPT_DOWNLOAD} and pass {where}.path=/path/to/BurstGPT_1.csv")
    src = SOURCES[kind].parse(cfg, where)
    if isinstance(src, SyntheticSource):
        _check_synthetic(src, where)
    elif isinstance(src, SharedPrefixSource):
        _check_shared_prefix(src, where)
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


def parse_pair(lengths: Any, where: str) -> Schema | str:
    """``lengths``: a preset name, ``{preset: name}`` or an empirical model."""
    from llmsim.workload.lengths import LENGTH_PRESETS

    if isinstance(lengths, str):
        return check_choice(lengths, LENGTH_PRESETS, where)
    if not isinstance(lengths, Mapping):
        raise ConfigError(f"{where}: expected a preset name or a mapping, got {_show(lengths)}")
    if "preset" in lengths:
        if set(lengths) != {"preset"}:
            raise ConfigError(f"{where}: 'preset' cannot be combined with {sorted(set(lengths) - {'preset'})}")
        return check_choice(lengths["preset"], LENGTH_PRESETS, f"{where}.preset")
    if lengths.get("dist") != "empirical":
        raise ConfigError(f"{where}.dist: expected 'empirical' (or use 'preset'), got {lengths.get('dist')!r}")
    return EmpiricalLengths.parse(lengths, where)


__all__ = ["MAX_TOKENS", "parse_arrival", "parse_length", "parse_pair", "parse_workload"]
