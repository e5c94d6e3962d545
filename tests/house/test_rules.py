"""The house rules hold in every room (tests/house/rules.py says what each rule is and why)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmsim.errors import LLMSimError, load_yaml_file
from tests.house import rules

LIBRARY = sorted(rules.LIBRARY_ROOMS)
ALL = sorted(rules.ROOMS)


def _report(found: list[str], what: str) -> str:
    return f"{len(found)} {what}:\n" + "\n".join(found[:80])


@pytest.mark.parametrize("room", ALL)
def test_files_and_functions_are_small(room: str) -> None:
    found = [v for p in rules.room_files(room) for v in rules.size_violations(p)]
    assert not found, _report(found, "files or functions over the limit")


@pytest.mark.parametrize("room", ALL)
def test_imports_are_at_the_top(room: str) -> None:
    found = [v for p in rules.room_files(room) for v in rules.inner_imports(p)]
    assert not found, _report(found, "imports inside functions without an 'optional' comment")


@pytest.mark.parametrize("room", ALL)
def test_no_private_access(room: str) -> None:
    found = [v for p in rules.room_files(room) for v in rules.private_accesses(p)]
    assert not found, _report(found, "private names of other objects or modules")


@pytest.mark.parametrize("room", ALL)
def test_one_import_name(room: str) -> None:
    found = [v for p in rules.room_files(room) for v in rules.bare_top_imports(p)]
    assert not found, _report(found, "imports of a bare top-level name (use llmsim.<name>)")


@pytest.mark.parametrize("room", LIBRARY)
def test_library_cites_papers_by_name(room: str) -> None:
    found = [v for p in rules.room_files(room) for v in rules.citations(p)]
    assert not found, _report(found, "spec / issue numbers in library code")


def test_shipped_configs_cite_papers_by_name() -> None:
    found = [v for p in sorted((rules.REPO / "conf").rglob("*.yaml")) for v in rules.citations(p)]
    assert not found, _report(found, "spec / issue numbers in conf/")


def test_shipped_yaml_gives_each_key_once() -> None:
    """Every YAML file of the repository loads with the shared loader, which refuses a key given twice in one
    mapping (PyYAML would keep the later one without a word)."""
    found = []
    for top in ("conf", "profiles", "zoo", "experiments", "docs", "notebooks"):
        for p in sorted((rules.REPO / top).rglob("*.y*ml")):
            try:
                load_yaml_file(p)
            except LLMSimError as e:
                found.append(str(e))
    assert not found, _report(found, "YAML files that do not load")


def test_every_room_is_covered() -> None:
    """Every Python file of the shipped packages and experiments belongs to a room (no file escapes the rules)."""
    covered = {p for room in rules.ROOMS for p in rules.room_files(room)}
    shipped = {p for top in ("llmsim", "envs", "agents", "serving", "profiles", "experiments")
               for p in (rules.REPO / top).rglob("*.py") if "__pycache__" not in p.parts
               and not (top == "llmsim" and p.relative_to(rules.REPO / "llmsim").parts[0] in rules.BARE_TOP)}
    assert shipped - covered == set()


def test_checks_are_not_vacuous(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    probe.write_text(f"from llmsim.cluster import _INF\nimport envs\n\ndef f(c):\n    import os\n"
                     f"    y = c._busy\n{body}\n    return self._ok\n# see spec 001\n")
    assert len(rules.size_violations(probe)) == 1
    assert len(rules.inner_imports(probe)) == 1
    assert len(rules.private_accesses(probe)) == 2
    assert len(rules.bare_top_imports(probe)) == 1
    assert len(rules.citations(probe)) == 1
