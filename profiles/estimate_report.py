"""How good estimated profiles are, and what llmsim's fidelity rests on: docs/results/fidelity.md.

    python -m llmsim.profiles estimate [--raw DIR]               # print the fidelity report
    python -m llmsim.profiles estimate --write                   # write it to docs/results/fidelity.md
    python -m llmsim.profiles estimate --profile-out DIR [--model M --gpu G --tp N]
                                                                 # calibrated estimated profiles, for
                                                                 # LLMSIM_PROFILE_PATH=DIR replays

The numbers come from :mod:`llmsim.profiles.estimate_check`: the calibrated estimate checked leave-one-GPU-out at
the operator level and at the step level, and the older estimation method behind the committed estimated
profiles (section 9 of profiles/VALIDATION.md, written by ``python -m llmsim.profiles validate``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from llmsim.errors import ConfigError, ProfileError, load_yaml_file
from llmsim.perf.hardware import get_gpu
from llmsim.perf.models import get_model
from llmsim.perf.profile_table import OPTIONAL_PARTS, PART_NAMES, profile_filename
from llmsim.profiles.document import dump
from llmsim.profiles.estimate_check import (
    CALIBRATION_GPUS,
    Row,
    calibrated_doc,
    calibrated_model,
    calibrated_rows,
    leave_out_rows,
    operator_error_rows,
    pooled,
    summary,
)
from llmsim.profiles.providers.calibrated import KV_REREAD
from llmsim.profiles.providers.gpu_features import gpu_features
from llmsim.profiles.providers.raw import LSS_RUNS, Raw
from llmsim.profiles.targets import DEFAULT_OUT, DEFAULT_RAW, REPO, check_raw_dir

FIDELITY = REPO / "docs" / "results" / "fidelity.md"
NO_FLOPS = ("elementwise", "sampler")  # operator classes timed by their bytes alone


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


def section(raw_dir: Path) -> str:
    """Section 9 of profiles/VALIDATION.md."""
    return "## 9. Estimated profiles: leave-measurements-out check\n\n" + INTRO + "\n" + error_tables(
        leave_out_rows(raw_dir)) + "\n"


# ------------------------------------------------------------------------------------ the fidelity report
RUNS = [  # the real vLLM runs fidelity is checked on (kept outside the repository): (run, model, GPU, TP)
    ("Llama-3.1-8B on RTX 4090 (vLLM 0.19)", "llama-3.1-8b", "rtx4090", 1),
    ("Llama-3.1-8B on RTX PRO 6000 (vLLM 0.19)", "llama-3.1-8b", "rtx-pro-6000", 1),
    ("Qwen3-32B TP 2 on RTX PRO 6000 (vLLM 0.19)", "qwen3-32b", "rtx-pro-6000", 2),
    ("Qwen3-30B-A3B on RTX PRO 6000 (vLLM 0.19, its run's DP / EP)", "qwen3-30b-a3b", "rtx-pro-6000", 1),
]
PUBLISHED = ("LLMServingSim 2.0: 1.9 % error reproducing GPU serving (arXiv 2511.07229); 0.95 % average over "
             "performance, memory and power metrics (ISPASS 2026 version)")
END_TO_END = (
    "No real serving run is used here. End-to-end fidelity is checked on real vLLM runs kept outside this "
    "repository (the four below): no profile, constant or test of llmsim is built, fitted or tuned on them. "
    "Each profile's parts say how they were obtained (measured from operator tables, estimated, "
    "roofline); the per-sequence overhead that used to be fitted to one of these runs is gone (the CPU overhead is "
    "modelled from the engine version and mode, profiles/providers/overhead.py). Replay your own vLLM run "
    "(a `vllm bench serve` requests.jsonl, meta.json beside it) with each kind of profile:\n\n"
    "```bash\n"
    "python -m llmsim.profiles replay --requests RUN/requests.jsonl --model qwen3-32b --gpu rtx-pro-6000 --tp 2\n"
    "python -m llmsim.profiles replay --requests RUN/requests.jsonl --model qwen3-32b --gpu rtx-pro-6000 --tp 2 "
    "--profile-kind roofline\n"
    "python -m llmsim.profiles estimate --profile-out /tmp/est      # calibrated estimates, each GPU left out\n"
    "LLMSIM_PROFILE_PATH=/tmp/est python -m llmsim.profiles replay --requests RUN/requests.jsonl --model qwen3-32b "
    "--gpu rtx-pro-6000 --tp 2\n"
    "```\n"
)


def committed_parts(model: str, gpu: str, tp: int) -> str:
    """``part=status`` of a committed profile (how each part was obtained), or why there is none."""
    f = Path(DEFAULT_OUT) / gpu / profile_filename(model, tp)
    if not f.is_file():
        return "none committed"
    parts = load_yaml_file(f, ProfileError)["parts"]
    return ", ".join(f"{p}={parts[p]['status']}" for p in (*PART_NAMES, *OPTIONAL_PARTS) if p in parts)


def runs_table() -> str:
    rows = [{"real run (kept outside)": run, "measured profile (parts)": committed_parts(m, g, tp),
             "estimated profile": f"`estimate --profile-out DIR`: {g}/{profile_filename(m, tp)}, {g} left out",
             "roofline": "`--profile-kind roofline`", "errors": "checked outside this repository"}
            for run, m, g, tp in RUNS]
    return _table(rows)


def operator_table(raw_dir: Path) -> str:
    rows = []
    for r in operator_error_rows(raw_dir):
        e = summary(r.err)
        rows.append({"held-out GPU": r.gpu, "operators": r.what, "n": e["n"],
                     "mean abs %": f"{e['mean_abs_pct']:.1f}", "median abs %": f"{e['median_abs_pct']:.1f}",
                     "p90 abs %": f"{e['p90_abs_pct']:.1f}", "mean signed %": f"{e['bias_pct']:+.1f}",
                     "calibrated on": "+".join(r.calibrated_on)})
    return _table(rows)


def constants_table(raw_dir: Path) -> str:
    """The model's constants fitted on every GPU with operator tables: what an unmeasured GPU's estimate uses."""
    model = calibrated_model(str(Path(raw_dir).resolve()))
    rows = []
    for cls, fit in sorted(model.fits.items()):
        c = fit.describe()
        l2 = (f"{c['l2_bytes_per_sm_cycle']:.2f} B / SM-cycle, reach {c['l2_reach']:.3g} x L2, exponent "
              f"{c['l2_exponent']:.3g}" if fit.cached else "not used")
        if fit.over_dram:
            l2 += " (fitted after the rest; never below DRAM" + ("; AIConfigurator's re-read KV only)"
                                                                  if cls in KV_REREAD else ")")
        moves = cls not in NO_FLOPS  # operators without FLOPs: e_c and p play no part
        p = "-" if not moves else ("max" if c["sharpness"] > 100 else f"{c['sharpness']:.2f}")
        rows.append({"class": cls, "floor µs": f"{c['floor_us']:.2f}",
                     "e_c": f"{c['eff_compute']:.3f}" if moves else "-", "e_m": f"{c['eff_memory']:.3f}", "p": p,
                     "L2 term": l2})
    factor = model.fits["gemm"].geforce_factor
    geforce = "+".join(g for g in model.gpus if gpu_features(g).geforce)
    return _table(rows) + (f"\n\nFitted on {'+'.join(model.gpus)}. GeForce factor (tensor peak and SMs x clock of a "
                           f"GeForce card, fitted on the GEMMs of {geforce}): {factor:.3f}.")


def step_table(raw_dir: Path) -> str:
    rows = []
    for r in calibrated_rows(raw_dir):
        e, g = summary(r.step), summary(r.gpu_only)
        rows.append({"held-out GPU": r.gpu, "profile": r.model, "batches": e["n"],
                     "mean abs %": f"{e['mean_abs_pct']:.1f}", "median abs %": f"{e['median_abs_pct']:.1f}",
                     "p90 abs %": f"{e['p90_abs_pct']:.1f}", "mean signed %": f"{e['bias_pct']:+.1f}",
                     "GPU time median abs %": f"{g['median_abs_pct']:.1f}"})
    return _table(rows)


OPERATOR_INTRO = (
    "The calibrated estimate (profiles/providers/calibrated.py) times an operator of a class (GEMM, elementwise, "
    "prefill attention, decode attention, and vLLM's GPU sampler after lm_head, by the bytes of its fp32 logits) "
    "as a launch floor plus a smooth roofline, `floor + (t_c^p + t_m^p)^(1/p)` "
    "with `t_c` = FLOPs / (e_c x datasheet peak) and `t_m` = bytes / (e_m x datasheet bandwidth), so where an "
    "operator falls between compute- and memory-bound is its arithmetic intensity relative to the GPU's ridge point; "
    "for prefill attention and elementwise operators the bytes that fit in L2 are read at an on-chip rate "
    "proportional to SMs x clock (GPU features from the vendors' whitepapers); for GEMMs, weights within reach of "
    "the L2 (read again at every timed call of an operator benchmark), and for decode attention the KV of "
    "AIConfigurator's benchmark (one KV cache read again at every call; not LLMServingSim's tables, not a serving "
    "step), likewise, never slower than from DRAM, with that term fitted after the shared constants. On a "
    "GeForce card (RTX 3090, RTX 4090: bf16 with fp32 accumulate at half the FP16 rate, so not power-limited, "
    "boosting above the rated clock) "
    "the tensor peak and SMs x clock are multiplied by a GeForce factor fitted, after the shared constants, on the "
    "other GeForce GPUs' GEMMs: the other GPUs' estimates do not depend on it. The few constants per "
    "class are fitted across GPUs (docs/profiles.md explains each). Each GPU with vLLM operator tables is left out "
    "in turn: the constants come from the others only, and its measured operators are predicted. Operators: "
    "LLMServingSim's tables (RTX 4090: Llama-3.1-8B; RTX PRO 6000: Llama-3.1-8B, Qwen3-32B, Qwen3-30B-A3B; TP 1), "
    "AIConfigurator's GEMM and attention tables (A100-80GB, H100, L40S, RTX PRO 6000) and the GEMMs (q / k / v / o, "
    "gate / up / down, lm_head at 1-2,048 tokens) of LLMServingSim's older v0 Llama-3.1-8B tables of RTX 3090 and "
    "RTX A6000 (HF Transformers + PyTorch profiler; its norms, rotary, SiLU and attention are HF kernels, not vLLM's, "
    "and are not used; profiles/providers/hf_layers.py). Iteration rows rebuild "
    "whole iterations (decode of 1-256 sequences at 1,024 tokens of context, prefill of 256-2,048 tokens) from the "
    "held-out GPU's operators, lm_head and the sampler once per iteration (the MoE model's experts are not in "
    "them). Error = (estimated - measured) / measured.\n"
)
STEP_INTRO = (
    "The calibrated estimate as a whole profile (`estimate --profile-out`), its GPU left out, against the profile "
    "built from that GPU's LLMServingSim tables, over prefill, decode and mixed batches "
    "(estimate_check.shape_grid). Both use the same CPU overhead, so GPU time and step time differ little.\n"
)


def fidelity_report(raw_dir: Path) -> str:
    """docs/results/fidelity.md."""
    return "\n".join([
        "# Fidelity (generated by `python -m llmsim.profiles estimate --write`; do not edit)\n",
        "## End to end: real serving runs\n", END_TO_END, runs_table(), "",
        f"Published figure of the closest simulator, for comparison: {PUBLISHED}.\n",
        "## Operators: leave one GPU out\n", OPERATOR_INTRO, operator_table(raw_dir), "",
        "The constants every estimate of an unmeasured GPU uses (all GPUs above calibrate them):\n",
        constants_table(raw_dir), "",
        "## Step times: leave one GPU out\n", STEP_INTRO, step_table(raw_dir), "",
        "## The older estimation method\n",
        "The committed estimated profiles (A30, A10, TITAN RTX; the A40's attention) use a simpler roofline whose "
        "GEMM efficiencies come from A100-80GB and L40S; its leave-measurements-out check is section 9 of "
        "profiles/VALIDATION.md (`python -m llmsim.profiles validate`).\n",
    ])


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``estimate`` verb's flags."""
    ap.add_argument("--raw", type=Path, default=DEFAULT_RAW, help="profiles_raw directory (default: %(default)s)")
    ap.add_argument("--write", action="store_true", help=f"write the fidelity report to {FIDELITY.relative_to(REPO)}")
    ap.add_argument("--out", type=Path, help="write the fidelity report to FILE instead")
    ap.add_argument("--profile-out", type=Path, metavar="DIR",
                    help="write calibrated estimated profiles to DIR/<gpu>/<model>[-tpN].yaml (for "
                         "LLMSIM_PROFILE_PATH=DIR replays): of --model/--gpu/--tp, else of every pair measured by "
                         "LLMServingSim's tables with that GPU's measurements left out")
    ap.add_argument("--model", help="with --profile-out: the model to estimate")
    ap.add_argument("--gpu", help="with --profile-out: the GPU to estimate it on")
    ap.add_argument("--tp", type=int, default=1, help="with --profile-out: tensor-parallel degree (default 1)")


def write_profiles(a: argparse.Namespace) -> int:
    """--profile-out: the calibrated estimate of one (model, GPU, TP), or the held-out one of every measured pair."""
    raw = Raw(a.raw)
    if a.model or a.gpu:
        if not (a.model and a.gpu):
            raise ProfileError("--profile-out with --model needs --gpu too (and the other way round)")
        todo = [(get_model(a.model).name, get_gpu(a.gpu).name, a.tp, ())]
    else:
        todo = [(m, g, tp, (g,)) for (g, m), tps in LSS_RUNS.items() for tp in tps]
    for model, gpu, tp, leave in todo:
        p = a.profile_out / gpu / profile_filename(model, tp)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(dump(calibrated_doc(raw, model, gpu, tp, leave)))
        print(f"wrote {p}" + (f" ({gpu} measurements left out)" if leave else ""))
    return 0


def run(a: argparse.Namespace) -> int:
    """Print the fidelity report (``--write``: into docs/results/fidelity.md), or write estimated profiles."""
    try:
        check_raw_dir(a.raw)
        if a.profile_out:
            return write_profiles(a)
        text = fidelity_report(a.raw)
    except (ProfileError, ConfigError) as e:
        print(f"{a.prog}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    out = a.out or (FIDELITY if a.write else None)
    if out is None:
        print(text)
        return 0
    out.write_text(text)
    print(f"wrote {out}")
    return 0
