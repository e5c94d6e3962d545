"""Every relative link of the README and the docs points at a file of the repository, and its ``#anchor`` at a
heading of that file (GitHub's anchor rules): moved pages and renamed sections otherwise break silently."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("profiles/*.md"), *ROOT.glob("zoo/**/*.md")])
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
HTML_ID = re.compile(r"""<a\s+(?:id|name)=["']([^"']+)["']""")


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings (lower case, markup and punctuation dropped, spaces as
    hyphens, a repeated one numbered) and its ``<a id=...>`` tags."""
    seen: dict[str, int] = {}
    out = set()
    for title in HEADING.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link's text
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out | set(HTML_ID.findall(page.read_text(encoding="utf-8")))


def broken_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code is not a link
    bad = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target} (no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest})")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target} (no heading #{anchor} in {dest.relative_to(ROOT)})")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(page: Path) -> None:
    assert broken_links(page) == []


def test_anchor_rules() -> None:
    """The anchor rule on headings of the kinds the docs use (GitHub's anchors for them)."""
    page = ROOT / "docs" / "evaluation.md"
    assert "the-unseen-traffic-suite-suiteunseen" in anchors(page)
