"""CPU-overhead providers: framework time per iteration and per sequence not hidden behind the GPU."""

from __future__ import annotations

import numpy as np

from .base import Context, PartResult, provider
from .fits import SEQ_GRID, fit_nnls
from .raw import Raw, lss_measured, lss_meta


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
V1_FROM = (0, 8)  # vLLM's V1 engine is the default from 0.8 (0.6-0.7: V0 with async output processing)


def vllm_version(text: str) -> tuple[int, int]:
    """``"0.19.0"`` -> ``(0, 19)``; an unreadable version is the oldest engine (its overhead is the largest)."""
    try:
        major, minor = text.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return (0, 0)


def engine_overhead(version: str, cuda_graphs: bool) -> tuple[dict[str, float], str]:
    """CPU time per iteration and per sequence the GPU waits for, from what sets it, and how it was obtained.

    What sets it: the engine generation (vLLM's version: V1 overlaps scheduling and output processing with the
    GPU, V0 runs them in between iterations), the batch (the per-sequence term: input preparation and output
    processing are per request in Python) and CUDA graphs (off in eager mode: each kernel launch is CPU time,
    which operator tables measured in eager mode already hold, so it is not added again). The sampler is GPU
    work measured with lm_head (the lm_head part). Never fitted to a serving run: a constant fitted to one run
    does not transfer (the RTX 4090 run showed it)."""
    v = vllm_version(version)
    graphs = "CUDA graphs on" if cuda_graphs else "eager (kernel launches inside the measured operator times)"
    if v >= V1_FROM:
        return dict(MODERN_OVERHEAD), (
            f"vLLM {version} V1 engine, {graphs}: scheduling and output processing overlap the GPU, leaving "
            "0.5 ms/iteration + 2 us/sequence (estimated from the engine design, not fitted to any run)"
        )
    return {}, f"vLLM {version} (V0 engine, {graphs}): the vidur CPU-overhead table applies"


def vidur_cpu(ctx: Context) -> tuple[dict[str, float], list[float]]:
    """The vidur CPU-overhead fit and the sampler times on SEQ_GRID, once per build."""
    return ctx.memo("vidur_cpu", lambda: vidur_overhead(ctx.raw))


@provider("llmservingsim")
def lss_overhead(ctx: Context) -> PartResult | None:
    """The overhead of the engine the LLMServingSim tables were measured with (their meta.yaml: vLLM 0.19, eager)."""
    if not lss_measured(ctx.gpu, ctx.model.name, ctx.tp):
        return None
    meta = lss_meta(ctx.raw.root, ctx.gpu, ctx.model.name)
    eager = bool(meta.get("engine_effective", {}).get("enforce_eager", True))
    ov, src = engine_overhead(str(meta.get("vllm_version", "0.19.0")), cuda_graphs=not eager)
    return PartResult(ov, "estimated", src, frozenset({"llmservingsim"}))


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


CHAIN = (lss_overhead, rtx4090_overhead, vidur_overhead_part)
