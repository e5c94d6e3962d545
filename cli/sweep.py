"""A Hydra multirun as one table: each job's typed overrides beside its ``summary.json``.

A Hydra multirun (``llmsim -m workload.rate=2,4,8 policy=jsq,round_robin``) leaves one job directory per
combination, each with ``summary.json`` and ``.hydra/overrides.yaml``. The overrides are parsed with Hydra's
own parser, so the table has one typed column per override key (``policy``, ``workload.rate``, ...)
followed by the summary's metrics. The *swept* keys are those whose value differs between jobs: one is the
x axis, and every combination of the others is its own curve (one curve per policy, not one zig-zag line
through all of them). :mod:`llmsim.cli.sweep_plot` draws the table; :mod:`llmsim.cli.collect` reads
sweeps of any launcher with the same readers; ``python -m llmsim.cli.report MULTIRUN_DIR`` writes
``sweep.csv`` and ``sweep.png`` (:mod:`llmsim.metrics.report`).

Imports Hydra's override grammar (and so the ``hydra`` package), hence stays off ``import llmsim``'s path.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

from llmsim.errors import LLMSimError

TABLE_METRICS = ("request_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms",
                 "p99_e2el_ms", "slo_attainment", "request_goodput", "dropped")


class ReportError(LLMSimError):
    """A sweep directory or option the report cannot use (message: one line naming the path or key)."""


@dataclass
class Sweep:
    """A multirun's jobs as one table: ``frame`` has the override columns ``keys`` first, then the metrics."""

    frame: pd.DataFrame
    keys: list[str]

    @property
    def swept(self) -> list[str]:
        return swept_keys(self.frame, self.keys)


def _job_order(path: Path) -> tuple[int, str]:
    """Hydra numbers jobs ``0_...``, ``1_...``, ``10_...``: sort by the number, not the text."""
    head = path.name.partition("_")[0]
    return (int(head), path.name) if head.isdigit() else (sys.maxsize, path.name)


def parse_overrides(items: list[Any], where: str = "overrides.yaml") -> dict[str, Any]:
    """``["policy=jsq", "workload.rate=4"]`` -> ``{"policy": "jsq", "workload.rate": 4}`` (Hydra's grammar:
    numbers stay numbers, ``+`` / ``++`` prefixes are dropped, lists and dicts keep their override text)."""
    try:
        parsed = OverridesParser.create().parse_overrides([str(i) for i in items])
    except HydraException as e:
        raise ReportError(f"{where}: cannot parse the overrides: {' '.join(str(e).split())}") from None
    out: dict[str, Any] = {}
    for o in parsed:
        key = o.key_or_group + (f"@{o.package}" if o.package else "")
        if o.is_delete():
            out[key] = None
            continue
        v = o.value()
        out[key] = o.get_value_element_as_str() if isinstance(v, list | dict) else v
    return out


def collect_sweep(sweep_dir: str | Path) -> Sweep:
    """Every job of a Hydra multirun directory: its overrides (typed) and its ``summary.json``."""
    root = Path(sweep_dir)
    if not root.is_dir():
        raise ReportError(f"{root}: no such directory (expected a Hydra multirun directory, multirun/<date>/<time>)")
    jobs = sorted((p.parent for p in root.glob("*/summary.json")), key=_job_order)
    if not jobs:
        raise ReportError(f"{root}: no */summary.json in it; is it a Hydra multirun directory of `llmsim -m ...`?")
    rows, keys = [], []
    for job in jobs:
        overrides = job_overrides(job)
        keys += [k for k in overrides if k not in keys]
        rows.append(job_row(job, overrides, read_json(job / "summary.json")))
    frame = pd.DataFrame(rows)
    metric_cols = [c for c in frame.columns if c not in keys and c != "job_dir"]
    return Sweep(frame[[*keys, *metric_cols, "job_dir"]], keys)


def job_overrides(job: Path) -> dict[str, Any]:
    """A job's typed overrides from its ``.hydra/overrides.yaml`` ({} without one); llmsim.cli.collect's too."""
    overrides_file = job / ".hydra" / "overrides.yaml"
    return _read_overrides(overrides_file) if overrides_file.exists() else {}


def read_json(path: Path) -> Any:
    """A job's ``summary.json`` (or another json it wrote); ReportError naming the file when unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ReportError(f"{path}: unreadable ({' '.join(str(e).split())})") from None


def job_row(job: Path, overrides: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """One table row: the overrides, then the summary's scalar metrics (an override wins a name clash), then
    ``job_dir``; nested values (``dropped_by_reason``, ...) are left out of the table."""
    row = dict(overrides)
    row.update({k: v for k, v in summary.items() if k not in overrides and not isinstance(v, dict | list)})
    row["job_dir"] = str(job)
    return row


def _read_overrides(path: Path) -> dict[str, Any]:
    try:
        items = yaml.safe_load(path.read_text()) or []
    except (OSError, yaml.YAMLError) as e:
        raise ReportError(f"{path}: unreadable ({' '.join(str(e).split())})") from None
    if not isinstance(items, list):
        raise ReportError(f"{path}: expected a list of key=value overrides, got {type(items).__name__}")
    return parse_overrides(items, str(path))


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and not (isinstance(v, float) and math.isnan(v))


def swept_keys(frame: pd.DataFrame, keys: list[str]) -> list[str]:
    """The override keys whose value differs between jobs (the others were fixed for the whole sweep)."""
    return [k for k in keys if k in frame and frame[k].astype(str).nunique(dropna=False) > 1]


def default_x(frame: pd.DataFrame, swept: list[str]) -> str | None:
    """The x axis when ``--x`` is not given: ``workload.rate`` if swept, else the first numeric swept key,
    else the first swept key (a categorical axis); None when nothing was swept."""
    numeric = [k for k in swept if all(_is_number(v) for v in frame[k])]
    if "workload.rate" in numeric:
        return "workload.rate"
    return numeric[0] if numeric else (swept[0] if swept else None)


def choose_x(sweep: Sweep, x: str | None) -> str | None:
    """Validate ``--x``: it must be a swept key (the error lists them)."""
    swept = sweep.swept
    if x is None:
        return default_x(sweep.frame, swept)
    if x not in swept:
        listed = ", ".join(swept) if swept else "none (every job has the same overrides)"
        what = "is not a swept key" if x not in sweep.keys else "has one value in every job"
        raise ReportError(f"--x {x!r} {what}; swept keys: {listed}")
    return x


def sort_rows(frame: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Rows ordered by ``cols``: numbers numerically, anything else (names, null, lists) by its text."""

    def key(col: pd.Series) -> pd.Series:
        return col if all(_is_number(v) for v in col) else col.astype(str)

    return frame.sort_values(cols, kind="stable", key=key) if cols else frame


def curves(frame: pd.DataFrame, x: str, by: list[str]) -> list[tuple[str | None, pd.DataFrame]]:
    """(label, rows sorted by x) per combination of the ``by`` keys, in first-seen order."""
    if not by:
        return [(None, sort_rows(frame, [x]))]
    out = []
    for values, g in frame.groupby(by, sort=False, dropna=False):
        vals = values if isinstance(values, tuple) else (values,)
        label = str(vals[0]) if len(by) == 1 else ", ".join(f"{k}={v}" for k, v in zip(by, vals))
        out.append((label, sort_rows(g, [x])))
    return out


def sweep_table(sweep: Sweep, x: str | None) -> str:
    """The swept keys and the headline metrics of each job, as text for the terminal."""
    swept = sweep.swept
    cols = [*swept, *(c for c in TABLE_METRICS if c in sweep.frame)]
    frame = sweep.frame[cols]
    if x is not None:
        frame = sort_rows(frame, [*(k for k in swept if k != x), x])
    return frame.to_string(index=False, float_format=lambda v: f"{v:.3g}" if abs(v) < 1 else f"{v:,.1f}")
