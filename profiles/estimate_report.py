"""How good estimated profiles are: the leave-measurements-out check as tables (VALIDATION.md section 9).

    python -m llmsim.profiles validate --write                   # section 9 is made here, with the whole report
    python -m llmsim.profiles estimate [--raw DIR]                # print section 9 only
    python -m llmsim.profiles estimate --profile-out DIR          # write the estimated held-out profiles
                                                                  # (for LLMSIM_PROFILE_PATH=DIR replays)

The numbers come from :mod:`llmsim.profiles.estimate_check`; besides its error tables the section replays the
real RTX PRO 6000 run of section 7 with the measured and with the estimated profile (two background processes,
since the profile is chosen by LLMSIM_PROFILE_PATH).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from llmsim.errors import ProfileError
from llmsim.perf.profile_table import profile_filename
from llmsim.profiles.document import dump
from llmsim.profiles.estimate_check import (
    CALIBRATION_GPUS,
    Row,
    estimated_doc,
    leave_out_rows,
    pooled,
    summary,
)
from llmsim.profiles.providers.raw import Raw
from llmsim.profiles.targets import DEFAULT_RAW, REPO, check_raw_dir

REPLAY_RUN = "llmservingsim/bench/examples/RTXPRO6000/Llama-3.1-8B/vllm/requests.jsonl"


# ------------------------------------------------------------------------------------------- replay
def write_estimated(raw: Raw, out_dir: Path, targets: list[tuple[str, str]]) -> list[Path]:
    """Write leave-out estimated profiles as ``out_dir/<gpu>/<model>.yaml`` (for LLMSIM_PROFILE_PATH)."""
    paths = []
    for gpu, model in targets:
        p = out_dir / gpu / profile_filename(model, 1)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(dump(estimated_doc(raw, model, gpu)))
        paths.append(p)
    return paths


def replay_cmd(requests: Path) -> list[str]:
    """The replay command of section 7 (engine settings from the run's meta.json), JSON output."""
    return [sys.executable, "-m", "llmsim.profiles", "replay", "--requests", str(requests)] + [
        "--model", "llama-3.1-8b", "--gpu", "rtx-pro-6000", "--json",
    ]  # fmt: skip


def start_replays(raw_dir: Path) -> tuple[subprocess.Popen, subprocess.Popen, tempfile.TemporaryDirectory]:
    """Start the replay with the measured and with the estimated RTX PRO 6000 profile (two processes: the
    profile is chosen by LLMSIM_PROFILE_PATH, and the replay has no way to pass a Profile object)."""
    tmp = tempfile.TemporaryDirectory(prefix="llmsim-estimated-")
    write_estimated(Raw(raw_dir), Path(tmp.name), [("rtx-pro-6000", "llama-3.1-8b")])
    cmd = replay_cmd(raw_dir / REPLAY_RUN)
    path = os.pathsep.join(d for d in (tmp.name, os.environ.get("LLMSIM_PROFILE_PATH", "")) if d)
    env_est = dict(os.environ, LLMSIM_PROFILE_PATH=path)  # the estimate shadows profiles/data
    pipe = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    return subprocess.Popen(cmd, **pipe), subprocess.Popen(cmd, env=env_est, **pipe), tmp


def finish_replays(procs) -> list[dict]:
    """``[{metric, measured, sim_measured, err_measured, sim_estimated, err_estimated}]`` from start_replays."""
    p_meas, p_est, tmp = procs
    out = []
    try:
        res = []
        for p in (p_meas, p_est):
            so, se = p.communicate(timeout=300)
            if p.returncode != 0:
                raise RuntimeError(f"python -m llmsim.profiles replay failed ({p.returncode}): {se.strip()[-500:]}")
            res.append([json.loads(line) for line in so.splitlines() if line.strip()])
    finally:
        for p in (p_meas, p_est):
            if p.poll() is None:
                p.kill()
                p.wait()
        tmp.cleanup()
    for a, b in zip(*res):
        out.append(
            {
                "metric": a["metric"],
                "measured": a["measured"],
                "sim_measured": a["simulated"],
                "err_measured": a["error_pct"],
                "sim_estimated": b["simulated"],
                "err_estimated": b["error_pct"],
            }
        )
    return out


# ------------------------------------------------------------------------------------------- report
def _table(rows: list[dict]) -> str:
    cols = list(rows[0])
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    return "\n".join(out + ["| " + " | ".join(str(r.get(c, "-")) for c in cols) + " |" for r in rows])


def _cells(label: dict, e: dict, g: dict | None = None) -> dict:
    d = dict(label)
    d.update(
        {
            "shapes": e["n"],
            "median abs %": f"{e['median_abs_pct']:.1f}",
            "mean abs %": f"{e['mean_abs_pct']:.1f}",
            "p90 abs %": f"{e['p90_abs_pct']:.1f}",
            "bias %": f"{e['bias_pct']:+.1f}",
        }
    )
    if g is not None:
        d["GPU-time median abs % / bias %"] = f"{g['median_abs_pct']:.1f} / {g['bias_pct']:+.1f}"
    return d


def calibrated_on(gpu: str) -> str:
    return "+".join(g for g in CALIBRATION_GPUS if g != gpu)


def error_tables(rows: list[Row]) -> str:
    """Per (GPU, model) rows, per-GPU and pooled summaries, pooled by kind of batch."""
    per = []
    for r in rows:
        lab = {"GPU": r.gpu, "model": ", ".join((r.model, *r.twins)), "GEMM eff. from": calibrated_on(r.gpu)}
        per.append(_cells(lab, summary(r.step), summary(r.gpu_only)))
    agg = []
    for gpu in dict.fromkeys(r.gpu for r in rows):
        sub = [r for r in rows if r.gpu == gpu]
        agg.append(_cells({"pool": gpu}, pooled(sub), pooled(sub, "gpu_only")))
    agg.append(_cells({"pool": "**all (pooled)**"}, pooled(rows), pooled(rows, "gpu_only")))
    for kind in ("prefill", "decode", "mixed"):
        agg.append(_cells({"pool": f"all, {kind} batches"}, pooled(rows, kind=kind), pooled(rows, "gpu_only", kind)))
    agg.append(_cells({"pool": "all, estimated attention + lm_head only (A40-style)"}, pooled(rows, "attention_only")))
    return _table(per) + "\n\n" + _table(agg)


def replay_table(rows: list[dict]) -> str:
    return _table(
        [
            {
                "metric": r["metric"],
                "measured run": f"{r['measured']:.1f}",
                "measured profile": f"{r['sim_measured']:.1f}",
                "error %": f"{r['err_measured']:+.1f}",
                "estimated profile": f"{r['sim_estimated']:.1f}",
                "error % (estimated)": f"{r['err_estimated']:+.1f}",
            }
            for r in rows
        ]
    )


INTRO = (
    "How good are the estimated profiles (A30, A10, TITAN RTX; the A40's attention)? For every GPU with "
    "measured step-time data, the profile is rebuilt with the estimation method alone, its own measurements "
    "hidden (`profiles/estimate_check.py`): GEMMs and lm_head by a roofline on the datasheet peak and bandwidth "
    "with GEMM efficiencies measured on the other calibration GPUs (A100-80GB and L40S: each is estimated from "
    "the other alone), norms/activations by the elementwise roofline, attention by a roofline at 0.5 of peak "
    "(prefill) and 0.8 of bandwidth (decode), vidur's A40-host CPU overhead and sampler. References: the "
    "profiles built from each GPU's own measurements (TP1, all four step-time parts measured; shape twins such "
    "as vicuna-7b = llama-2-7b are counted once). Grid: prefill-only batches (1 x 128 ... 8192 tokens, 4 x 512, "
    "16 x 128), decode-only batches (batch 1-256 x context 256 / 1,024 / 4,096) and mixed chunked batches "
    "(2,048-token budget: 8 / 32 / 128 decodes at context 512 / 2,048 plus one chunk with 0 or 2,048 cached "
    "tokens); shapes whose KV does not fit the GPU at util 0.9 are left out. Error = (estimated - measured) / "
    "measured step time; GPU time leaves out the CPU overhead (the 4090 / PRO 6000 references assume the vLLM "
    "V1 overhead, the estimate uses vidur's). Command: `python -m llmsim.profiles validate --write` (this section; "
    "`python -m llmsim.profiles estimate` prints it).\n"
)


def section(raw_dir: Path, procs=None) -> str:
    """Section 9 of profiles/VALIDATION.md; ``procs``: replays already started (start_replays), so that they
    run while the caller computes other sections."""
    procs = procs or start_replays(raw_dir)
    rows = leave_out_rows(raw_dir)
    rep = finish_replays(procs)
    return (
        "## 9. Estimated profiles: leave-measurements-out check\n\n"
        + INTRO
        + "\n"
        + error_tables(rows)
        + "\n\nReplay of the real RTX PRO 6000 run of section 7 (same command and engine settings from "
        "meta.json: max_num_seqs 128, max_num_batched_tokens 2048, chunked) with the measured profile and with "
        "the estimated one (`python -m llmsim.profiles estimate --profile-out DIR`, then the replay command with "
        "`LLMSIM_PROFILE_PATH=DIR`); latencies in ms:\n\n" + replay_table(rep) + "\n"
    )


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``estimate`` verb's flags."""
    ap.add_argument("--raw", type=Path, default=DEFAULT_RAW, help="profiles_raw directory (default: %(default)s)")
    ap.add_argument("--profile-out", type=Path, help="write the estimated held-out profiles to DIR/<gpu>/<model>.yaml")


def run(a: argparse.Namespace) -> int:
    """Print section 9, or with ``--profile-out`` write the estimated profiles of every held-out (GPU, model)."""
    try:
        check_raw_dir(a.raw)
    except ProfileError as e:
        print(f"{a.prog}: error: {e}", file=sys.stderr)
        return 2
    if a.profile_out:
        rows = leave_out_rows(a.raw)
        for p in write_estimated(Raw(a.raw), a.profile_out, [(r.gpu, m) for r in rows for m in (r.model, *r.twins)]):
            print(f"wrote {p}")
        return 0
    print(section(a.raw))
    return 0
