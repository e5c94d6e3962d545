"""What the unseen-traffic suite writes: suite.json (everything), suite.md (the scenario x policy table of gains over
the best heuristic with intervals, the bars, the details) and suite.png (the same gains as a heatmap).

Nothing here runs a simulation: it reads the body :func:`llmsim.agents.suite.run_suite` assembles.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from llmsim.agents.evaluate_report import jsonable, rows_skipped
from llmsim.agents.seeds import split_note
from llmsim.metrics.plots import new_figure

METRIC_NAMES = {"mean_e2el_ms": "mean E2E", "p99_e2el_ms": "p99 E2E", "avg_qos": "avg QoS", "utility": "utility"}
# (stat key, header, scale, decimals) of the details table: all-requests statistics, then the rest
DETAIL_COLUMNS: tuple[tuple[str, str, float, int], ...] = (
    ("mean_ttft_ms", "TTFT mean (s)", 1e-3, 2), ("median_ttft_ms", "TTFT p50", 1e-3, 2),
    ("p99_ttft_ms", "TTFT p99", 1e-3, 2), ("mean_e2el_ms", "E2E mean (s)", 1e-3, 2),
    ("median_e2el_ms", "E2E p50", 1e-3, 2), ("p99_e2el_ms", "E2E p99", 1e-3, 2),
    ("makespan_s", "makespan (s)", 1.0, 1), ("SLO", "SLO att.", 1.0, 3), ("router_wait_s", "wait (s)", 1.0, 2),
    ("dropped", "dropped", 1.0, 1), ("cut_off", "cut off", 1.0, 1), ("timeouts", "timeouts", 1.0, 1),
)
CLIP_PCT = 50.0  # the heatmap's colour range


def fmt_value(metric: str, v: float | None) -> str:
    if v is None:
        return "n/a"
    if metric.endswith("_ms"):
        return f"{v / 1e3:.2f} s"
    return f"{v:.4f}" if metric in ("avg_qos", "utility") else f"{v:.3f}"


def fmt_gain(g: Mapping[str, Any] | None) -> str:
    """``+3.1 % [-0.4, +6.0]`` (no interval with one seed)."""
    if not g or g.get("gain_pct") is None:
        return "n/a"
    s = f"{g['gain_pct']:+.1f} %"
    return s if g.get("ci_low") is None else f"{s} [{g['ci_low']:+.1f}, {g['ci_high']:+.1f}]"


def policy_order(body: Mapping[str, Any]) -> list[str]:
    return [*body["learned"], *body["heuristics"]]


def gain_cell(body: Mapping[str, Any], scenario: str, policy: str) -> str:
    res = body["results"][scenario]
    if policy in body.get("incompatible", {}).get(scenario, {}):
        return "cannot run"
    if policy == res["reference"]:
        return "**best**"
    return fmt_gain(res["gains"].get(policy, {}).get(body["primary"]))


def main_table(body: Mapping[str, Any]) -> list[str]:
    """Scenario x policy: the gain on the primary metric over the scenario's best heuristic, with its interval."""
    pols = policy_order(body)
    head = ["scenario", "best heuristic", METRIC_NAMES.get(body["primary"], body["primary"]), *pols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for sc in body["scenarios"]:
        res = body["results"][sc["name"]]
        ref = res["reference"]
        val = res["stats"].get(ref, {}).get(body["primary"]) if ref else None
        cells = [sc["name"], ref or "n/a", fmt_value(body["primary"], val)]
        cells += [gain_cell(body, sc["name"], p) for p in pols]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def details_table(body: Mapping[str, Any]) -> list[str]:
    """Per scenario, the reference and every learned policy: every request counted."""
    head = ["scenario", "policy", *(c[1] for c in DETAIL_COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for sc in body["scenarios"]:
        res = body["results"][sc["name"]]
        for p in [res["reference"], *body["learned"]]:
            st = res["stats"].get(p) if p else None
            if st is None:
                continue
            cells = [sc["name"], f"{p} (best)" if p == res["reference"] else p]
            for key, _, scale, dec in DETAIL_COLUMNS:
                v = st.get(body["slo_metric"] if key == "SLO" else key)
                cells.append("n/a" if v is None else f"{v * scale:.{dec}f}")
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def bars_section(body: Mapping[str, Any]) -> list[str]:
    out = []
    for p, verdicts in body["bars"].items():
        out.append(f"**{p}**, the must-hold bars:")
        for v in verdicts:
            missed = f"; missed: {', '.join(v['missed'])}" if v["missed"] else ""
            out.append(f"- {'HOLDS' if v['holds'] else 'FAILS'}: {v['name']} ({v['met']} of {v['scenarios']} "
                       f"scenarios{missed})")
        out.append("")
    return out


def markdown(body: Mapping[str, Any]) -> str:
    """suite.md: the title, the main table, the bars, the notes, the details and the scenarios."""
    n_h = len(body["heuristics"])
    better = "higher" if body["better"] == "higher" else "lower"
    title = (f"**Unseen-traffic suite `{body['suite']}` ({body['size']}), {body['testbed']}**: "
             f"{len(body['scenarios'])} scenarios x {len(policy_order(body))} policies; "
             f"{split_note(body['seeds'])}")
    notes = [f"Cells: gain over the scenario's best heuristic (of {n_h}, chosen by {body['primary']} on the same "
             f"seeds; {better} is better) in % of its value, positive = better, with a paired 95 % bootstrap "
             "interval over seeds (none with one seed). Every request counts: a dropped or cut-off request enters "
             "the latencies at the time it was given up."]
    for name, reason in body.get("skipped", {}).items():
        notes.append(f"Skipped {name}: {reason}.")
    for scen in body["scenarios"]:  # a trace window's rows left out (over max_prompt, ...): counted, never silent
        skipped = rows_skipped([r for r in body.get("rows", []) if r.get("scenario") == scen["name"]])
        if skipped:
            notes.append(f"Trace rows skipped in {scen['name']} (counted, not simulated), by reason, summed over one "
                         f"policy's episodes: {skipped}.")
    for scen, bad in body.get("incompatible", {}).items():
        notes += [f"{p} cannot run on {scen}: {why}" for p, why in bad.items()]
    scen = ["| scenario | what it is | requests | seeds |", "|---|---|---|---|"]
    for sc in body["scenarios"]:
        n = body["results"][sc["name"]]["stats"].get(body["results"][sc["name"]]["reference"] or "", {})
        reqs = n.get("num_requests")
        scen.append(f"| {sc['name']} | {sc['about']} | {'n/a' if reqs is None else f'{reqs:,.0f}'} | "
                    f"{len(sc['seeds'])} |")
    parts = [title, "", *main_table(body), "", *notes, "", *bars_section(body),
             "Details (means over seeds; SLO att. = " + body["slo_metric"] + "):", "", *details_table(body), "",
             *scen]
    return "\n".join(parts) + "\n"


def plot(body: Mapping[str, Any], path: Path) -> Path:
    """Heatmap: scenario x policy, gain on the primary metric over the best heuristic (clipped to +-50 %)."""
    pols = policy_order(body)
    scens = [s["name"] for s in body["scenarios"]]
    grid = np.full((len(scens), len(pols)), np.nan)
    for i, s in enumerate(scens):
        for j, p in enumerate(pols):
            g = body["results"][s]["gains"].get(p, {}).get(body["primary"], {}).get("gain_pct")
            grid[i, j] = np.nan if g is None else g
    fig, ax = new_figure(1, 1, (max(6.0, 0.55 * len(pols) + 3.0), max(3.0, 0.35 * len(scens) + 1.8)))
    im = ax.imshow(np.clip(grid, -CLIP_PCT, CLIP_PCT), cmap="RdYlGn", vmin=-CLIP_PCT, vmax=CLIP_PCT, aspect="auto")
    for i in range(len(scens)):
        for j in range(len(pols)):
            if not math.isnan(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.0f}", ha="center", va="center", fontsize=6)
    ax.set_xticks(range(len(pols)), pols, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(scens)), scens, fontsize=7)
    for lab in ax.get_xticklabels():
        if lab.get_text() in body["learned"]:
            lab.set_fontweight("bold")
    fig.colorbar(im, ax=ax, label="gain (%)")
    ax.set_title(f"{body['testbed']}, unseen-traffic suite ({body['size']}):\n{body['primary']}, gain over each "
                 "scenario's best heuristic (positive = better)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def write_suite(body: Mapping[str, Any], out_dir: Path, plots: bool = True) -> str:
    """suite.json, suite.md and suite.png in ``out_dir``; returns the markdown."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "suite.json").write_text(json.dumps(jsonable(body), indent=1) + "\n")
    md = markdown(body)
    (out_dir / "suite.md").write_text(md)
    if plots:
        plot(body, out_dir / "suite.png")
    return md

