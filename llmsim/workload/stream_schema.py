"""The schema of a generated stream's parts: arrival processes (``process``) and length models (``dist``).

Shared by the ``synthetic`` and ``shared_prefix`` sources of :mod:`llmsim.workload.schema`. Dispatch on the tag
is done by hand (not a pydantic tagged union) so an error names the key as the user wrote it
(``workload.prompt.value``), never a union branch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, model_validator

from llmsim.errors import ConfigError
from llmsim.schema import Float, NonNegFloat, PosFloat, Schema, TokenCount, check_choice, show
from llmsim.workload.arrivals import ARRIVAL_PRESETS
from llmsim.workload.lengths import LENGTH_PRESETS


# ---------------------------------------------------------------------------------------------- arrivals
class PoissonArrival(Schema):
    process: Literal["poisson"]
    rate: PosFloat


Cv = Annotated[Float, Field(gt=0, le=100)]  # past ~100 most gaps round to zero


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
    repeat: StrictBool = False

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
    duty: Annotated[Float, Field(gt=0, lt=1)] = 0.5
    cv: Cv = 1.0


class MmppArrival(Schema):
    """Markov-modulated: phases whose rate is drawn from ``mixture`` rows [weight, low, high]."""

    process: Literal["mmpp"]
    mixture: Annotated[list[Annotated[list[NonNegFloat], Field(min_length=3, max_length=3)]], Field(min_length=1)]
    mean_requests: Annotated[Float, Field(ge=1)] | None = None
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
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"{where}: expected a mapping like {{process: poisson, rate: 4}}, got {show(cfg)}")
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
                          f"got {show(cfg)}")
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


def parse_pair(lengths: Any, where: str) -> Schema | str:
    """``lengths``: a preset name, ``{preset: name}`` or an empirical model."""
    if isinstance(lengths, str):
        return check_choice(lengths, LENGTH_PRESETS, where)
    if not isinstance(lengths, Mapping):
        raise ConfigError(f"{where}: expected a preset name or a mapping, got {show(lengths)}")
    if "preset" in lengths:
        if set(lengths) != {"preset"}:
            raise ConfigError(f"{where}: 'preset' cannot be combined with {sorted(set(lengths) - {'preset'})}")
        return check_choice(lengths["preset"], LENGTH_PRESETS, f"{where}.preset")
    if lengths.get("dist") != "empirical":
        raise ConfigError(f"{where}.dist: expected 'empirical' (or use 'preset'), got {lengths.get('dist')!r}")
    pair = EmpiricalLengths.parse(lengths, where)
    if pair.prompt_column is not None and pair.prompt_column == pair.output_column:
        raise ConfigError(f"{where}.output_column: expected a column other than the prompt_column's, got the same "
                          f"column {pair.output_column!r} (one column cannot hold both)")
    return pair
