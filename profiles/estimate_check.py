"""How good are estimated profiles? Rebuild measured GPUs with the estimation method alone and compare.

The estimation method is the one behind the estimated profiles (A30, A10, TITAN RTX, some A40): GEMMs by a
roofline on datasheet peak / bandwidth with efficiencies measured on other GPUs (the AIConfigurator big and
weight-streaming GEMMs of A100-80GB and L40S, averaged), norms and activations by the elementwise roofline,
attention by a roofline at 0.5 of peak (prefill) and 0.8 of bandwidth (decode), vidur's A40-host CPU overhead
and sampler. For a GPU that *has* measurements we hide them: its own GEMM tables leave the calibration set
(A100-80GB is estimated from L40S alone and L40S from A100 alone; the others from both), and nothing else of
that GPU is read (:data:`MEASUREMENT_PATHS`, enforced by tests/profiles/test_estimate.py). The estimate is
compared with the profile the builder makes from that GPU's measurements over a grid of batch shapes.

The errors found here are written into every estimated profile (``provenance.expected_error``, by the build)
and reported in section 9 of profiles/VALIDATION.md (``llmsim.profiles.estimate_report``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from llmsim.errors import ConfigError
from llmsim.perf.hardware import get_gpu
from llmsim.perf.models import get_model
from llmsim.perf.profile_table import MeasuredProfile, profile_filename
from llmsim.profiles.document import Built, Part, build_one, render
from llmsim.profiles.providers.allreduce import allreduce_curve
from llmsim.profiles.providers.attention import roofline_pair
from llmsim.profiles.providers.base import Context
from llmsim.profiles.providers.calibrated import (
    EfficiencyModel,
    attention_coefficients,
    calibrate,
    dense_seconds,
    moe_seconds,
    roofline_terms,
    unpriced,
)
from llmsim.profiles.providers.fits import SEQ_GRID, TOKEN_GRID, Roofline, gemm_dense, sig
from llmsim.profiles.providers.hf_layers import v0_records
from llmsim.profiles.providers.lm_head import lm_gemm
from llmsim.profiles.providers.memory import config_memory
from llmsim.profiles.providers.operators import (
    CLASSES,
    OpRecord,
    all_records,
    gemm_cost,
    measured_gpus,
    records_frame,
    sampler_bytes,
)
from llmsim.profiles.providers.overhead import engine_overhead, vidur_overhead_part
from llmsim.profiles.providers.raw import LSS_GPUS, LSS_MODEL, LSS_RUNS, Raw, lss_measured, lss_table_model
from llmsim.profiles.targets import TARGETS, fits_gpu

# GPUs whose step-time parts are measured (their committed profiles are the references).
HELD_OUT_GPUS = ("a100-80gb", "h100", "l40s", "rtx4090", "rtx-pro-6000")
# What llmsim.profiles.providers.fits.mean_efficiency averages for Ampere-and-later GPUs without GEMM tables.
CALIBRATION_GPUS = ("a100-80gb", "l40s")
STEP_PARTS = ("dense", "prefill_attention", "decode_attention", "lm_head")
_AIC = "aiconfigurator/{}aic-core/src/aiconfigurator_core/systems/data/"
# Everything under ../shared/profiles_raw measured on each held-out GPU (relative paths).
MEASUREMENT_PATHS: dict[str, tuple[str, ...]] = {
    "a100-80gb": (
        _AIC.format("") + "a100_sxm",
        _AIC.format("csv_gz/") + "a100_sxm",
        "vidur/data/profiling/compute/a100",
        "vidur/data/profiling/network/a100_dgx",
        "vidur/data/profiling/network/a100_pairwise_nvlink",
        "vidur/history-e2d00e9/data/profiling/a100",
    ),
    "h100": (
        _AIC.format("") + "h100_sxm",
        _AIC.format("csv_gz/") + "h100_sxm",
        "vidur/data/profiling/compute/h100",
        "vidur/data/profiling/network/h100_dgx",
        "vidur/data/profiling/network/h100_pairwise_nvlink",
        "llmservingsim/profiler/v0/perf_models/H100",
    ),
    "l40s": (_AIC.format("") + "l40s", _AIC.format("csv_gz/") + "l40s"),
    "rtx4090": ("llmservingsim/profiler/perf/RTX4090",),
    "rtx-pro-6000": (
        _AIC.format("") + "rtx_pro_6000_server",
        _AIC.format("csv_gz/") + "rtx_pro_6000_server",
        "llmservingsim/profiler/perf/RTXPRO6000",
    ),
}
KV_UTIL = 0.9


# ------------------------------------------------------------------------------------- leave-out builder
def gemm_efficiency(raw: Raw, gpu: str) -> dict[str, float]:
    """Big-GEMM share of dense peak and weight-streaming share of bandwidth (as fits.calibrated_efficiencies)."""
    g, gm = get_gpu(gpu), raw.aic_gemm(gpu)
    return {
        "eff_c": 2 * 4096 * 12288 * 4096 / gm(4096, 12288, 4096) / g.peak_flops,
        "eff_m": 16384 * 4096 * 2 / gm(1, 16384, 4096) / g.bandwidth,
    }


def leave_out_efficiency(raw: Raw, hidden: str) -> tuple[dict[str, float], tuple[str, ...]]:
    """The calibration GPUs' mean efficiencies, without the hidden GPU (whose tables are never read)."""
    calib = tuple(g for g in CALIBRATION_GPUS if g != hidden)
    effs = [gemm_efficiency(raw, g) for g in calib]
    return {k: float(np.mean([e[k] for e in effs])) for k in ("eff_c", "eff_m")}, calib


def estimated_doc(raw: Raw, model: str, gpu: str, hidden: str | None = None) -> dict:
    """The profile document the estimation method gives for (model, gpu) at TP1, ``hidden``'s data unused.

    ``hidden`` defaults to ``gpu``; for a GPU without measurements (e.g. a30) this is exactly the committed
    estimated profile's step-time model (tested)."""
    hidden = gpu if hidden is None else hidden
    m, spec = get_model(model), get_gpu(gpu)
    ctx = Context(raw, m, gpu, spec, 1)
    eff, calib = leave_out_efficiency(raw, hidden)
    rl = Roofline(spec, eff["eff_c"], eff["eff_m"])
    pf, dec = roofline_pair(ctx)
    ov, mem = vidur_overhead_part(ctx), config_memory(ctx)
    src = f"roofline, GEMM eff {eff['eff_c']:.2f} of peak / {eff['eff_m']:.2f} of bandwidth from {'+'.join(calib)}"
    parts = {
        "dense": Part("estimated", src),
        "prefill_attention": Part(pf.status, pf.source),
        "decode_attention": Part(dec.status, dec.source),
        "lm_head": Part("estimated", src + "; sampler from vidur"),
        "overhead": Part(ov.status, ov.source),
        "memory": Part(mem.status, mem.source),
    }
    b = Built(
        gemm_dense(ctx, rl.gemm),
        lm_gemm(ctx, rl.gemm),
        pf.value,
        dec.value,
        ov.value,
        parts,
        ["llm-analysis", "vidur-history"],
        [f"leave-measurements-out estimate: {gpu} measurements hidden"],
        mem.value,
    )
    return render(b, model, gpu, 1)


def reference_docs(raw: Raw) -> dict[tuple[str, str], dict]:
    """``{(gpu, model): doc}`` built from the held-out GPUs' measurements: TP1 targets that fit the GPU and
    whose four step-time parts are all measured (transferred or estimated parts are not a reference)."""
    out = {}
    for gpu in HELD_OUT_GPUS:
        for model in TARGETS[gpu]:
            if gpu in LSS_GPUS and not (lss_measured(gpu, model, 1) and lss_table_model(model) == LSS_MODEL):
                continue  # transferred (the 4090's other models), or the Qwen3 tables of the calibrated check
            if not fits_gpu(model, gpu, 1, KV_UTIL):
                continue
            b = build_one(raw, model, gpu)
            if all(b.parts[p].status == "measured" for p in STEP_PARTS):
                out[(gpu, model)] = render(b, model, gpu, 1)
    return out


# ------------------------------------------------------------------------------------------ shape grid
@dataclass(frozen=True)
class Shape:
    """One batch: the arguments of Profile.step_time plus the KV tokens it holds."""

    kind: str  # prefill / decode / mixed
    n_tokens: int
    n_seqs: int
    prefill_c2: int
    prefill_cp: int
    n_decode: int
    decode_ctx: int
    kv_tokens: int

    def args(self) -> tuple[int, int, int, int, int, int]:
        return self.n_tokens, self.n_seqs, self.prefill_c2, self.prefill_cp, self.n_decode, self.decode_ctx


def shape_grid() -> list[Shape]:
    """Prefill-only (1 x 128..8192, 4 x 512, 16 x 128), decode-only (batch 1..256 x context 256..4096) and
    mixed chunked batches under a 2,048-token budget (8/32/128 decodes at 512/2048 context + one chunk with
    0 or 2,048 cached tokens)."""
    out = []
    for b, c in [(1, 128), (1, 512), (1, 1024), (1, 2048), (1, 4096), (1, 8192), (4, 512), (16, 128)]:
        out.append(Shape("prefill", b * c, b, b * c * c, 0, 0, 0, b * c))
    for b in (1, 4, 16, 32, 64, 128, 256):
        for ctx in (256, 1024, 4096):
            out.append(Shape("decode", b, b, 0, 0, b, b * ctx, b * ctx))
    for d in (8, 32, 128):
        for ctx in (512, 2048):
            for p in (0, 2048):
                c = 2048 - d
                out.append(Shape("mixed", c + d, d + 1, c * c, c * p, d, d * ctx, d * ctx + c + p))
    return out


def overhead_s(prof: MeasuredProfile, s: Shape) -> float:
    ov = prof.data["overhead"]
    return ov["per_iteration"] + ov["per_seq"] * s.n_seqs


@dataclass
class Row:
    """Errors (%) of one estimated profile against its reference, per shape (full step and GPU time only)."""

    gpu: str
    model: str
    kinds: list[str]
    step: np.ndarray
    gpu_only: np.ndarray
    attention_only: np.ndarray  # measured dense, estimated attention + lm_head (as the A40 profiles)
    twins: tuple[str, ...] = ()  # models with identical shapes (identical errors), folded into this row


def hybrid_doc(ref: dict, est: dict) -> dict:
    """The reference with the estimated attention and lm_head: what a profile with only a measured dense
    table (the A40's vidur tables) gets."""
    return {**ref, **{k: est[k] for k in ("prefill_attention", "decode_attention", "lm_head")}}


def compare_profiles(est: dict, ref: dict, shapes: list[Shape]) -> Row:
    """Per-shape errors (%); shapes whose KV does not fit the reference profile at util 0.9 are left out."""
    pe, pr, ph = MeasuredProfile(est), MeasuredProfile(ref), MeasuredProfile(hybrid_doc(ref, est))
    cap = pr.kv_capacity_tokens(KV_UTIL)
    kinds, err = [], []
    for s in shapes:
        if s.kv_tokens > cap:
            continue
        te, tr, th = pe.step_time(*s.args()), pr.step_time(*s.args()), ph.step_time(*s.args())
        ge, gr = te - overhead_s(pe, s), tr - overhead_s(pr, s)
        kinds.append(s.kind)
        err.append(((te - tr) / tr, (ge - gr) / gr, (th - tr) / tr))
    e = np.asarray(err) * 100
    return Row(pr.gpu.name, pr.model.name, kinds, e[:, 0], e[:, 1], e[:, 2])


@cache
def _rows(raw_root: str) -> tuple[Row, ...]:
    raw = Raw(Path(raw_root))
    shapes = shape_grid()
    rows: list[Row] = []
    for (gpu, model), ref in reference_docs(raw).items():
        r = compare_profiles(estimated_doc(raw, model, gpu), ref, shapes)
        same = [x for x in rows if x.gpu == gpu and np.array_equal(x.step, r.step) and x.kinds == r.kinds]
        if same:  # a shape twin (vicuna-7b = llama-2-7b, ...): counted once
            same[0].twins += (model,)
        else:
            rows.append(r)
    return tuple(rows)


def leave_out_rows(raw_dir: Path) -> list[Row]:
    """One Row per (held-out GPU, model), computed once per raw directory and process."""
    return list(_rows(str(Path(raw_dir).resolve())))


def summary(e: np.ndarray) -> dict[str, float]:
    a = np.abs(e)
    return {
        "median_abs_pct": float(np.median(a)),
        "mean_abs_pct": float(np.mean(a)),
        "p90_abs_pct": float(np.percentile(a, 90)),
        "bias_pct": float(np.mean(e)),
        "n": int(len(e)),
    }


def pooled(rows: list[Row], what: str = "step", kind: str | None = None) -> dict[str, float]:
    """Summary over every shape of ``rows`` (``what``: step / gpu_only / attention_only; optionally one kind)."""
    vals = []
    for r in rows:
        e = getattr(r, what)
        vals.append(e if kind is None else e[np.asarray(r.kinds) == kind])
    return summary(np.concatenate(vals))


# --------------------------------------------------------------------------- expected error of a profile
APPLIES = {
    "roofline": "this profile's dense, attention and lm_head come from the estimation method checked there",
    "attention": "this profile's dense table is measured; its attention and lm_head come from the estimation "
    "method (figures for the measured GPUs with only those parts estimated)",
    "v100": "attention is the V100-calibrated roofline (the Intelligent Router paper's V100 facts, section 5); no "
    "held-out measurement of V100 attention exists, so no figure",
    "turing": "TITAN RTX uses the V100 GEMM efficiencies and 0.35 of peak for prefill attention; no "
    "pre-Ampere GPU has measured attention, so these figures (Ampere and later GPUs) are a lower bound",
}


def estimate_kind(gpu: str, providers: dict[str, str]) -> str | None:
    """Which APPLIES case a built profile is (from the providers of its parts), None when nothing is estimated."""
    if providers.get("dense") == "roofline":
        return "turing" if gpu == "titan-rtx" else "roofline"
    return {"roofline": "attention", "v100-calibrated": "v100"}.get(providers.get("prefill_attention", ""))


def expected_error(raw_dir: Path, kind: str) -> dict:
    """The ``provenance.expected_error`` block of an estimated profile (``kind``: a key of APPLIES); numbers
    to 3 significant digits so that check mode's relative tolerance absorbs last-digit differences."""
    out: dict = {
        "source": "leave-measurements-out check on A100-80GB, H100, L40S, RTX 4090 and RTX PRO 6000 "
        "(profiles/VALIDATION.md section 9, `python -m llmsim.profiles validate`): step-time error over "
        "prefill, decode and mixed batches",
        "applies": APPLIES[kind],
    }
    if kind == "v100":
        return {"source": "no held-out check (see profiles/VALIDATION.md sections 5 and 9)", "applies": APPLIES[kind]}
    rows = leave_out_rows(raw_dir)
    what = "attention_only" if kind == "attention" else "step"
    p = pooled(rows, what)
    per_gpu = [pooled([r for r in rows if r.gpu == g], what)["median_abs_pct"] for g in HELD_OUT_GPUS]
    out.update(
        {
            "median_abs_pct": sig(p["median_abs_pct"], 3),
            "p90_abs_pct": sig(p["p90_abs_pct"], 3),
            "bias_pct": sig(p["bias_pct"], 3),
            "per_gpu_median_abs_pct": [sig(min(per_gpu), 3), sig(max(per_gpu), 3)],
        }
    )
    return out


def add_expected_error(doc: dict, raw_dir: Path, gpu: str, providers: dict[str, str]) -> None:
    """State in an estimated profile the error its estimation method showed on GPUs with measurements
    (``provenance.expected_error``; VALIDATION.md section 9). Profiles with nothing estimated are left alone."""
    kind = estimate_kind(gpu, providers)
    if kind is not None:
        doc["provenance"]["expected_error"] = expected_error(raw_dir, kind)


# ----------------------------------------------------------------- the calibrated estimate as a profile
def calibrated_parts(model: EfficiencyModel, m, g, tp: int, ctx: Context) -> tuple[dict, dict]:
    """Every step-time value of the calibrated estimate and the optional parts (moe, allreduce) that apply."""
    pf, dec = attention_coefficients(model, m, g, tp)
    lm = [model.op_seconds(g, "gemm", *gemm_cost(s, m.vocab / tp, m.hidden))
          + model.op_seconds(g, "sampler", 0.0, sampler_bytes(m, s)) for s in SEQ_GRID]
    values = {"dense": [dense_seconds(model, m, g, tp, t) for t in TOKEN_GRID], "lm_head": lm,
              "prefill_attention": pf, "decode_attention": dec}
    optional: dict = {}
    if m.is_moe:
        experts = [e for e in (1, 2, 4, 8, 16, 32, 64, 128, 256) if m.experts_per_token <= e <= m.n_experts]
        curves = [{"tokens": TOKEN_GRID, "seconds": [moe_seconds(model, m, g, tp, t, e) for t in TOKEN_GRID]}
                  for e in experts]
        optional["moe"] = {"n_experts": m.n_experts, "experts_per_token": m.experts_per_token,
                           "layers": m.n_moe_layers, "experts": experts, "curves": curves}
    if tp > 1:
        optional["allreduce"] = allreduce_curve(ctx)
    return values, optional


# GPUs whose LLMServingSim v0 (HF Transformers) tables join the calibration, and which of their operators: the
# GEMMs only (cuBLAS, as in vLLM). Their HF norms, rotary, SiLU and SDPA attention are other kernels than vLLM's
# (providers.hf_layers); added to the vLLM classes they made the held-out elementwise and prefill-attention errors
# of every GPU worse. The v0 H100 is left out: AIConfigurator's H100 GEMMs cover the same shapes, from vLLM.
V0_CALIBRATION = ("rtx3090", "rtx-a6000")
V0_CLASSES = ("gemm",)


@cache
def calibration_records(raw_root: str) -> tuple[OpRecord, ...]:
    """Every operator record the calibrated estimate learns from: the vLLM operator tables and the v0 GEMMs."""
    v0 = [r for g in V0_CALIBRATION for r in v0_records(Path(raw_root), g) if r.cls in V0_CLASSES]
    return all_records(raw_root) + tuple(v0)


@cache
def calibrated_model(raw_root: str, leave_out: tuple[str, ...] = ()) -> EfficiencyModel:
    """The calibrated estimate fitted on every GPU with operator tables but ``leave_out`` (once per process)."""
    return calibrate(calibration_records(raw_root), leave_out)


def calibrated_doc(raw: Raw, model: str, gpu: str, tp: int = 1, leave_out: tuple[str, ...] = ()) -> dict:
    """The profile the calibrated estimate gives for (model, gpu, tp), calibrated on every GPU with operator
    tables except ``leave_out`` (llmsim.profiles.providers.calibrated)."""
    m, g = get_model(model), get_gpu(gpu)
    if unpriced(m):
        raise ConfigError(f"model {m.name!r}: the calibrated estimate does not price {', '.join(unpriced(m))}; "
                          "use the roofline (profile kind roofline) for it")
    eff = calibrated_model(str(Path(raw.root).resolve()), tuple(leave_out))
    ctx = Context(raw, m, gpu, g, tp)
    values, optional = calibrated_parts(eff, m, g, tp, ctx)
    ov, src_ov = engine_overhead("0.19.0", cuda_graphs=False)
    src = ("calibrated estimate: launch floor + smooth roofline (L2 term for attention and elementwise) per operator "
           "class, fitted on " + "+".join(eff.gpus))
    parts = {p: Part("estimated", src) for p in ("dense", "prefill_attention", "decode_attention", "lm_head")}
    parts["lm_head"] = Part("estimated", src + "; the sampler as vLLM's GPU sampler (its own operator class)")
    parts["overhead"] = Part("estimated", src_ov)
    mem = config_memory(ctx)
    parts["memory"] = Part(mem.status, mem.source)
    if "moe" in optional:
        parts["moe"] = Part("estimated", src + "; grouped expert GEMMs at each number of distinct experts")
    if "allreduce" in optional:
        parts["allreduce"] = Part("estimated", "ring all-reduces from the hardware table (llmsim.perf.parallel)")
    b = Built(values["dense"], values["lm_head"], values["prefill_attention"], values["decode_attention"], ov,
              parts, ["llm-analysis", "vidur-history"], [f"calibrated estimate; measurements of {gpu} unused"
                                                           if gpu in leave_out else "calibrated estimate"],
              mem.value, optional=optional)
    return render(b, model, gpu, tp)


# ------------------------------------------------------------------- leave-one-GPU-out, operator level
ITERATIONS = {  # batch -> (tokens through the dense ops, lm_head sequences, attention record label)
    **{f"decode {n} x 1,024": (n, n, f"decode@{n}x1024") for n in (1, 16, 64, 256)},
    **{f"prefill {c}": (c, 1, f"prefill@{c}+0") for c in (256, 1024, 2048)},
}
ONCE = ("embedding", "final_layernorm")
PER_STEP = ("lm_head", "sampler")  # once per iteration, on the sequences that sample


@dataclass
class OperatorRow:
    """Errors (%) of the calibrated estimate on one held-out GPU, by operator class or iteration."""

    gpu: str
    what: str  # operator class, or "iteration <model>"
    err: np.ndarray
    calibrated_on: tuple[str, ...]


def iteration_seconds(ops: dict[str, float], model: str, tokens: int, seqs: int, attention: str) -> float | None:
    """One iteration of ``model`` from per-operator seconds keyed by label (None when a label is missing)."""
    m = get_model(model)
    layer_ops = [lab for lab in ops if lab.endswith(f"@{tokens}") and lab.split("@")[0] not in ONCE + PER_STEP]
    try:
        layer = sum(ops[lab] * (2 if lab.startswith("layernorm@") else 1) for lab in layer_ops) + ops[attention]
        once = sum(ops[f"{op}@{tokens}"] for op in ONCE) + sum(ops[f"{op}@{seqs}"] for op in PER_STEP)
    except KeyError:
        return None
    return m.n_layers * layer + once if layer_ops else None


def iteration_errors(frame, predicted: np.ndarray) -> dict[str, np.ndarray]:
    """Per model measured on the GPU: errors (%) of whole iterations (ITERATIONS) rebuilt from its operators."""
    out = {}
    frame = frame.assign(pred=predicted)
    for src, sub in frame[frame.source.str.startswith("llmservingsim:")].groupby("source"):
        model = src.split(":")[-1]
        meas, pred = dict(zip(sub.label, sub.seconds)), dict(zip(sub.label, sub.pred))
        errs = []
        for tokens, seqs, att in ITERATIONS.values():
            a, b = iteration_seconds(meas, model, tokens, seqs, att), iteration_seconds(pred, model, tokens, seqs, att)
            if a and b:
                errs.append((b - a) / a * 100)
        if errs:
            out[f"iteration {model}"] = np.asarray(errs)
    return out


@cache
def _operator_rows(raw_root: str) -> tuple[OperatorRow, ...]:
    recs = calibration_records(raw_root)
    rows = []
    for gpu in measured_gpus(recs):
        model = calibrated_model(raw_root, (gpu,))
        frame = roofline_terms(records_frame([r for r in recs if r.gpu == gpu]))
        pred = model.predict(frame)
        err = (pred - frame.seconds.to_numpy(float)) / frame.seconds.to_numpy(float) * 100
        for cls in CLASSES:
            sel = (frame.cls == cls).to_numpy()
            if sel.any():
                rows.append(OperatorRow(gpu, cls, err[sel], model.gpus))
        rows += [OperatorRow(gpu, what, e, model.gpus) for what, e in iteration_errors(frame, pred).items()]
    return tuple(rows)


def operator_error_rows(raw_dir: Path) -> list[OperatorRow]:
    """The leave-one-GPU-out check of the calibrated estimate: for every GPU with operator tables, calibrate on
    the other GPUs and compare with its measured operators and with iterations rebuilt from them."""
    return list(_operator_rows(str(Path(raw_dir).resolve())))


@cache
def _calibrated_rows(raw_root: str) -> tuple[Row, ...]:
    raw, shapes, rows = Raw(Path(raw_root)), shape_grid(), []
    for (gpu, model), tps in LSS_RUNS.items():
        for tp in tps:
            ref = render(build_one(raw, model, gpu, tp), model, gpu, tp)
            row = compare_profiles(calibrated_doc(raw, model, gpu, tp, leave_out=(gpu,)), ref, shapes)
            row.model = profile_filename(model, tp).removesuffix(".yaml")
            rows.append(row)
    return tuple(rows)


def calibrated_rows(raw_dir: Path) -> list[Row]:
    """Step-time errors of the calibrated estimate, its GPU left out, against every profile built from
    LLMServingSim's tables (prefill, decode and mixed batches of :func:`shape_grid`)."""
    return list(_calibrated_rows(str(Path(raw_dir).resolve())))


if __name__ == "__main__":  # not a command of its own: the room has one entry
    print(f"{__spec__.name} is not a command; run: python -m llmsim.profiles estimate --help", file=sys.stderr)
    raise SystemExit(2)
