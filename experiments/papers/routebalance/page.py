"""results.md and routebalance.png of a RouteBalance reproduction: the claims, then the frontier, latency, tier-mix,
isolation, non-stationary, seed, 72B, budget and batching tables."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from experiments.harness.pages import claims_table, md_section
from experiments.papers.routebalance.setup import BATCH_ARMS, BUDGET_RATE, SECTIONS, SLOW72, STRICT_N, Size

COLS = (("quality", "{:.3f}", 1), ("cost", "{:.2f}", 1e6), ("e2e", "{:.2f}", 1), ("p95", "{:.1f}", 1),
        ("p99", "{:.1f}", 1), ("throughput", "{:.1f}", 1))
MIX = ("mix_3B", "mix_7B", "mix_14B", "mix_72B")


def _fmt(c: dict[str, Any], cols: tuple = COLS) -> list[str]:
    if "error" in c:
        return ["missing: " + str(c["error"])[:80]] + [""] * (len(cols) + 0)
    cells = [f.format(c.get(k, float("nan")) * s) for k, f, s in cols]
    return cells + ["/".join(f"{100 * c.get(m, float('nan')):.0f}" for m in MIX)]
HEAD = ["quality", "cost (1e-6 USD)", "mean E2E s", "p95 s", "p99 s", "thr req/s", "mix 3B/7B/14B/72B %"]


def _rate_tables(R: Any, sz: Size) -> list[str]:
    rates = sorted(sz.rates)
    r12 = 12.0 if 12.0 in rates else rates[0]
    labs = [lab for p in ("rb:", "rbn:", "rbk:", "br:", "ap:", "pt:") for lab in R.labels(p)]
    lines = md_section(f"Frontier at lambda {r12:g} (every grid cell)", ["label", *HEAD],
                   [[lab, *_fmt(R.get(lab, r12))] for lab in labs])
    main = ["rb:cost", "rb:uniform", "rb:mid", "rb:quality", "rbn:uniform", "rbn:quality", "rbk:cost",
            "rbk:uniform", "rbk:quality", "br:0.5:sq", "br:0.5:rr",
            "brser:0:rr", "ap:0.53:sq", "ap:0.53:rr", "pt:rr", "pt:sq", "pt:random"]
    lines += md_section("Mean E2E (s) vs lambda", ["label", *[f"{r:g}" for r in rates]],
                    [[lab, *[f"{R.m(lab, r, 'e2e'):.2f}" for r in rates]] for lab in main])
    lines += md_section("p99 E2E (s) vs lambda", ["label", *[f"{r:g}" for r in rates]],
                    [[lab, *[f"{R.m(lab, r, 'p99'):.1f}" for r in rates]] for lab in main])
    mixl = ["rb:cost", "rb:uniform", "rb:mid", "rb:quality", "rb:latency", "rbk:uniform", "rbk:quality",
            "br:0.5:sq", "ap:0.53:sq"]
    lines += md_section("Tier mix 3B/7B/14B/72B (%) vs lambda", ["label", *[f"{r:g}" for r in rates]],
                    [[lab, *[_fmt(R.get(lab, r))[-1] for r in rates]] for lab in mixl])
    sysrows = []
    for p, name in (("rb:", "RouteBalance (oracle)"), ("rbn:", "RouteBalance (noisy)"), ("rbk:", "RouteBalance (kNN)"),
                    ("br:", "BEST-Route enh."),
                    ("ap:", "Avengers-Pro"), ("pt:", "passthrough")):
        cells = [R.get(lab, r) for lab in R.labels(p) for r in rates]
        cells = [c for c in cells if "error" not in c]
        if cells:
            q = max(cells, key=lambda c: c["quality"])
            cc = min(cells, key=lambda c: c["cost"])
            t = max(cells, key=lambda c: c["throughput"])
            sysrows.append([name, f"{q['quality']:.3f} ({q['label']} @ {q['rate']:g})",
                            f"{cc['cost'] * 1e6:.2f} ({cc['label']} @ {cc['rate']:g})",
                            f"{t['throughput']:.1f} ({t['label']})"])
    lines += md_section("Table 3 analogue: per-axis best over the sweep",
                        ["system", "best quality", "cheapest (1e-6 USD)", "max throughput req/s"], sysrows)
    return lines


def _other_tables(R: Any, sz: Size) -> list[str]:
    iso = sorted(set(sz.iso_rates) | ({18.0} if sz.nonstat else set()))
    rows = [[arm, f"{r:g}", *_fmt(R.get(arm, r, exp="iso"))] for arm in sz.arms for r in iso]
    lines = md_section("Isolation arms (RouteBalance paper §6.3 / Table 7)", ["arm", "lambda", *HEAD], rows)
    if sz.nonstat:
        rows = [[lab, proc, *_fmt(R.get(lab, 18.0, exp="nonstat", process=proc))]
                for lab in ("rb:uniform", "arm4", "ap:0.53:sq", "br:0.5:sq", "brser:0:rr")
                for proc in ("gamma", "square6/30", "square6/40")]
        rows += [[lab, "poisson 23", *_fmt(R.get(lab, 23.0, exp="nonstat"))] for lab in ("rb:uniform", "arm4")]
        lines += md_section("Non-stationary arrivals (mean lambda 18; 6/40 has mean 23)",
                            ["label", "process", *HEAD], rows)
    rows = [[lab, f"{r:g}", str(s), *_fmt(R.get(lab, r, exp="seeds", seed=s))]
            for s in (*sz.seeds[:1], *sz.extra_seeds) if sz.extra_seeds
            for lab in ("rb:uniform", "rb:quality", "rb:cost", "br:0.5:sq") for r in (12.0, 30.0)]
    if rows:
        lines += md_section("Seed stability", ["label", "lambda", "seed", *HEAD], rows)
    top = max(sz.rates)
    rows = [[lab, f"{r:g}", *_fmt(R.get(lab, r, exp="slow72", slow72=True))]
            for lab in ("rb:uniform", "rb:quality", "arm2", "arm3", "arm4", "br:0.5:sq", "pt:rr") for r in (12.0, top)]
    lines += md_section(f"72B step time x {SLOW72:.2f} (paper's nominal TPOT)", ["label", "lambda", *HEAD], rows)
    strict = R.get("brstrict:0:rr", min(sz.rates), exp="serial")
    lines += [f"Strict 431 ms serial BEST-Route (t 0, RR) at lambda {min(sz.rates):g} on {STRICT_N} requests: "
              + " / ".join(_fmt(strict)), ""]
    return lines


def _budget_tables(R: Any, sz: Size) -> list[str]:
    head = ["weights", "budgeted %", "filter", "quality (all)", "quality, cut = 0", "cost (1e-6 USD, all)",
            "mean E2E s",
            "budgeted: quality", "budgeted: cost", "clamped %", "cut %", "exhausted %", "filtered %", "fallback %"]
    rows = []
    for w in sz.budget_weights:
        for mix in (0, *sz.budget_mixes):
            for flt in (("f", "n") if mix else ("f",)):
                c = R.get(f"rbb:{w}:{mix}:{flt}", BUDGET_RATE, exp="budget")
                if "error" in c:
                    rows.append([w, str(mix), flt, "missing: " + str(c["error"])[:60]] + [""] * 10)
                    continue
                pct = [f"{100 * c.get(k, float('nan')):.1f}" for k in ("clamped_share", "cut_share", "exhausted_share",
                                                                       "filtered_share", "fallback_share")]
                rows.append([w, str(mix), "on" if flt == "f" else "off", f"{c['quality']:.4f}",
                             f"{c.get('quality_cut0', float('nan')):.4f}",
                             f"{1e6 * c['cost']:.2f}", f"{c['e2e']:.2f}",
                             f"{c.get('budget_quality', float('nan')):.4f}",
                             f"{1e6 * c.get('budget_cost', float('nan')):.2f}", *pct])
    title = f"Budget study (kNN RouteBalance, lambda {BUDGET_RATE:g}; RouteBalance paper §6.4 / Table 8)"
    return md_section(title, head, rows)


def _batching_tables(R: Any, sz: Size) -> list[str]:
    cols = (("e2e", "{:.2f}", 1), ("p99", "{:.1f}", 1), ("router_wait", "{:.0f}", 1000), ("decision_ms", "{:.2f}", 1),
            ("per_window", "{:.1f}", 1), ("quality", "{:.3f}", 1))
    head = ["mean E2E s", "p99 s", "batch wait ms", "decision ms/req", "req/window", "quality"]

    def fmt(c: dict[str, Any]) -> list[str]:
        if "error" in c:
            return ["missing: " + str(c["error"])[:60]] + [""] * (len(cols) - 1)
        return [f.format(c.get(k, float("nan")) * s) for k, f, s in cols]

    rows = [[arm, f"{r:g}", *fmt(R.get(f"bat:{arm}", r, exp="batching"))]
            for arm in BATCH_ARMS for r in sz.arm_rates]
    out = md_section("Batching ablation (a): default vs LPT-off vs adaptive-off (kNN RouteBalance, uniform)",
                 ["arm", "lambda", *head], rows)
    rows = [[f"bs={b}" if b else "adaptive", f"{r:g}",
             *fmt(R.get(f"bat:bs{b}" if b else "bat:default", r, exp="batching"))]
            for r in sz.batch_rates for b in (0, *sz.batch_sizes)]
    return out + md_section("Batching ablation (b): fixed batch size vs adaptive", ["batch", "lambda", *head], rows)


def markdown(report: dict[str, Any], R: Any, sz: Size, sections: tuple[str, ...] = SECTIONS) -> str:
    lines = [f"# RouteBalance reproduction ({report['size_name']})", "",
             f"N = {sz.requests} per cell, seed {sz.seeds[0]}, rates {list(sz.rates)}; sections {list(sections)}; "
             f"learned predictors: {report['predictors']}; wall time {report['wall_s']:.0f} s.", "", "## Claims", "",
             *claims_table(report["claims"], with_paper=False)]
    lines += ["", "Cells: quality = mean ground-truth quality of the served model; cost = USD per request x 1e6; "
              "mix = share of completed requests per tier.", ""]
    if "main" in sections:
        lines += _rate_tables(R, sz) + _other_tables(R, sz)
    if "budget" in sections:
        lines += _budget_tables(R, sz)
    if "batching" in sections:
        lines += _batching_tables(R, sz)
    return "\n".join(lines)


def plot(R: Any, sz: Size, path: Any) -> None:
    rates = sorted(sz.rates)
    r12 = 12.0 if 12.0 in rates else rates[0]
    fig = Figure(figsize=(16, 4.2))
    axes = fig.subplots(1, 3)
    styles = {"rb:": ("C0", "o"), "rbn:": ("C9", "s"), "rbk:": ("C1", "v"), "br:": ("C3", "^"), "ap:": ("C2", "D"),
              "pt:": ("C7", "x")}
    for p, (col, mk) in styles.items():
        cells = [R.get(lab, r12) for lab in R.labels(p)]
        cells = [c for c in cells if "error" not in c]
        axes[0].scatter([c["e2e"] for c in cells], [c["quality"] for c in cells], c=col, marker=mk, label=p[:-1])
        axes[2].scatter([c["cost"] * 1e6 for c in cells], [c["quality"] for c in cells], c=col, marker=mk)
    axes[0].set(xlabel=f"mean E2E (s), lambda {r12:g}", ylabel="quality", title="(a) quality vs latency")
    axes[0].legend(fontsize=7)
    for lab in ("rb:uniform", "rb:quality", "rb:cost", "br:0.5:sq", "brser:0:rr", "ap:0.53:sq", "pt:rr"):
        axes[1].plot(rates, [R.m(lab, r, "e2e") for r in rates], marker="o", label=lab)
    axes[1].set(yscale="log", xlabel="lambda (req/s)", ylabel="mean E2E (s)", title="(b) mean E2E vs lambda")
    axes[1].legend(fontsize=7)
    axes[2].set(xlabel="cost per request (1e-6 USD)", ylabel="quality", title=f"(d) quality vs cost, lambda {r12:g}")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
