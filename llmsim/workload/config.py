"""Build a workload from a plain dict (what ``conf/workload/*.yaml`` passes through Hydra).

The schema (:mod:`llmsim.workload.schema`) checks every key, type and range first; an unknown key raises
:class:`ConfigError` naming the key, where it was found and the allowed keys, so a typo never silently falls
back to a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmsim.errors import ConfigError
from llmsim.registry import Registry
from llmsim.schema import check_seed
from llmsim.workload.arrivals import (
    ArrivalProcess,
    GammaArrivals,
    Phase,
    PhasedArrivals,
    RandomPhases,
    square_wave,
)
from llmsim.workload.base import Workload
from llmsim.workload.lengths import (
    LENGTH_PRESETS,
    Empirical,
    Fixed,
    Independent,
    LengthModel,
    LogNormal,
    PairModel,
    Uniform,
)
from llmsim.workload.prefix import PromptPool, SharedPrefixWorkload
from llmsim.workload.schema import (
    LOG_TYPES,
    AzureSource,
    BurstGPTLikeSource,
    BurstGPTSource,
    CsvSource,
    MooncakeSource,
    SharedPrefixSource,
    SyntheticSource,
    parse_workload,
)
from llmsim.workload.stream_schema import (
    EmpiricalLengths,
    FixedLength,
    GammaArrival,
    LogNormalLength,
    MmppArrival,
    PhasesArrival,
    PoissonArrival,
    SquareWaveArrival,
    UniformLength,
    parse_arrival,
    parse_length,
    parse_pair,
)
from llmsim.workload.synthetic import SyntheticWorkload
from llmsim.workload.traces import AzureTrace, BurstGPTTrace, CsvTrace, MooncakeTrace
from llmsim.workload.transforms import Limited, PromptCapped, RateScaled, Windowed

# the sources whose ``max_prompt`` skips rows (the generators' own ``max_prompt`` shapes what they draw instead)
TRACE_SOURCES = (AzureSource, BurstGPTSource, CsvSource, MooncakeSource)

# generators whose module needs scipy: imported when a config first asks for one (keeps `import llmsim.workload` light)
GENERATORS: Registry[Any] = Registry("workload generator")
GENERATORS.register_lazy("burstgpt_like", "llmsim.workload.burstgpt_like:BurstGPTLike")


def build_arrival(cfg: Mapping[str, Any], where: str = "workload.arrival") -> ArrivalProcess:
    """Arrival process from ``{"process": ..., ...}`` or ``{"preset": name}`` (checked by the schema)."""
    a = parse_arrival(cfg, where)
    if isinstance(a, PoissonArrival):
        return GammaArrivals(a.rate, 1.0)
    if isinstance(a, GammaArrival):
        return GammaArrivals(a.rate, a.cv)
    if isinstance(a, PhasesArrival):
        return PhasedArrivals([Phase(p.duration, p.rate, p.cv) for p in a.phases], a.repeat)
    if isinstance(a, SquareWaveArrival):
        return square_wave(a.low, a.high, a.period, a.duty, a.cv)
    assert isinstance(a, MmppArrival)
    return RandomPhases([tuple(c) for c in a.mixture], a.mean_requests, a.mean_seconds)


def build_length(cfg: Mapping[str, Any], where: str) -> LengthModel:
    """One length dimension from ``{"dist": "fixed"|"uniform"|"lognormal", ...}``."""
    m = parse_length(cfg, where)
    if isinstance(m, FixedLength):
        return Fixed(m.value)
    if isinstance(m, UniformLength):
        return Uniform(m.min, m.max)
    assert isinstance(m, LogNormalLength)
    if m.mu is not None:
        return LogNormal(m.mu, m.sigma, m.min, m.max)
    if m.p50 is not None:
        return LogNormal.from_mean_median(m.mean, m.p50, m.min, m.max)
    return LogNormal.from_mean_sigma(m.mean, m.sigma, m.min, m.max)


def build_lengths(cfg: Mapping[str, Any], where: str = "workload") -> PairModel:
    """(prompt, output) model from a synthetic config's ``lengths`` or ``prompt`` + ``output``."""
    lengths = cfg.get("lengths")
    if lengths is not None:
        if cfg.get("prompt") is not None or cfg.get("output") is not None:
            raise ConfigError(f"{where}: give either 'lengths' or 'prompt' + 'output', not both")
        pair = parse_pair(lengths, f"{where}.lengths")
        if isinstance(pair, str):
            return LENGTH_PRESETS[pair]
        assert isinstance(pair, EmpiricalLengths)
        return Empirical(pair.path, pair.prompt_column, pair.output_column, pair.prompt_min, pair.prompt_max,
                         pair.output_min, pair.output_max)
    if cfg.get("prompt") is None or cfg.get("output") is None:
        raise ConfigError(f"{where}: expected 'lengths' or both 'prompt' and 'output' length models")
    return Independent(build_length(cfg["prompt"], f"{where}.prompt"), build_length(cfg["output"], f"{where}.output"))


def _build_source(src: Any, seed: int) -> Workload:
    if isinstance(src, SyntheticSource):
        arrival_cfg = dict(src.arrival)
        if src.rate is not None:
            arrival_cfg["rate"] = src.rate
        lengths = {"lengths": src.lengths, "prompt": src.prompt, "output": src.output}
        return SyntheticWorkload(
            build_arrival(arrival_cfg), build_lengths(lengths), seed=seed, num_requests=src.num_requests,
            duration=src.duration, task_mix=src.task_mix, tenant_mix=src.tenant_mix, slo_class_mix=src.slo_class_mix,
            model_mix=src.model_mix,
        )
    if isinstance(src, AzureSource):
        return AzureTrace(src.path, on_error=src.on_error)
    if isinstance(src, BurstGPTSource):
        return BurstGPTTrace(src.path, model=src.model, log_type=src.log_type, on_error=src.on_error,
                             time_origin=src.time_origin, sessions=src.sessions, hash_block=src.hash_block,
                             max_sessions=src.max_sessions)
    if isinstance(src, BurstGPTLikeSource):
        return _burstgpt_like(src, seed)
    if isinstance(src, SharedPrefixSource):
        return _shared_prefix(src, seed)
    if isinstance(src, MooncakeSource):
        return MooncakeTrace(src.path, jitter_s=src.jitter_s, seed=seed, on_error=src.on_error)
    assert isinstance(src, CsvSource)
    cols = src.columns
    return CsvTrace(
        src.path, cols.arrival, cols.prompt, cols.output, arrival_unit=src.arrival_unit, task=cols.task,
        tenant=cols.tenant, slo_class=cols.slo_class, extra=src.extra, filters=src.filters,
        on_error=src.on_error,
        delimiter=src.delimiter,
    )


def _generator_bound(src: BurstGPTLikeSource | SharedPrefixSource) -> tuple[int | None, float | None]:
    """(num_requests, duration) of a generator: its own, or, when only ``max_requests`` bounds it, a bound that
    leaves ``max_requests`` requests after the window: the window's end (the source runs that long), or, with no
    window, ``max_requests`` itself. An open-ended window needs the source's own bound."""
    if src.num_requests is not None or src.duration is not None or src.max_requests is None:
        return src.num_requests, src.duration
    if src.window is None:
        return src.max_requests, None
    start, end = src.window
    if end is None:
        raise ConfigError(f"workload: max_requests alone cannot bound a {src.kind} stream cut by the open window "
                          f"[{start:g}, null): expected a window end, 'num_requests' or 'duration' (the source's own "
                          f"bound; max_requests counts requests after the window)")
    return None, end


def _burstgpt_like(src: BurstGPTLikeSource, seed: int) -> Workload:
    """``log_type`` is the one-service shortcut of ``mix``; ``max_requests`` alone also bounds the stream."""
    mix = src.mix if src.log_type is None else {LOG_TYPES[src.log_type]: 1.0}
    num_requests, duration = _generator_bound(src)
    overrides = {name: spec.model_dump(exclude_none=True) for name in ("conversation", "api")
                 if (spec := getattr(src, name)) is not None}
    return GENERATORS.get("burstgpt_like")(
        rate=src.rate, model=src.model, mix=mix, seed=seed, num_requests=num_requests, duration=duration,
        start_hour=src.start_hour, period_s=src.period_s, diurnal=src.diurnal, overrides=overrides,
        max_prompt=src.max_prompt, max_output=src.max_output,
    )


def _shared_prefix(src: SharedPrefixSource, seed: int) -> Workload:
    """``max_requests`` alone also bounds the stream (as for burstgpt_like); ``user`` is the message length."""
    arrival_cfg = dict(src.arrival)
    if src.rate is not None:
        arrival_cfg["rate"] = src.rate
    if src.lengths is not None:
        lengths = build_lengths({"lengths": src.lengths})
    else:
        lengths = Independent(build_length(src.user, "workload.user"), build_length(src.output, "workload.output"))
    num_requests, duration = _generator_bound(src)
    pools = [None if p is None else PromptPool(p.count, p.tokens, p.zipf, p.prob) for p in (src.system, src.fewshot)]
    return SharedPrefixWorkload(
        build_arrival(arrival_cfg), lengths, seed=seed, num_requests=num_requests,
        duration=duration, reuse=src.reuse, system=pools[0], fewshot=pools[1],
        turns=build_length(src.turns, "workload.turns"), think_time=src.think_time, max_prompt=src.max_prompt,
        hash_block=src.hash_block,
    )


def build_workload(cfg: Mapping[str, Any], seed: int) -> Workload:
    """Workload from a plain dict: the source (``kind``), then window, prompt cap, rate scale and limit.

    The whole dict is checked by :func:`llmsim.workload.schema.parse_workload` first. The window is cut in the
    source's own time (e.g. seconds 0-600 of the trace); a trace's ``max_prompt`` then skips (and counts) the
    rows whose prompt is longer; the rate scale compresses what is left (``rate_scale: 2`` replays that window
    in 300 s), and ``max_requests`` truncates last, so it counts requests that are simulated.
    """
    src = parse_workload(cfg)
    wl = _build_source(src, check_seed(seed))
    if src.window is not None:
        wl = Windowed(wl, *src.window)
    if isinstance(src, TRACE_SOURCES) and src.max_prompt is not None:
        wl = PromptCapped(wl, src.max_prompt)
    if src.rate_scale != 1.0:
        wl = RateScaled(wl, src.rate_scale)
    if src.max_requests is not None:
        wl = Limited(wl, src.max_requests)
    return wl
