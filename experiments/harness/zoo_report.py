"""The reproduction report from the router zoo (docs/REPRODUCTION.md), in seconds:

    llmsim-reproduce report --from-zoo --report docs/REPRODUCTION.md

Why a page of its own: the older report is built from output directories of long runs, which live outside the
repository and cannot be rebuilt in CI-sized time. This one reads only what the repository ships: each zoo
router's manifest (how it was trained: command, seed, steps, wall and CPU time, commit, date; its validation
result and its unseen-traffic suite summary) and the paths of its files, named relative to the repository. No
simulation runs, no clock is read: the same zoo gives the same page. An experiment without a zoo router says so
and names the command that measures its claims.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from experiments.harness import zoo_routers
from experiments.harness.reproduction_report import PAGES, PAPERS, STUDIES, TITLES, write_page
from experiments.harness.zoo_routers import ROOT, ZOO_ROUTERS, in_repo

COMMAND = "llmsim-reproduce report --from-zoo --report docs/REPRODUCTION.md"


def _cell(x: Any) -> str:
    return " ".join(str(x).split()).replace("|", "/")


def _minutes(seconds: Any) -> str:
    return f"{float(seconds) / 60:.1f} min" if isinstance(seconds, int | float) else "not recorded"


def _brief(value: Any) -> str:
    """A manifest value in one cell: numbers to 4 significant digits, None as 'not recorded'."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    return "not recorded" if value in (None, "", {}, []) else str(value)


def _seeds(seeds: Any) -> str:
    if isinstance(seeds, Mapping):  # seeds per split, e.g. {"test": [2000, 2001]}
        return "; ".join(f"{k} {_seeds(v)}" for k, v in seeds.items())
    if isinstance(seeds, list) and seeds and all(isinstance(s, int) for s in seeds):
        return f"{seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 1 \
            else ", ".join(map(str, seeds))
    return _brief(seeds)


def validation_text(m: Mapping[str, Any]) -> str:
    """What chose the shipped checkpoint: the metric and best score at its step, and that evaluation's warnings."""
    v = m.get("validation") or {}
    if not isinstance(v, Mapping) or not v:
        return "not recorded"
    at = m.get("best_at_step")
    text = f"{v.get('eval_metric', 'score')} {_brief(v.get('best_score'))}" + (f" at step {at:,}" if isinstance(
        at, int) else "") + f", best of {len(v.get('evaluations') or [])} evaluation(s)"
    if v.get("fallback_margin") is not None:
        text += f", fallback margin {_brief(v['fallback_margin'])}"
    chosen = [e for e in v.get("evaluations") or [] if isinstance(e, Mapping) and e.get("step") == at]
    if chosen and "warnings" in chosen[0]:
        found = chosen[0]["warnings"] or []
        text += "; training warnings there: " + ("; ".join(map(str, found)) if found else "none")
    return text


def suite_text(m: Mapping[str, Any]) -> str:
    """The unseen-traffic suite summary: size, seeds, scenarios and each learned policy's bars."""
    s = m.get("suite") or {}
    if not isinstance(s, Mapping) or not s:
        return "not run yet (the manifest has no suite summary)"
    text = f"{_brief(s.get('scenarios'))} scenario(s), size {_brief(s.get('size'))}, seeds {_seeds(s.get('seeds'))}"
    for policy, bars in (s.get("bars") or {}).items():
        verdicts = [f"{b.get('bar') or b.get('name') or i}: {b.get('verdict', b.get('holds', '?'))}"
                    for i, b in enumerate(bars) if isinstance(b, Mapping)]
        text += f"; {policy}: " + (", ".join(verdicts) or "no bar")
    return text


def zoo_entries() -> dict[str, Any]:
    """experiment -> its zoo entry (llmsim.agents.zoo), for the experiments whose testbed has a zoo router."""
    zoo = zoo_routers.zoo  # looked up at call time: the tests put a fake zoo there
    names = set(zoo.names())
    return {exp: zoo.entry(name) for exp, name in ZOO_ROUTERS.items() if name in names}


def _files(entry: Any) -> str:
    parts = [f"checkpoint `{in_repo(entry.checkpoint_dir)}`"]
    if entry.export_dir is not None:
        parts.append(f"export `{in_repo(entry.export_dir)}`")
    if entry.suite_json is not None:
        parts.append(f"suite evaluation `{in_repo(entry.suite_json)}`")
    return ", ".join(parts)


def summary_table(entries: Mapping[str, Any]) -> list[str]:
    """A row per experiment: its zoo router and how it was trained, or that it has none."""
    lines = ["| experiment | paper / system | zoo router | trained by | steps | wall time | validation | "
             "unseen-traffic suite |", "|" + "---|" * 8]
    for name in (*PAPERS, *STUDIES):
        e = entries.get(name)
        if e is None:
            cells = [f"[{name}](#{name})", TITLES[name], "none", "-", "-", "-", "-", "-"]
        else:
            m = e.manifest or {}
            cells = [f"[{name}](#{name})", TITLES[name], f"`{e.name}` ({m.get('label', e.name)})",
                     f"`{m.get('train_command', 'not recorded')}`", _brief(m.get("steps")),
                     _minutes(m.get("wall_s")), validation_text(m), suite_text(m)]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return lines


def results_link(page: str, report: Path) -> str:
    """The link to docs/results/``page`` from the report: relative when the report is in the repository, else
    the repository path (never a directory outside it)."""
    target = ROOT / "docs" / "results" / page
    try:
        report.resolve().relative_to(ROOT)
    except ValueError:
        return f"docs/results/{page}"
    return os.path.relpath(target, report.resolve().parent)


def section(name: str, entry: Any | None, report: Path) -> list[str]:
    """An experiment's section: its zoo router (files, training, validation, suite) or a plain 'none'."""
    link = results_link(PAGES[name], report)
    lines = [f'<a id="{name}"></a>', f"### {name}: {TITLES[name]}", "",
             f"Results page: [docs/results/{PAGES[name]}]({link}).", ""]
    quick = f"`llmsim-reproduce {name} --quick`"
    if entry is None:
        why = "its testbed has no learned router" if name not in ZOO_ROUTERS else \
            f"the zoo has no `{ZOO_ROUTERS[name]}` router yet"
        return lines + [f"**No zoo router and no run**: {why}, and this page runs nothing. {quick} measures its "
                        "claims in minutes (a small setting, not the paper's).", ""]
    m = entry.manifest or {}
    lines += [f"Zoo router `{entry.name}` on the `{entry.testbed}` testbed ({m.get('label', entry.name)}, agent "
              f"{m.get('agent', 'not recorded')}): {_files(entry)}.", "",
              f"* Trained by: `{m.get('train_command', 'not recorded')}` (seed {_brief(m.get('train_seed'))}, "
              f"{_brief(m.get('steps'))} steps, wall {_minutes(m.get('wall_s'))}, CPU {_minutes(m.get('cpu_s'))}, "
              f"commit {str(m.get('commit') or 'not recorded')[:10]}, {_brief(m.get('date'))}; env config sha256 "
              f"{str(m.get('env_config_sha256') or 'not recorded')[:12]}).",
              f"* Validation (checkpoint choice, seeds 1000-1999): {validation_text(m)}.",
              f"* Unseen-traffic suite (test seeds from 2000, against the best heuristic per scenario): "
              f"{suite_text(m)}.", *([f"* Notes: {m['notes']}"] if m.get("notes") else []), "",
              f"The paper's claims are not measured on this page: {quick} evaluates this router for the learned "
              f"claims (labelled \"zoo router {entry.name}, trained by ...\"), `llmsim-reproduce {name}` retrains "
              "the paper's routers (hours).", ""]
    return lines


def render(entries: Mapping[str, Any], report: Path, command: str = COMMAND) -> str:
    """The whole page (markdown): what it is built from, the summary, a section per experiment."""
    zoo = "`zoo/` (shipped as llmsim.zoo)"
    routers = ", ".join(f"`{e.name}`" for e in entries.values()) or "none"
    lines = ["# Reproduction report", "", f"Generated by `{command}` from the router zoo {zoo}; zoo routers: "
             f"{routers}. No simulation was run to write this page and it names no directory outside the "
             "repository: every number is copied from a zoo router's manifest. The same command rebuilds it in "
             "seconds.", "",
             "A section without a zoo router says so; its claims are measured by `llmsim-reproduce NAME --quick` "
             "(minutes, a small setting) or `llmsim-reproduce NAME` (the full setting), each writing its own "
             "claims.json (docs/reproduce.md).", "", "## Summary", "", *summary_table(entries), ""]
    for title, names in (("Papers", PAPERS), ("llmsim studies (not papers)", STUDIES)):
        lines += [f"## {title}", ""]
        for name in names:
            lines += section(name, entries.get(name), report)
    return "\n".join(lines)


def write_zoo_report(report: Path, command: str = COMMAND) -> dict[str, Any]:
    """Write the page to ``report``; the experiments that have a zoo router (for the summary lines)."""
    entries = zoo_entries()
    write_page(report, render(entries, report, command))
    return entries
