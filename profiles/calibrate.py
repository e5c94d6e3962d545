"""Fit a profile's per-sequence CPU overhead to a recorded vLLM run, on part of the run, and report the rest.

    python -m llmsim.profiles calibrate --requests RUN/requests.jsonl --model M --gpu G [--fit-until 33] [--write DIR]

Why this parameter. The operator tables of a measured profile time the GPU work of an iteration; what they miss
is the engine's own work per step that the GPU waits for: scheduling, preparing inputs, sampling,
detokenising and sending each sequence's output (vLLM V1 keeps it per request in Python). It grows with the
number of sequences in the batch, so a replay that leaves it out runs fast exactly when the batch is large:
on the RTX PRO 6000 run the per-second decode rate of the drain phase (no prefill, 13 to 110 sequences)
matches the tables at 13 sequences and is 1-2 ms per iteration slower than them at 60-110 (see
docs/profiles.md, "Replay fidelity"). A per-iteration constant would instead slow the small batches too.

Method (transfers to any GPU with a recorded run and its ``timeseries.csv``): replay the run for a grid of
``overhead.per_seq`` values (the per-iteration term stays the profile's), keep the value whose per-second
running and waiting curves are closest (RMSE) to the measured ones over the first ``--fit-until`` seconds
(default: the first half of the timeline), and report the RMSE on the remaining seconds, which the fit never
saw, and the request latency errors of the whole run. ``--write DIR`` stores the result in
``DIR/<gpu>/<model>.yaml``. The deployment replayed is the one the run's meta.json records, read as ``replay``
reads it (llmsim.profiles.replay.recorded_deployment). It is a diagnosis of that run, never a profile part: the
build does not read it, since a constant fitted to one run does not transfer (the committed overheads are
modelled from the engine version and mode, profiles/providers/overhead.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import yaml

from llmsim.errors import LLMSimError, TraceError
from llmsim.perf.profile import load_profile
from llmsim.profiles.providers.overhead import MODERN_OVERHEAD
from llmsim.profiles.replay import compare, read_requests, recorded_deployment, simulate_run, stats
from llmsim.profiles.replay_timeline import align, read_timeseries, rmse

COARSE_US = tuple(range(0, 52, 4))  # per-sequence overhead grid, microseconds


@dataclass
class Fit:
    model: str
    gpu: str
    run: str
    per_seq: float  # seconds per sequence per iteration
    per_iteration: float
    fit_until: float
    fit_rmse: float
    holdout_rmse: float
    before_holdout_rmse: float
    errors_pct: dict[str, float]
    before_errors_pct: dict[str, float]


def _replay(rec, model: str, gpu: str, deployment: dict, measured, offset: float, per_seq: float | None):
    """One replay of the run's recorded deployment (TP, DP, EP, batching, blocks, caching: as ``replay`` reads
    them) with ``per_seq`` as the CPU overhead."""
    ov = None if per_seq is None else {"per_seq": per_seq}
    sim, notes, tl = simulate_run(rec, model, gpu, overhead=ov, **deployment)
    return sim, align(tl, measured, offset)


def fit_overhead(requests: str | Path, model: str, gpu: str, fit_until: float | None = None) -> Fit:
    """The per-sequence overhead that best replays the first ``fit_until`` seconds of the run (see module)."""
    rec = read_requests(requests)
    got = read_timeseries(requests)
    if got is None:
        raise TraceError(f"{Path(requests).parent}: no timeseries.csv next to the requests: nothing to fit to")
    if rec.ttft is None:
        raise TraceError(f"{requests}: the requests carry no measured latencies")
    measured, offset = got
    deployment, _ = recorded_deployment(requests, model)
    t_end = float(measured.t.max())
    lo_hi = t_end / 2 if fit_until is None else float(fit_until)
    if not 0 < lo_hi < t_end:  # an empty fit window (or no held-out seconds) would report a fit made of nothing
        raise TraceError(f"--fit-until {lo_hi:g}: expected seconds in (0, {t_end:g}), the timeseries.csv's last t, "
                         f"so that both the fit window and the held-out seconds hold rows")
    meas = stats(rec.ttft, rec.e2e, rec.output)

    def loss(us: float) -> tuple[float, dict, object]:
        sim, al = _replay(rec, model, gpu, deployment, measured, offset, us * 1e-6)
        return rmse(al, hi=lo_hi), sim, al

    scores = {us: loss(us) for us in COARSE_US}
    best = min(scores, key=lambda u: scores[u][0])
    for us in np.arange(best - 3, best + 3.01, 1.0):  # refine to 1 us around the coarse minimum
        if us >= 0 and float(us) not in scores:
            scores[float(us)] = loss(float(us))
    best = min(scores, key=lambda u: scores[u][0])
    fit_rmse, sim, al = scores[best]
    # "before": the V1 engine's assumed overhead, whatever the committed profile holds now (so a re-fit is stable)
    base_sim, base_al = _replay(rec, model, gpu, deployment, measured, offset, MODERN_OVERHEAD["per_seq"])
    prof_iter = _profile_overhead(model, gpu, deployment["tp"], deployment["ep"])["per_iteration"]

    def errs(s: dict) -> dict[str, float]:
        return {r["metric"]: r["error_pct"] for r in compare(s, meas)}

    return Fit(model, gpu, str(Path(requests).parent), best * 1e-6, prof_iter, lo_hi, round(fit_rmse, 2),
               round(rmse(al, lo=lo_hi + 1e-9), 2), round(rmse(base_al, lo=lo_hi + 1e-9), 2), errs(sim),
               errs(base_sim))


def _profile_overhead(model: str, gpu: str, tp: int, ep: int) -> dict[str, float]:
    return dict(load_profile(model, gpu, tp, "measured", ep=ep).data["overhead"])


def write_fit(f: Fit, root: Path) -> Path:
    """The fit as ``root/<gpu>/<model>.yaml`` (derived data: the run is named, never copied). The build never
    reads it: a constant fitted to one run is a diagnosis of that run, not a profile part."""
    out = root / f.gpu / f"{f.model}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    body = {"generated_by": "python -m llmsim.profiles calibrate --write",
            "overhead": {"per_seq": float(f"{f.per_seq:.4g}")},
            "method": f"replay grid over overhead.per_seq, RMSE of per-second running + waiting vs timeseries.csv "
                      f"over t <= {f.fit_until:g} s; held-out t > {f.fit_until:g} s",
            "run": f.run.split("profiles_raw/")[-1], "fit_rmse": f.fit_rmse, "holdout_rmse": f.holdout_rmse,
            "holdout_rmse_before": f.before_holdout_rmse, "request_errors_pct": f.errors_pct,
            "request_errors_pct_before": f.before_errors_pct}
    head = "# Derived by `python -m llmsim.profiles calibrate`; do not edit.\n"
    out.write_text(head + yaml.safe_dump(body, sort_keys=False))
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``calibrate`` verb's flags."""
    ap.add_argument("--requests", required=True, help="a recorded run's requests.jsonl (timeseries.csv beside it)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--fit-until", type=float, default=None, help="seconds of the timeline fitted (default: half)")
    ap.add_argument("--write", type=Path, metavar="DIR", help="store the fit in DIR/<gpu>/<model>.yaml (a diagnosis: "
                    "the build never reads it)")
    ap.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Fit, print the fit and its held-out check (or ``--json``), and with ``--write`` store it."""
    try:
        f = fit_overhead(args.requests, args.model, args.gpu, args.fit_until)
    except LLMSimError as e:
        print(f"{args.prog}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(asdict(f)))
    else:
        print(f"{f.model} on {f.gpu}: overhead.per_seq = {f.per_seq * 1e6:.0f} us (per_iteration "
              f"{f.per_iteration * 1e3:.2f} ms kept), fitted on t <= {f.fit_until:g} s")
        print(f"  running + waiting RMSE: fit window {f.fit_rmse}, held-out seconds {f.holdout_rmse} "
              f"(with the assumed {MODERN_OVERHEAD['per_seq'] * 1e6:.0f} us: {f.before_holdout_rmse})")
        print(f"  {'metric':<16}{'before %':>10}{'after %':>10}")
        for k, v in f.errors_pct.items():
            print(f"  {k:<16}{f.before_errors_pct[k]:>+10.1f}{v:>+10.1f}")
    if args.write:
        print("wrote", write_fit(f, args.write))
    return 0


if __name__ == "__main__":  # not a command of its own: the room has one entry
    print(f"{__spec__.name} is not a command; run: python -m llmsim.profiles calibrate --help", file=sys.stderr)
    raise SystemExit(2)
