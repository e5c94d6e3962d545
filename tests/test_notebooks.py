"""Notebooks run top to bottom (code cells executed in order, with a small request count)."""

import json

import pytest

from tests.conftest import REPO


@pytest.mark.parametrize("nb", sorted((REPO / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_notebook_runs(nb, monkeypatch):
    monkeypatch.setenv("LLMSIM_NOTEBOOK_REQUESTS", "150")
    cells = json.loads(nb.read_text())["cells"]
    ns: dict = {}
    for cell in cells:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), f"{nb.name}", "exec"), ns)  # noqa: S102
    import matplotlib.pyplot as plt

    plt.close("all")
    if "sweep" in ns:
        assert len(ns["sweep"]) == len(ns["RATES"]) * len(ns["POLICIES"])
        assert (ns["sweep"]["completed"] == 150).all()
