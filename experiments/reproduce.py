"""``llmsim-reproduce`` (also ``python -m experiments.reproduce``): a paper's headline claims, measured, with verdicts.

    llmsim-reproduce intelligent_router --quick          # minutes: a small setting, NOT the paper's (says so)
    llmsim-reproduce intelligent_router --jobs 2         # the paper's setting: trains three routers (hours)
    llmsim-reproduce intelligent_router --from-runs B,A,G    # evaluate existing Baseline, Aware, Guided runs
    llmsim-reproduce intelligent_router --quick --json   # one JSON object per claim on stdout
    llmsim-reproduce best_effort
    llmsim-reproduce qos_edge --from-runs sac_han=RUN,baseline_rl=RUN,dsa=RUN,no_pred=RUN
    llmsim-reproduce qlm --quick --jobs 2                # QLM: W_A / W_B / W_C, baselines, ablations (minutes)
    llmsim-reproduce qlm --jobs 2 --out OUT --resume     # again after a stop: keeps the cells OUT/cells.jsonl holds
    llmsim-reproduce routebalance --quick --jobs 2       # RouteBalance: frontier, latency vs rate, isolation arms
    llmsim-reproduce routebalance --size tiny --sections budget,batching
    llmsim-reproduce prefix --jobs 2                     # KV reuse: Mooncake's 36.6 % check, routers (not a paper)
    llmsim-reproduce disagg --jobs 2                     # P/D disaggregation vs colocated (DistServe, Splitwise)
    llmsim-reproduce all --jobs 2 --out OUT                        # every experiment into OUT/<name>/, the report
    llmsim-reproduce all --jobs 2 --out OUT --resume               # again: keeps what OUT finished, runs the rest
    llmsim-reproduce report --from DIR,NAME=DIR --report FILE      # the report from existing output directories
    llmsim-reproduce report --from-zoo --report docs/REPRODUCTION.md   # the report from the router zoo (seconds)

The old spec ids name the papers too (spec000 qos_edge, spec001 intelligent_router, spec002 best_effort, spec003
qlm, spec004 routebalance). Each experiment's module (experiments.harness.registry, imported only when asked for)
measures what its claims need and returns one row per claim; this module owns the command line: sizes, options,
``--json`` and ``claims.json`` / ``claims.md``. Everything goes under ``--out`` (default
``outputs/reproduce/<name>/<timestamp>``). A bad name, option or run directory is one line on stderr, exit 2.
Verdict rules: experiments/harness/claims.py (docs/reproduce.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import inspect
import json
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.harness import reproduction_report as book
from experiments.harness.cellfile import CELLS_FILE, recording, refuse_earlier, run_setting
from experiments.harness.claims import PROG, source_commit
from experiments.harness.pages import learned_lines, out_file, text_table, write_claims
from experiments.harness.pool import cap_jobs, say
from experiments.harness.registry import ALIASES, ORDER, load, resolve
from experiments.harness.sizes import SIZE_NAMES, size_name
from experiments.harness.timing import positive_int
from experiments.harness.zoo_report import write_zoo_report
from experiments.harness.zoo_routers import in_repo
from llmsim.errors import ConfigError, LLMSimError
from llmsim.planning.runner import cpu_count

MODES = ("all", "report")  # not experiments: every experiment in turn, and the report from existing outputs
RUN_OPTIONS = ("from_runs", "from_runs_8", "seeds", "scale8", "size", "sections")  # what a run may take


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        fail(message)


def fail(message: str) -> None:
    """The one-line error every bad input gets (exit 2)."""
    print(f"{PROG}: error: {' '.join(str(message).split())}", file=sys.stderr)
    raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    names = ", ".join(f"{n} ({a})" if (a := {v: k for k, v in ALIASES.items()}.get(n)) else n for n in ORDER)
    p = _Parser(prog=PROG, description="Measure a paper's headline claims and give each a verdict "
                                       "(reproduced / partly / not); docs/reproduce.md.")
    p.add_argument("experiment", help=f"which experiment: {names}; or all (every one, then --report), or report "
                                      "(the report from --from directories)")
    p.add_argument("--size", choices=SIZE_NAMES, help="tiny (seconds, tests only), quick (minutes, NOT the paper's "
                                                      "setting) or full (the default)")
    p.add_argument("--quick", action="store_true", help="the same as --size quick")
    p.add_argument("--json", action="store_true", help="one JSON object per claim on stdout")
    p.add_argument("--out", type=Path, help="output directory (default outputs/reproduce/<name>/<timestamp>)")
    p.add_argument("--jobs", type=positive_int, default=1, help="worker processes for training and evaluation "
                                                                "(at most the CPUs this process may use)")
    p.add_argument("--seeds", type=positive_int, help="held-out evaluation seeds from 1000 (default 5; --quick 2)")
    p.add_argument("--from-runs", help="existing training runs, skipping training; intelligent_router: "
                                       "BASELINE,AWARE,GUIDED run (or checkpoint) directories; best_effort: "
                                       "hard=DIR,soft=DIR; qos_edge: sac_han=DIR[,baseline_rl=DIR,dsa=DIR,no_pred=DIR]")
    p.add_argument("--from-runs-8", help="intelligent_router: the same for the 8-instance runs (adds the "
                                         "scalability claims)")
    p.add_argument("--scale8", action="store_true", help="intelligent_router: also train and evaluate on 8 instances")
    p.add_argument("--sections", help="routebalance: a comma-separated subset of main, budget, batching (default all)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    p.add_argument("--report", type=out_file, help="all / report: where the reproduction report goes "
                                               "(all: default OUT/REPRODUCTION.md)")
    p.add_argument("--from", dest="from_dirs", help="report: output directories DIR[,NAME=DIR...] (their claims.json)")
    p.add_argument("--from-zoo", action="store_true", help="report: the page from the router zoo's manifests "
                                                            "(seconds; docs/REPRODUCTION.md)")
    p.add_argument("--resume", action="store_true", help="with the --out of a stopped run: keep the cells its "
                                                         "OUT/cells.jsonl recorded, run the rest; all: also keep the "
                                                         "experiments an earlier all finished (OUT/<name>/claims.json)")
    return p


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    a = _parser().parse_args(argv)
    if a.experiment not in MODES:
        try:
            a.experiment = resolve(a.experiment)
        except ConfigError as e:
            fail(str(e).replace("experiment: unknown", "unknown", 1))
    if a.quick and a.size not in (None, "quick"):
        fail(f"--quick means --size quick; it does not go with --size {a.size}")
    _check_mode(a)
    a.jobs = cap_jobs(a.jobs, PROG, cpu_count())
    return a


def _check_mode(a: argparse.Namespace) -> None:
    """Options that belong to one mode only are refused elsewhere, with the option named."""
    per_run = {"--from-runs": a.from_runs, "--from-runs-8": a.from_runs_8, "--scale8": a.scale8,
               "--seeds": a.seeds, "--json": a.json, "--sections": a.sections}
    if a.experiment in MODES:
        given = [k for k, v in per_run.items() if v]
        if given:
            fail(f"{a.experiment} does not take {given[0]} (run that experiment on its own)")
    if a.experiment == "report":
        if not (a.from_dirs or a.from_zoo) or a.report is None:
            fail("report needs --from DIR[,NAME=DIR...] (or --from-zoo) and --report FILE")
        if a.from_dirs and a.from_zoo:
            fail("report takes --from or --from-zoo, not both")
        if a.quick or a.size or a.out:
            fail("report reads existing directories (or the zoo): it takes only --from and --report (or --from-zoo "
                 "and --report)")
    elif a.from_dirs or a.from_zoo:
        fail(f"{'--from' if a.from_dirs else '--from-zoo'} is for report (all runs every experiment itself)")
    elif a.report is not None and a.experiment != "all":
        fail("--report is for all and report")
    if a.resume and (a.experiment == "report" or a.out is None):
        fail("--resume is for all or one experiment, with the --out directory of the run to resume")
    if a.resume and not a.out.is_dir():
        fail(f"--resume: {a.out}: no such directory, nothing to resume (drop --resume to start a new run there)")


def runs_option(value: str | None) -> str | dict[str, str] | None:
    """``--from-runs``: ``KEY=DIR,KEY=DIR`` becomes a mapping (best_effort: hard=..,soft=..; intelligent_router
    accepts baseline=..,aware=..,guided=..), anything else stays the comma-separated string of directories."""
    if value is None:
        return None
    parts = [p.strip() for p in value.split(",")]
    if parts and all("=" in p for p in parts):
        pairs = [p.split("=", 1) for p in parts]
        return {k.strip(): v.strip() for k, v in pairs}
    return value


def run_options(run: Any, a: argparse.Namespace) -> dict[str, Any]:
    """The options the experiment's ``run`` takes; one it does not take is an error, not silently dropped."""
    opts = {"from_runs": runs_option(a.from_runs), "from_runs_8": runs_option(a.from_runs_8), "seeds": a.seeds,
            "scale8": a.scale8 or None, "size": a.size, "sections": a.sections}
    accepted = inspect.signature(run).parameters
    given = {k: v for k, v in opts.items() if v is not None}
    bad = [k for k in given if k not in accepted]
    if bad:
        fail(f"{a.experiment} does not take --{bad[0].replace('_', '-')}")
    return given


def run_experiment(name: str, module: Any, a: argparse.Namespace, out: Path, kwargs: Mapping[str, Any],
                   command: str) -> list[Any]:
    """Run one experiment into ``out`` and write claims.json / claims.md; its rows. Each finished cell goes to
    ``out/cells.jsonl`` (with ``--resume``, the cells recorded there are kept). Errors propagate (an empty ``out``
    made here is removed first)."""
    t0 = time.perf_counter()
    existed = out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        options = {k: v for k, v in kwargs.items() if k != "size"}
        setting = run_setting(name, size_name(a.quick, a.size), options)
        with recording(out / CELLS_FILE, setting, a.resume, name):
            rows = module.run(a.quick, out, a.jobs, not a.no_progress, **kwargs)
    except (LLMSimError, OSError):
        if not existed and out.is_dir():
            _drop_if_empty(out)  # refused before anything was written: leave no empty directory behind
        raise
    rows = [{**r, "command": command} for r in rows]
    write_claims(rows, out, command, time.perf_counter() - t0)
    return rows


def _drop_if_empty(out: Path) -> None:
    """Remove ``out`` when it holds nothing but a cells file without a cell."""
    cells = out / CELLS_FILE
    if cells.is_file() and len(cells.read_text().splitlines()) <= 1:
        cells.unlink()
    if not any(out.iterdir()):
        out.rmdir()


# ---------------------------------------------------------------------- all / report
def _setting_of(command: str) -> str:
    """The size a recorded command ran at (``--size X``, ``--quick``, else full)."""
    words = command.split()
    if "--size" in words[:-1]:
        return words[words.index("--size") + 1]
    return "quick" if "--quick" in words else "full"


def finished(out: Path, setting: str) -> dict[str, str]:
    """``all --resume``: the experiments ``out/<name>/claims.json`` holds finished runs of, with their dates. A run
    of another setting there is refused: one report must not mix them."""
    done: dict[str, str] = {}
    for name in ORDER:
        path = out / name / "claims.json"
        if not path.is_file():
            continue
        try:
            body = json.loads(path.read_text())
            command, when = str(body["command"]), str(body.get("date", "an unknown date"))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"{path}: not a finished run's claims.json ({type(e).__name__}: {e}); move it away "
                              "to run that experiment again") from None
        if _setting_of(command) != setting:
            raise ConfigError(f"{path}: a {_setting_of(command)} run ({command}); this is the {setting} setting: "
                              "resume with the same setting or use another --out")
        done[name] = when
    return done


def _set_aside(sub: Path) -> None:
    """An unfinished experiment directory (failed.json, or a run cut off) is kept beside, not overwritten; the
    cells it recorded are copied back, so the run again keeps them."""
    stamp = dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    aside = sub.with_name(f"{sub.name}.unfinished-{stamp}")
    sub.rename(aside)
    cells = aside / CELLS_FILE
    if cells.is_file():
        sub.mkdir()
        shutil.copyfile(cells, sub / CELLS_FILE)
    say(f"{PROG} all", f"{sub} held no finished run: moved to {aside}, running it again"
                       f"{' from the cells it recorded' if cells.is_file() else ''}")


def _record_failure(name: str, sub: Path, error: Exception, command: str, wall_s: float) -> None:
    """failed.json for an experiment that raised (the report lists it with its one-line error)."""
    text = " ".join(f"{type(error).__name__}: {error}".split())
    say(f"{PROG} all", f"{name} failed: {text}")
    sub.mkdir(parents=True, exist_ok=True)
    body = {"experiment": name, "error": text, "command": command,
            "date": dt.datetime.now().isoformat(timespec="seconds"), "commit": source_commit(),
            "wall_s": round(wall_s, 1)}
    (sub / "failed.json").write_text(json.dumps(body, indent=1) + "\n")


def run_all(a: argparse.Namespace, out: Path) -> tuple[list[tuple[str | None, Path]], list[str]]:
    """Every experiment in turn into ``out/<name>/``. One that raises does not stop the others: its one-line error
    goes to stderr and to ``out/<name>/failed.json``. With ``--resume``, the ones finished there earlier are kept.
    The (name, directory) entries and the names kept."""
    entries: list[tuple[str | None, Path]] = []
    setting = a.size or ("quick" if a.quick else "full")
    done = finished(out, setting) if a.resume else {}
    if not a.resume:
        for name in ORDER:  # before anything runs, not once per experiment
            refuse_earlier(out / name / CELLS_FILE)
    sized = [*["--quick"] * a.quick, *(["--size", a.size] if a.size and not a.quick else [])]
    for i, name in enumerate(ORDER, 1):
        sub = out / name
        entries.append((name, sub))
        if name in done:
            say(f"{PROG} all", f"{name} ({i}/{len(ORDER)}): finished on {done[name]}, kept (--resume)")
            continue
        if a.resume and sub.exists():
            _set_aside(sub)
        command = " ".join([PROG, name, *sized, "--jobs", str(a.jobs), "--out", str(sub)])
        say(f"{PROG} all", f"{name} ({i}/{len(ORDER)}): {command}")
        t0 = time.perf_counter()
        try:
            kwargs = {"size": a.size} if a.size and not a.quick else {}
            run_experiment(name, load(name), a, sub, kwargs, command)
        except Exception as e:  # any failure of one experiment is reported; the others still run
            _record_failure(name, sub, e, command, time.perf_counter() - t0)
    return entries, list(done)


def report_mode(a: argparse.Namespace, command: str) -> None:
    """``all`` (run every experiment, then the report) and ``report`` (the report from ``--from`` directories)."""
    try:
        if a.experiment == "all":
            out = a.out or Path("outputs/reproduce/all") / dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
            entries, kept = run_all(a, out)
            target = a.report or out / "REPRODUCTION.md"
            reports = book.write_report(entries, target, command, origin="all", strict=False, kept=kept)
        elif a.from_zoo:
            target = a.report
            entries = write_zoo_report(target, f"{PROG} report --from-zoo --report {in_repo(target)}")
            print("\n".join(f"{name}: zoo router {e.name}" for name, e in entries.items()) or "the zoo has no router")
            print(f"report: {target}")
            return
        else:
            target = a.report
            reports = book.write_report(book.parse_from(a.from_dirs), target, command)
    except ConfigError as e:
        fail(str(e))
    print(book.summary_line(reports))
    print(f"report: {target}")


# ---------------------------------------------------------------------- one experiment
def _print_rows(rows: Sequence[Mapping[str, Any]], as_json: bool, command: str, wall: float, out: Path) -> None:
    if as_json:
        for r in rows:
            print(json.dumps(r, default=str))
        return
    print(text_table(rows), end="")
    for n in sorted({str(r["setting_note"]) for r in rows if r.get("setting_note")}):
        print(f"note: {n}")
    for line in learned_lines(rows):
        print(f"learned: {line}")
    print(f"command: {command}   ({wall / 60:.1f} min)")
    print(f"outputs: {out}  (claims.md, claims.json and the experiment's own results)")


def stopped(out: Path) -> None:
    """Ctrl-C: one line saying how to go on (the finished cells are in ``out``'s cells file), exit 130."""
    cells = out / CELLS_FILE
    kept = max(0, len(cells.read_text().splitlines()) - 1) if cells.is_file() else 0
    print(f"{PROG}: stopped; {kept} finished cell(s) are recorded in {cells}: run the same command with --resume "
          f"--out {out} to go on from them", file=sys.stderr)
    raise SystemExit(130)


def main(argv: Sequence[str] | None = None) -> None:
    """Run one experiment, write claims.json / claims.md, print the table (or JSON lines); or ``all`` / ``report``
    (the reproduction report)."""
    a = parse_args(argv)
    command = " ".join([PROG, *(sys.argv[1:] if argv is None else argv)])
    if a.experiment in MODES:
        report_mode(a, command)
        return
    try:
        module = load(a.experiment)
    except ConfigError as e:
        fail(str(e))
    kwargs = run_options(module.run, a)
    out = a.out or Path("outputs/reproduce") / a.experiment / dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    t0 = time.perf_counter()
    try:
        rows = run_experiment(a.experiment, module, a, out, kwargs, command)
    except (LLMSimError, OSError) as e:
        fail(str(e))
    except KeyboardInterrupt:
        stopped(out)
    _print_rows(rows, a.json, command, time.perf_counter() - t0, out)


if __name__ == "__main__":
    main()
