"""docs/configuration.md shows what a bad value prints (``$ llmsim ARGS`` then ``llmsim: error: ...``): each
pair is checked against the message the CLI builds, in-process (Hydra compose, then the run's validation), so
the page cannot quote a message the program no longer prints. A trailing ``[...]`` elides the rest of the line."""

from __future__ import annotations

import re
import shlex

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from llmsim.cli.hydra_app import one_line
from llmsim.errors import LLMSimError
from llmsim.resources import conf_dir
from llmsim.simulation.from_config import run_from_config
from tests.helpers import REPO

PAGE = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")


def shown_errors() -> list[tuple[list[str], str]]:
    """(overrides, the error line the page shows) of every ``$ llmsim ...`` line followed by its error."""
    return [(shlex.split(m.group(1)), m.group(2))
            for m in re.finditer(r"^\$ llmsim (.*)\n(llmsim: error: .*)$", PAGE, flags=re.M)]


CASES = shown_errors()


def cli_error(overrides: list[str], tmp_path) -> str:
    """The line ``llmsim OVERRIDES`` prints for a config it rejects (as cli/simulate.py words it)."""
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    with pytest.raises((LLMSimError, OmegaConfBaseException)) as e:
        run_from_config(OmegaConf.to_container(cfg, resolve=True), tmp_path)  # type: ignore[arg-type]
    return f"llmsim: error: {one_line(e.value)}"


def test_the_page_shows_errors() -> None:
    assert len(CASES) >= 3


@pytest.mark.parametrize(("overrides", "shown"), CASES, ids=[" ".join(o) for o, _ in CASES])
def test_shown_error_is_what_llmsim_prints(overrides: list[str], shown: str, tmp_path) -> None:
    printed = cli_error(overrides, tmp_path)
    if shown.endswith("[...]"):
        assert printed.startswith(shown[: -len("[...]")]), (shown, printed)
    else:
        assert printed == shown
