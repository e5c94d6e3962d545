"""Build a workload from a plain dict (what ``conf/workload/*.yaml`` passes through Hydra).

Every level checks its keys: an unknown key raises :class:`ConfigError` naming the key, where it
was found and the allowed keys, so a typo never silently falls back to a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmsim.errors import ConfigError
from llmsim.workload.arrivals import (
    ARRIVAL_PRESETS,
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
from llmsim.workload.synthetic import SyntheticWorkload
from llmsim.workload.traces import AzureTrace, BurstGPTTrace, CsvTrace, MooncakeTrace
from llmsim.workload.transforms import Limited, RateScaled, Windowed

COMMON_KEYS = ("kind", "rate_scale", "window", "max_requests")
KIND_KEYS: dict[str, tuple[str, ...]] = {
    "synthetic": (
        "arrival",
        "rate",
        "prompt",
        "output",
        "lengths",
        "num_requests",
        "duration",
        "task_mix",
        "tenant_mix",
        "slo_class_mix",
    ),
    "azure": ("path", "on_error"),
    "burstgpt": ("path", "model", "log_type", "on_error"),
    "mooncake": ("path", "jitter_s", "on_error"),
    "csv": (
        "path",
        "columns",
        "arrival_unit",
        "extra",
        "filters",
        "skip_zero_output",
        "delimiter",
        "on_error",
    ),
}
ARRIVAL_KEYS: dict[str, tuple[str, ...]] = {
    "poisson": ("rate",),
    "gamma": ("rate", "cv"),
    "phases": ("phases", "repeat"),
    "square_wave": ("low", "high", "period", "duty", "cv"),
    "mmpp": ("mixture", "mean_requests", "mean_seconds"),
}
LENGTH_KEYS: dict[str, tuple[str, ...]] = {
    "fixed": ("value",),
    "uniform": ("min", "max"),
    "lognormal": ("mean", "sigma", "p50", "mu", "min", "max"),
}
EMPIRICAL_KEYS = (
    "dist",
    "path",
    "prompt_column",
    "output_column",
    "prompt_min",
    "prompt_max",
    "output_min",
    "output_max",
)
CSV_COLUMN_KEYS = ("arrival", "prompt", "output", "task", "tenant", "slo_class")


def _check_keys(cfg: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(cfg).__name__} {cfg!r}")
    for key in cfg:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key {key!r}; allowed keys: {sorted(allowed)}")


def _require(cfg: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in cfg or cfg[key] is None:
        raise ConfigError(f"{where}: missing required key {key!r}")
    return cfg[key]


def _choice(cfg: Mapping[str, Any], key: str, choices: Mapping[str, Any], where: str) -> str:
    value = _require(cfg, key, where)
    if value not in choices:
        raise ConfigError(f"{where}.{key}: unknown value {value!r}; expected one of {sorted(choices)}")
    return str(value)


def build_arrival(cfg: Mapping[str, Any], where: str = "workload.arrival") -> ArrivalProcess:
    """Arrival process from ``{"process": ..., ...}`` or ``{"preset": name}``."""
    if isinstance(cfg, Mapping) and "preset" in cfg:
        _check_keys(cfg, ("preset",), where)
        name = _choice(cfg, "preset", ARRIVAL_PRESETS, where)
        return build_arrival(ARRIVAL_PRESETS[name], f"{where}(preset {name})")
    _check_keys(cfg, ("process", *{k for ks in ARRIVAL_KEYS.values() for k in ks}), where)
    process = _choice(cfg, "process", ARRIVAL_KEYS, where)
    _check_keys(cfg, ("process", *ARRIVAL_KEYS[process]), where)
    if process == "poisson":
        return GammaArrivals(_require(cfg, "rate", where), 1.0)
    if process == "gamma":
        return GammaArrivals(_require(cfg, "rate", where), _require(cfg, "cv", where))
    if process == "phases":
        phases = []
        for i, ph in enumerate(_require(cfg, "phases", where)):
            if isinstance(ph, Mapping):
                _check_keys(ph, ("duration", "rate", "cv"), f"{where}.phases[{i}]")
                phases.append(
                    Phase(_require(ph, "duration", where), _require(ph, "rate", where), ph.get("cv", 1.0))
                )
            elif len(ph) in (2, 3):
                phases.append(Phase(*ph))
            else:
                raise ConfigError(
                    f"{where}.phases[{i}]: expected [duration_s, rate] or [duration_s, rate, cv], got {ph!r}"
                )
        return PhasedArrivals(phases, bool(cfg.get("repeat", False)))
    if process == "square_wave":
        return square_wave(
            _require(cfg, "low", where),
            _require(cfg, "high", where),
            _require(cfg, "period", where),
            cfg.get("duty", 0.5),
            cfg.get("cv", 1.0),
        )
    return RandomPhases(
        [tuple(c) for c in _require(cfg, "mixture", where)], cfg.get("mean_requests"), cfg.get("mean_seconds")
    )


def build_length(cfg: Mapping[str, Any], where: str) -> LengthModel:
    """One length dimension from ``{"dist": "fixed"|"uniform"|"lognormal", ...}``."""
    _check_keys(cfg, ("dist", *{k for ks in LENGTH_KEYS.values() for k in ks}), where)
    dist = _choice(cfg, "dist", LENGTH_KEYS, where)
    _check_keys(cfg, ("dist", *LENGTH_KEYS[dist]), where)
    if dist == "fixed":
        return Fixed(int(_require(cfg, "value", where)))
    if dist == "uniform":
        return Uniform(int(_require(cfg, "min", where)), int(_require(cfg, "max", where)))
    lo = int(cfg.get("min", 1))
    hi = None if cfg.get("max") is None else int(cfg["max"])
    given = {k for k in ("mean", "sigma", "p50", "mu") if cfg.get(k) is not None}
    if given == {"mean", "sigma"}:
        return LogNormal.from_mean_sigma(float(cfg["mean"]), float(cfg["sigma"]), lo, hi)
    if given == {"mean", "p50"}:
        return LogNormal.from_mean_median(float(cfg["mean"]), float(cfg["p50"]), lo, hi)
    if given == {"mu", "sigma"}:
        return LogNormal(float(cfg["mu"]), float(cfg["sigma"]), lo, hi)
    raise ConfigError(
        f"{where}: lognormal expects exactly one of (mean, sigma), (mean, p50) or (mu, sigma); "
        f"got {sorted(given)}"
    )


def build_lengths(cfg: Mapping[str, Any], where: str = "workload") -> PairModel:
    """(prompt, output) model from a synthetic config's ``lengths`` or ``prompt`` + ``output``."""
    lengths = cfg.get("lengths")
    if lengths is not None:
        if "prompt" in cfg or "output" in cfg:
            raise ConfigError(f"{where}: give either 'lengths' or 'prompt' + 'output', not both")
        w = f"{where}.lengths"
        if isinstance(lengths, str):
            lengths = {"preset": lengths}
        if "preset" in lengths:
            _check_keys(lengths, ("preset",), w)
            return LENGTH_PRESETS[_choice(lengths, "preset", LENGTH_PRESETS, w)]
        _check_keys(lengths, EMPIRICAL_KEYS, w)
        if lengths.get("dist") != "empirical":
            raise ConfigError(
                f"{w}.dist: expected 'empirical' (or use 'preset'), got {lengths.get('dist')!r}"
            )
        return Empirical(
            _require(lengths, "path", w),
            lengths.get("prompt_column"),
            lengths.get("output_column"),
            int(lengths.get("prompt_min", 1)),
            None if lengths.get("prompt_max") is None else int(lengths["prompt_max"]),
            int(lengths.get("output_min", 1)),
            None if lengths.get("output_max") is None else int(lengths["output_max"]),
        )
    if "prompt" not in cfg or "output" not in cfg:
        raise ConfigError(f"{where}: expected 'lengths' or both 'prompt' and 'output' length models")
    return Independent(
        build_length(cfg["prompt"], f"{where}.prompt"), build_length(cfg["output"], f"{where}.output")
    )


def _build_source(cfg: Mapping[str, Any], kind: str, seed: int) -> Workload:
    w = "workload"
    on_error = cfg.get("on_error", "raise")
    if kind == "synthetic":
        arrival_cfg = dict(_require(cfg, "arrival", w))
        if cfg.get("rate") is not None:
            if arrival_cfg.get("process") not in ("poisson", "gamma"):
                raise ConfigError(
                    f"{w}.rate: only applies to a poisson or gamma arrival process, "
                    f"got {arrival_cfg.get('process') or arrival_cfg.get('preset')!r}"
                )
            arrival_cfg["rate"] = cfg["rate"]
        return SyntheticWorkload(
            build_arrival(arrival_cfg),
            build_lengths(cfg),
            seed=seed,
            num_requests=cfg.get("num_requests"),
            duration=cfg.get("duration"),
            task_mix=cfg.get("task_mix"),
            tenant_mix=cfg.get("tenant_mix"),
            slo_class_mix=cfg.get("slo_class_mix"),
        )
    path = _require(cfg, "path", w)
    if kind == "azure":
        return AzureTrace(path, on_error=on_error)
    if kind == "burstgpt":
        return BurstGPTTrace(path, model=cfg.get("model"), log_type=cfg.get("log_type"), on_error=on_error)
    if kind == "mooncake":
        return MooncakeTrace(path, jitter_s=cfg.get("jitter_s", 0.0), seed=seed, on_error=on_error)
    columns = _require(cfg, "columns", w)
    _check_keys(columns, CSV_COLUMN_KEYS, f"{w}.columns")
    zero = cfg.get("skip_zero_output", False)
    return CsvTrace(
        path,
        _require(columns, "arrival", f"{w}.columns"),
        _require(columns, "prompt", f"{w}.columns"),
        _require(columns, "output", f"{w}.columns"),
        arrival_unit=cfg.get("arrival_unit", "s"),
        task=columns.get("task"),
        tenant=columns.get("tenant"),
        slo_class=columns.get("slo_class"),
        extra=cfg.get("extra"),
        filters=cfg.get("filters"),
        zero_output_reason="zero_output_tokens" if zero else None,
        on_error=on_error,
        delimiter=cfg.get("delimiter", ","),
    )


def build_workload(cfg: Mapping[str, Any], seed: int) -> Workload:
    """Workload from a plain dict: the source (``kind``), then window, rate scale and limit.

    The window is cut in the source's own time (e.g. seconds 0-600 of the trace), the rate scale
    then compresses it (``rate_scale: 2`` replays that window in 300 s), and ``max_requests``
    truncates last.
    """
    _check_keys(cfg, COMMON_KEYS + tuple({k for ks in KIND_KEYS.values() for k in ks}), "workload")
    kind = _choice(cfg, "kind", KIND_KEYS, "workload")
    _check_keys(cfg, COMMON_KEYS + KIND_KEYS[kind], f"workload (kind {kind!r})")
    wl = _build_source(cfg, kind, int(seed))
    window = cfg.get("window")
    if window is not None:
        if isinstance(window, Mapping):
            _check_keys(window, ("start", "end"), "workload.window")
            start, end = window.get("start", 0.0), window.get("end")
        elif len(window) == 2:
            start, end = window
        else:
            raise ConfigError(f"workload.window: expected [start_s, end_s] or {{start, end}}, got {window!r}")
        wl = Windowed(wl, float(start or 0.0), None if end is None else float(end))
    if cfg.get("rate_scale") is not None and float(cfg["rate_scale"]) != 1.0:
        wl = RateScaled(wl, float(cfg["rate_scale"]))
    if cfg.get("max_requests") is not None:
        wl = Limited(wl, cfg["max_requests"])
    return wl
