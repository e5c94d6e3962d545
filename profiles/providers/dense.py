"""Dense (non-attention) providers: all layers' GEMMs, norms, activation, RoPE, residual adds, embedding,
final norm and TP all-reduces, versus tokens in the iteration (on TOKEN_GRID).

Chain, best first: LLMServingSim tables (RTX 4090, RTX PRO 6000; Llama-3.1-8B shapes), the L40S -> RTX 4090
transfer, vidur per-layer op tables (A100/H100/A40, Llama shapes), AIConfigurator bf16 GEMMs (A100/H100/L40S/
RTX PRO 6000) + bandwidth-roofline elementwise ops, the A100-80GB -> 40GB transfer, APEX+ fp16 GEMMs (V100),
and a roofline whose efficiencies are calibrated on the measured GPUs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from llmsim.perf.models import ModelSpec, get_model

from .base import Context, PartResult, provider
from .fits import (
    TOKEN_GRID,
    a100_40_transfer,
    efficiencies,
    gemm_dense,
    gemm_layer,
    lss_data,
    lss_dense,
    lss_own,
    roofline_basis,
)
from .raw import AIC_SYSTEMS, LSS_MODEL, VIDUR_GPUS, VIDUR_MODELS, VIDUR_NET, Raw, lss_measured, lss_source

VIDUR_OPS = [
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
]


def vidur_allreduce(raw: Raw, m: ModelSpec, gpu: str, tp: int) -> list[float]:
    """Two all-reduces per layer of ``tokens x hidden`` activations on TOKEN_GRID (vidur DGX network table)."""
    ar = raw.vidur_allreduce(gpu)
    ar = ar[(ar.num_workers == tp) & (ar.devices_per_node == tp)].groupby("size")["time_stats.all_reduce.median"]
    ar = ar.median()
    sizes, times = ar.index.to_numpy(float), ar.to_numpy(float) * 1e-3
    out = []
    for t in TOKEN_GRID:
        s = t * m.hidden * m.dtype_bytes
        a = float(np.interp(s, sizes, times)) if s <= sizes[-1] else float(times[-1] * s / sizes[-1])
        out.append(2 * m.n_layers * a)
    return out


def vidur_dense(raw: Raw, m: ModelSpec, gpu: str, tp: int) -> tuple[list[float], str] | None:
    """Per-layer op medians x layers + embedding and first norm (+ all-reduces at TP > 1), and the source."""
    md = VIDUR_MODELS.get(m.name)
    if gpu not in VIDUR_GPUS or md is None:
        return None
    df = raw.vidur_mlp(gpu, md)
    if df is None:
        return None
    df = df[df.num_tensor_parallel_workers == tp]
    if df.empty:
        return None
    r = df.iloc[0]
    if (r.n_embd, r.n_head, r.n_kv_head, r.n_expanded_embd) != (m.hidden, m.n_heads, m.n_kv_heads, m.intermediate):
        raise SystemExit(f"vidur shape mismatch for {m.name} ({md}): {r.n_embd} {r.n_head} {r.n_kv_head}")
    # Some token counts were profiled more than once: take the median of each op over the repeats. (Sorting
    # the repeats and interpolating at a duplicated x picked whichever repeat the unstable sort put there,
    # which depends on the machine's numpy sort kernel.)
    cols = [f"time_stats.{o}.median" for o in [*VIDUR_OPS, "add", "emb"]]
    med = df.groupby("num_tokens")[sorted(set(cols))].median()
    layer = sum(med[f"time_stats.{o}.median"] for o in VIDUR_OPS) + 2 * med["time_stats.add.median"]
    once = med["time_stats.emb.median"] + med["time_stats.input_layernorm.median"]
    x = med.index.to_numpy(float)
    tot = (m.n_layers * layer + once).to_numpy(float) * 1e-3
    out = [float(np.interp(t, x, tot)) if t <= x[-1] else float(tot[-1] * t / x[-1]) for t in TOKEN_GRID]
    src = f"vidur {VIDUR_GPUS[gpu]}/{md}/mlp.csv (per-layer op medians x {m.n_layers} layers)"
    if tp > 1:
        out = [a + b for a, b in zip(out, vidur_allreduce(raw, m, gpu, tp))]
        src += f"; all-reduce x2/layer from vidur network/{VIDUR_NET[gpu]}/all_reduce.csv"
    return out, src


@provider("llmservingsim")
def lss_dense_part(ctx: Context) -> PartResult | None:
    if not lss_measured(ctx.gpu, ctx.model.name, ctx.tp):
        return None
    dn, _, _ = lss_own(ctx)
    src = lss_source(ctx.gpu, ctx.model.name, ctx.tp)
    src += f" dense.csv, per-layer ops x {ctx.model.n_layers} + embedding + final norm"
    if ctx.tp > 1:
        src += " (one GPU's shard; the tables time no all-reduce: see the allreduce part)"
    return PartResult(lss_dense(dn, ctx.model), "measured", src, frozenset({"llmservingsim"}))


def rtx4090_gemm(ctx: Context, dn: pd.DataFrame):
    """RTX 4090 GEMM time from the L40S table (same AD102 die family), calibrated on the measured 4090 tables:
    a memory-bound factor fitted on the Llama-3.1-8B GEMMs at 1 token, floored by the measured compute rate."""
    l40 = ctx.raw.aic_gemm("l40s")
    ref = get_model(LSS_MODEL)
    big = dn[(dn.layer == "gate_up_proj") & (dn.tokens == dn.tokens.max())].time_us.median() * 1e-6
    rate = 2 * dn.tokens.max() * 2 * ref.intermediate * ref.hidden / big  # measured 4090 GEMM FLOP/s
    gops = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
    m1 = dn[(dn.tokens == 1) & dn.layer.isin(gops)].groupby("layer").time_us.median().sum() * 1e-6
    f_mem = m1 / gemm_layer(l40, ref, 1, 1)

    def g4090(tokens: float, n: float, k: float) -> float:
        return max(f_mem * l40(tokens, n, k), 2 * tokens * n * k / rate)

    return g4090, f_mem, rate


@provider("rtx4090-transfer")
def rtx4090_dense(ctx: Context) -> PartResult | None:
    """Transfer from L40S GEMMs + the measured 4090 Llama-3.1-8B elementwise ops scaled by width."""
    if ctx.gpu != "rtx4090":
        return None
    m, tp = ctx.model, ctx.tp
    dn, _, _ = lss_data(ctx, "RTX4090")
    ref = get_model(LSS_MODEL)
    g4090, f_mem, rate = rtx4090_gemm(ctx, dn)
    piv = dn.pivot_table(index="tokens", columns="layer", values="time_us", aggfunc="median").sort_index()
    xs = piv.index.to_numpy(float)

    def ew(col: str, t: float, ratio: float) -> float:
        ys = piv[col].to_numpy(float) * 1e-6
        return float(np.interp(t * ratio, xs, ys)) if t * ratio <= xs[-1] else float(ys[-1] * t * ratio / xs[-1])

    rh = m.hidden / ref.hidden
    ri = (m.intermediate / tp) / ref.intermediate
    rq = (m.q_dim + m.kv_dim) / (ref.q_dim + ref.kv_dim)
    dense = []
    for t in TOKEN_GRID:
        layer = (
            gemm_layer(g4090, m, tp, t)
            + 2 * ew("layernorm", t, rh)
            + ew("rotary_emb", t, rq)
            + ew("act_fn", t, ri * (1 if m.gated_mlp else 0.5))
        )
        dense.append(m.n_layers * layer + ew("embedding", t, rh) + ew("final_layernorm", t, rh))
    src = (
        f"aiconfigurator L40S vLLM 0.14 bf16 GEMMs -> RTX 4090: max({f_mem:.3f} x L40S"
        " (fitted on the measured 4090 Llama-3.1-8B GEMMs at 1 token), "
        f"FLOPs / {rate / 1e12:.0f} TF measured on the 4090 gate_up GEMM); norms/act/RoPE from "
        "the measured 4090 Llama-3.1-8B ops scaled by width"
    )
    return PartResult(dense, "transferred", src, frozenset({"aiconfigurator", "llmservingsim"}))


@provider("vidur")
def vidur_dense_part(ctx: Context) -> PartResult | None:
    vd = vidur_dense(ctx.raw, ctx.model, ctx.gpu, ctx.tp)
    if vd is None:
        return None
    return PartResult(vd[0], "measured", vd[1], frozenset({"vidur"}))


@provider("aiconfigurator")
def aic_dense(ctx: Context) -> PartResult | None:
    if ctx.gpu not in AIC_SYSTEMS:
        return None
    system, ver = AIC_SYSTEMS[ctx.gpu]
    src = (
        f"aiconfigurator {system} vLLM {ver} "
        "bf16 GEMMs (QKV, O, up/gate, down; bilinear in n,k between grid points); "
        "norms/act/RoPE/adds by a 70%-of-bandwidth roofline (~5% of the total)"
    )
    notes = ("TP all-reduce not included in the dense table for this profile",) if ctx.tp > 1 else ()
    return PartResult(gemm_dense(ctx, ctx.raw.aic_gemm(ctx.gpu)), "measured", src, frozenset({"aiconfigurator"}), notes)


@provider("a100-40gb-transfer")
def a100_40_dense(ctx: Context) -> PartResult | None:
    tr = a100_40_transfer(ctx)
    if tr is None:
        return None
    src80, bw, src = tr
    m, g = ctx.model, ctx.spec
    eff_c = efficiencies(ctx)["a100-80gb"]["eff_c"]
    dense = []
    for t in TOKEN_GRID:
        flops = 2 * t * m.n_layers * m.layer_linear_params / ctx.tp
        comp = flops / (eff_c * g.peak_flops)
        t80 = src80.dense[TOKEN_GRID.index(t)]
        dense.append(max(t80, min(t80 / bw, max(comp, t80))))
    return PartResult(dense, "transferred", src, frozenset(src80.sources))


@provider("apex_plus")
def v100_dense(ctx: Context) -> PartResult | None:
    if ctx.gpu not in ("v100-16gb", "v100-32gb"):
        return None
    src = (
        "apex_plus V100-PCIE-16GB fp16 torch.matmul table (m,k powers of two: "
        "bilinear interpolation in the weight shape, linear in tokens); norms/act by "
        "bandwidth roofline"
    )
    return PartResult(gemm_dense(ctx, ctx.raw.apex_gemm()), "measured", src, frozenset({"apex_plus"}))


@provider("roofline")
def roofline_dense(ctx: Context) -> PartResult:
    rl, txt = roofline_basis(ctx)
    return PartResult(gemm_dense(ctx, rl.gemm), "estimated", txt, frozenset({"llm-analysis"}))


CHAIN = (lss_dense_part, rtx4090_dense, vidur_dense_part, aic_dense, a100_40_dense, v100_dense, roofline_dense)
