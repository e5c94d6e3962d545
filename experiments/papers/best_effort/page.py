"""results.md and availability.png of a Learned Best-Effort LLM Serving reproduction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from experiments.papers.best_effort import metrics as M
from experiments.papers.best_effort.setup import MODELS, policy_labels


def markdown(report: dict[str, Any]) -> str:
    rates = report["size"]["rates"]
    labs = policy_labels()
    lines = [f"# Learned Best-Effort LLM Serving: reproduction ({report['size_name']})", "",
             "## Claims", "", "| claim | paper | measured | verdict | note |", "|---|---|---|---|---|"]
    lines += [f"| {c['claim']} | {c['paper_value']} | {c['measured']} | {c['verdict']} | {c.get('note', '')} |"
              for c in report["claims"]]
    for key, title in (("met", "deadline-met share"), ("utility_hard", "mean utility, hard deadlines"),
                       ("utility_soft", "mean utility, soft deadlines")):
        lines += ["", f"## Stable sweep: {title} (mean over seeds {report['size']['seeds']})", "",
                  "| rate | " + " | ".join(labs) + " |", "|---" * (len(labs) + 1) + "|"]
        lines += [f"| {r} | " + " | ".join(f"{report['sweep'][lab][str(r)][key]:.3f}" for lab in labs) + " |"
                  for r in rates]
    lines += ["", "## Model shares of the learned routers (125M / 1.3B / 6.7B)", "",
              "| rate | learned_hard | learned_soft |", "|---|---|---|"]
    for r in rates:
        cells = ["/".join(f"{report['sweep'][lab][str(r)]['shares'][m]:.2f}" for m in MODELS)
                 for lab in ("learned_hard", "learned_soft")]
        lines.append(f"| {r} | {cells[0]} | {cells[1]} |")
    for b, tab in report["windows"].items():
        thr = list(next(iter(tab.values()))["counts"])
        lines += ["", f"## {b}: sliding 20-request windows at >= x of peak (count / share)", "",
                  "| policy | " + " | ".join(thr) + " |", "|---" * (len(thr) + 1) + "|"]
        lines += [f"| {lab} | " + " | ".join(f"{w['counts'][t]} / {w['fractions'][t]:.3f}" for t in thr) + " |"
                  for lab, w in tab.items()]
    lines += ["", "## Hardware utility: learned (4 GPUs) vs OPT-6.7B (8 GPUs)", "",
              "| workload | learned / GPU | OPT-6.7B x8 / GPU | ratio | windows higher | overall ratio |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {b} | {h['policy_per_gpu']:.4f} | {h['base_per_gpu']:.4f} | {h['ratio']:.2f} | "
              f"{h['higher_frac']:.3f} | {h['overall_ratio']:.2f} |" for b, h in report["hardware_utility"].items()]
    lines += ["", f"Wall time: training {report['wall_s']['train']:.0f} s, evaluation "
              f"{report['wall_s']['evaluate']:.0f} s.", ""]
    return "\n".join(lines)


def plot_sweep(sweep: dict[str, dict[str, Any]], rates: tuple[float, ...], path: Path) -> None:
    """Fig. 2 left: mean utility and deadline-met share vs arrival rate, every policy."""
    fig = Figure(figsize=(11, 4))
    axes = fig.subplots(1, 2)
    for lab in policy_labels():
        key = "utility_soft" if lab == "learned_soft" else "utility_hard"
        axes[0].plot(rates, [sweep[lab][str(r)][key] for r in rates], marker="o", label=lab)
        axes[1].plot(rates, [sweep[lab][str(r)]["met"] for r in rates], marker="o", label=lab)
    for ax, yl in zip(axes, ("mean utility (soft policy: soft)", "deadline-met share")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("arrival rate (req/s)")
        ax.set_ylabel(yl)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[1].axhline(M.AVAILABLE_MET, color="grey", ls="--", lw=0.8)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
