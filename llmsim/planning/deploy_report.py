"""Reporting for ``llmsim-deploy``: the cost / capacity frontier, deploy.json, CSVs, the plot and the table.

Kept apart from the search (:mod:`llmsim.planning.deploy`) so the search reads as the algorithm and this as its output.
A *point* is one cluster: a candidate (GPU, tp, engine) times a replica count. Its capacity is measured for
one replica and for the chosen cluster, and otherwise the replica count times one replica's capacity
("estimated"), which the verification runs check for the clusters that matter. The Pareto frontier is the
set of points no other point beats on both cost ($/h, lower) and capacity (req/s, higher).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from rich.console import Console
from rich.table import Table

from llmsim.planning.candidates import Candidate, Plan, Prices
from llmsim.planning.search import RateSearch


def frontier_points(plan: Plan, cands: list[Candidate], verified: list[dict[str, Any]],
                    best: dict[str, Any] | None, measured: RateSearch | None) -> list[dict[str, Any]]:
    """Every (candidate, replica count) worth showing, with its cost, capacity, provenance and Pareto flag."""
    dcfg = plan.dcfg
    checks = {(v["candidate"], v["replicas"]): v for v in verified}
    pts = []
    for c in cands:
        per_replica = c.capacity
        if per_replica <= 0:
            continue
        need = c.replicas_for(dcfg.target_rate)
        counts = sorted({n for n in dcfg.counts if n * c.tp <= dcfg.max_gpus}
                        | ({need} if need and need * c.tp <= dcfg.max_gpus else set())
                        | {v["replicas"] for v in verified if v["candidate"] == c.name})
        for n in counts:
            chk = checks.get((c.name, n))
            capacity, source = n * per_replica, "measured (1 replica)" if n == 1 else f"{n} x 1 replica"
            if c.status in ("pruned", "budget"):
                source += ", lower bound"
            if chk is not None and chk["ok"] and capacity < dcfg.target_rate:
                capacity, source = dcfg.target_rate, "verified at the target"
            chosen = best is not None and best["candidate"] == c.name and best["replicas"] == n
            if chosen and measured is not None and measured.capacity > 0:
                capacity, source = measured.capacity, "measured (cluster)"
            pts.append({"candidate": c.name, "gpu": c.gpu, "tp": c.tp, "engine": c.engine_name, "replicas": n,
                        "gpus": n * c.tp, "cost_per_hour": n * c.replica_cost, "capacity_rps": capacity,
                        "usd_per_million_requests": n * c.replica_cost / (capacity * 3600) * 1e6,
                        "source": source, "meets_target_estimate": capacity >= dcfg.target_rate,
                        "verified": None if chk is None else bool(chk["ok"]),
                        "verified_attainment": None if chk is None else chk["attainment"], "chosen": chosen})
    _mark_pareto(pts)
    return pts


def _mark_pareto(pts: list[dict[str, Any]]) -> None:
    """Pareto flag by a sweep in cost order; a point that failed its verification is never on the frontier."""
    order = sorted(range(len(pts)), key=lambda i: (pts[i]["cost_per_hour"], -pts[i]["capacity_rps"]))
    best_cap = -math.inf
    for i in order:
        p = pts[i]
        p["pareto"] = p["verified"] is not False and p["capacity_rps"] > best_cap
        if p["pareto"]:
            best_cap = p["capacity_rps"]


def build_report(plan: Plan, cands: list[Candidate], skipped: list[dict[str, Any]], verified: list[dict[str, Any]],
                 best: dict[str, Any] | None, measured: RateSearch | None, prices: Prices, wall: float,
                 ) -> dict[str, Any]:
    """The whole result as one JSON-able dict (what deploy.json holds)."""
    dcfg, cap, runner = plan.dcfg, plan.cap, plan.runner
    points = frontier_points(plan, cands, verified, best, measured)
    chosen = None
    if best is not None:
        chosen = {k: v for k, v in best.items() if not k.startswith("_")}
        chosen["capacity_rps"] = measured.capacity if measured is not None else None
        chosen["capacity_note"] = measured.summary_note() if measured is not None else ""
        chosen["estimate_rps"] = best["replicas"] * best["_cand"].capacity
    elif not dcfg.verify:
        est = [p for p in points if p["meets_target_estimate"]]
        if est:
            chosen = {**min(est, key=lambda p: (p["cost_per_hour"], -p["capacity_rps"])), "verified": False}
    return {
        "model": dcfg.model, "target_rate": dcfg.target_rate, "target_attainment": cap.target, "metric": cap.metric,
        "slo": plan.base["slo"], "router": plan.base["policy"]["name"], "seeds": cap.seeds,
        "requests_per_replica": cap.num_requests,
        "prices": {"currency": prices.currency, "source": prices.source, "date": prices.date},
        "chosen": chosen,
        "frontier": [p for p in points if p["pareto"]],
        "points": points,
        "candidates": [_candidate_row(c, dcfg.target_rate) for c in cands],
        "skipped": dict(sorted(Counter(s["reason"] for s in skipped).items())),
        "skipped_detail": skipped,
        "verifications": [{k: v for k, v in r.items() if not k.startswith("_")} for r in verified],
        "verification_cut_by_budget": plan.verify_cut,
        "budget": dcfg.budget, "runs": runner.runs, "simulated_requests": runner.requests, "workers": runner.workers,
        "wall_s": wall, "runs_per_min": runner.runs / max(wall, 1e-9) * 60,
        "replica_note": replica_note(cap.num_requests, chosen),
    }


def replica_note(requests_per_replica: int, chosen: dict[str, Any] | None) -> str:
    """Why one replica's capacity times n is not ``llmsim-capacity``'s figure for a cluster of n replicas, with the
    chosen cluster's numbers when it was measured whole."""
    text = (f"cap/replica is one replica alone, {requests_per_replica:,} requests per run; n replicas are estimated "
            f"at n x cap/replica, and the cheapest clusters are simulated whole to verify it. llmsim-capacity's "
            f"figure is a whole cluster's: its capacity.num_requests are shared by all the replicas (unless "
            f"capacity.requests_per_instance=true) and its router spreads the arrivals, so a cluster usually "
            f"sustains more than n x cap/replica")
    cap, n = (chosen or {}).get("capacity_rps"), (chosen or {}).get("replicas", 1)
    if cap and n > 1 and chosen.get("estimate_rps"):
        text += (f" (the chosen {n} x {chosen['candidate']}: {cap:.3g} req/s measured whole, "
                 f"{chosen['estimate_rps']:.3g} estimated)")
    return text + "."


def _candidate_row(c: Candidate, target: float) -> dict[str, Any]:
    s = c.job.search if c.job else None
    lo, hi = s.bracket() if s else (None, None)
    need = c.replicas_for(target)
    return {
        "candidate": c.name, "gpu": c.gpu, "tp": c.tp, "engine": c.engine_name, "engine_overrides": c.engine,
        "kv_cache_dtype": c.kv_cache_dtype,
        "price_per_gpu_hour": c.price, "replica_cost_per_hour": c.replica_cost, "prior_rps": c.prior_rps,
        "estimated_profile": c.estimated_profile, "kv_tokens": c.info.get("kv_tokens"),
        "capacity_per_replica": c.capacity, "bracket": [lo, hi], "status": c.status,
        "replicas_needed": need, "cost_for_target": None if need is None else need * c.replica_cost,
        "evaluations": len(s.points) if s else 0, "note": s.summary_note() if s else "",
        "curve": [] if s is None else [{"rate": p.rate, "attainment": p.attainment, "per_seed": p.per_seed}
                                       for p in s.curve()],
    }


def _json_num(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else str(v)


def write_outputs(report: dict[str, Any], out: Path) -> None:
    """The four files, in ``out`` (created here: a run that fails before this leaves no folder)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "deploy.json").write_text(json.dumps(report, indent=2, default=_json_num) + "\n")
    rows = [{k: v for k, v in r.items() if k not in ("curve", "engine_overrides", "bracket")}
            | {"bracket_lo": r["bracket"][0], "bracket_hi": r["bracket"][1]} for r in report["candidates"]]
    pd.DataFrame(rows).to_csv(out / "deploy_candidates.csv", index=False)
    pd.DataFrame(report["points"]).to_csv(out / "deploy_frontier.csv", index=False)
    plot_frontier(report, out / "deploy.png")


def plot_frontier(report: dict[str, Any], path: Path) -> None:
    """Cost vs capacity: dominated points grey, the frontier in colour (one per GPU), the choice starred."""
    pts = report["points"]
    fig = Figure(figsize=(7.5, 4.8))
    ax = fig.subplots()
    dom = [p for p in pts if not p["pareto"]]
    ax.scatter([p["cost_per_hour"] for p in dom], [p["capacity_rps"] for p in dom], s=18, color="0.75",
               label="dominated", zorder=2)
    front = sorted((p for p in pts if p["pareto"]), key=lambda p: p["cost_per_hour"])
    if front:
        ax.step([p["cost_per_hour"] for p in front], [p["capacity_rps"] for p in front], where="post",
                color="black", lw=1, zorder=3)
    gpus = list(dict.fromkeys(p["gpu"] for p in front))
    for k, g in enumerate(gpus):
        sel = [p for p in front if p["gpu"] == g]
        ax.scatter([p["cost_per_hour"] for p in sel], [p["capacity_rps"] for p in sel], s=42, color=f"C{k}",
                   edgecolor="black", label=f"frontier: {g}", zorder=4)
    bad = [p for p in pts if p["verified"] is False]
    if bad:
        ax.scatter([p["cost_per_hour"] for p in bad], [p["capacity_rps"] for p in bad], marker="x", color="red",
                   s=40, label="failed verification", zorder=5)
    ch = report["chosen"]
    if ch:
        y = ch.get("capacity_rps") or ch.get("estimate_rps") or report["target_rate"]
        ax.scatter([ch["cost_per_hour"]], [y], marker="*", s=260, color="gold", edgecolor="black", zorder=6,
                   label=f"chosen: {ch['replicas']} x {ch['gpu']} tp{ch['tp']} {ch['engine']}")
    ax.axhline(report["target_rate"], color="gray", ls="--", lw=1, label=f"target {report['target_rate']:g} req/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"cost ({report['prices']['currency']}/hour)")
    ax.set_ylabel(f"capacity at {report['target_attainment']:.0%} SLO attainment (req/s)")
    ax.set_title(f"{report['model']}: cost vs capacity", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def print_report(report: dict[str, Any]) -> None:
    con = Console(width=max(120, Console().width))
    t = Table(title=f"Candidates ({report['model']}, target {report['target_rate']:g} req/s at "
                    f"{report['target_attainment']:.0%} {report['metric']})")
    for col in ("candidate", "$/GPU-h", "cap/replica", "replicas", "$/h for target", "evals", "status"):
        t.add_column(col, overflow="fold")
    for r in sorted(report["candidates"], key=lambda r: (r["cost_for_target"] is None, r["cost_for_target"] or 0)):
        t.add_row(r["candidate"] + (" (roofline)" if r["estimated_profile"] else ""),
                  f"{r['price_per_gpu_hour']:.2f}", f"{r['capacity_per_replica']:.3g}",
                  "-" if r["replicas_needed"] is None else str(r["replicas_needed"]),
                  "-" if r["cost_for_target"] is None else f"{r['cost_for_target']:.2f}", str(r["evaluations"]),
                  r["status"])
    con.print(t)
    con.print(report["replica_note"], markup=False, highlight=False)
    f = Table(title="Cost / capacity frontier (Pareto)")
    for col in ("cluster", "GPUs", "$/h", "capacity req/s", "$/M req", "source", "verified"):
        f.add_column(col, overflow="fold")
    for p in report["frontier"]:
        f.add_row(f"{p['replicas']} x {p['candidate']}" + (" *" if p["chosen"] else ""), str(p["gpus"]),
                  f"{p['cost_per_hour']:.2f}", f"{p['capacity_rps']:.3g}", f"{p['usd_per_million_requests']:.3g}",
                  p["source"], "-" if p["verified"] is None else ("yes" if p["verified"] else "NO"))
    con.print(f)
    if report["skipped"]:
        con.print("skipped before simulating: " + ", ".join(f"{k} {v}" for k, v in report["skipped"].items()))
    ch = report["chosen"]
    if ch is None:
        short = report["verification_cut_by_budget"] or any(r["status"] == "budget" for r in report["candidates"])
        con.print("[bold red]no cluster met the target within the search space"
                  + (f"; the budget of {report['budget']} simulations ran out: raise deploy.budget" if short else "")
                  + "[/]")
    else:
        cap = ch.get("capacity_rps")
        con.print(f"[bold]cheapest: {ch['replicas']} x {ch['gpu']} tp{ch['tp']} {ch['engine']} "
                  f"({ch['gpus']} GPU{'s' if ch['gpus'] > 1 else ''}) at ${ch['cost_per_hour']:.2f}/h[/]"
                  + (f", attainment {ch['attainment']:.3f} at {report['target_rate']:g} req/s"
                     if "attainment" in ch else " (not verified)")
                  + (f", capacity {cap:.3g} req/s" if cap else ""))
        if report["verification_cut_by_budget"]:
            con.print(f"[bold red]the budget of {report['budget']} simulations ran out before cheaper clusters were "
                      "verified: raise deploy.budget[/]")
    con.print(f"{report['runs']} simulations ({report['simulated_requests']:,} requests) in {report['wall_s']:.1f} s "
              f"on {report['workers']} worker(s): {report['runs_per_min']:.0f} runs/min")
