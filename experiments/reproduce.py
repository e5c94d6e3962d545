"""``llmsim-reproduce`` (also ``python -m experiments.reproduce``): a paper's headline claims, measured, with verdicts.

    llmsim-reproduce spec001 --quick                 # minutes: a small setting, NOT the paper's (says so)
    llmsim-reproduce spec001 --jobs 2                # the paper's setting: trains three routers (hours)
    llmsim-reproduce spec001 --from-runs B,A,G       # evaluate existing Baseline, Aware, Guided training runs
    llmsim-reproduce spec001 --quick --json          # one JSON object per claim on stdout
    llmsim-reproduce spec002
    llmsim-reproduce spec000 --from-runs sac_han=RUN,baseline_rl=RUN,dsa=RUN,no_pred=RUN
    llmsim-reproduce spec003 --quick --jobs 2       # QLM: W_A / W_B / W_C, baselines, ablations (minutes)
    llmsim-reproduce spec004 --quick --jobs 2       # RouteBalance: frontier, latency vs rate, isolation arms
    llmsim-reproduce prefix --jobs 2                # issue 17 KV reuse: Mooncake 36.6 % check, routers (not a paper)
    llmsim-reproduce disagg --jobs 2                # issue 17 P/D disaggregation vs colocated (DistServe, Splitwise)
    llmsim-reproduce all --jobs 2 --report docs/REPRODUCTION.md    # every spec into OUT/<spec>/, then the report
    llmsim-reproduce all --jobs 2 --out OUT --resume                # again: keeps the specs OUT finished, runs the rest
    llmsim-reproduce report --from DIR,SPEC=DIR --report FILE       # the report from existing output directories

Each spec module (``agents.reproduce_<spec>``, imported only when asked for) trains and evaluates what its
paper's claims need and returns one row per claim; this module owns what is common: the verdict rules, the
table, ``--json`` and ``claims.json`` / ``claims.md``. Everything goes under ``--out`` (default
``outputs/reproduce/<spec>/<timestamp>``). A bad spec, option or run directory is one line on stderr, exit 2.

Verdict rules (docs/reproduce.md). Gains are per cent vs round robin, positive = better; the band around a
paper value p is ``tol(p) = max(TOL_ABS, TOL_REL * |p|)``:

* ``at_least`` (a method improves by p): reproduced if measured >= p - tol (within the band or beyond it, same
  sign); partly if it has p's sign but falls short of the band; not if it is 0, of the other sign or missing.
* ``about`` (a point value, e.g. a heuristic's gain): reproduced if |measured - p| <= tol; partly if same sign
  but outside the band; not otherwise.
* ``at_most`` (an upper bound, e.g. "heuristics gain <= 2.6 %"): reproduced if measured <= p + tol; partly
  if measured <= p + 2 tol; not otherwise.
* ``order`` (values claimed in a strict order): of the n (n - 1) / 2 pairs, reproduced if all are in the
  claimed order, partly if more than half are, not otherwise (a tie or a missing value counts as out of order).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import inspect
import json
import math
import os
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.harness.claims import KEYS, PROG, SPECS, TOL_ABS, TOL_REL, VERDICTS, format_value, missing  # noqa: F401 (KEYS: the harnesses' import)
from experiments.harness.claims import source_commit as _commit
from llmsim.errors import ConfigError

MODES = ("all", "report")  # not specs: every spec in turn, and the report from existing outputs


# ---------------------------------------------------------------------- running many simulations
def size_name(quick: bool, size: str | None, sizes: Collection[str], size_env: str) -> str:
    """Which size a harness runs: ``size`` (its ``run(size=...)``), else its own ``size_env`` variable, else
    ``LLMSIM_REPRODUCE_SIZE=tiny`` (the test suite's size for every harness: ``test``), else the flag."""
    common = {"tiny": "test"}.get(os.environ.get("LLMSIM_REPRODUCE_SIZE", ""))
    name = size or os.environ.get(size_env) or common or ("quick" if quick else "full")
    if name not in sizes:
        raise ConfigError(f"{size_env}={name!r}: expected one of {sorted(sizes)}")
    return name


def run_pool(fn: Any, items: Sequence[Any], jobs: int, progress: bool, label: str, every: int = 10) -> list[Any]:
    """``fn`` over ``items`` (in that order of submission) in ``jobs`` processes, results as they finish, with a
    progress line on stderr every ``every`` results. ``fn`` must be a module-level function (it is pickled)."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    t0 = time.perf_counter()
    out: list[Any] = []

    def tick() -> None:
        i = len(out)
        if progress and (i == len(items) or i % every == 0):
            print(f"{label}: {i}/{len(items)} runs, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)

    if jobs <= 1:
        for it in items:
            out.append(fn(it))
            tick()
        return out
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for f in as_completed([pool.submit(fn, it) for it in items]):
            out.append(f.result())
            tick()
    return out


# ---------------------------------------------------------------------- verdict rules
def tolerance(paper: float) -> float:
    """The band around a paper value within which a measurement counts as the same number."""
    return max(TOL_ABS, TOL_REL * abs(paper))


def gain_verdict(paper: float, measured: float | None, kind: str = "at_least") -> str:
    """Verdict of a numeric claim (module docstring): ``kind`` is at_least, about or at_most."""
    if missing(measured):
        return "not"
    assert measured is not None
    tol = tolerance(paper)
    same_sign = measured * paper > 0 or (paper == 0 and abs(measured) <= tol)
    if kind == "at_least":
        ahead = measured - paper if paper >= 0 else paper - measured  # how far beyond p, in p's direction
        if same_sign and ahead >= -tol:
            return "reproduced"
        return "partly" if same_sign else "not"
    if kind == "about":
        if abs(measured - paper) <= tol:
            return "reproduced"
        return "partly" if same_sign else "not"
    if kind == "at_most":
        if measured <= paper + tol:
            return "reproduced"
        return "partly" if measured <= paper + 2 * tol else "not"
    raise ValueError(f"gain_verdict: kind {kind!r} is not one of at_least, about, at_most")


def pairs_in_order(values: Sequence[float | None], descending: bool = True) -> tuple[int, int]:
    """(pairs in the claimed order, all pairs) of ``values`` listed in the claimed order."""
    n, good = len(values), 0
    for i in range(n):
        for j in range(i + 1, n):
            a, b = values[i], values[j]
            if not missing(a) and not missing(b) and ((a > b) if descending else (a < b)):  # type: ignore[operator]
                good += 1
    return good, n * (n - 1) // 2


def order_verdict(values: Sequence[float | None], descending: bool = True) -> str:
    """Verdict of an ordering claim: ``values`` listed in the claimed order (largest first if ``descending``)."""
    good, total = pairs_in_order(values, descending)
    if total == 0 or good == total:
        return "reproduced"
    return "partly" if 2 * good > total else "not"


def claim_row(paper: str, claim: str, paper_value: Any, measured: Any, verdict: str, **extra: Any) -> dict[str, Any]:
    """One claim with the required keys first; ``extra`` (unit, note, seeds, ...) after them."""
    if verdict not in VERDICTS:
        raise ValueError(f"verdict {verdict!r} is not one of {VERDICTS}")
    if isinstance(measured, float):
        measured = None if math.isnan(measured) else round(measured, 2)
    return {"paper": paper, "claim": claim, "paper_value": paper_value, "measured": measured, "verdict": verdict,
            **extra}


# ---------------------------------------------------------------------- output
def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The claims as an aligned plain-text table (what the command prints)."""
    head = ["paper", "claim", "paper_value", "measured", "verdict"]
    body = [[str(r["paper"]), str(r["claim"]), format_value(r["paper_value"], r.get("unit")),
             format_value(r["measured"], r.get("unit")), str(r["verdict"])] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [head, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


def claims_table(rows: Sequence[Mapping[str, Any]], with_paper: bool = True) -> list[str]:
    """The claims as markdown table lines (values with their units, verdicts in bold, "|" escaped)."""
    head = ["paper"] * with_paper + ["claim", "paper", "measured", "verdict", "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["paper"]] * with_paper + [r["claim"], format_value(r["paper_value"], r.get("unit")),
                                             format_value(r["measured"], r.get("unit")), f"**{r['verdict']}**",
                                             str(r.get("note") or "")]
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    return lines


def markdown(rows: Sequence[Mapping[str, Any]], header: Sequence[str]) -> str:
    """claims.md: the header lines, the claims table with notes, and the verdict rules it applied."""
    lines = [*header, "", *claims_table(rows)]
    counts = {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}
    lines += ["", "Verdicts: " + ", ".join(f"{n} {v}" for v, n in counts.items()) + ".", "",
              f"Rules (docs/reproduce.md): tol(p) = max({TOL_ABS} pp, {TOL_REL:.0%} of |p|). at_least: reproduced "
              "if measured >= p - tol, partly if same sign, else not. about: reproduced if |measured - p| <= tol, "
              "partly if same sign. at_most: reproduced if measured <= p + tol, partly if <= p + 2 tol. order: "
              "reproduced if every pair is in the claimed order, partly if more than half are."]
    return "\n".join(lines) + "\n"


def write_claims(rows: Sequence[Mapping[str, Any]], out_dir: Path, command: str, wall_s: float) -> None:
    """claims.json (the rows and how they were made) and claims.md."""
    when = dt.datetime.now().isoformat(timespec="seconds")
    body = {"command": command, "date": when, "commit": _commit(), "wall_s": round(wall_s, 1), "claims": list(rows)}
    (out_dir / "claims.json").write_text(json.dumps(body, indent=1, default=str) + "\n")
    settings = sorted({str(r.get("setting")) for r in rows if r.get("setting")})
    notes = sorted({str(r["setting_note"]) for r in rows if r.get("setting_note")})
    header = [f"# Claims: {', '.join(sorted({str(r['paper']) for r in rows}))}", "",
              f"Command: `{command}` ({when}, commit {body['commit'] or 'unknown'}, {wall_s / 60:.1f} min)."]
    if settings:
        header += ["", f"Setting: **{', '.join(settings)}**." + "".join(f" {n.rstrip('.')}." for n in notes)]
    (out_dir / "claims.md").write_text(markdown(rows, header))


# ---------------------------------------------------------------------- command line
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        _fail(message)


def _fail(message: str) -> None:
    print(f"{PROG}: error: {' '.join(str(message).split())}", file=sys.stderr)
    raise SystemExit(2)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = _Parser(prog=PROG, description="Measure a paper's headline claims and give each a verdict "
                                       "(reproduced / partly / not); docs/reproduce.md.")
    p.add_argument("spec", help=f"which paper: {', '.join(SPECS)}; or all (every one, then --report), or report "
                                "(the report from --from directories)")
    p.add_argument("--quick", action="store_true", help="a small setting that runs in minutes (not the paper's)")
    p.add_argument("--json", action="store_true", help="one JSON object per claim on stdout")
    p.add_argument("--out", type=Path, help="output directory (default outputs/reproduce/<spec>/<timestamp>)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes for training and evaluation")
    p.add_argument("--seeds", type=int, help="held-out evaluation seeds from 1000 (default 5; --quick 2)")
    p.add_argument("--from-runs", help="existing training runs, skipping training; spec001: BASELINE,AWARE,GUIDED "
                                       "run (or checkpoint) directories; spec002: hard=DIR,soft=DIR; spec000: "
                                       "sac_han=DIR[,baseline_rl=DIR,dsa=DIR,no_pred=DIR]")
    p.add_argument("--from-runs-8", help="spec001: the same for the 8-instance runs (adds the scalability claims)")
    p.add_argument("--scale8", action="store_true", help="spec001: also train and evaluate on 8 instances")
    p.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    p.add_argument("--report", type=Path, help="all / report: where the reproduction report goes "
                                               "(all: default OUT/REPRODUCTION.md)")
    p.add_argument("--from", dest="from_dirs", help="report: output directories DIR[,SPEC=DIR...] (their claims.json)")
    p.add_argument("--resume", action="store_true", help="all: keep the specs whose OUT/<spec>/claims.json an earlier "
                                                         "all with the same setting finished, run the others")
    a = p.parse_args(argv)
    if a.spec not in (*SPECS, *MODES):
        _fail(f"unknown spec {a.spec!r}; expected one of {', '.join((*SPECS, *MODES))}")
    if a.jobs < 1 or (a.seeds is not None and a.seeds < 1):
        _fail("--jobs and --seeds must be positive integers")
    _check_mode(a)
    return a


def _check_mode(a: argparse.Namespace) -> None:
    """Options that belong to one mode only are refused elsewhere, with the option named."""
    per_spec = {"--from-runs": a.from_runs, "--from-runs-8": a.from_runs_8, "--scale8": a.scale8,
                "--seeds": a.seeds, "--json": a.json}
    if a.spec in MODES:
        given = [k for k, v in per_spec.items() if v]
        if given:
            _fail(f"{a.spec} does not take {given[0]} (run that spec on its own)")
    if a.spec == "report":
        if not a.from_dirs or a.report is None:
            _fail("report needs --from DIR[,SPEC=DIR...] and --report FILE")
        if a.quick or a.out:
            _fail("report reads existing directories: it takes only --from and --report")
    elif a.from_dirs:
        _fail("--from is for report (all runs every spec itself)")
    elif a.report is not None and a.spec != "all":
        _fail("--report is for all and report")
    if a.resume and (a.spec != "all" or a.out is None):
        _fail("--resume is for all, with the --out directory of the run to resume")


def runs_option(value: str | None) -> str | dict[str, str] | None:
    """``--from-runs``: ``KEY=DIR,KEY=DIR`` becomes a mapping (spec002: hard=..,soft=..; spec001 accepts
    baseline=..,aware=..,guided=..), anything else stays the comma-separated string of positional directories."""
    if value is None:
        return None
    parts = [p.strip() for p in value.split(",")]
    if parts and all("=" in p for p in parts):
        pairs = [p.split("=", 1) for p in parts]
        return {k.strip(): v.strip() for k, v in pairs}
    return value


def _spec_kwargs(run: Any, a: argparse.Namespace) -> dict[str, Any]:
    """The options the spec module's ``run`` takes; one it does not take is an error, not silently dropped."""
    opts = {"from_runs": runs_option(a.from_runs), "from_runs_8": runs_option(a.from_runs_8), "seeds": a.seeds,
            "scale8": a.scale8 or None}
    accepted = inspect.signature(run).parameters
    given = {k: v for k, v in opts.items() if v is not None}
    bad = [k for k in given if k not in accepted]
    if bad:
        _fail(f"{a.spec} does not take --{bad[0].replace('_', '-')}")
    return given


def _import_spec(spec: str) -> Any:
    """The spec's module; a ConfigError (not an exit) when it is not installed, so ``all`` can go on."""
    name = SPECS[spec]
    try:
        return importlib.import_module(name)  # by name: a spec module may import this one
    except ModuleNotFoundError as e:
        if e.name == name:
            raise ConfigError(f"{spec} is not available in this installation (no module {name})") from None
        raise


def _load(spec: str) -> Any:
    try:
        return _import_spec(spec)
    except ConfigError as e:
        _fail(str(e))


def run_spec(module: Any, a: argparse.Namespace, out: Path, kwargs: Mapping[str, Any], command: str) -> list[Any]:
    """Run one spec into ``out`` and write claims.json / claims.md; its rows. Errors propagate (an empty ``out``
    made here is removed first)."""
    from llmsim.errors import LLMSimError

    t0 = time.perf_counter()
    existed = out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        rows = module.run(a.quick, out, a.jobs, not a.no_progress, **kwargs)
    except (LLMSimError, OSError):
        if not existed and out.is_dir() and not any(out.iterdir()):
            out.rmdir()  # refused before anything was written: leave no empty directory behind
        raise
    rows = [{**r, "command": command} for r in rows]
    write_claims(rows, out, command, time.perf_counter() - t0)
    return rows


def finished_specs(out: Path, quick: bool) -> dict[str, str]:
    """``all --resume``: the specs ``out/<spec>/claims.json`` holds finished runs of, with their dates. A run of
    the other setting (quick vs full) there is refused: one report must not mix them."""
    done: dict[str, str] = {}
    for spec in SPECS:
        path = out / spec / "claims.json"
        if not path.is_file():
            continue
        try:
            body = json.loads(path.read_text())
            command, when = str(body["command"]), str(body.get("date", "an unknown date"))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"{path}: not a finished run's claims.json ({type(e).__name__}: {e}); move it away "
                              "to run that spec again") from None
        if ("--quick" in command.split()) != quick:
            was, now = ("full", "quick") if quick else ("quick", "full")
            raise ConfigError(f"{path}: a {was} run ({command}); this is the {now} setting: resume with the same "
                              "setting or use another --out")
        done[spec] = when
    return done


def _set_aside(sub: Path) -> None:
    """An unfinished spec directory (failed.json, or a run cut off) is kept beside, not overwritten."""
    stamp = dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    aside = sub.with_name(f"{sub.name}.unfinished-{stamp}")
    sub.rename(aside)
    print(f"[{PROG} all] {sub} held no finished run: moved to {aside}, running it again", file=sys.stderr, flush=True)


def run_all(a: argparse.Namespace, out: Path) -> tuple[list[tuple[str | None, Path]], list[str]]:
    """Every spec in turn into ``out/<spec>/``. A spec that raises does not stop the others: its one-line error
    goes to stderr and to ``out/<spec>/failed.json`` (the report lists it). With ``--resume``, specs finished
    there earlier are kept. The (spec, directory) entries and the specs kept."""
    entries: list[tuple[str | None, Path]] = []
    done = finished_specs(out, a.quick) if a.resume else {}
    for i, spec in enumerate(SPECS, 1):
        sub = out / spec
        entries.append((spec, sub))
        if spec in done:
            print(f"[{PROG} all] {spec} ({i}/{len(SPECS)}): finished on {done[spec]}, kept (--resume)",
                  file=sys.stderr, flush=True)
            continue
        if a.resume and sub.exists():
            _set_aside(sub)
        command = " ".join([PROG, spec, *["--quick"] * a.quick, "--jobs", str(a.jobs), "--out", str(sub)])
        print(f"[{PROG} all] {spec} ({i}/{len(SPECS)}): {command}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            run_spec(_import_spec(spec), a, sub, {}, command)
        except Exception as e:  # any failure of one spec is reported; the others still run
            error = " ".join(f"{type(e).__name__}: {e}".split())
            print(f"[{PROG} all] {spec} failed: {error}", file=sys.stderr, flush=True)
            sub.mkdir(parents=True, exist_ok=True)
            body = {"spec": spec, "error": error, "command": command, "date": dt.datetime.now().isoformat(
                timespec="seconds"), "commit": _commit(), "wall_s": round(time.perf_counter() - t0, 1)}
            (sub / "failed.json").write_text(json.dumps(body, indent=1) + "\n")
    return entries, list(done)


def _report_mode(a: argparse.Namespace, command: str) -> None:
    """``all`` (run every spec, then the report) and ``report`` (the report from ``--from`` directories)."""
    from experiments import report as rr

    try:
        if a.spec == "all":
            out = a.out or Path("outputs/reproduce/all") / dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
            entries, kept = run_all(a, out)
            target = a.report or out / "REPRODUCTION.md"
            reports = rr.write_report(entries, target, command, origin="all", strict=False, kept=kept)
        else:
            target = a.report
            reports = rr.write_report(rr.parse_from(a.from_dirs), target, command)
    except ConfigError as e:
        _fail(str(e))
    print(rr.summary_line(reports))
    print(f"report: {target}")


def main(argv: Sequence[str] | None = None) -> None:
    """Run one spec's reproduction, write claims.json / claims.md, print the table (or JSON lines); or ``all`` /
    ``report`` (the reproduction report)."""
    from llmsim.errors import LLMSimError

    a = parse_args(argv)
    command = " ".join([PROG, *(sys.argv[1:] if argv is None else argv)])
    if a.spec in MODES:
        _report_mode(a, command)
        return
    module = _load(a.spec)
    kwargs = _spec_kwargs(module.run, a)
    out = a.out or Path("outputs/reproduce") / a.spec / dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    t0 = time.perf_counter()
    try:
        rows = run_spec(module, a, out, kwargs, command)
    except (LLMSimError, OSError) as e:
        _fail(str(e))
    wall = time.perf_counter() - t0
    if a.json:
        for r in rows:
            print(json.dumps(r, default=str))
        return
    print(table(rows), end="")
    notes = sorted({str(r["setting_note"]) for r in rows if r.get("setting_note")})
    for n in notes:
        print(f"note: {n}")
    print(f"command: {command}   ({wall / 60:.1f} min)")
    print(f"outputs: {out}  (claims.md, claims.json, evaluation.md)")


if __name__ == "__main__":
    main()
