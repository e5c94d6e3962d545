"""Notebooks run top to bottom (code cells executed in order, with a small request count) and produce what
they claim. Every notebook needs an entry in CHECKS, so a new notebook cannot pass by merely running."""

import json
from collections.abc import Callable

import pytest

from tests.conftest import REPO

N = 150  # LLMSIM_NOTEBOOK_REQUESTS: requests per simulated point


def _check_rate_sweep(ns: dict) -> None:
    sweep = ns["sweep"]
    assert len(sweep) == len(ns["RATES"]) * len(ns["POLICIES"])
    assert set(sweep["policy"]) == set(ns["POLICIES"]) and set(sweep["workload.rate"]) == set(ns["RATES"])
    assert (sweep["completed"] == N).all()
    assert sweep[["p99_ttft_ms", "median_tpot_ms", "slo_attainment"]].notna().all().all()
    # more load never makes the median TTFT of a policy better by much (a sanity check of the sweep itself)
    for _, g in sweep.groupby("policy"):
        ttft = g.sort_values("workload.rate")["median_ttft_ms"].to_numpy()
        assert ttft[-1] >= ttft[0]
    # the figure is llmsim.report's sweep plot: one curve per policy, each running once along the rates
    fig = ns["fig"]
    assert sorted(t.get_text() for t in fig.legends[0].get_texts()) == sorted(ns["POLICIES"])
    medians = [ln for ln in fig.axes[0].get_lines() if len(ln.get_xdata()) and ln.get_linestyle() == "-"]
    assert len(medians) == len(ns["POLICIES"])
    assert all(list(ln.get_xdata()) == sorted(ns["RATES"]) for ln in medians)


def test_rate_sweep_plots_with_the_report_code():
    """No second copy of the plotting code: the notebook draws with llmsim.report.plot_sweep only."""
    code = "".join("".join(c["source"]) for c in json.loads((REPO / "notebooks" / "rate_sweep.ipynb").read_text())
                   ["cells"] if c["cell_type"] == "code")
    assert "plot_sweep(" in code and "from llmsim.report import plot_sweep" in code
    for own_plotting in ("matplotlib", "plt.", ".plot(", "subplots"):
        assert own_plotting not in code, own_plotting


CHECKS: dict[str, Callable[[dict], None]] = {"rate_sweep.ipynb": _check_rate_sweep}
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_every_notebook_has_a_check():
    assert NOTEBOOKS, "no notebooks found"
    assert sorted(p.name for p in NOTEBOOKS) == sorted(CHECKS)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(nb, monkeypatch):
    monkeypatch.setenv("LLMSIM_NOTEBOOK_REQUESTS", str(N))
    cells = json.loads(nb.read_text())["cells"]
    ns: dict = {}
    for cell in cells:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), f"{nb.name}", "exec"), ns)  # noqa: S102
    import matplotlib.pyplot as plt

    plt.close("all")
    CHECKS[nb.name](ns)
