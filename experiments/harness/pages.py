"""What a run writes: claims.json / claims.md (every experiment), results.json / results.md (its own tables),
the plain-text claims table ``llmsim-reproduce`` prints, and the markdown helpers the results pages share."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.harness.claims import PROG, RULES_TEXT, VERDICTS, format_value, source_commit
from llmsim.errors import unwritable_folder


# ---------------------------------------------------------------------- markdown
def md_table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A markdown table (cells as given; "|" in a cell is the caller's business)."""
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + \
        ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]


def md_section(title: str, head: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """``## title``, a blank line, the table, a blank line."""
    return [f"## {title}", "", *md_table(head, rows), ""]


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


def text_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The claims as an aligned plain-text table (what the command prints)."""
    head = ["paper", "claim", "paper_value", "measured", "verdict"]
    body = [[str(r["paper"]), str(r["claim"]), format_value(r["paper_value"], r.get("unit")),
             format_value(r["measured"], r.get("unit")), str(r["verdict"])] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [head, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------- claims.json / claims.md
def claims_markdown(rows: Sequence[Mapping[str, Any]], header: Sequence[str]) -> str:
    """claims.md: the header lines, the claims table with notes, and the verdict rules it applied."""
    lines = [*header, "", *claims_table(rows)]
    counts = {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}
    lines += ["", "Verdicts: " + ", ".join(f"{n} {v}" for v, n in counts.items()) + ".", "",
              f"Rules (docs/reproduce.md): {RULES_TEXT}"]
    return "\n".join(lines) + "\n"


def write_claims(rows: Sequence[Mapping[str, Any]], out_dir: Path, command: str, wall_s: float) -> None:
    """claims.json (the rows and how they were made) and claims.md."""
    when = dt.datetime.now().isoformat(timespec="seconds")
    body = {"command": command, "date": when, "commit": source_commit(), "wall_s": round(wall_s, 1),
            "claims": list(rows)}
    (out_dir / "claims.json").write_text(json.dumps(body, indent=1, default=str) + "\n")
    settings = sorted({str(r.get("setting")) for r in rows if r.get("setting")})
    notes = sorted({str(r["setting_note"]) for r in rows if r.get("setting_note")})
    header = [f"# Claims: {', '.join(sorted({str(r['paper']) for r in rows}))}", "",
              f"Command: `{command}` ({when}, commit {body['commit'] or 'unknown'}, {wall_s / 60:.1f} min)."]
    if settings:
        header += ["", f"Setting: **{', '.join(settings)}**." + "".join(f" {n.rstrip('.')}." for n in notes)]
    learned = learned_lines(rows)
    if learned:
        header += ["", "What each learned policy's own training run learned:", "", *(f"* {line}" for line in learned)]
    (out_dir / "claims.md").write_text(claims_markdown(rows, header))


def learned_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The runs' one line per learned policy (rows' ``learned``: what its training learned, what is measured)."""
    out: list[str] = []
    for r in rows:
        out += [str(line) for line in r.get("learned") or [] if str(line) not in out]
    return out


# ---------------------------------------------------------------------- results.json / results.md
def write_results(out_dir: Path, report: Mapping[str, Any], page: str) -> None:
    """results.json (everything the run measured) and results.md (its page) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out_dir / "results.md").write_text(page)


def run_command(fallback: str) -> str:
    """The command line a results page names: ``llmsim-reproduce ...`` when run from it, else ``fallback``."""
    if Path(sys.argv[0]).name.startswith(("llmsim-reproduce", "reproduce")):
        return " ".join([PROG, *sys.argv[1:]])
    return fallback


# ---------------------------------------------------------------------- study outputs
def study_out(study: str, name: str = "") -> Path:
    """A study's default output path, under the gitignored ``outputs/``: a run from the checkout leaves no
    untracked file behind."""
    return Path("outputs") / study / name if name else Path("outputs") / study


def out_file(text: str) -> Path:
    """An argparse type for a study's ``--out FILE``: checked before the study runs (it was written only after the
    whole run). Not a directory, and its nearest existing folder takes a new file (missing folders are made)."""
    p = Path(text)
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: is a directory; expected a file name")
    problem = unwritable_folder(p)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{text}: {problem}")
    return p


def write_text(path: Path, text: str) -> None:
    """``text`` to ``path``, creating its folder (a documented ``outputs/<study>/`` need not exist yet)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
