"""The reproduction report from output directories: every experiment's claims.json on one page, verdicts copied.

    llmsim-reproduce all --out OUT                                      # every experiment, then OUT/REPRODUCTION.md
    llmsim-reproduce report --from DIR[,NAME=DIR...] --report FILE      # the same page from existing outputs

Why a module of its own: ``experiments.reproduce`` runs experiments; this one only reads what they wrote, so the page
can be rebuilt in seconds without rerunning hours of training. An output directory holds ``claims.json`` (a finished
run), ``claims_partial.json`` (rows a run saved before it was stopped: shown, labelled partial) or
``failed.json`` (written by ``all`` for an experiment that raised: listed with its one-line error). Verdicts are copied
from the rows, never recomputed; a paper's overall verdict is only a count of its rows' verdicts.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.harness.claims import KEYS, PROG, RULES_TEXT, VERDICTS, format_value, source_commit
from experiments.harness.registry import ALIASES, EXPERIMENTS, ORDER
from llmsim.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
PAPERS = tuple(n for n in ORDER if EXPERIMENTS.get(n).paper)
STUDIES = tuple(n for n in ORDER if not EXPERIMENTS.get(n).paper)
TITLES = {n: EXPERIMENTS.get(n).title for n in ORDER}
PAGES = {n: EXPERIMENTS.get(n).page for n in ORDER}
FILES = ("claims.json", "claims_partial.json", "failed.json")
CATEGORIES = {"full": "full runs", "runs": "existing training runs, re-evaluated (`--from-runs`)",
              "quick": "quick runs (a small setting, NOT the paper's)", "tiny": "test-size runs (numbers mean nothing)",
              "partial": "partial: a run stopped before it wrote claims.json (only the rows it saved)",
              "failed": "failed (the one-line error is in the table)", "missing": "no claims.json"}


@dataclass
class Source:
    """One output file read for an experiment: where it came from and how it was made."""

    path: Path
    kind: str  # claims | partial | failed
    command: str | None = None
    date: str | None = None
    commit: str | None = None
    wall_s: float | None = None
    error: str | None = None
    rows: int = 0
    duplicates: int = 0


@dataclass
class ExperimentReport:
    """An experiment's claims (merged over its sources, each claim once) and the sources they came from."""

    name: str
    claims: list[dict[str, Any]] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        kinds = {s.kind for s in self.sources}
        if not self.sources:
            return "missing"
        if "claims" in kinds:
            return "ok"
        return "partial" if "partial" in kinds else "failed"

    @property
    def counts(self) -> dict[str, int]:
        return {v: sum(r["verdict"] == v for r in self.claims) for v in VERDICTS}

    @property
    def wall_s(self) -> float | None:
        walls = [s.wall_s for s in self.sources if s.wall_s is not None and (s.rows > s.duplicates or not s.rows)]
        return sum(walls) if walls else None


# ---------------------------------------------------------------------- reading output directories
def read_json(path: Path) -> Any:
    """A JSON file, or a ConfigError that names it (one line)."""
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        what = e.msg.removesuffix(" at")  # "Unterminated string starting at": the position follows once
        raise ConfigError(f"{path}: malformed JSON ({what} at line {e.lineno}, column {e.colno})") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None


def _rows(path: Path, body: Any, key: str) -> list[dict[str, Any]]:
    """The claim rows of a parsed file, checked for the keys every row has (experiments.reproduce.claim_row)."""
    rows = body.get(key) if isinstance(body, dict) else None
    if not isinstance(rows, list):
        raise ConfigError(f"{path}: expected a JSON object with a {key!r} list of claim rows")
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or any(k not in r for k in KEYS) or r["verdict"] not in VERDICTS:
            raise ConfigError(f"{path}: claim row {i} lacks one of {', '.join(KEYS)} or has an unknown verdict")
    return rows


def load_source(path: Path) -> tuple[Source, list[dict[str, Any]]]:
    """An output directory (or one of its files) as a Source and its rows; a directory without any of FILES is
    an error naming the claims.json it lacks."""
    file = path if path.is_file() else next((path / f for f in FILES if (path / f).is_file()), None)
    if file is None:
        why = "no such directory" if not path.exists() else f"no such file (nor {', '.join(FILES[1:])})"
        raise ConfigError(f"{path / 'claims.json'}: {why}; not a {PROG} output directory")
    body = read_json(file)
    if file.name == "failed.json":
        if not isinstance(body, dict) or not isinstance(body.get("error"), str):
            raise ConfigError(f"{file}: expected a JSON object with an 'error' string")
        src = Source(file, "failed", body.get("command"), body.get("date"), body.get("commit"), body.get("wall_s"),
                     " ".join(body["error"].split()))
        return src, []
    partial = file.name == "claims_partial.json"
    rows = _rows(file, body, "rows" if partial and "claims" not in body else "claims")
    src = Source(file, "partial" if partial else "claims", body.get("command"), body.get("date"),
                 body.get("commit"), body.get("wall_s"), rows=len(rows))
    return src, rows


def known(name: str) -> str | None:
    """An experiment's name from its name or old spec id (output directories of earlier runs use those)."""
    name = ALIASES.get(name, name)
    return name if name in PAGES else None


def experiment_of(src: Source, rows: Sequence[Mapping[str, Any]], given: str | None) -> str:
    """Which experiment a source belongs to: given (NAME=DIR), else the one named in its command, else its rows'
    ``paper`` when that names one."""
    if given:
        return given
    for token in (src.command or "").split():
        if known(token):
            return str(known(token))
    papers = {str(r["paper"]) for r in rows}
    if len(papers) == 1 and known(p := papers.pop()):
        return str(known(p))
    raise ConfigError(f"{src.path}: cannot tell which experiment this is; give it as NAME=DIR ({', '.join(ORDER)})")


def parse_from(value: str) -> list[tuple[str | None, Path]]:
    """``--from``: comma-separated ``DIR`` or ``NAME=DIR`` entries (NAME: an experiment or its old spec id)."""
    out: list[tuple[str | None, Path]] = []
    for part in (p.strip() for p in value.split(",")):
        if not part:
            continue
        name, sep, where = part.partition("=")
        if sep and not known(name.strip()):
            raise ConfigError(f"--from {part}: unknown experiment {name.strip()!r}; expected one of {', '.join(ORDER)}")
        out.append((known(name.strip()), Path(where.strip())) if sep else (None, Path(part)))
    if not out:
        raise ConfigError("--from: no output directory given")
    return out


def _merge(rep: ExperimentReport, src: Source, rows: Sequence[Mapping[str, Any]]) -> None:
    """Add a source's rows to an experiment, each claim once: a claim already there (by its text) is counted as a
    duplicate, and a duplicate with another verdict is noted, never silently chosen."""
    seen = {str(r["claim"]): r for r in rep.claims}
    for r in rows:
        old = seen.get(str(r["claim"]))
        if old is None:
            rep.claims.append(dict(r))
            seen[str(r["claim"])] = r
            continue
        src.duplicates += 1
        if old["verdict"] != r["verdict"] or old["measured"] != r["measured"]:
            rep.notes.append(f"`{src.path}` has \"{r['claim']}\" as {_value(r['measured'], r.get('unit'))} "
                             f"(**{r['verdict']}**); the row shown is the first source's.")
    rep.sources.append(src)


def collect(entries: Sequence[tuple[str | None, Path]], strict: bool = True) -> dict[str, ExperimentReport]:
    """Every experiment's report from the output directories (in order; the first source of a claim wins).
    Experiments not given are there with no sources (shown as "no claims.json"). ``strict=False`` (``all``) turns a
    directory with nothing in it into a missing experiment instead of an error."""
    reports = {s: ExperimentReport(s) for s in ORDER}
    for given, path in entries:
        try:
            src, rows = load_source(path)
        except ConfigError as e:
            if strict or given is None:
                raise
            if any((path / f).exists() for f in FILES):  # unreadable: a failed experiment, not a lost report
                reports[given].sources.append(Source(path, "failed", error=str(e)))
            continue
        _merge(reports[experiment_of(src, rows, given)], src, rows)
    return reports


# ---------------------------------------------------------------------- rendering
def setting_label(rep: ExperimentReport) -> str:
    """The category an experiment's section comes from (a key of CATEGORIES)."""
    return _row_label(rep) if rep.status == "ok" else rep.status


def _row_label(rep: ExperimentReport) -> str:
    """full / runs / quick / tiny from the rows' own ``setting``; rows that state none, from the command."""
    raw = {str(r.get("setting") or "") for r in rep.claims}
    if raw == {""}:
        command = " ".join(s.command or "" for s in rep.sources).split()
        return "runs" if "--from-runs" in command else "quick" if "--quick" in command else "full"
    if all(s == "runs" for s in raw):
        return "runs"
    if all(s.startswith("full") for s in raw):
        return "full"
    if any(s.startswith(("test", "tiny")) for s in raw):
        return "tiny"
    return "quick" if any("quick" in s for s in raw) else sorted(raw)[0]


def setting_text(rep: ExperimentReport) -> str:
    """The setting as the rows state it, with their setting_note(s)."""
    raw = sorted({str(r["setting"]) for r in rep.claims if r.get("setting")})
    label = {"runs": "existing runs"}.get(_row_label(rep), _row_label(rep))
    notes = sorted({str(r["setting_note"]).rstrip(".") for r in rep.claims if r.get("setting_note")} - {label})
    extra = [s for s in raw if s not in ("runs", label)]
    text = label + (f" ({'; '.join(extra)})" if extra else "")
    if notes and not extra and all(n.startswith(label) for n in notes):  # the note already says the label
        return "; ".join(notes)
    if rep.claims and not raw:
        text += " (the rows state no setting; read from the command)"
    return text + (": " + "; ".join(notes) if notes else "")


def overall(rep: ExperimentReport) -> str:
    """An experiment's overall verdict, counted from its rows' verdicts (all reproduced, all not, else partly)."""
    c = rep.counts
    if not rep.claims:
        return "failed" if rep.status == "failed" else "no claims"
    if c["reproduced"] == len(rep.claims):
        return "reproduced"
    return "not" if c["not"] == len(rep.claims) else "partly"


def _value(x: Any, unit: str | None) -> str:
    """A value as claims.json has it: 6 significant digits, not the 2 decimals of claims.md."""
    return format_value(x, unit, ".6g")


def _minutes(wall: float | None) -> str:
    return "not recorded" if wall is None else f"{wall / 60:.1f} min"


def _seeds(seeds: Any) -> str:
    if not isinstance(seeds, list) or not seeds:
        return "n/a"
    if all(isinstance(s, int) for s in seeds) and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])
    return ", ".join(str(s) for s in seeds)


def _cell(x: Any) -> str:
    return " ".join(str(x).split()).replace("|", "/")


def _link(name: str, report: Path) -> tuple[str, Path]:
    page = ROOT / "docs" / "results" / PAGES[name]
    return os.path.relpath(page, report.resolve().parent), page


def summary_table(reports: Mapping[str, ExperimentReport]) -> list[str]:
    """The one table at the top: a row per experiment, missing and failed ones included."""
    lines = ["| experiment | paper / system | claims | reproduced | partly | not | overall | wall time | setting |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, rep in reports.items():
        c = rep.counts
        setting = setting_text(rep) if rep.claims else CATEGORIES[rep.status]
        if rep.status == "partial":
            setting = f"**PARTIAL** ({rep.sources[0].path.name}): {setting}"
        errors = [s.error for s in rep.sources if s.error]
        if errors:
            setting = f"**failed**: {'; '.join(errors)}" + (f"; {setting}" if rep.claims else "")
        cells = [f"[{name}](#{name})", TITLES.get(name, name), len(rep.claims), c["reproduced"], c["partly"],
                 c["not"], f"**{overall(rep)}**", _minutes(rep.wall_s), setting]
        lines.append("| " + " | ".join(_cell(x) for x in cells) + " |")
    return lines


def claims_rows(rep: ExperimentReport) -> list[str]:
    """A table row per claim: the verdict as claims.json has it; a seeds column only when seeds differ."""
    seed_sets = {_seeds(r.get("seeds")) for r in rep.claims}
    per_claim = len(seed_sets) > 1
    head = ["claim", "paper", "llmsim", "verdict", "note"] + ["seeds"] * per_claim
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rep.claims:
        cells = [r["claim"], _value(r["paper_value"], r.get("unit")), _value(r["measured"], r.get("unit")),
                 f"**{r['verdict']}**", r.get("note") or ""] + [_seeds(r.get("seeds"))] * per_claim
        lines.append("| " + " | ".join(_cell(x) for x in cells) + " |")
    return lines


def _results_seeds(rep: ExperimentReport) -> str:
    """Seeds when the rows carry none: the ``size`` record of the results.json next to claims.json, if any."""
    for s in rep.sources:
        try:
            size = read_json(s.path.parent / "results.json").get("size", {})
        except (ConfigError, AttributeError):
            continue
        found = [f"`size.{k}` {_seeds(size[k])}" for k in ("seeds", "extra_seeds") if isinstance(size, dict)
                 and isinstance(size.get(k), list)]
        if found:
            return f"the rows carry none; {s.path.parent / 'results.json'} has {', '.join(found)}."
    return "not recorded in claims.json (see the setting above)."


def _source_lines(rep: ExperimentReport, page: Path) -> list[str]:
    text = page.read_text() if page.is_file() else ""
    out = []
    for s in rep.sources:
        where = s.path.parent if s.path.name in FILES else s.path
        cited = "yes" if f"{where.parent.name}/{where.name}" in text else "**no**"  # absolute or runs/NAME
        what = {"claims": "finished run", "partial": "**partial**: the run was stopped before it wrote "
                "claims.json", "failed": "**failed**"}[s.kind]
        line = (f"* `{s.path}` ({what}; {s.rows} claim(s)"
                + (f", {s.duplicates} of them duplicates of an earlier source's, counted once and not in the wall "
                   "time" if s.duplicates == s.rows else f", {s.duplicates} of them duplicates of an earlier "
                   "source's, counted once" if s.duplicates else "")
                + f"). Command: `{s.command or 'not recorded'}`; date {s.date or 'not recorded'}, commit "
                f"{s.commit or 'not recorded'}, wall time {_minutes(s.wall_s)}. The results page names this "
                f"output directory: {cited}.")
        out.append(line + (f" Error: `{s.error}`" if s.error else ""))
    return out


def section(rep: ExperimentReport, report: Path) -> list[str]:
    """An experiment's section: sources, setting, seeds, every claim and the link to its docs/results page."""
    link, page = _link(rep.name, report)
    c = rep.counts
    lines = [f'<a id="{rep.name}"></a>', f"### {rep.name}: {TITLES.get(rep.name, rep.name)}", "",
             f"Results page: [docs/results/{PAGES[rep.name]}]({link}).", ""]
    if not rep.sources:
        return lines + ["**No claims.json**: no output directory was given or found for it.", ""]
    lines += [f"Setting: {setting_text(rep) if rep.claims else CATEGORIES[rep.status]}.", "", "Sources:", "",
              *_source_lines(rep, page), ""]
    if not rep.claims:
        return lines
    seed_sets = {_seeds(r.get("seeds")) for r in rep.claims}
    seeds = seed_sets.pop() if len(seed_sets) == 1 else None
    lines.append("Held-out seeds: " + ("per claim (last column)." if seeds is None else
                                       f"{seeds}." if seeds != "n/a" else _results_seeds(rep)))
    lines += ["", *claims_rows(rep), "",
              f"Verdicts: {c['reproduced']} reproduced, {c['partly']} partly, {c['not']} not "
              f"(overall **{overall(rep)}**).", ""]
    return lines + [f"* Note: {n}" for n in rep.notes] + ([""] if rep.notes else [])


def provenance(reports: Mapping[str, ExperimentReport], origin: str, kept: Sequence[str] = ()) -> list[str]:
    """The honest part at the top: how the page was made and which sections come from what kind of run."""
    if origin == "all" and kept:
        lines = [f"Every experiment below was run by `{PROG} all` into one output directory, one after another, "
                 f"each into its own directory, over more than one invocation (`--resume`): {', '.join(kept)} "
                 "finished in an earlier invocation and were kept (their sections give that run's command, date, "
                 "commit and wall time); the others were run by this one. One that failed is listed with its error."]
    elif origin == "all":
        lines = ["Every experiment below was run by this one command, one after another, each into its own directory; "
                 "one that failed is listed with its error."]
    else:
        lines = [f"Built from existing output directories; no simulation was run to write this page. "
                 f"`{PROG} all` (the full setting) was **NOT** run end to end in "
                 "one go for it: each section comes from its own earlier run, listed with that run's command, "
                 "date, commit and wall time."]
    lines += ["", "Where each section comes from:", ""]
    for key, what in CATEGORIES.items():
        names = [s for s, r in reports.items() if setting_label(r) == key]
        if names:
            lines.append(f"* {what}: {', '.join(names)}")
    return lines + [""]


def render(reports: Mapping[str, ExperimentReport], report: Path, command: str, origin: str, commit: str | None,
           kept: Sequence[str] = ()) -> str:
    """The whole page (markdown)."""
    when = dt.datetime.now().isoformat(timespec="seconds")
    lines = ["# Reproduction report", "",
             f"Generated by `{command}` on {when} (commit {commit or 'unknown'}).", "",
             *provenance(reports, origin, kept), "## Summary", "", *summary_table(reports), "",
             "Claims and verdicts are copied from each run's claims.json; the overall verdict counts them "
             "(reproduced: every claim reproduced; not: every claim not; else partly). Wall time is the run's "
             "own (a re-evaluation of existing training runs does not include the training).", ""]
    for title, names in (("Papers", PAPERS), ("llmsim studies (not papers)", STUDIES)):
        lines += [f"## {title}", ""]
        for name in names:
            lines += section(reports[name], report)
    others = [s for s in reports if s not in PAPERS + STUDIES]
    for name in others:
        lines += section(reports[name], report)
    lines += ["## Verdict rules", "",
              f"From `experiments/harness/claims.py` (docs/reproduce.md): {RULES_TEXT} Some experiments judge a "
              "claim by their own stated rule (its note says so).", ""]
    return "\n".join(lines)


def write_report(entries: Sequence[tuple[str | None, Path]], report: Path, command: str, origin: str = "report",
                 strict: bool = True, kept: Sequence[str] = ()) -> dict[str, ExperimentReport]:
    """Read the output directories, write the page to ``report``; the per-experiment reports (for the summary
    line). ``kept``: experiments an ``all --resume`` kept from an earlier invocation."""
    reports = collect(entries, strict)
    write_page(report, render(reports, report, command, origin, source_commit(), kept))
    return reports


def write_page(report: Path, text: str) -> None:
    """Write a report page, creating its folder; an unwritable path is one line."""
    try:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(text)
    except OSError as e:
        raise ConfigError(f"{report}: cannot write ({e.strerror})") from None


def summary_line(reports: Mapping[str, ExperimentReport]) -> str:
    """One stdout line per experiment after writing a report."""
    return "\n".join(f"{s}: {overall(r)} ({r.counts['reproduced']} reproduced, {r.counts['partly']} partly, "
                     f"{r.counts['not']} not; {setting_label(r)})" for s, r in reports.items())
