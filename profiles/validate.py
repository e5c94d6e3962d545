# ruff: noqa: E501 - long prose strings of the generated report
"""Compare the committed profiles with measured numbers that were not used to build them (profiles/VALIDATION.md).

    python -m llmsim.profiles validate [--raw DIR]            # check (default): is profiles/VALIDATION.md up to date?
    python -m llmsim.profiles validate --write                # rewrite profiles/VALIDATION.md
    python -m llmsim.profiles validate --out FILE             # write the report elsewhere

Generates profiles/VALIDATION.md: LLM-Inference-Bench vLLM static batches (A100/H100), Splitwise iteration
times (Llama-2-70B TP2/4/8), DistServe OPT-13B fits, cross-source checks (vidur vs AIConfigurator, the
L40S->4090 transfer vs the measured 4090 table), the V100 facts of the Intelligent Router paper, KV-capacity
anchors, and the
leave-measurements-out check of the estimation method (section 9, llmsim.profiles.estimate_report). Check
mode (the default) compares the regenerated report with the committed one numerically
(llmsim.profiles.compare.compare_report_texts: same text, numbers within a relative 2e-3 or two units of their
last printed digit) and writes nothing: exit 0 when it is up to date, 1 listing the lines that differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from llmsim.errors import ProfileError
from llmsim.perf.hardware import get_gpu
from llmsim.perf.models import get_model
from llmsim.perf.profile import load_profile
from llmsim.profiles.compare import REL_TOL, compare_report_texts
from llmsim.profiles.document import build_one
from llmsim.profiles.estimate_report import section
from llmsim.profiles.providers.dense import vidur_dense
from llmsim.profiles.providers.fits import TOKEN_GRID, elementwise_roofline, gemm_layer
from llmsim.profiles.providers.raw import Raw
from llmsim.profiles.targets import BUILD_SOURCES, DEFAULT_RAW, HELD_OUT_SOURCES, PACKAGE, check_raw_dir

DEFAULT_REPORT = PACKAGE / "VALIDATION.md"

BENCH_MODELS = {
    "meta-llama/Llama-2-7b-hf": "llama-2-7b",
    "meta-llama/Meta-Llama-3-8B": "llama-3-8b",
    "mistralai/Mistral-7B-v0.1": "mistral-7b",
    "Qwen/Qwen2-7B": "qwen2.5-7b",
    "facebook/opt-6.7b": "opt-6.7b",
}
BENCH_GPUS = {"Nvidia A100 GPU": "a100-80gb", "Nvidia H100 GPU": "h100"}


def static_batch_latency(prof, batch: int, isl: int, osl: int, max_batched: int = 8192) -> float:
    """vLLM V0-style static batch: whole-prompt prefills packed up to ``max_batched`` tokens, then decodes."""
    t = 0.0
    left = batch
    per = max(1, max_batched // isl)
    while left > 0:
        n = min(per, left)
        t += prof.step_time(n * isl, n, n * isl * isl, 0, 0, 0)
        left -= n
    for i in range(1, osl):
        t += prof.step_time(batch, batch, 0, 0, batch, batch * (isl + i))
    return t


def pct(a: float, b: float) -> float:
    return (a - b) / b * 100


def md_table(rows: list[dict], cols: list[str]) -> str:
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(str(r[c]) for c in cols) + " |")
    return "\n".join(out)


def bench_section(raw: Path) -> tuple[str, list[float]]:
    d = pd.read_csv(raw / "llm-inference-bench/Plots/All_results.csv")
    d = d[
        (d.Framework == "vLLM") & (d["Num of Hardware"] == 1) & d.Hardware.isin(BENCH_GPUS) & d.Model.isin(BENCH_MODELS)
    ]
    d = d.groupby(["Hardware", "Model", "Input Output Length", "Batch Size"], as_index=False)["Latency"].median()
    rows, errs, kv = [], [], []
    for r in d.itertuples(index=False):
        model, gpu = BENCH_MODELS[r.Model], BENCH_GPUS[r.Hardware]
        io, b = int(r[2]), int(r[3])
        prof = load_profile(model, gpu)
        cap = prof.kv_capacity_tokens(0.9)
        if b * 2 * io > cap:
            continue  # KV-starved in the real run (preemption); a static-batch formula does not apply
        sim = static_batch_latency(prof, b, io, io)
        e = pct(sim, r.Latency)
        errs.append(e)
        kv.append(b * io)
        rows.append(
            {
                "GPU": gpu,
                "model": model,
                "in=out": io,
                "batch": b,
                "measured s": f"{r.Latency:.3f}",
                "profile s": f"{sim:.3f}",
                "error %": f"{e:+.1f}",
            }
        )
    a = np.abs(errs)
    e_arr, kv_arr = np.asarray(errs), np.asarray(kv)
    small, large = e_arr[kv_arr <= 8192], e_arr[kv_arr > 8192]
    head = (
        f"{len(rows)} configurations (vLLM, 1 GPU, batch x 2 x length within the profile's KV capacity). "
        f"Median |error| {np.median(a):.1f} %, mean error {np.mean(errs):+.1f} %, "
        f"{(a <= 20).mean() * 100:.0f} % within 20 %. By KV read per decode step: batch x length <= 8,192 "
        f"tokens ({len(small)} configs) median error {np.median(small):+.1f} %; above ({len(large)} configs) "
        f"median {np.median(large):+.1f} % (see section 8).\n\n"
    )
    return head + md_table(rows, list(rows[0])), errs


def splitwise_section(raw: Path) -> str:
    d = pd.read_csv(raw / "splitwise-sim/data/perf_model.csv")
    d = d[d.model == "llama2-70b"]
    rows = []
    for hw, gpu in (("a100-80gb", "a100-80gb"), ("h100-80gb", "h100")):
        for tp in (2, 4, 8):
            prof = load_profile("llama-2-70b", gpu, tp)
            x = d[(d.hardware == hw) & (d.tensor_parallel == tp)]
            for b, p in ((1, 512), (16, 512), (64, 512)):
                y = x[(x.batch_size == b) & (x.prompt_size == p)]
                if y.empty:
                    continue
                tok = float(y.token_time.median()) * 1e-3
                ctx = p + float(y.token_size.median()) / 2
                sim = prof.step_time(b, b, 0, 0, b, int(b * ctx))
                rows.append(
                    {
                        "GPU": gpu,
                        "TP": tp,
                        "what": f"token_time b={b}, prompt {p}",
                        "measured ms": f"{tok * 1e3:.1f}",
                        "profile ms": f"{sim * 1e3:.1f}",
                        "error %": f"{pct(sim, tok):+.1f}",
                    }
                )
            y = x[(x.batch_size == 1) & (x.prompt_size == 2048)]
            if not y.empty:
                pt = float(y.prompt_time.median()) * 1e-3
                sim = prof.step_time(2048, 1, 2048 * 2048, 0, 0, 0)
                rows.append(
                    {
                        "GPU": gpu,
                        "TP": tp,
                        "what": "prompt_time 1 x 2048",
                        "measured ms": f"{pt * 1e3:.1f}",
                        "profile ms": f"{sim * 1e3:.1f}",
                        "error %": f"{pct(sim, pt):+.1f}",
                    }
                )
    return md_table(rows, list(rows[0]))


def distserve_section(raw: Path) -> str:
    fits = json.loads((raw / "distserve/simdistserve/estimators/profile_data/profiler-a100-80g.vllm.json").read_text())
    f = fits["facebook/opt-13b"]["1"]
    prof = load_profile("opt-13b", "a100-80gb")
    rows = []
    for n in (128, 512, 2048):
        meas = (f["prefill"][0] + f["prefill"][1] * n + f["prefill"][2] * n * n) * 1e-3
        sim = prof.step_time(n, 1, n * n, 0, 0, 0)
        rows.append(
            {
                "what": f"prefill 1 x {n}",
                "DistServe fit ms": f"{meas * 1e3:.1f}",
                "profile ms": f"{sim * 1e3:.1f}",
                "error %": f"{pct(sim, meas):+.1f}",
            }
        )
    for b, ctx in ((1, 512), (32, 512), (64, 1024)):
        c = f["decoding_smallbs"]
        meas = (c[0] + c[1] * b * ctx + c[2] * b) * 1e-3
        sim = prof.step_time(b, b, 0, 0, b, b * ctx)
        rows.append(
            {
                "what": f"decode b={b}, ctx {ctx}",
                "DistServe fit ms": f"{meas * 1e3:.1f}",
                "profile ms": f"{sim * 1e3:.1f}",
                "error %": f"{pct(sim, meas):+.1f}",
            }
        )
    return md_table(rows, list(rows[0]))


def cross_section(raw_dir: Path) -> str:
    raw = Raw(raw_dir)
    rows = []
    # vidur vs AIConfigurator GEMM-based dense, A100, Llama-2-7B (the committed profile uses vidur)
    m = get_model("llama-2-7b")
    gm = raw.aic_gemm("a100-80gb")
    vd, _ = vidur_dense(raw, m, "a100-80gb", 1)
    for t in (1, 128, 2048):
        i = TOKEN_GRID.index(t)
        aic = m.n_layers * (gemm_layer(gm, m, 1, t) + elementwise_roofline(m, 1, get_gpu("a100-80gb"), t))
        rows.append(
            {
                "check": f"A100 Llama-2-7B dense, {t} tokens",
                "reference ms": f"{vd[i] * 1e3:.2f}",
                "other ms": f"{aic * 1e3:.2f} (AIConfigurator GEMMs)",
                "diff %": f"{pct(aic, vd[i]):+.1f}",
            }
        )
    # L40S->4090 transfer applied to Llama-3.1-8B vs the measured 4090 table
    meas = load_profile("llama-3.1-8b", "rtx4090")
    tr = build_one(raw, "llama-3.1-8b", "rtx4090", skip=("llmservingsim",))  # the transfer, not the measurement
    for t in (1, 128, 2048):
        i = TOKEN_GRID.index(t)
        mv = meas.data["dense"]["seconds"][i]
        rows.append(
            {
                "check": f"RTX 4090 Llama-3.1-8B dense, {t} tokens",
                "reference ms": f"{mv * 1e3:.2f} (measured)",
                "other ms": f"{tr.dense[i] * 1e3:.2f} (L40S transfer)",
                "diff %": f"{pct(tr.dense[i], mv):+.1f}",
            }
        )
    ctx = 2048
    a, b = meas.step_time(64, 64, 0, 0, 64, 64 * ctx), None
    b = (
        (tr.decode["fixed"] + 64 * tr.decode["per_seq"] + 64 * ctx * tr.decode["per_ctx_token"])
        + np.interp(64, TOKEN_GRID, tr.dense)
        + np.interp(64, [1, 2, 4, 8, 16, 32, 64], tr.lm_head[:7])
        + meas.data["overhead"]["per_iteration"]
        + 64 * meas.data["overhead"]["per_seq"]
    )
    rows.append(
        {
            "check": "RTX 4090 Llama-3.1-8B decode step b=64 ctx 2048",
            "reference ms": f"{a * 1e3:.2f} (measured)",
            "other ms": f"{b * 1e3:.2f} (transfer)",
            "diff %": f"{pct(b, a):+.1f}",
        }
    )
    return md_table(rows, list(rows[0]))


def v100_section() -> str:
    rows = []
    for gpu in ("v100-32gb", "v100-16gb"):
        p = load_profile("llama-2-7b", gpu)
        pre = p.step_time(1000, 1, 1000 * 1000, 0, 0, 0)
        dec_min = p.step_time(1, 1, 0, 0, 1, 16)
        alone = pre + sum(p.step_time(1, 1, 0, 0, 1, 1000 + i) for i in range(1, 1000))
        slope = (p.step_time(2000, 1, 2000**2, 0, 0, 0) - p.step_time(500, 1, 500**2, 0, 0, 0)) / 1500
        dslope = (p.step_time(32, 32, 0, 0, 32, 32 * 2000) - p.step_time(32, 32, 0, 0, 32, 32 * 1000)) / 32000
        rows.append(
            {
                "GPU": gpu,
                "p=1000,d=1000 alone s (paper ~17)": f"{alone:.2f}",
                "min decode iteration s (paper ~0.02)": f"{dec_min:.4f}",
                "prefill slope s/token (paper 3.2e-4)": f"{slope:.2e}",
                "decode s per KV token (paper grad_d 3.3e-5 s/token, meaning unclear)": f"{dslope:.2e}",
                "KV tokens at 0.9": p.kv_capacity_tokens(0.9),
            }
        )
    return md_table(rows, list(rows[0]))


def capacity_section() -> str:
    rows = []
    p = load_profile("llama-3.1-8b", "rtx4090")
    rows.append(
        {
            "anchor": "RTX 4090, Llama-3.1-8B, util 0.9 (vLLM 0.19)",
            "measured tokens": 41408,
            "profile tokens": p.kv_capacity_tokens(0.9),
            "error %": f"{pct(p.kv_capacity_tokens(0.9), 41408):+.1f}",
            "note": "calibration anchor (reserve base fitted here)",
        }
    )
    p = load_profile("opt-13b", "a100-80gb")
    for u in (0.9, 0.95):
        c = p.kv_capacity_tokens(u)
        rows.append(
            {
                "anchor": f"A100-80GB, OPT-13B TP1 (DistServe), util {u}",
                "measured tokens": 66144,
                "profile tokens": c,
                "error %": f"{pct(c, 66144):+.1f}",
                "note": "held out; DistServe's utilisation is not recorded",
            }
        )
    return md_table(rows, list(rows[0]))


def report_head(raw: Path) -> list[str]:
    """Title and sections 1-3 (held-out end-to-end and iteration-time measurements)."""
    parts = [
        "# Profile validation (generated by `python -m llmsim.profiles validate`; do not edit)\n",
        "Every number below compares a committed profile in profiles/data with measured data that was not used "
        "to build it (except where marked as the calibration anchor). Errors are (profile - measured) / measured.\n",
    ]
    bench, _ = bench_section(raw)
    parts += [
        "## 1. LLM-Inference-Bench, vLLM static batches (end-to-end latency of the whole batch)\n",
        "Source: argonne-lcf/LLM-Inference-Bench @4211f5d (BSD-3-Clause), `Plots/All_results.csv`. The A100 "
        "variant is not recorded (assumed 80 GB SXM). Qwen2-7B uses the qwen2.5-7b profile (identical shapes). "
        "Simulated as packed whole-prompt prefills then decode steps.\n",
        bench,
        "",
    ]
    parts += [
        "## 2. Splitwise iteration times, Llama-2-70B (median of 5 runs)\n",
        "Source: Mutinifni/splitwise-sim @8f99e7d (MIT), `data/perf_model.csv`. Decode context = prompt + half "
        "the output.\n",
        splitwise_section(raw),
        "",
    ]
    parts += [
        "## 3. DistServe OPT-13B on A100-80GB (vLLM fits)\n",
        "Source: LLMServe/DistServe @82831f1 (Apache-2.0), `profiler-a100-80g.vllm.json` (regression fits, "
        "not raw samples).\n",
        distserve_section(raw),
        "",
    ]
    return parts


def report_tail(raw: Path) -> list[str]:
    """Sections 4-7: cross-source checks, V100 facts, KV capacity, where the real serving runs are."""
    parts: list[str] = []
    parts += ["## 4. Cross-source checks\n", cross_section(raw), ""]
    parts += [
        "## 5. V100 facts (Intelligent Router for LLM Workloads)\n",
        "GEMMs measured (APEX+ V100-PCIE-16GB); attention roofline with decode efficiency fitted towards the "
        "17 s fact and capped at 0.85 of bandwidth. The paper's facts conflict (17 s over 1000 decode steps "
        "is 17 ms/step, below its own 0.02 s minimum decode iteration); the measured GEMMs side with 0.02 s.\n",
        v100_section(),
        "",
    ]
    parts += ["## 6. KV-cache capacity\n", capacity_section(), ""]
    parts += [
        "## 7. Real serving runs\n",
        "None is replayed here. Published end-to-end serving runs (vLLM on RTX 4090, RTX PRO 6000) are kept out "
        "of this repository as the held-out check of end-to-end fidelity: no profile, constant or test uses them. "
        "The operator-level fidelity, and the command to replay your own vLLM run, are in "
        "docs/results/fidelity.md (`python -m llmsim.profiles estimate --write`).\n",
        "",
    ]
    return parts


GAPS = [
    "## 8. Reading the gaps\n",
    "- **Long contexts at large batch (section 1) are too fast.** The error grows with the KV bytes a decode "
    "step reads (batch x length): the median moves from about -7 % to -12 % across 8,192 tokens (section 1), "
    "and every error beyond -25 % has batch x length >= 16,384. The decode-attention tables come from "
    "AIConfigurator's vLLM 0.14 kernels "
    "(FlashAttention / FlashInfer decode, 77-91 % of bandwidth); LLM-Inference-Bench ran a 2024 vLLM whose "
    "PagedAttention v1/v2 decode kernels read the paged KV cache far less efficiently. The profiles model "
    "current vLLM; for older engines, scale `decode_attention.per_ctx_token` (the evaluation here does not "
    "refit it, to keep this benchmark held out).",
    "- **Small configurations are about 10 % too fast on A100** (about right on H100): host-side overhead of "
    "that older vLLM (no CUDA graphs, Python sampler) is larger than the vidur CPU-overhead model.",
    "- **Splitwise TP8 decode (section 2) is about 50 % too fast**: the TP8 stack has a per-iteration floor "
    "(all-reduce latency on 8 GPUs, scheduler) that the TP1-derived overhead model and the bandwidth term of "
    "the all-reduce do not capture.",
    "- **V100 (section 5)**: see the conflict between the paper's facts above; the paper's relative slowdown "
    "under periodic arrivals (17 s -> 31 s, x1.82) is reproduced within 10 % (x1.98, "
    "`tests/profiles/test_v100.py`).",
    "",
]


def report(raw: Path) -> str:
    """The whole of profiles/VALIDATION.md."""
    return "\n".join(report_head(raw) + report_tail(raw) + GAPS + [section(raw)])


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``validate`` verb's flags."""
    ap.add_argument("--raw", type=Path, default=DEFAULT_RAW, help="profiles_raw directory (default: %(default)s)")
    ap.add_argument("--out", type=Path, help="report path (default: the committed profiles/VALIDATION.md, checked)")
    ap.add_argument("--write", action="store_true", help="rewrite the committed profiles/VALIDATION.md")


def run(a: argparse.Namespace) -> int:
    """Check (default), rewrite (``--write``) or write elsewhere (``--out``) the report; exit 1 when stale."""
    committed = Path(DEFAULT_REPORT)
    out = a.out if a.out is not None else committed
    try:
        check_raw_dir(a.raw, BUILD_SOURCES + HELD_OUT_SOURCES)
    except ProfileError as e:
        print(f"{a.prog}: error: {e}", file=sys.stderr)
        return 2
    text = report(a.raw)
    if out.resolve() != committed.resolve() or a.write:
        out.write_text(text)
        print(f"wrote {out}")
        return 0
    if not out.is_file():
        print(f"{out} is missing; run `python -m llmsim.profiles validate --write`")
        return 1
    diffs = compare_report_texts(out.read_text(), text)
    for d in diffs:
        print(f"DIFFERS {d.where}:\n  committed: {d.committed}\n  new:       {d.new}")
    if diffs:
        print(
            f"{out}: {len(diffs)} line(s) differ beyond rel {REL_TOL:g} / 2 units of the last digit; "
            "run `python -m llmsim.profiles validate --write` to update it"
        )
        return 1
    print(f"{out} is up to date (rel {REL_TOL:g}); nothing written")
    return 0


if __name__ == "__main__":  # not a command of its own: the room has one entry
    print(f"{__spec__.name} is not a command; run: python -m llmsim.profiles validate --help", file=sys.stderr)
    raise SystemExit(2)
