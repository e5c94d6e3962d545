"""results.md and qlm.png of a QLM reproduction: the claims, then one table per experiment of the paper's section 8."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from experiments.harness.pages import claims_table
from experiments.papers.qlm.claims import metric

TITLES = {"wa_tail": "W_A: tail-model share of arrivals (Fig. 8)", "wa_ls": "W_A: latency-sensitive share (Fig. 9)",
          "wb_rate": "W_B: arrival rate per 4 A100s (Figs. 11, 16)", "wb_ls": "W_B: latency-sensitive share (Fig. 12)",
          "wc": "W_C: mega-prompt share (Fig. 15)", "hetero": "A10 share of the cluster (Fig. 14)",
          "relax": "W_A: SLO scale (Fig. 20)",
          "cache0": "W_A on a cluster without host cache (host_cache_gb 0)",
          "abl_wa": "W_A ablation (Fig. 10)", "abl_wb": "W_B ablation (Fig. 13)"}


def _cell(c: dict[str, Any]) -> str:
    if not c.get("seeds"):
        return "missing"
    return (f"{metric(c, 'attainment'):.3f} ({metric(c, 'att_ls'):.2f}/{metric(c, 'att_batch'):.2f}) / "
            f"{metric(c, 'throughput'):.2f} / {metric(c, 'model_swaps'):.0f}")


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# QLM reproduction ({report['size_name']})", "",
             f"Seeds {report['size']['seeds']}; refused QLM operations: {report['refused_ops'] or 'none'}; "
             f"evaluation wall time {report['wall_s']:.0f} s.", "", "## Claims", "",
             *claims_table(report["claims"], with_paper=False)]
    lines += ["", "Cells: SLO attainment (latency-sensitive / batch) / throughput req/s / model swaps, mean over "
              "seeds; attainment counts dropped requests as missed.", ""]
    for exp, tab in report["tables"].items():
        labs = list(tab)
        xs = list(next(iter(tab.values())))
        lines += [f"## {TITLES.get(exp, exp)}", "", "| x | " + " | ".join(labs) + " |", "|---" * (len(labs) + 1) + "|"]
        lines += [f"| {x} | " + " | ".join(_cell(tab[lab][x]) for lab in labs) + " |" for x in xs]
        ops = [f"{lab} @ {x}: {metric(tab[lab][x], 'evicted'):.0f} / {metric(tab[lab][x], 'parked'):.0f} / "
               f"{metric(tab[lab][x], 'prefetched'):.0f}" for lab in labs if lab.startswith("qlm") for x in xs
               if tab[lab][x].get("seeds")]
        lines += ["", "QLM evicted / parked (KV swapped out) / prefetched: " + "; ".join(ops), ""]
    s = report["speed"]
    lines += [f"Speed: QLM, {s.get('n')} requests on {s.get('instances')} instances: {s.get('wall_s', math.nan):.1f} s "
              f"wall ({s.get('router_stats', {})}).", ""]
    return "\n".join(lines)


def plot(tables: dict[str, Any], path: Path) -> None:
    """Throughput vs tail share, attainment vs SLO scale and W_B rate, throughput vs A10 share."""
    panels = (("wa_tail", "throughput", "W_A tail share", "req/s"), ("relax", "attainment", "W_A SLO scale",
              "SLO attainment"), ("wb_rate", "attainment", "W_B rate (req/s per 4 GPUs)", "SLO attainment"),
              ("hetero", "throughput", "A10 share", "req/s"))
    fig = Figure(figsize=(17, 3.8))
    axes = fig.subplots(1, 4)
    for ax, (exp, key, xl, yl) in zip(axes, panels):
        for lab, cells in tables[exp].items():
            xs = sorted(cells)
            ax.plot(xs, [metric(cells[x], key) for x in xs], marker="o", label=lab)
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
