"""The typed config schema: one pydantic model per config group, shared by the CLI, the Python API and the envs.

Why pydantic rather than OmegaConf structured configs: the composed Hydra config is converted to a plain dict
anyway (the Python API and the envs take plain dicts or keyword arguments), and the checks we need are beyond
what OmegaConf validates - finiteness (no NaN / inf), integers that refuse 1.5, ranges, closed choices, one
model per workload ``kind`` - with error locations we can turn into one line naming the key. Every model here
forbids unknown keys and reports the first problem as::

    engine.max_num_seqs: expected an integer, got 1.5

Groups: ``engine`` (:class:`llmsim.engine.config.EngineConfig`), ``cluster`` (:class:`ClusterConfig`), ``workload``
(:mod:`llmsim.workload.schema`), ``policy`` (:class:`PolicyConfig`), ``slo`` (:class:`SLO`), ``sim``
(:class:`SimConfig`), ``output`` (:class:`OutputConfig`) and the whole run (:class:`RunConfig`). The envs'
options are :class:`llmsim.envs.config.RoutingEnvConfig`, built from the same field types.
"""

from __future__ import annotations

import difflib
import functools
import math
import numbers
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, ValidationError, validate_call
from pydantic_core import PydanticCustomError

from llmsim.errors import ConfigError

S = TypeVar("S", bound="Schema")
F = TypeVar("F", bound=Callable[..., Any])

MAX_TOKENS = 10**8  # no prompt, output or context length is larger (a guard against 1e30 in a trace)


def refuse_string(v: Any, kind: str) -> None:
    """A number must not come as a string: pydantic's lax mode would read ``'5'`` as 5. YAML, JSON and Hydra overrides
    give numbers typed, so a quoted one in a config is a mistake, reported rather than guessed at."""
    if isinstance(v, str | bytes):
        try:
            quoted = math.isfinite(float(v))
        except ValueError:
            quoted = False
        raise PydanticCustomError(f"{kind}_quoted" if quoted else f"{kind}_str", "a string, not a number")


def not_bool(v: Any) -> Any:
    """Integers must be integers: pydantic's lax mode would read ``true`` as 1 (and ``'5'`` as 5)."""
    if isinstance(v, bool):
        raise PydanticCustomError("bool_not_number", "a number, not a boolean")
    refuse_string(v, "int")
    return v


def finite_float(v: Any) -> Any:
    refuse_string(v, "float")
    if isinstance(v, bool):
        raise PydanticCustomError("bool_not_number", "a number, not a boolean")
    if isinstance(v, int | float) and not math.isfinite(float(v)):
        raise PydanticCustomError("finite_number", "a finite number")
    return v


Int = Annotated[int, BeforeValidator(not_bool)]
PosInt = Annotated[int, BeforeValidator(not_bool), Field(ge=1)]
NonNegInt = Annotated[int, BeforeValidator(not_bool), Field(ge=0)]
TokenCount = Annotated[int, BeforeValidator(not_bool), Field(ge=1, le=MAX_TOKENS)]
Float = Annotated[float, BeforeValidator(finite_float)]
PosFloat = Annotated[float, BeforeValidator(finite_float), Field(gt=0)]
NonNegFloat = Annotated[float, BeforeValidator(finite_float), Field(ge=0)]
Fraction = Annotated[float, BeforeValidator(finite_float), Field(gt=0, le=1)]
# vLLM's --kv-cache-dtype (llmsim.perf.kv_cache_dtype): a simulated instance's, and a live router backend's
KvCacheDtype = Literal["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"]


class _SchemaMeta(type(BaseModel)):  # type: ignore[misc]
    """Direct construction (``EngineConfig(max_num_seqs=0)``) raises ConfigError, not ValidationError.

    Done in the metaclass, not ``__init__``: pydantic calls a custom ``__init__`` while validating nested
    models too, which would turn the inner error into an unreadable outer one.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except ValidationError as e:
            raise ConfigError(format_validation_error(e, cls.where, cls)) from None


class Schema(BaseModel, metaclass=_SchemaMeta):
    """Base of every config model: unknown keys, NaN / inf and wrong types are errors naming the key.

    Constructing a model (``EngineConfig(max_num_seqs=0)``) raises :class:`ConfigError` directly, so the
    Python API gets the same one-line message as the CLI. ``where`` is the config path of the group.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, validate_assignment=False, frozen=False)
    where: ClassVar[str] = ""

    @classmethod
    def parse(cls: type[S], data: Any, where: str | None = None) -> S:
        """Validate a mapping (or an instance) at config path ``where``; ConfigError on any problem."""
        at = cls.where if where is None else where
        if isinstance(data, cls):
            return data
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ConfigError(f"{at or 'config'}: expected a mapping of {cls.__name__} keys, got {show(data)}")
        try:
            return cls.model_validate(dict(data))
        except ValidationError as e:
            raise ConfigError(format_validation_error(e, at, cls)) from None


# ---------------------------------------------------------------------------------------------- messages
_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "int_parsing_size": "an integer of sensible size",
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "bool_not_number": "a number, not a boolean",
    "int_str": "an integer",
    "int_quoted": "an integer, not a string (write it unquoted)",
    "float_str": "a number",
    "float_quoted": "a number, not a string (write it unquoted)",
    "missing": "a value (this key is required)",
    "tuple_type": "a list",
    "sequence_str": "a list of strings, not one string",
}


def _expected(err: Mapping[str, Any]) -> str:
    t = err["type"]
    ctx = err.get("ctx") or {}
    if "expected" in err:  # a union's members, joined by _collapse_unions
        return str(err["expected"])
    if t == "is_instance_of":
        cls = str(ctx.get("class", ""))
        return {"Sequence": "a list", "Mapping": "a mapping"}.get(cls, f"an instance of {cls}")
    if t in _EXPECTED:
        return _EXPECTED[t]
    bounds = {"greater_than": "> {gt}", "greater_than_equal": ">= {ge}", "less_than": "< {lt}",
              "less_than_equal": "<= {le}"}
    if t in bounds:
        return "a value " + bounds[t].format(**{k: _fmt_num(v) for k, v in ctx.items()})
    if t == "literal_error":
        return "one of " + str(ctx.get("expected", "")).replace("'", "").replace(" or ", ", ")
    if t == "string_too_short":
        return f"a string of at least {ctx.get('min_length')} character(s)"
    if t == "string_too_long":
        return f"a string of at most {ctx.get('max_length')} character(s)"
    if t in ("too_short", "too_long"):
        n = ctx.get("min_length") if t == "too_short" else ctx.get("max_length")
        return f"a list of at {'least' if t == 'too_short' else 'most'} {n} item{'' if n == 1 else 's'}"
    msg = err["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    return msg


def _fmt_num(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def show(v: Any) -> str:
    """``repr(v)`` cut to 80 characters, for one-line error messages."""
    s = repr(v)
    return s if len(s) <= 80 else s[:77] + "..."


def _join_loc(where: str, loc: tuple[Any, ...]) -> str:
    out = where
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else str(part)
    return out or "config"


def _model_at(root: type[BaseModel] | None, loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class that owns the last key of ``loc`` (to list its allowed keys)."""
    model = root
    for part in loc[:-1]:
        if model is None:
            return None
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        model = _first_model(field.annotation)
    return model


def _first_model(tp: Any) -> type[BaseModel] | None:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    for arg in typing.get_args(tp):
        m = _first_model(arg)
        if m is not None:
            return m
    return None


_UNKNOWN = ("extra_forbidden", "unexpected_keyword_argument")
# how pydantic names the member of a union (``str | Mapping[str, float]``) in an error's location: not a key
_MEMBER_TAGS = frozenset({"str", "int", "float", "bool", "none", "list", "dict", "tuple", "set", "bytes"})
_TYPE_ERRORS = frozenset({"int_type", "int_parsing", "float_type", "float_parsing", "bool_type", "bool_parsing",
                          "string_type", "list_type", "dict_type", "model_type", "tuple_type", "is_instance_of",
                          "bool_not_number", "int_str", "int_quoted", "float_str", "float_quoted"})


def _is_member_tag(part: Any) -> bool:
    return isinstance(part, str) and ("[" in part or part in _MEMBER_TAGS)


def _collapse_unions(errs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One error per union-typed key, its location without member tags: the member the value got furthest into
    (a key inside it, a bound it broke), or, when the value is of no member's type, all the members' types."""
    out: list[dict[str, Any]] = []
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for err in errs:
        loc = tuple(err["loc"])
        tag = next((i for i, part in enumerate(loc) if i and _is_member_tag(part)), None)
        err = {**err, "loc": tuple(part for i, part in enumerate(loc) if not (i and _is_member_tag(part)))}
        if tag is None:
            out.append(err)
        elif loc[:tag] in groups:
            groups[loc[:tag]].append(err)
        else:
            groups[loc[:tag]] = [err]
            out.append({"union": loc[:tag]})  # the union's place among the errors
    for i, err in enumerate(out):
        if "union" not in err:
            continue
        members = groups[err["union"]]
        best = max(members, key=lambda e: (len(e["loc"]), e["type"] not in _TYPE_ERRORS))
        if best["type"] in _TYPE_ERRORS:
            kinds = dict.fromkeys(_expected(e) for e in members if e["loc"] == best["loc"])
            best = {**best, "expected": " or ".join(kinds)}
        out[i] = best
    return out


def format_validation_error(e: ValidationError, where: str = "", root: type[BaseModel] | None = None) -> str:
    """One line: the first problem's key, what was expected and what was given (+ how many more)."""
    # a misspelt key explains the "missing" one next to it: report unknown keys first
    errs = sorted(_collapse_unions(e.errors(include_url=False)), key=lambda er: er["type"] not in _UNKNOWN)
    err = errs[0]
    loc = tuple(err["loc"])
    key = _join_loc(where, loc)
    if err["type"] in _UNKNOWN:
        owner = _model_at(root, loc)
        allowed = sorted(owner.model_fields) if owner is not None else []
        hint = difflib.get_close_matches(str(loc[-1]), allowed, n=1) if allowed else []
        what = "option" if err["type"] == "unexpected_keyword_argument" else "key"
        msg = f"{_join_loc(where, loc[:-1])}: unknown {what} {loc[-1]!r}"
        if hint:
            msg += f" (did you mean {hint[0]!r}?)"
        if allowed:
            msg += f"; allowed keys: {allowed}"
    elif err["type"] in ("missing", "missing_argument"):
        msg = f"{key}: missing required key"
    else:
        msg = f"{key}: expected {_expected(err)}, got {show(err.get('input'))}"
    if len(errs) > 1:
        msg += f" (and {len(errs) - 1} more problem(s))"
    return msg


def check_choice(value: Any, choices: Any, key: str) -> str:
    """A closed set of names (registries): ConfigError naming the key, with a close match if there is one."""
    names = sorted(choices)
    if not isinstance(value, str) or value not in names:
        hint = difflib.get_close_matches(str(value), names, n=1)
        extra = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise ConfigError(f"{key}: unknown value {show(value)}{extra}; expected one of {names}")
    return value


def check_seed(value: Any, key: str = "seed") -> int:
    """A seed as the Python API takes it: an integer in [0, 2**63) (a float or a string would be silently cut
    to another seed, or fail deep in numpy)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value < 2**63:
        raise ConfigError(f"{key}: expected an integer in [0, 2**63), got {show(value)}")
    return int(value)


# ---------------------------------------------------------------------------------------------- groups
class SimConfig(Schema):
    """``sim``: how the cluster is driven and observed."""

    where: ClassVar[str] = "sim"
    view_staleness: NonNegFloat = 0.0
    metrics_interval: PosFloat = 1.0
    central_queue_tick: PosFloat | None = None
    on_unservable: Literal["error", "drop"] = "error"
    colocation_interference: NonNegFloat = 1.0
    kv_link: Literal["nvlink", "infiniband", "pcie", "ethernet"] = "infiniband"  # prefill -> decode (cluster.disagg)
    kv_transfer: Literal["overlap", "blocking"] = "overlap"


class SLOTargets(Schema):
    """Latency targets of one request class (``slo.classes.<name>``), milliseconds; None = not checked."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)
    where: ClassVar[str] = "slo.classes"
    ttft_ms: PosFloat | None = None
    tpot_ms: PosFloat | None = None
    e2el_ms: PosFloat | None = None


class SLO(Schema):
    """``slo``: latency targets in milliseconds (None = not checked), as ``vllm bench serve --goodput``.

    ``classes`` gives a request class (``Request.slo_class``: e.g. ``latency_sensitive`` with an end-to-end
    deadline of seconds, ``batch`` with one of an hour) its own targets; a request of no listed class is held
    to the top-level ones. The summary then reports attainment per class too."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)
    where: ClassVar[str] = "slo"
    ttft_ms: PosFloat | None = None
    tpot_ms: PosFloat | None = None
    e2el_ms: PosFloat | None = None
    classes: dict[Annotated[str, Field(min_length=1)], SLOTargets] | None = None

    def any(self) -> bool:
        return any(v is not None for v in (self.ttft_ms, self.tpot_ms, self.e2el_ms)) or bool(self.classes)

    def targets(self, slo_class: str | None) -> tuple[float | None, float | None, float | None]:
        """(ttft_ms, tpot_ms, e2el_ms) a request of ``slo_class`` is held to."""
        t = (self.classes or {}).get(slo_class) if slo_class is not None else None
        src = t if t is not None else self
        return src.ttft_ms, src.tpot_ms, src.e2el_ms


class OutputConfig(Schema):
    where: ClassVar[str] = "output"
    format: Literal["csv", "parquet"] = "csv"
    stream: Literal["parquet"] | None = None  # parquet: requests.parquet written as requests finish (bounded memory)
    plots: StrictBool = True
    progress: StrictBool = True
    save: StrictBool = True


class PolicyConfig(Schema):
    """``policy``: a router name from the registry and its options (checked by the router itself)."""

    where: ClassVar[str] = "policy"
    name: str = "round_robin"
    kwargs: dict[str, Any] = Field(default_factory=dict)


class InstanceSpec(Schema):
    """One ``cluster.instances`` entry; ``engine`` overrides the global engine group key by key."""

    model: Annotated[str, Field(min_length=1)] = "llama-2-7b"
    gpu: Annotated[str, Field(min_length=1)] = "a100-80gb"
    tp: Annotated[int, BeforeValidator(not_bool), Field(ge=1, le=64)] = 1
    ep: Annotated[int, BeforeValidator(not_bool), Field(ge=1, le=64)] = 1  # expert parallelism (docs/models.md)
    kv_cache_dtype: KvCacheDtype = "auto"
    count: NonNegInt = 1
    name: str | None = None
    engine: dict[str, Any] | None = None
    profile_kind: Literal["auto", "measured", "roofline"] = "auto"
    device: str | None = None
    # a multi-model instance (llmsim.engine.model_host, docs/multi_model.md): other models it may load, swap costs
    models: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    host_cache_gb: NonNegFloat = 0.0
    storage_gbps: PosFloat = 2.0
    swap_overhead_s: NonNegFloat = 0.0
    role: Literal["mixed", "prefill", "decode"] = "mixed"  # prefill/decode disaggregation (llmsim.cluster.disagg)


class ClusterConfig(Schema):
    """``cluster``: the instances (``count`` repeats an entry; ``device: gpu{i}`` puts replica i on gpu<i>)."""

    where: ClassVar[str] = "cluster"
    instances: Annotated[list[InstanceSpec], Field(min_length=1)]


class RunConfig(Schema):
    """A whole ``llmsim`` run, as Hydra composes it from conf/ (the workload is checked by its own schema)."""

    where: ClassVar[str] = ""
    cluster: ClusterConfig
    engine: dict[str, Any] | None = None
    workload: dict[str, Any]
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    seed: Annotated[int, BeforeValidator(not_bool), Field(ge=0, lt=2**63)] = 0
    slo: SLO = Field(default_factory=SLO)
    sim: SimConfig = Field(default_factory=SimConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)


def validated(where: str) -> Callable[[F], F]:
    """Check a factory's annotated arguments like a config group (``where`` names it in messages).

    For Python-API entry points whose options are plain keyword arguments (the env testbeds, ``simulate``):
    the same field types as the schema (``PosFloat``, ``PosInt``...), the same one-line ConfigError.
    """

    def deco(fn: F) -> F:
        checked = validate_call(config=ConfigDict(allow_inf_nan=False, arbitrary_types_allowed=True))(fn)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return checked(*args, **kwargs)
            except ValidationError as e:
                raise ConfigError(format_validation_error(e, where)) from None

        return wrapper  # type: ignore[return-value]

    return deco
