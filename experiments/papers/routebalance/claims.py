"""The RouteBalance paper's headline claims of the main grid (frontier, cost, latency vs rate, isolation arms, tier
mix and tails, non-stationary arrivals, dominance), from the finished cells (cells.Results)."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np

from experiments.harness.claims import gain_verdict, noted_row, order_verdict
from experiments.papers.routebalance import setup as S
from experiments.papers.routebalance.cells import SHORT, Results, best, rel

PAPER = "routebalance"
_row = partial(noted_row, PAPER)


def quality_claims(R: Results, r12: float) -> list[dict[str, Any]]:
    q_rb = R.m("rb:quality", r12, "quality")
    q_rbn = R.m("rbn:quality", r12, "quality")
    q_br, l_br = best(R, "br:", r12, "quality")
    q_ap, l_ap = best(R, "ap:", r12, "quality")
    acc = R.m("rbn:quality", r12, "best_model_acc")
    ctx = (f"oracle RB {q_rb:.3f}, noisy RB {q_rbn:.3f} (best-model accuracy {acc:.1%}), best BR {q_br:.3f} "
           f"({l_br}), best AP {q_ap:.3f} ({l_ap}), lambda {r12:g}")
    v = "reproduced" if abs(q_rb - 0.419) <= 0.02 else ("partly" if q_rb > max(q_br, q_ap) else "not")
    rows = [_row("Peak RB quality, w_q = 0.8 (oracle estimator)", 0.419, round(q_rb, 3), v,
                 ctx + "; the oracle knows the true labels, so the level is above the paper's kNN-driven 0.419")]
    q_rbk = R.m("rbk:quality", r12, "quality")
    ctx += f", kNN RB {q_rbk:.3f} (accuracy {R.m('rbk:quality', r12, 'best_model_acc'):.1%})"
    for est, q in (("oracle", q_rb), ("noisy ~39 % accurate", q_rbn), ("kNN", q_rbk)):
        d_br, d_ap = 1000 * (q - q_br), 1000 * (q - q_ap)
        rows.append(_row(f"RB peak - best BEST-Route cell, {est} RB (milli-DeepEval)", "+13 [5, 22]", d_br,
                         gain_verdict(13, d_br), ctx, "e-3"))
        rows.append(_row(f"RB peak - best Avengers-Pro cell, {est} RB (milli-DeepEval)", "+43 [33, 53]", d_ap,
                         gain_verdict(43, d_ap), ctx, "e-3"))
    knn = [R.m(f"rbk:{w}", r12, "quality") for w in ("cost", "uniform", "quality")]
    far = max(abs(a - b) for a, b in zip(knn, (0.354, 0.371, 0.419)))
    rows.append(_row("kNN RB quality: cost / uniform / quality presets (lambda 12)", "0.354 / 0.371 / 0.419",
                     " / ".join(f"{q:.3f}" for q in knn), "reproduced" if far <= 0.015 else
                     ("partly" if order_verdict(knn, descending=False) == "reproduced" else "not"),
                     "the registered knn estimator (task, prompt length and the request's topic embedding; "
                     "docs/routebalance_testbed.md, Topics)"))
    qs = [R.m(f"rb:{w}", r12, "quality") for w in ("cost", "uniform", "mid", "quality")]
    ls = [R.m(f"rb:{w}", r12, "e2e") for w in ("cost", "uniform", "mid", "quality")]
    rows.append(_row("RB presets cost < uniform < mid < quality in quality (lambda 12)", "0.354 < 0.371 < 0.397 < "
                     "0.419", " < ".join(f"{q:.3f}" for q in qs), order_verdict(qs, descending=False),
                     "mid = (0.6, 0.2, 0.2), the reproducer's choice for the paper's unnamed mid-band cell"))
    rows.append(_row("RB presets cost < uniform < mid < quality in mean E2E (s, lambda 12)", "2.2 < 2.3 < 4.1 < 5.9",
                     " < ".join(f"{x:.2f}" for x in ls), order_verdict(ls, descending=False)))
    return rows


def cost_claims(R: Results) -> list[dict[str, Any]]:
    rates = sorted({r["rate"] for r in R.rows if r["exp"] == "grid"})
    def cheapest(prefix: str) -> tuple[float, str]:
        vals = [best(R, prefix, r, "cost", lowest=True) for r in rates]
        vals = [v for v in vals if not math.isnan(v[0])]
        return min(vals) if vals else (math.nan, "none")
    (c_rb, l_rb), (c_ap, l_ap), (c_br, l_br) = cheapest("rb:"), cheapest("ap:"), cheapest("br:")
    note = f"cheapest over all rates: RB {c_rb:.3g} ({l_rb}), AP {c_ap:.3g} ({l_ap}), BR {c_br:.3g} ({l_br})"
    d = rel(c_rb, c_ap)
    return [_row("RB cheapest cost (USD/request x 1e-6)", 16.7, c_rb * 1e6, gain_verdict(16.7, c_rb * 1e6, "about"),
                 note),
            _row("RB cheapest vs Avengers-Pro cheapest (%): tie or cheaper", 0.0, d, gain_verdict(0.0, d, "at_most"),
                 note, "%"),
            _row("BEST-Route cheapest vs RB cheapest (%)", "+60 (2.68e-5 vs 1.67e-5)", rel(c_br, c_rb),
                 gain_verdict(60, rel(c_br, c_rb)), note + "; BR's fallback is 3B, so t = 0.8 is nearly always-3B",
                 "%")]


def latency_claims(R: Results, rates: list[float]) -> list[dict[str, Any]]:
    uni = [R.m("rb:uniform", r, "e2e") for r in rates]
    lo, hi = min(uni), max(uni)
    ok = hi / lo <= 1.22 * 1.25 and lo >= 2.3 * 0.75 and hi <= 2.8 * 1.25
    rows = [_row(f"RB uniform mean E2E over lambda {rates[0]:g}-{rates[-1]:g} (s)", "2.3-2.8", f"{lo:.2f}-{hi:.2f}",
                 "reproduced" if ok else ("partly" if hi / lo <= 1.5 else "not"),
                 "per rate " + ", ".join(f"{r:g}: {x:.2f}" for r, x in zip(rates, uni)))]
    for r, p in ((24.0, 2.6), (30.0, 4.1)):
        if r not in rates:
            continue
        ratio = R.m("br:0.5:sq", r, "e2e") / R.m("rb:uniform", r, "e2e")
        rows.append(_row(f"enhanced BEST-Route (t 0.5, SQ, 431 ms concurrent) / RB uniform, lambda {r:g} (x)", p,
                         ratio, gain_verdict((p - 1) * 100, (ratio - 1) * 100),
                         f"BR {R.m('br:0.5:sq', r, 'e2e'):.2f} s (paper {6.9 if r == 24 else 11.4} s), BR 14B share "
                         f"{R.m('br:0.5:sq', r, 'mix_14B'):.0%} (paper 98 %)", "x"))
    top = rates[-1]
    ser = R.m("brser:0:rr", top, "e2e")
    rows.append(_row(f"as-published BEST-Route at lambda {top:g} (s; serial, effective 67 ms)", 63.0, ser,
                     gain_verdict(63.0, ser, "about"),
                     "67 ms was chosen to fit the paper's 63 s (docs/route_baselines.md"
                     f"), so this is a consistency check; strict 431 ms at lambda {min(rates):g}: "
                     f"{R.m('brstrict:0:rr', min(rates), 'e2e', exp='serial'):.0f} s mean E2E on {S.STRICT_N} requests",
                     "s"))
    if 12.0 in rates:
        ser12 = R.m("brser:0:rr", 12.0, "e2e")
        rows.append(_row("as-published BEST-Route at lambda 12 (s)", 4.5, ser12, gain_verdict(4.5, ser12, "about"),
                         unit="s"))
        rr = rel(R.m("pt:rr", 12.0, "e2e"), R.m("rb:uniform", 12.0, "e2e"))
        rows.append(_row("passthrough RR vs RB uniform mean E2E, lambda 12 (%)", "+65 (3806 vs 2311 ms)", rr,
                         gain_verdict(64.7, rr, "about"), f"RR {R.m('pt:rr', 12.0, 'e2e'):.2f} s", "%"))
    thr_rb = max(R.m(f"rb:{w}", top, "throughput") for w in ("uniform", "cost", "latency"))
    thr_br = max(R.m(lab, top, "throughput") for lab in ("brser:0:rr",))
    rows.append(_row(f"max sustained throughput RB vs as-published BR, lambda {top:g} (%)", "+27 (27.6 vs 21.8)",
                     rel(thr_rb, thr_br), gain_verdict(26.6, rel(thr_rb, thr_br)),
                     f"RB {thr_rb:.1f} req/s, serial BR {thr_br:.1f} req/s (completed / makespan)", "%"))
    ap = [R.m("ap:0.53:sq", r, "e2e") / R.m("rb:uniform", r, "e2e") for r in rates if r >= 24]
    if ap:
        worst = (max(ap) - 1) * 100
        rows.append(_row("enhanced Avengers-Pro (p_w 0.53, SQ) matches RB uniform latency at lambda >= 24 (%)",
                         "~0 (2.18-2.74 s)", worst, gain_verdict(0.0, worst, "at_most"),
                         "the larger of its excess over RB uniform at lambda 24 and 30", "%"))
    return rows


def iso_claims(R: Results, iso: list[float]) -> list[dict[str, Any]]:
    main = [r for r in iso if r != 18.0] or iso
    faster = [100 * (1 - R.m("arm1", r, "e2e", exp="iso") / R.m("arm3", r, "e2e", exp="iso")) for r in main]
    d23 = [abs(rel(R.m("arm2", r, "e2e", exp="iso"), R.m("arm3", r, "e2e", exp="iso"))) for r in main]
    r0 = main[0]
    s1, s2 = (100 * R.m(a, r0, "mix_72B", exp="iso") for a in ("arm1", "arm2"))
    q1, q2 = (R.m(a, r0, "quality", exp="iso") for a in ("arm1", "arm2"))
    per = ", ".join(f"{r:g}: {f:.0f} %" for r, f in zip(main, faster))
    rows = [_row("arm 1 (full objective) faster than arm 3 (w_lat 0 + predictive tiebreak) (%)", "26-31",
                 float(np.mean(faster)), gain_verdict(26, float(np.mean(faster))), "per lambda " + per, "%"),
            _row("arms 2 and 3 (reactive vs predictive tiebreak) differ by a few % (max |diff| %)", "<= 3.5",
                 max(d23), gain_verdict(3.5, max(d23), "at_most"), "", "%"),
            _row(f"72B share: arm 2 - arm 1 (pp, lambda {r0:g})", "+13 (14 % vs 1 %)", s2 - s1,
                 gain_verdict(13, s2 - s1), f"arm 1 {s1:.1f} %, arm 2 {s2:.1f} %", "pp"),
            _row(f"quality: arm 2 - arm 1 (milli-DeepEval, lambda {r0:g})", "+16 (0.385 vs 0.369)",
                 1000 * (q2 - q1), gain_verdict(16, 1000 * (q2 - q1)), f"arm 1 {q1:.3f}, arm 2 {q2:.3f}", "e-3")]
    if 18.0 in iso:
        a4 = 100 * (1 - R.m("arm4", 18.0, "e2e", exp="iso") / R.m("arm1", 18.0, "e2e", exp="iso"))
        mix = max(abs(R.m("arm4", 18.0, f"mix_{t}", exp="iso") - R.m("arm1", 18.0, f"mix_{t}", exp="iso"))
                  for t in SHORT.values()) * 100
        rows += [_row("arm 4 (static per-tier TPOT prior) lower mean E2E than arm 1, lambda 18 (%)", 8.0, a4,
                      gain_verdict(8.0, a4, "about"), f"arm 1 {R.m('arm1', 18.0, 'e2e', exp='iso'):.2f} s, arm 4 "
                      f"{R.m('arm4', 18.0, 'e2e', exp='iso'):.2f} s", "%"),
                 _row("arm 4 leaves the tier mix unchanged (max |share diff| pp, lambda 18)", "~0", mix,
                      gain_verdict(0.0, mix, "at_most"), unit="pp")]
        ov = [R.m(a, 18.0, "e2e", exp="nonstat", process="square6/40") for a in ("rb:uniform", "arm4")]
        g = 100 * (1 - ov[1] / ov[0])
        rows.append(_row("arm 4 vs arm 1 under the 6/40 square-wave overload (% lower)", 18.0, g,
                         gain_verdict(18.0, g, "about"), f"arm 1 {ov[0]:.2f} s, arm 4 {ov[1]:.2f} s", "%"))
    rows += predictor_claims(R, r0)
    return rows


def predictor_claims(R: Results, r0: float) -> list[dict[str, Any]]:
    rows = []
    for arm, what in (("arm1_knn", "kNN quality/length estimator"), ("arm1_xgb", "learned (XGBoost) TPOT head")):
        c = R.get(arm, r0, exp="iso")
        if "error" in c:
            rows.append(_row(f"arm 1 with the {what} (quality, lambda {r0:g})", 0.371, None, "not",
                             "missing: " + c["error"]))
            continue
        if arm == "arm1_xgb":  # the paper: the latency signal need not be learned (arm 4 ~ arm 1)
            d = rel(float(c["e2e"]), R.m("arm1", r0, "e2e", exp="iso"))
            rows.append(_row(f"arm 1 with the {what} vs the telemetry step time: mean E2E (%, lambda {r0:g})",
                             "~0 (not needed)", d, gain_verdict(0.0, abs(d), "at_most"),
                             f"quality {c['quality']:.3f} vs {R.m('arm1', r0, 'quality', exp='iso'):.3f}; head "
                             f"calls {c.get('tpot_head_calls', 'n/a')}", "%"))
            continue
        q = float(c["quality"])
        acc = c.get("best_model_acc")
        rows.append(_row(f"arm 1 with the {what} (quality, lambda {r0:g})", 0.371, round(q, 3),
                         "reproduced" if abs(q - 0.371) <= 0.02 else "partly",
                         f"mean E2E {c['e2e']:.2f} s vs oracle arm 1 {R.m('arm1', r0, 'e2e', exp='iso'):.2f} s"
                         + (f"; best-model accuracy {acc:.1%} (paper kNN 34.8 %)" if acc is not None else "")))
    return rows


def mix_tail_claims(R: Results, rates: list[float]) -> list[dict[str, Any]]:
    mix = {t: [100 * R.m("rb:uniform", r, f"mix_{t}") for r in rates] for t in SHORT.values()}
    spread = max(max(v) - min(v) for v in mix.values())
    mean = {t: float(np.mean(v)) for t, v in mix.items()}
    far = max(abs(mean[t] - p) for t, p in (("3B", 57), ("7B", 11), ("14B", 32), ("72B", 1)))
    shown = "/".join(f"{mean[t]:.0f}" for t in ("3B", "7B", "14B", "72B"))
    rows = [_row("RB uniform tier mix is rate-independent (max spread over lambda, pp)", "~2 (56-58 % 3B)", spread,
                 gain_verdict(2.0, spread, "at_most"), "", "pp"),
            _row("RB uniform tier mix 3B/7B/14B/72B (%)", "57/11/32/1", shown,
                 "reproduced" if far <= 5 else ("partly" if abs(mean["3B"] - 57) <= 5 and mean["72B"] <= 3 else "not"),
                 f"mean over lambda; largest gap {far:.0f} pp")]
    lo, hi = rates[0], rates[-1]
    g = R.m("rb:uniform", hi, "p99") / R.m("rb:uniform", lo, "p99")
    rows.append(_row(f"RB uniform p99 bounded: p99(lambda {hi:g}) / p99(lambda {lo:g}) (x)", "bounded", g,
                     "reproduced" if g <= 1.5 else ("partly" if g <= 2.5 else "not"),
                     f"p99 {R.m('rb:uniform', lo, 'p99'):.1f} -> {R.m('rb:uniform', hi, 'p99'):.1f} s; cost preset "
                     f"{R.m('rb:cost', lo, 'p99'):.1f} -> {R.m('rb:cost', hi, 'p99'):.1f} s; quality preset "
                     f"{R.m('rb:quality', lo, 'p99'):.1f} -> {R.m('rb:quality', hi, 'p99'):.1f} s", "x"))
    qp, up = R.m("rb:quality", hi, "p99"), R.m("rb:uniform", hi, "p99")
    rows.append(_row(f"quality preset has the poor p99 at high load (vs uniform, lambda {hi:g}, x)", "> 1", qp / up,
                     "reproduced" if qp / up > 1.5 else ("partly" if qp > up else "not"), unit="x"))
    sp = R.m("brser:0:rr", hi, "p99", exp="serial") / up
    rows.append(_row(f"serial BEST-Route p99 blows up (vs RB uniform, lambda {hi:g}, x)", ">> 1", sp,
                     "reproduced" if sp > 5 else ("partly" if sp > 1 else "not"), unit="x"))
    return rows


def nonstat_claims(R: Results) -> list[dict[str, Any]]:
    if "error" in R.get("rb:uniform", 18.0, exp="nonstat", process="gamma"):
        return []
    devs, parts = [], []
    for lab in ("rb:uniform", "ap:0.53:sq", "br:0.5:sq"):
        base = R.m(lab, 18.0, "e2e")
        for proc in ("gamma", "square6/30"):
            d = rel(R.m(lab, 18.0, "e2e", exp="nonstat", process=proc), base)
            devs.append(abs(d))
            parts.append(f"{lab} {proc} {d:+.0f} %")
    ser = [rel(R.m("brser:0:rr", 18.0, "e2e", exp="nonstat", process=p), R.m("brser:0:rr", 18.0, "e2e", exp="serial"))
           for p in ("gamma", "square6/30")]
    return [_row("amortised systems stay within ~14 % of their stationary E2E at mean lambda 18 (max |diff| %)", 14.0,
                 max(devs), gain_verdict(14.0, max(devs), "at_most"), "; ".join(parts), "%"),
            _row("serial BEST-Route degrades under non-stationary load (worst %)", "up to +74", max(ser),
                 gain_verdict(74.0, max(ser), "about"), f"gamma {ser[0]:+.0f} %, square 6/30 {ser[1]:+.0f} %", "%")]


def dominance_claims(R: Results, r12: float) -> list[dict[str, Any]]:
    rb = [R.get(lab, r12) for lab in R.labels("rb:")]
    rows = []
    for prefix, name in (("br:", "BEST-Route (enhanced)"), ("pt:", "dispatcher-only"), ("ap:", "Avengers-Pro")):
        cells = [R.get(lab, r12) for lab in R.labels(prefix)]
        dom = sum(any(x["quality"] >= c["quality"] - 1e-3 and x["cost"] <= c["cost"] * 1.01 and x["e2e"] <= c["e2e"]
                      * 1.01 for x in rb) for c in cells)
        share = 100 * dom / max(len(cells), 1)
        rows.append(_row(f"{name} cells at lambda {r12:g} weakly dominated by an RB cell (%)", 100, share,
                         gain_verdict(100, share), f"{dom}/{len(cells)} cells; quality within 0.001, cost and mean "
                         "E2E within 1 %", "%"))
    q_pt, l_pt = R.m("pt:sq", r12, "quality"), R.m("pt:sq", r12, "e2e")
    q_rb = max((x["quality"] for x in rb if x["e2e"] <= l_pt), default=math.nan)
    rows.append(_row("load-only balancer (SQ) forfeits quality at the same latency (milli-DeepEval)", "40-50",
                     1000 * (q_rb - q_pt), gain_verdict(45, 1000 * (q_rb - q_pt), "about"),
                     f"best RB cell with E2E <= SQ's {l_pt:.2f} s: {q_rb:.3f}; SQ {q_pt:.3f}", "e-3"))
    return rows
