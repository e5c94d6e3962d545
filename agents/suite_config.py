"""What a suite is: conf/suite/<testbed>.yaml (scenarios, sizes, heuristics, bars) and the ``suite=`` choice.

``llmsim-evaluate suite=unseen env=<testbed>`` selects conf/suite/unseen.yaml (:class:`SuiteChoice`: which size,
which scenarios, seed and request overrides); the scenarios themselves are in conf/suite/<testbed>.yaml
(:class:`SuiteFile`), read here. Each scenario is an env config: the env group's (the testbed's defaults) with the
suite's ``base`` and the scenario's ``env`` merged on top. Trace paths in a suite file may use
``${oc.env:LLMSIM_TRACES,../shared/traces}`` as the conf/workload presets do.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import Field

from llmsim.errors import ConfigError, load_yaml_file
from llmsim.resources import conf_dir
from llmsim.schema import Float, NonNegInt, PosFloat, PosInt, Schema

SUITES = ("unseen",)


class SuiteChoice(Schema):
    """``suite`` (conf/suite/unseen.yaml): which suite, at which size, and narrowing it (``only``, ``seeds``,
    ``num_requests``) for a quick look; the scenarios are the testbed's (conf/suite/<env.id>.yaml)."""

    where: ClassVar[str] = "suite"
    name: Literal[SUITES] = "unseen"  # type: ignore[valid-type]
    size: str = "full"
    only: list[str] | None = None  # scenario names (None: every scenario)
    seeds: Any = None  # a count or a list: replaces the size's seeds (and trace seeds)
    num_requests: PosInt | None = None  # replaces the size's requests per episode (and the trace cap)


class Size(Schema):
    """How big each episode is and how many paired seeds each scenario gets."""

    where: ClassVar[str] = "suite.sizes"
    num_requests: PosInt
    seeds: Any = 5  # a count n (test seeds 2000 .. 1999 + n) or a list
    trace_requests: PosInt | None = None  # a trace window's cap (None: the whole window)
    trace_seeds: Any = 1  # a trace window is one workload: seeds vary only the env's own randomness


class Scenario(Schema):
    """One unseen workload: what it is (``about``) and the env options that make it (merged on the base)."""

    where: ClassVar[str] = "suite.scenarios"
    about: str
    env: dict[str, Any] = Field(default_factory=dict)
    requests_scale: PosFloat = 1.0  # episode requests = the size's x this (a larger cluster gets more)
    trace: bool = False  # a trace window: the size's trace_requests / trace_seeds apply


class Bar(Schema):
    """A must-hold bar: the gain (%, positive = better) of a learned policy vs the reference on ``metric`` must be
    at least ``at_least_pct`` on every scenario (``scope: every``) or on at least half of them (``scope: half``)."""

    where: ClassVar[str] = "suite.bars"
    name: str
    metric: str
    at_least_pct: Float
    scope: Literal["every", "half"] = "every"
    reference: list[str] | None = None  # labels the reference is the best of (None: every heuristic)


class SuiteFile(Schema):
    """conf/suite/<testbed>.yaml."""

    where: ClassVar[str] = "suite file"
    testbed: str
    primary: str  # the row key the best heuristic is chosen by
    better: Literal["lower", "higher"] = "lower"
    slo_metric: str = "slo_attainment"  # the row key shown as SLO attainment
    base: dict[str, Any] = Field(default_factory=dict)
    sizes: dict[str, Size]
    heuristics: list[Any] = Field(min_length=1)
    not_applicable: dict[str, str] = Field(default_factory=dict)
    bars: list[Bar] = Field(default_factory=list)
    bootstrap: PosInt = 2000
    bootstrap_seed: NonNegInt = 0
    scenarios: dict[str, Scenario] = Field(min_length=1)


def suite_path(testbed: str) -> Path:
    return conf_dir() / "suite" / f"{testbed}.yaml"


def load_suite_file(testbed: str) -> SuiteFile:
    """conf/suite/<testbed>.yaml, interpolations resolved, checked; one line naming the file on any problem."""
    path = suite_path(testbed)
    if not path.is_file():
        have = sorted(p.stem for p in path.parent.glob("*.yaml") if p.stem not in SUITES)
        raise ConfigError(f"suite: no scenarios for env id {testbed!r} ({path} is missing); suites exist for {have}")
    data = load_yaml_file(path)
    try:
        data = OmegaConf.to_container(OmegaConf.create(data), resolve=True)
    except OmegaConfBaseException as e:
        raise ConfigError(f"{path}: {str(e).splitlines()[0]}") from None
    suite = SuiteFile.parse(data, f"{path.name}")
    if suite.testbed != testbed:
        raise ConfigError(f"{path}: testbed {suite.testbed!r} does not match the file name ({testbed!r})")
    return suite


def applicable_heuristics(testbed: str) -> list[Any]:
    """Every registered heuristic that applies to ``testbed`` (the suite file's ``heuristics``)."""
    return copy.deepcopy(load_suite_file(testbed).heuristics)


def choose_size(suite: SuiteFile, choice: SuiteChoice) -> Size:
    """The chosen size with the choice's ``seeds`` / ``num_requests`` on top."""
    if choice.size not in suite.sizes:
        raise ConfigError(f"suite.size: unknown size {choice.size!r}; expected one of {sorted(suite.sizes)}")
    size = suite.sizes[choice.size].model_copy()
    if choice.seeds is not None:
        size.seeds = size.trace_seeds = choice.seeds
    if choice.num_requests is not None:
        size.num_requests = size.trace_requests = choice.num_requests
    return size


def chosen_scenarios(suite: SuiteFile, only: list[str] | None) -> dict[str, Scenario]:
    """The suite's scenarios in file order, or those named in ``only`` (in file order; unknown names fail)."""
    if only is None:
        return dict(suite.scenarios)
    unknown = [s for s in only if s not in suite.scenarios]
    if unknown:
        raise ConfigError(f"suite.only: unknown scenario(s) {unknown}; expected some of {list(suite.scenarios)}")
    if not only:
        raise ConfigError("suite.only: expected at least one scenario name (or null for all)")
    return {k: v for k, v in suite.scenarios.items() if k in only}


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` on ``base``: mappings merge key by key, anything else is replaced (a copy; inputs unchanged)."""
    out = copy.deepcopy(dict(base))
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(out.get(k), Mapping) and isinstance(v, Mapping) else copy.deepcopy(v)
    return out


def trace_files(env_cfg: Mapping[str, Any]) -> list[str]:
    """The trace files an env config reads (``path`` of its workload, or of a trace arrival), for the skip check."""
    out = []
    wl = env_cfg.get("workload")
    if isinstance(wl, Mapping) and isinstance(wl.get("path"), str) and wl.get("kind") != "labelled":
        out.append(wl["path"])
    arr = env_cfg.get("arrival")
    if isinstance(arr, Mapping) and isinstance(arr.get("trace"), Mapping) and isinstance(arr["trace"].get("path"), str):
        out.append(arr["trace"]["path"])
    return out
