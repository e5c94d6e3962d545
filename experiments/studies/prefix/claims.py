"""The KV-reuse study's claim rows: the published 36.6 % (ideal and engine) and, per setting, precise prefix-aware
routing vs round robin; and the lookups of a run's report that the claims and the page share."""

from __future__ import annotations

import math
from typing import Any

from experiments.harness.claims import claim_row, gain_verdict, order_verdict

PAPER = "prefix"



def cell_of(report: dict[str, Any], wl: str, n: int, label: str) -> dict[str, Any] | None:
    """The routing comparison's row of (workload, instances, router), None if it was not run."""
    return next((r for r in report["table"] if (r["workload"], r["n"], r["label"]) == (wl, n, label)), None)


def hit_of(report: dict[str, Any], n: int, tag: str, label: str = "round_robin") -> dict[str, Any] | None:
    """Part 1's run of (instances, unbounded / profile cache, router), None if it was not run."""
    return next((r for r in report["hit"] if (r["n"], r["tag"], r["label"]) == (n, tag, label)), None)


def settings(report: dict[str, Any]) -> list[tuple[str, int]]:
    """The (workload, instances) settings of the routing comparison."""
    return [(wl, n) for wl in ("mooncake", "multi_turn") for n in report["size"]["clusters"]]


def claims(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The published 36.6 % (ideal and engine) and, per setting, precise prefix-aware vs round robin."""
    ideal = report["ideal"]["trace"]["ideal_512"] * 100
    unb = hit_of(report, 1, "unbounded")
    eng = unb["hit_rate"] * 100 if unb else math.nan
    window = "" if report["size"]["hit_end"] is None else f" (engine: first {report['size']['hit_end']:g} s only)"
    rows = [claim_row(PAPER, "infinite-cache hit rate, conversation trace (ideal, 512-token blocks)", 36.6, ideal,
                      gain_verdict(36.6, ideal, "about"), unit="%", kind="about", note="ideal_prefix_hit_rate"),
            claim_row(PAPER, "engine hit rate, unbounded KV, 1 instance (tokens, 16-token blocks)", 36.6, eng,
                      gain_verdict(36.6, eng, "about"), unit="%", kind="about",
                      note="prefix_cache_hits / prefix_cache_queries" + window)]
    for wl, n in settings(report):
        rr, pa = cell_of(report, wl, n, "round_robin"), cell_of(report, wl, n, "prefix_precise")
        if rr is None or pa is None:
            continue
        rows.append(claim_row(PAPER, f"{wl}, {n} inst.: prefix_aware precise hit rate > round_robin", "higher",
                              100 * (pa["hit_rate"] - rr["hit_rate"]), order_verdict([pa["hit_rate"], rr["hit_rate"]]),
                              unit="pp", kind="order", note=f"{pa['hit_rate']:.3f} vs {rr['hit_rate']:.3f}"))
        gain = 100 * (rr["ttft_mean"] - pa["ttft_mean"]) / rr["ttft_mean"] if rr["ttft_mean"] > 0 else math.nan
        rows.append(claim_row(PAPER, f"{wl}, {n} inst.: prefix_aware precise mean TTFT < round_robin", "lower", gain,
                              order_verdict([rr["ttft_mean"], pa["ttft_mean"]]), unit="%", kind="order",
                              note=f"{pa['ttft_mean']:.0f} vs {rr['ttft_mean']:.0f} ms (gain vs RR)"))
    return rows


if __name__ == "__main__":  # a part of a study: running it alone would do nothing
    raise SystemExit("python -m experiments.studies.prefix.claims: a part of the prefix study, not a study; "
                     "run the study with llmsim-reproduce prefix")
