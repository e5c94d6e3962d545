"""results.md of the KV-reuse study (docs/results/prefix_caching.md is a copy).

Every sentence with a number is filled in from the run's report, so the page is regenerated, not edited; the
explanations are fixed text about the engine's rules.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from experiments.harness.pages import claims_table
from experiments.studies.prefix.claims import cell_of, hit_of, settings

LABELS = ("round_robin", "jsq", "least_kv", "session_affinity", "prefix_precise", "prefix_approx")
NAMES = {"round_robin": "round_robin", "jsq": "jsq", "least_kv": "least_kv", "session_affinity": "session_affinity",
         "prefix_precise": "prefix_aware precise", "prefix_approx": "prefix_aware approx"}



def _f(x: Any, nd: int = 0) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:,.{nd}f}"


def pp(a: float, b: float) -> str:
    """The difference of two rates in percentage points, signed."""
    return f"{100 * (a - b):+.2f} pp"


def header(report: dict[str, Any]) -> list[str]:
    sz, name = report["size"], report["size_name"]
    when = report.get("date") or dt.datetime.now().isoformat(timespec="seconds")
    lines = ["# KV reuse: prefix caching and prefix-aware routing", "",
             f"Command: `{report['command']}` ({when}, "
             f"{report.get('wall_s', 0) / 60:.1f} min wall on 2 shared cores, {report['jobs']} job(s)).", "",
             f"Size **{name}**; every instance is {report['model']} on {report['gpu']} (the only profiled model whose "
             "context holds the trace's longest prompt), default engine (vllm_v0 scheduling, 16-token blocks, "
             "prefix caching on). Seeds: Mooncake jitter seed and multi-turn workload seed "
             f"{', '.join(map(str, sz['seeds']))} for the routing comparison (mean over seeds); seed 0 for the "
             "scan and part 1. Routers are deterministic."]
    if report.get("note"):
        lines += ["", str(report["note"])]
    if name != "full":
        lines += ["", f"**Not the full setting**: Mooncake window {sz['mc_end']:g} s of the trace, "
                      f"{sz['mt_requests']:,} multi-turn requests per 4 instances, clusters {sz['clusters']}."]
    return lines


def part1(report: dict[str, Any]) -> list[str]:
    """Ideal vs engine hit rates, with the numbers that explain the gaps."""
    tr, lim = report["ideal"]["trace"], report["ideal"]["limits"]
    lines = ["", "## 1. Hit rate of the Mooncake conversation trace vs the published 36.6 %", "",
             f"Whole trace: {tr['requests']:,} requests, {tr['prompt_tokens']:,} prompt tokens, longest prompt "
             f"{tr['max_prompt']:,} tokens; one instance's context is {lim['max_model_len']:,} tokens and its KV "
             f"cache {lim['kv_blocks']:,} blocks of {lim['block_size']} ({lim['kv_blocks'] * lim['block_size']:,} "
             f"tokens), so no prompt is over the context (dropped and truncated prompts are counted below).", "",
             "| workload-level ideal (infinite cache, `ideal_prefix_hit_rate`) | hit rate |", "|---|---|",
             f"| whole trace, 512-token ids, every prompt block (a partial last one too), block-weighted | "
             f"{100 * tr['ideal_512']:.2f} % |"]
    win = report["ideal"]["window"]
    end = report["size"]["hit_end"]
    for what, d in (("whole trace", tr), ("" if end is None else f"first {end:g} s", win)):
        if d and "ideal_16" in d:
            lines += [f"| {what}, 16-token engine blocks, full blocks only, block-weighted | "
                      f"{100 * d['ideal_16']:.2f} % |",
                      f"| {what}, 16-token blocks, token-weighted (hit tokens / all prompt tokens) | "
                      f"{100 * d['ideal_16_tokens']:.2f} % |",
                      f"| {what}, the same with the engine's last-token rule (the engine's ceiling) | "
                      f"{100 * d['ideal_16_engine_rule']:.2f} % |"]
    if win:
        lines += [f"| first {end:g} s, 512-token ids | {100 * win['ideal_512']:.2f} % |"]
    lines += ["", "| engine run (rate scale) | instances | KV blocks each | router | hit rate (tokens) | evictions | "
              "mean TTFT ms | dropped / truncated |", "|---|---|---|---|---|---|---|---|"]
    for r in report["hit"]:
        cap = "unbounded" if r["tag"] == "unbounded" else f"{r['kv_blocks']:,} (profile)"
        lines.append(f"| {r['tag']} (x{r['x']:g}) | {r['n']} | {cap} | {NAMES[r['label']]} | "
                     f"{100 * r['hit_rate']:.2f} % | {r['evictions']:,} | {_f(r['ttft_mean'])} | "
                     f"{r['dropped']} / {r['truncated']} |")
    return lines + [""] + explain1(report)


def explain1(report: dict[str, Any]) -> list[str]:
    """Part 1's gaps, step by step from the published figure to the engine's, each measured."""
    tr = report["ideal"]["trace"]
    ref = report["ideal"]["window"] or tr  # the engine runs' own window
    win = "" if ref is tr else f"; first {report['size']['hit_end']:g} s of the trace"
    u1, p1, u4, r4 = (hit_of(report, 1, "unbounded"), hit_of(report, 1, "profile"), hit_of(report, 4, "unbounded"),
                      hit_of(report, 4, "profile"))
    pa = hit_of(report, 4, "profile", "prefix_precise")
    out = [f"* **The published figure.** `ideal_prefix_hit_rate` gives {100 * tr['ideal_512']:.2f} % "
           f"({tr['hit_blocks_512']:,} of {tr['blocks_512']:,} 512-token blocks): the 36.6 % is reproduced at the "
           "workload level.",
           f"* **Granularity** (512 -> 16-token blocks, partial blocks excluded{win}): "
           f"{pp(ref['ideal_16'], ref['ideal_512'])}. **Tokens vs blocks** (the engine counts vLLM's "
           "`prefix_cache_hits / prefix_cache_queries`, prompt tokens, partial last blocks in the denominator): "
           f"{pp(ref['ideal_16_tokens'], ref['ideal_16'])}. **Last token recomputed** (a prompt reuses at most "
           f"`(prompt - 1) // 16` blocks; it cuts {ref['fully_cached_prompts']:,} fully cached prompts): "
           f"{pp(ref['ideal_16_engine_rule'], ref['ideal_16_tokens'])}, so the engine's ceiling is "
           f"{100 * ref['ideal_16_engine_rule']:.2f} %."]
    if u1:
        gap = u1["hit_rate"] - ref["ideal_16_engine_rule"]
        why = ("exactly the ceiling: at this load (mean TTFT " f"{_f(u1['ttft_mean'])} ms) no request was admitted "
               "while a block it shares was still queued or being prefilled" if abs(gap) < 1e-4 else
               "blocks still queued or being prefilled when a request sharing them is admitted are misses in the "
               "engine (a block is cached when the iteration computing it ends) and hits in the ideal"
               if gap < 0 else "ABOVE the ceiling, which the engine's rules do not allow: a discrepancy to look at")
        out.append(f"* **Engine, unbounded cache, one instance: {100 * u1['hit_rate']:.2f} %**{win}, "
                   f"{pp(u1['hit_rate'], ref['ideal_16_engine_rule'])} from the ceiling: {why}.")
    if u1 and p1:
        out.append(f"* **Capacity.** With the profile's own KV cache ({p1['kv_blocks']:,} blocks of 16 tokens) the "
                   f"same instance keeps {100 * p1['hit_rate']:.2f} % ({p1['evictions']:,} blocks evicted): "
                   f"at a mean prompt of {tr['prompt_tokens'] / tr['requests']:,.0f} tokens, the cache holds a few "
                   "dozen prompts, and most of the reuse the unbounded cache finds comes after the prefix would "
                   "have been evicted. Most of the 36.6 % needs a KV store far larger than one GPU's HBM.")
    if u4 and r4:
        txt = (f"* **Four instances** (rate x{r4['x']:g}): unbounded caches with round robin {100 * u4['hit_rate']:.2f}"
               f" % (a prefix is reused only where its predecessor went), profile capacity: round robin "
               f"{100 * r4['hit_rate']:.2f} %")
        out.append(txt + (f", prefix_aware precise {100 * pa['hit_rate']:.2f} %." if pa else "."))
    return out


def part2(report: dict[str, Any]) -> list[str]:
    """The rate scan, the chosen loads and the routers' table per setting."""
    lines = ["", "## 2. Routing comparison", "",
             "Mooncake: the whole conversation trace (or the window above), arrivals jittered uniformly within their "
             "3 s buckets (`jitter_s: 3`), rate-scaled (load = rate scale of the trace). Multi-turn: "
             "`conf/workload/multi_turn.yaml` with only its session rate and request count changed (load = "
             "sessions/s; 4 instances get the request count, 16 instances four times it).", "",
             "**How the load was chosen.** A round-robin scan on a short window (seed 0); the chosen load is the "
             "lowest at which round robin's mean TTFT is at least twice its TTFT at the lightest load of the scan "
             "while it still serves at least 90 % of the offered request rate (else the highest such load).", "",
             "| workload | instances | load | offered req/s | served req/s | RR mean TTFT ms | RR p99 TTFT ms | "
             "chosen |", "|---|---|---|---|---|---|---|---|"]
    for r in sorted(report["scan"], key=lambda r: (r["workload"], r["n"], r["x"])):
        pick = "**yes**" if report["chosen"][f"{r['workload']}/{r['n']}"] == r["x"] else ""
        lines.append(f"| {r['workload']} | {r['n']} | {r['load']:g} | {r['offered_rps']:.2f} | {r['rps']:.2f} | "
                     f"{_f(r['ttft_mean'])} | {_f(r['ttft_p99'])} | {pick} |")
    lines += ["", *scan_notes(report)]
    for wl, n in settings(report):
        first = cell_of(report, wl, n, "round_robin")
        if first is None:
            continue
        lines += ["", f"### {wl}, {n} instances (load {first['load']:g}, {first['requests']:,} requests, "
                      f"offered {first['offered_rps']:.2f} req/s)", "",
                  "| router | mean TTFT ms | p50 TTFT ms | p99 TTFT ms | req/s | output tok/s | hit rate | "
                  "max/mean requests per instance |", "|---|---|---|---|---|---|---|---|"]
        for lab in LABELS:
            r = cell_of(report, wl, n, lab)
            if r is not None:
                lines.append(f"| {NAMES[lab]} | {_f(r['ttft_mean'])} | {_f(r['ttft_p50'])} | {_f(r['ttft_p99'])} | "
                             f"{r['rps']:.2f} | {_f(r['out_tps'])} | {r['hit_rate']:.3f} | {r['imbalance']:.2f} |")
    return lines


def scan_notes(report: dict[str, Any]) -> list[str]:
    """Why each load was chosen, and where the short scan misjudged the offered rate of the full run."""
    out = []
    for wl, n in settings(report):
        key, rr = f"{wl}/{n}", cell_of(report, wl, n, "round_robin")
        pick = next((r for r in report["scan"] if r["workload"] == wl and r["n"] == n
                     and r["x"] == report["chosen"].get(key)), None)
        if pick is None or rr is None:
            continue
        text = f"* {wl}, {n} instances: load {pick['load']:g}, {report['why'][key]}."
        if rr["offered_rps"] > 1.1 * pick["offered_rps"]:
            cause = ("the scan's window of the trace is quieter than the trace as a whole" if wl == "mooncake" else
                     "the scan was too short for the sessions (several turns, 30 s apart) to reach steady state")
            text += (f" Caveat: {cause}: the same load offers "
                     f"{rr['offered_rps']:.1f} req/s over the comparison's run vs {pick['offered_rps']:.1f} in the "
                     f"scan, so the comparison runs hotter than the scan showed (round robin serves "
                     f"{rr['rps']:.1f} req/s there).")
        out.append(text)
    return out


def verdicts(report: dict[str, Any]) -> list[str]:
    """Who wins each setting on mean TTFT, p99 TTFT and hit rate, and whether hit rate or balance decided it."""
    lines = ["", "## 3. Verdict", ""]
    for wl, n in settings(report):
        cells = [c for lab in LABELS if (c := cell_of(report, wl, n, lab)) is not None]
        if not cells:
            continue
        best = {m: min(cells, key=lambda c: c[m]) for m in ("ttft_mean", "ttft_p99")}
        top = max(cells, key=lambda c: c["hit_rate"])
        rr = cell_of(report, wl, n, "round_robin")
        rr_hit = "" if rr is None else f" vs round robin {rr['hit_rate']:.3f}"
        close = top["ttft_mean"] <= 1.05 * best["ttft_mean"]["ttft_mean"]
        served = "" if rr is None else (f" Round robin serves {rr['rps']:.2f} of {rr['offered_rps']:.2f} offered "
                                        "req/s" + (" (at or past its saturation)." if rr["rps"] < 0.95 *
                                                   rr["offered_rps"] else "."))
        lines.append(f"* **{wl}, {n} instances**: best mean TTFT {NAMES[best['ttft_mean']['label']]} "
                     f"({_f(best['ttft_mean']['ttft_mean'])} ms vs round robin {_f(rr['ttft_mean']) if rr else 'n/a'}"
                     f"), best p99 {NAMES[best['ttft_p99']['label']]} ({_f(best['ttft_p99']['ttft_p99'])} ms), "
                     f"highest hit rate {NAMES[top['label']]} ({top['hit_rate']:.3f}{rr_hit}); "
                     + ("the highest hit rate is also the fastest." if top is best["ttft_mean"] else
                        "the highest hit rate is within 5 % of the fastest mean TTFT." if close else
                        f"the highest hit rate is not the fastest: {NAMES[best['ttft_mean']['label']]}'s balance "
                        "wins.") + served)
    sa = [c for wl, n in settings(report) if (c := cell_of(report, wl, n, "session_affinity")) is not None]
    if sa:
        worst = max(sa, key=lambda c: c["imbalance"])
        sa_gap = max(abs(c["hit_rate"] - rr["hit_rate"]) for c in sa
                     if (rr := cell_of(report, c["workload"], c["n"], "round_robin")) is not None)
        lines.append(f"* **session_affinity** keys on `extra['session']`, which neither workload sets, so it keys "
                     "on the first hash id: on multi-turn that is the one shared 64-token system prompt (every "
                     "session is the same \"session\"), on Mooncake the first 512 tokens. Popular prefixes pile onto "
                     f"one instance until the overload guard (16 requests above the shortest queue) moves them: up "
                     f"to {worst['imbalance']:.2f}x the mean requests per instance ({worst['workload']}, "
                     f"{worst['n']} instances). Its hit rate is within {sa_gap:.3f} of round robin's, and its median "
                     "TTFT is "
                     + ", ".join(f"{_f(c['ttft_p50'])} vs jsq {_f(j['ttft_p50'])} ms ({c['workload']}, {c['n']})"
                                 for c in sa if (j := cell_of(report, c['workload'], c['n'], 'jsq')) is not None)
                     + ": the sticky instance runs a deeper queue than the others.")
    return lines


def markdown(report: dict[str, Any]) -> str:
    """results.md: header, part 1, part 2, verdicts, the claim rows."""
    lines = header(report) + part1(report) + part2(report) + verdicts(report)
    lines += ["", "### Expectations checked (rules of docs/reproduce.md; no paper values but the 36.6 %)", "",
              *claims_table(report["claims"], with_paper=False)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # a part of a study: running it alone would do nothing
    raise SystemExit("python -m experiments.studies.prefix.page: a part of the prefix study, not a study; "
                     "run the study with llmsim-reproduce prefix")
