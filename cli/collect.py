"""``python -m llmsim.cli.collect SWEEP_DIR [--out PATH]``: every run of a sweep in one table (CSV and Parquet).

A sweep of thousands of runs is launched by Hydra's basic launcher, joblib (``hydra/launcher=joblib_local``) or
submitit (``hydra/launcher=slurm``, ``slurm_local``), possibly as several multiruns under one directory (one per
Slurm job of a grouped sweep, docs/scale-out.md). They all leave one directory per run holding ``.hydra/`` and,
when the run got that far, a summary: ``summary.json`` (``llmsim``), ``training.json`` (``llmsim-train``) or
``evaluation.json`` (``llmsim-evaluate``, one row per policy). This module finds those run directories at any
depth, reads them with :mod:`llmsim.cli.sweep`'s readers (same typed override columns as ``sweep.csv``) and
writes ``collect.csv`` and ``collect.parquet``. Some runs of a big sweep always fail (a bad combination, a node
lost, a timeout): such a run is a row with ``status`` ``failed`` and an ``error`` (the last line of its error log
when one is found, e.g. submitit's ``.submitit/<job>/<job>_0_log.err``), counted and printed, never fatal. A run
that fails with an error leaves no run directory (the apps remove it), and a submitit job can die before making
one: such a job is still a ``failed`` row, with its log's last line and, when ``multirun.yaml`` tells which job it
was, its overrides. The jobs ``multirun.yaml`` asked for that have no directory and no submitit log (the basic
and joblib launchers stop a sweep at its first failing job) are rows with ``status`` ``missing`` and their
overrides, ready to be submitted again.

Imports no torch, gymnasium nor matplotlib, so it runs on a login node; override values go through Hydra's
override parser, as in ``python -m llmsim.cli.report``, so both tables type them alike.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

from llmsim.cli.sweep import (
    TABLE_METRICS,
    ReportError,
    job_overrides,
    job_row,
    parse_overrides,
    read_json,
    swept_keys,
)
from llmsim.errors import LLMSimError

SUMMARIES = ("summary.json", "training.json", "evaluation.json")  # what a run of each app leaves, in that order
STATUS_COLUMNS = ("status", "source", "error", "job_dir")  # after the overrides and the metrics
_SHOWN = 20  # rows and failures printed; the files hold everything
# headline columns of training.json / evaluation.json rows, printed beside llmsim's (report_sweep.TABLE_METRICS)
_APP_METRICS = ("policy", "mean_e2el_ms_mean", "p99_e2el_ms_mean", "steps", "best_score", "final_return", "wall_s")


@dataclass
class Collected:
    """A sweep as one table: ``frame`` has the override columns ``keys``, the metrics, then STATUS_COLUMNS."""

    frame: pd.DataFrame
    keys: list[str]
    root: Path
    launchers: list[str] = field(default_factory=list)

    @property
    def ok(self) -> pd.DataFrame:
        return self.frame[self.frame["status"] == "ok"]

    @property
    def failed(self) -> pd.DataFrame:
        """Failed and missing (never started) jobs."""
        return self.frame[self.frame["status"] != "ok"]


def find_runs(root: Path) -> list[Path]:
    """Run directories under ``root`` (those with ``.hydra/`` or a summary), in job order; a run's own
    subdirectories (checkpoints, tensorboard/) and hidden ones (.submitit/) are not searched."""
    return _walk(root)[0]


def _walk(root: Path) -> tuple[list[Path], list[Path]]:
    """The run directories (see :func:`find_runs`) and the multirun directories (with ``multirun.yaml``, the
    root included) under ``root``, in one pass over the tree."""
    runs, sweeps = [], []
    for here, dirs, files in os.walk(root):
        path = Path(here)
        if path != root and (".hydra" in dirs or any(s in files for s in SUMMARIES)):
            runs.append(path)
            dirs.clear()
            continue
        if "multirun.yaml" in files:
            sweeps.append(path)
        # in name order, not the file system's listing order (which a copy or another file system changes)
        dirs[:] = sorted((d for d in dirs if not d.startswith(".")), key=lambda d: _order(Path(d)))
    return sorted(runs, key=lambda p: _order(p.relative_to(root))), sweeps


def _order(rel: Path) -> tuple[tuple[int, str], ...]:
    """Hydra numbers jobs 0_..., 1_..., 10_...: each path part by its leading number, then its text."""
    out = []
    for part in rel.parts:
        head = part.partition("_")[0]
        out.append((int(head), part) if head.isdigit() else (sys.maxsize, part))
    return tuple(out)


def read_run(run: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """A run's override keys and its table rows (one, or one per policy of an evaluation); ``status`` says
    whether it has a summary. Unreadable overrides or summaries make a failed row naming the file."""
    try:
        overrides = job_overrides(run)
    except ReportError as e:
        return [], [_failed(run, {}, str(e))]
    keys = list(overrides)
    for name in SUMMARIES:
        path = run / name
        if not path.exists():
            continue
        try:
            body = read_json(path)
        except ReportError as e:
            return keys, [_failed(run, overrides, str(e))]
        if not isinstance(body, dict):
            return keys, [_failed(run, overrides, f"{path}: expected a JSON object, got {type(body).__name__}")]
        return keys, [{**job_row(run, overrides, summary), "status": "ok", "source": name}
                      for summary in _summaries(name, body)]
    return keys, [_failed(run, overrides, failure_reason(run))]


def _summaries(name: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The flat summaries of a run: summary.json as is; training.json's scalars plus its last evaluation
    (``final_*``); one per policy of evaluation.json's ``summary``."""
    if name == "training.json":
        last = (body.get("evaluations") or [{}])[-1]
        return [{**body, **{f"final_{k}": v for k, v in (last if isinstance(last, dict) else {}).items()}}]
    if name == "evaluation.json":
        entries = [e for e in body.get("summary") or [] if isinstance(e, dict)]
        return entries or [{}]
    return [body]


def _failed(run: Path, overrides: dict[str, Any], reason: str) -> dict[str, Any]:
    return {**overrides, "status": "failed", "source": None, "error": reason, "job_dir": str(run)}


def failure_reason(run: Path) -> str:
    """Why a run has no summary, in one line: the last line of its submitit error log, of a ``*.err`` or of
    the job's Hydra log beside it, else a plain statement (basic / joblib jobs print errors on the sweep's own
    terminal)."""
    for log in [*_submitit_logs(run, _job_id(run)), *sorted(run.glob("*.err")), *sorted(run.glob("*.log"))]:
        line = last_line(log)
        if line:
            return f"{line} ({log.name})"
    return "no summary (no error log beside it; the error, if any, went to the sweep's terminal)"


# srun's own closing line on a real Slurm node ("srun: error: node12: task 0: Exited with exit code 2") only
# restates the exit status: the job's own last line, above it, says why
_SRUN_EXIT = re.compile(r"srun: error: \S+: tasks? [\d,-]+: Exited with exit code \d+")


def last_line(path: Path, tail: int = 8192) -> str | None:
    """The last non-empty line of a (possibly large) text file, None when it has none; srun's closing exit-status
    line is passed over when a line stands above it."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines()]
    except OSError:
        return None
    lines = [ln for ln in lines if ln]
    said = [ln for ln in lines if not _SRUN_EXIT.fullmatch(ln)]
    return (said or lines or [None])[-1]


def _job_id(run: Path) -> str | None:
    """``hydra.job.id`` of a run (submitit's job id, ``<array>_<task>`` on Slurm); None when unknown."""
    path = run / ".hydra" / "hydra.yaml"
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        job = ((yaml.load(path.read_text(), Loader=loader) or {}).get("hydra") or {}).get("job") or {}
    except (OSError, yaml.YAMLError, AttributeError):
        return None
    jid = job.get("id") if isinstance(job, dict) else None
    return str(jid) if jid is not None else None


def _submitit_logs(run: Path, job_id: str | None) -> list[Path]:
    """The error, then output, logs of ``job_id`` in the nearest ``.submitit/`` above the run."""
    if job_id is None:
        return []
    for d in (run.parent, *run.parent.parents):
        folder = d / ".submitit" / job_id
        if folder.is_dir():
            return [*sorted(folder.glob("*_log.err")), *sorted(folder.glob("*_log.out"))]
        if (d / "multirun.yaml").exists() or (d / ".submitit").is_dir():
            break
    return []


def orphan_jobs(root: Path, job_ids: set[str]) -> list[dict[str, Any]]:
    """Failed rows for submitit jobs under ``root`` that left no run directory (killed before Hydra started
    the job, or lost with their node): one per ``.submitit/<job>/`` whose id no run reports."""
    rows = []
    for sub in sorted(root.rglob(".submitit")):
        for folder in sorted(p for p in sub.iterdir() if p.is_dir() and p.name != "%j"):
            if folder.name in job_ids or _array_script_only(folder):
                continue
            logs = [*sorted(folder.glob("*_log.err")), *sorted(folder.glob("*_log.out"))]
            line = next((f"{ln} ({log.name})" for log in logs if (ln := last_line(log))), None)
            rows.append({"status": "failed", "source": None, "job_dir": str(folder),
                         "error": line or "submitit job without a run directory and without logs (never started?)"})
    return rows


def _array_script_only(folder: Path) -> bool:
    """On Slurm, submitit keeps a job array's sbatch script in ``.submitit/<array id>/<array id>_submission.sh``
    beside its tasks' ``<array id>_<task>/`` folders: not a job of its own."""
    files = [p.name for p in folder.iterdir()]
    return bool(files) and all(f.endswith("_submission.sh") for f in files)


def _multirun_config(sweep_dir: Path) -> dict[str, Any]:
    """``hydra:`` of a multirun's ``multirun.yaml`` ({} when absent or unreadable)."""
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        cfg = yaml.load((sweep_dir / "multirun.yaml").read_text(), Loader=loader) or {}
    except (OSError, yaml.YAMLError):
        return {}
    hydra = cfg.get("hydra") if isinstance(cfg, dict) else None
    return hydra if isinstance(hydra, dict) else {}


def planned_jobs(sweep_dir: Path) -> list[dict[str, Any]] | None:
    """The typed overrides of every job a multirun was asked for (the basic sweeper's cartesian product of
    ``hydra.overrides.task`` and ``hydra.sweeper.params``); None when that cannot be told (another sweeper)."""
    hydra = _multirun_config(sweep_dir)
    sweeper = (hydra.get("sweeper") or {}).get("_target_", "")
    task = (hydra.get("overrides") or {}).get("task")
    if not str(sweeper).endswith("BasicSweeper") or not isinstance(task, list):
        return None
    params = (hydra.get("sweeper") or {}).get("params") or {}
    try:
        choices = []
        for o in OverridesParser.create().parse_overrides([*map(str, task), *(f"{k}={v}" for k, v in params.items())]):
            if not o.is_sweep_override():
                choices.append([o.input_line])
            elif o.is_discrete_sweep():
                key = o.get_key_element()
                choices.append([f"{key}={v}" for v in o.sweep_string_iterator()])
            else:
                return None
        return [parse_overrides(list(combo)) for combo in itertools.product(*choices)]
    except Exception:  # noqa: BLE001 - a sweep Hydra cannot expand here (glob, ...): nothing planned to compare
        return None


def missing_jobs(sweep_dir: Path, found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The overrides of the planned jobs of ``sweep_dir`` that have no run directory at all: the job failed (a
    failed run leaves no directory), or never started (the basic and joblib launchers stop a sweep at its first
    failing job, an interrupted sweep stops anywhere)."""
    planned = planned_jobs(sweep_dir)
    if planned is None:
        return []
    seen = Counter(_key(o) for o in found)
    out = []
    for overrides in planned:
        k = _key(overrides)
        if seen[k] > 0:
            seen[k] -= 1
            continue
        out.append(overrides)
    return out


def jobs_without_a_run(sweep_dir: Path, missing: list[dict[str, Any]],
                       orphans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows for a sweep's jobs that left no run directory: its planned jobs without one (``missing``, their
    overrides) and its submitit jobs without one (``orphans``, failed rows with their log's last line).

    Under submitit a job that failed is both, so when the two counts agree they are the same jobs: the launcher
    submits the planned jobs in order (a Slurm array's task index, a local job's process id), and each failed row
    gets its job's overrides. Otherwise planned jobs are ``missing`` rows and submitit jobs keep no overrides."""
    if missing and len(missing) == len(orphans):
        ordered = sorted(orphans, key=lambda row: _submission_order(Path(row["job_dir"]).name))
        return [{**overrides, **row} for overrides, row in zip(missing, ordered)]
    return [*({**overrides, "status": "missing", "source": None, "job_dir": str(sweep_dir),
               "error": "no run directory: the job failed (its error went to the sweep's terminal) or never started "
                        "(the sweep stopped at a failed job, or was interrupted)"} for overrides in missing),
            *orphans]


def _submission_order(job_id: str) -> tuple[int, ...]:
    """submitit job ids in submission order: ``<array>_<task>`` numerically (Slurm), a process id (local)."""
    return tuple(int(p) if p.isdigit() else sys.maxsize for p in job_id.split("_"))


def _key(overrides: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in overrides.items()))


def _launcher(sweep_dir: Path, cache: dict[Path, str | None]) -> str | None:
    """The launcher class named in a multirun's ``multirun.yaml`` (JoblibLauncher, SlurmLauncher, ...)."""
    if sweep_dir not in cache:
        target = (_multirun_config(sweep_dir).get("launcher") or {}).get("_target_")
        cache[sweep_dir] = target.rsplit(".", 1)[-1] if isinstance(target, str) else None
    return cache[sweep_dir]


def collect(sweep_dir: str | Path) -> Collected:
    """Every run under ``sweep_dir`` as one table (see the module docstring); ReportError when it holds none."""
    root = Path(sweep_dir)
    if not root.is_dir():
        raise ReportError(f"{root}: no such directory (expected a sweep directory, e.g. multirun/<date>/<time>)")
    runs, sweeps = _walk(root)
    rows: list[dict[str, Any]] = []
    keys: list[str] = []
    found: dict[Path, list[dict[str, Any]]] = {sweep: [] for sweep in sweeps}
    for run in runs:
        run_keys, run_rows = read_run(run)
        keys += [k for k in run_keys if k not in keys]
        rows += run_rows
        found.setdefault(run.parent, []).append({k: run_rows[0][k] for k in run_keys})
    orphans = orphan_jobs(root, {j for r in runs if (j := _job_id(r)) is not None}) \
        if any(root.rglob(".submitit")) else []
    for sweep, overrides in found.items():
        missing = missing_jobs(sweep, overrides)
        keys += [k for k in dict.fromkeys(k for o in missing for k in o) if k not in keys]
        mine = [o for o in orphans if Path(o["job_dir"]).parent.parent == sweep]
        rows += jobs_without_a_run(sweep, missing, mine)
    rows += [o for o in orphans if Path(o["job_dir"]).parent.parent not in found]
    if not rows:
        what = ("a single run's directory, not a sweep; pass the directory that holds the runs"
                if (root / ".hydra").is_dir() or any((root / s).exists() for s in SUMMARIES)
                else "no run directories (with .hydra/ or a summary) in it; is it a sweep (`llmsim -m ...`)?")
        raise ReportError(f"{root}: {what}")
    cache: dict[Path, str | None] = {}
    launchers = sorted({name for d in [*(r.parent for r in runs), *sweeps] if (name := _launcher(d, cache))})
    frame = pd.DataFrame(rows)
    for col in STATUS_COLUMNS:
        if col not in frame:
            frame[col] = None
    metrics = [c for c in frame.columns if c not in keys and c not in STATUS_COLUMNS]
    return Collected(frame[[*keys, *metrics, *STATUS_COLUMNS]], keys, root, launchers)


def parquet_ready(frame: pd.DataFrame) -> pd.DataFrame:
    """Parquet wants one type per column: a column mixing types (``workload.prompt`` = 128 in one run and
    ``azure_conv_like`` in another) is written as text, nulls kept."""
    out = frame.copy()
    for col in out.columns:
        if out[col].dtype != object:
            continue
        kinds = {type(v) for v in out[col] if v is not None and not (isinstance(v, float) and math.isnan(v))}
        if len(kinds) > 1 or (kinds and not kinds <= {str, bool, int, float}):
            out[col] = [None if v is None or (isinstance(v, float) and math.isnan(v)) else str(v) for v in out[col]]
    return out


def output_paths(sweep_dir: Path, out: str | None) -> tuple[Path, Path]:
    """``collect.csv`` / ``collect.parquet`` in the sweep directory, in ``--out DIR``, or ``--out FILE.csv``
    (or .parquet) and its sibling of the other kind."""
    if out is None:
        base = sweep_dir / "collect"
    else:
        p = Path(out)
        base = p.with_suffix("") if p.suffix in (".csv", ".parquet") else p / "collect"
    base.parent.mkdir(parents=True, exist_ok=True)
    return base.with_suffix(".csv"), base.with_suffix(".parquet")


def save(col: Collected, out: str | None = None) -> tuple[Path, Path]:
    """Write the table as CSV and Parquet (same rows and columns); returns both paths."""
    csv, parquet = output_paths(col.root, out)
    col.frame.to_csv(csv, index=False)
    parquet_ready(col.frame).to_parquet(parquet, index=False)
    return csv, parquet


def summary_text(col: Collected) -> str:
    """What the terminal shows: counts, the swept keys with headline metrics (first rows), the failures."""
    ok, failed = col.ok, col.failed
    swept = swept_keys(col.frame, col.keys)
    runs = ok["job_dir"].nunique()
    rows = f"{len(ok)} rows from {runs} runs" if len(ok) != runs else f"{runs} run{'s' * (runs != 1)}"
    missing = int((failed["status"] == "missing").sum())
    never = f", {missing} never started" if missing else ""
    lines = [f"collected {rows}, {len(failed) - missing} failed{never}, from {col.root}"
             + (f" (launcher: {', '.join(col.launchers)})" if col.launchers else "")]
    cols = [*swept, *(c for c in (*TABLE_METRICS, *_APP_METRICS) if c in ok and c not in swept and ok[c].notna().any())]
    if len(ok) and cols:
        shown = ok[cols].head(_SHOWN)
        lines.append(shown.to_string(index=False, float_format=lambda v: f"{v:.3g}" if abs(v) < 1 else f"{v:,.1f}"))
        if len(ok) > _SHOWN:
            lines.append(f"... {len(ok) - _SHOWN} more rows in the files")
    for _, r in failed.head(_SHOWN).iterrows():
        what = " ".join(f"{k}={r[k]}" for k in swept) if r["status"] == "missing" else ""
        lines.append(f"{r['status']}: {r['job_dir']}: {what + ': ' if what else ''}{r['error']}")
    if len(failed) > _SHOWN:
        lines.append(f"... {len(failed) - _SHOWN} more failed or missing jobs (status != 'ok' in the files)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Exit status 0 when at least one run was collected, 1 when every run failed, 2 when ``SWEEP_DIR`` is
    not a sweep (one line on stderr)."""
    ap = argparse.ArgumentParser(
        prog="python -m llmsim.cli.collect",
        description="Gather every run of a sweep (any launcher: basic, joblib, submitit; nested multiruns too) "
                    "into one table: override columns, summary metrics, status / error / job_dir; written as "
                    "collect.csv and collect.parquet.")
    ap.add_argument("sweep_dir", help="the sweep directory, e.g. multirun/2025-01-31/12-00-00")
    ap.add_argument("--out", default=None, help="a directory for collect.csv / collect.parquet, or a FILE.csv / "
                                                "FILE.parquet (both kinds are written); default: the sweep dir")
    args = ap.parse_args(argv)
    try:
        col = collect(args.sweep_dir)
        csv, parquet = save(col, args.out)
    except (LLMSimError, OSError) as e:
        print(f"llmsim.cli.collect: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    try:
        print(summary_text(col))
        print(f"wrote {csv} and {parquet}", flush=True)
    except BrokenPipeError:  # `... | head`: the reader left; the files are written
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if col.ok.empty:
        print("llmsim.cli.collect: error: no run has a summary (all failed)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
