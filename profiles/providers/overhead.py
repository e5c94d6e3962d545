"""CPU-overhead providers: framework time per iteration and per sequence not hidden behind the GPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from .base import Context, PartResult, provider
from .fits import SEQ_GRID, fit_nnls
from .raw import Raw, lss_measured


def vidur_overhead(raw: Raw) -> tuple[dict[str, float], list[float]]:
    """CPU overhead (schedule + prepare_inputs + process_outputs) and sampler (vidur A40 host, Llama-2-7B)."""
    c = raw.vidur_cpu()
    c = c[(c.model_name == "meta-llama/Llama-2-7b-hf") & (c.tensor_parallel_degree == 1)]
    b = c.batch_size.to_numpy(float)
    y = (c.schedule_median + c.prepare_inputs_e2e_median + c.process_model_outputs_median).to_numpy(float) * 1e-3
    cf = fit_nnls(np.stack([np.ones_like(b), b], 1), y)
    ys = c.sampler_e2e_median.to_numpy(float) * 1e-3
    cs = fit_nnls(np.stack([np.ones_like(b), b], 1), ys)
    return {"per_iteration": cf[0], "per_seq": cf[1]}, [cs[0] + cs[1] * s for s in SEQ_GRID]


# vLLM >= 0.6 (multi-step/async scheduling, V1 engine) hides most CPU work behind the GPU: per-iteration
# overhead is a small fraction of the 2024 sarathi/vLLM numbers. Used with the vLLM 0.19 tables.
MODERN_OVERHEAD = {"per_iteration": 5e-4, "per_seq": 2e-6}


def vidur_cpu(ctx: Context) -> tuple[dict[str, float], list[float]]:
    """The vidur CPU-overhead fit and the sampler times on SEQ_GRID, once per build."""
    return ctx.memo("vidur_cpu", lambda: vidur_overhead(ctx.raw))


FITS = Path(__file__).resolve().parents[1] / "fits"


@provider("run-fit")
def run_fit_overhead(ctx: Context) -> PartResult | None:
    """The per-sequence overhead fitted to a recorded run of this (model, GPU) by
    ``python -m llmsim.profiles calibrate`` (profiles/fits/<gpu>/<model>.yaml, derived data), on top of the V1
    per-iteration term. Only for profiles whose
    GPU work is measured with the same engine (the LLMServingSim vLLM 0.19 tables): the fit absorbs whatever the
    operator tables miss."""
    f = FITS / ctx.gpu / f"{ctx.model.name}.yaml"
    if ctx.tp != 1 or not f.is_file() or not lss_measured(ctx.gpu, ctx.model.name, ctx.tp):
        return None
    fit = yaml.safe_load(f.read_text())
    per_seq = float(fit["overhead"]["per_seq"])
    return PartResult(
        {"per_iteration": MODERN_OVERHEAD["per_iteration"], "per_seq": per_seq},
        "measured",
        f"vLLM 0.19 V1 engine: 0.5 ms/iteration (assumed) + {per_seq * 1e6:.0f} us/sequence fitted to the recorded "
        f"run {fit['run']} ({fit['method']}; held-out RMSE {fit['holdout_rmse']} requests, "
        f"{fit['holdout_rmse_before']} with the assumed 2 us); profiles/calibrate.py",
        frozenset({"llmservingsim"}),
    )


@provider("llmservingsim")
def lss_overhead(ctx: Context) -> PartResult | None:
    if not lss_measured(ctx.gpu, ctx.model.name, ctx.tp):
        return None
    return PartResult(
        dict(MODERN_OVERHEAD),
        "estimated",
        "vLLM 0.19 V1 engine overlaps scheduling with the GPU: 0.5 ms/iteration "
        "+ 2 us/sequence (assumed; eager-mode launch cost is already in the op tables)",
        frozenset({"llmservingsim"}),
    )


@provider("rtx4090-transfer")
def rtx4090_overhead(ctx: Context) -> PartResult | None:
    if ctx.gpu != "rtx4090":
        return None
    return PartResult(dict(MODERN_OVERHEAD), "estimated", "as the measured RTX 4090 profile (vLLM V1 engine, assumed)")


@provider("vidur")
def vidur_overhead_part(ctx: Context) -> PartResult:
    ov, _ = vidur_cpu(ctx)
    return PartResult(
        {"per_iteration": ov["per_iteration"], "per_seq": ov["per_seq"]},
        "transferred",
        "vidur cpu_overheads.csv (A40 host, Llama-2-7B TP1, sarathi/vLLM 2024): "
        "schedule + prepare_inputs + process_model_outputs medians, linear in batch",
        frozenset({"vidur-history"}),
    )


CHAIN = (run_fit_overhead, lss_overhead, rtx4090_overhead, vidur_overhead_part)
