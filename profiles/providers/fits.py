"""Shared numerics of the providers: output grids, rounding, NNLS fits, rooflines and the fits of the
LLMServingSim-layout tables (also written by ``python -m llmsim.profiles measure``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from llmsim.perf.hardware import GpuSpec, get_gpu
from llmsim.perf.models import ModelSpec

from .base import Context
from .raw import Raw, lss_dir, lss_run_dir, lss_tables

# fmt: off
TOKEN_GRID = [1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144,
              8192, 16384]
# fmt: on
SEQ_GRID = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


def sig(x: float, d: int = 4) -> float:
    if x == 0 or not math.isfinite(x):
        return 0.0
    return float(f"{x:.{d}g}")


@dataclass
class Roofline:
    """Calibrated roofline for GPUs (or parts) without measured data."""

    gpu: GpuSpec
    eff_c: float
    eff_m: float
    t0: float = 5e-6

    def gemm(self, tokens: float, n: float, k: float, dtype: int = 2) -> float:
        flops = 2.0 * tokens * n * k
        byts = (n * k + tokens * (n + k)) * dtype
        return max(flops / (self.eff_c * self.gpu.peak_flops), byts / (self.eff_m * self.gpu.bandwidth)) + self.t0


def elementwise_roofline(
    m: ModelSpec, tp: int, gpu: GpuSpec, tokens: float, eff: float = 0.7, t0: float = 3e-6
) -> float:
    """Per-layer norms (2), RoPE, activation and residual adds (2): bytes moved / bandwidth + launch."""
    h, inter = m.hidden, m.intermediate / tp
    qk = (m.q_dim + m.kv_dim) / tp
    byts = tokens * m.dtype_bytes * (2 * 2 * h + 2 * qk + (3 if m.gated_mlp else 2) * inter + 2 * 3 * h)
    return byts / (eff * gpu.bandwidth) + 6 * t0


def gemm_layer(gemm, m: ModelSpec, tp: int, tokens: float) -> float:
    """One layer's GEMMs: QKV, O and, for a dense model, the MLP (a MoE model's experts are its ``moe`` part)."""
    qkv = (m.q_dim + 2 * m.kv_dim) / tp
    attn = gemm(tokens, qkv, m.hidden) + gemm(tokens, m.hidden, m.q_dim / tp)
    if m.is_moe:
        return attn
    up = (2 if m.gated_mlp else 1) * m.intermediate / tp
    return attn + gemm(tokens, up, m.hidden) + gemm(tokens, m.hidden, m.intermediate / tp)


def monotone(v: list[float]) -> list[float]:
    out, cur = [], 0.0
    for x in v:
        cur = max(cur, sig(x))
        out.append(cur)
    return out


def fit_nnls(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares on relative error (rows weighted by 1/y)."""
    w = 1.0 / np.maximum(y, 1e-9)
    coef, _ = nnls(X * w[:, None], y * w)
    return coef


# Ops of one decoder layer in LLMServingSim's dense.csv, in the order they are summed (Llama's first, so its
# profiles keep their numbers); ``layernorm`` runs twice per layer (before attention and before the MLP), any other
# op once (e.g. Qwen3's ``qk_norm``); ``embedding`` and ``final_layernorm`` once per forward.
LSS_LAYER_OPS = ("layernorm", "layernorm", "qkv_proj", "rotary_emb", "o_proj", "gate_up_proj", "act_fn", "down_proj")
LSS_ONCE_OPS = ("embedding", "final_layernorm")


def lss_layer_ops(columns) -> list[str]:
    """The per-layer ops of a dense.csv (known ones in LSS_LAYER_OPS order, then any other, sorted)."""
    known = [c for c in LSS_LAYER_OPS if c in columns]
    return known + sorted(c for c in columns if c not in LSS_LAYER_OPS and c not in LSS_ONCE_OPS)


def lss_dense(dense: pd.DataFrame, m: ModelSpec) -> list[float]:
    """Whole-model dense time on TOKEN_GRID: per-layer ops x layers + embedding + final norm (a MoE model's
    dense.csv has no MLP ops: its experts are the ``moe`` part)."""
    piv = dense.pivot_table(index="tokens", columns="layer", values="time_us", aggfunc="median").sort_index()
    layer = sum(piv[c] for c in lss_layer_ops(piv.columns))
    once = piv.get("embedding", 0.0) + piv.get("final_layernorm", 0.0)
    x = piv.index.to_numpy(float)
    tot = (m.n_layers * layer + once).to_numpy(float) * 1e-6
    return [float(np.interp(t, x, tot)) if t <= x[-1] else float(tot[-1] * t / x[-1]) for t in TOKEN_GRID]


def lss_attention(att: pd.DataFrame, n_layers: int) -> tuple[dict[str, float], dict[str, float]]:
    dec = att[(att.prefill_chunk == 0) & (att.n_decode > 0) & (att.kv_decode > 0)]
    b, kv = dec.n_decode.to_numpy(float), dec.kv_decode.to_numpy(float)
    X = np.stack([np.ones_like(b), b, b * kv], 1)
    cd = fit_nnls(X, dec.time_us.to_numpy(float) * 1e-6) * n_layers
    pf = att[(att.n_decode == 0) & (att.prefill_chunk > 0)]
    c, p = pf.prefill_chunk.to_numpy(float), pf.kv_prefill.to_numpy(float)
    X = np.stack([np.ones_like(c), c * c, c * p], 1)
    cp = fit_nnls(X, pf.time_us.to_numpy(float) * 1e-6) * n_layers
    return (
        {"fixed": cp[0], "c2": cp[1], "cp": cp[2]},
        {"fixed": cd[0], "per_seq": cd[1], "per_ctx_token": cd[2]},
    )


def lss_lm_head(per_seq: pd.DataFrame) -> list[float]:
    piv = per_seq.pivot_table(index="sequences", columns="layer", values="time_us", aggfunc="median").sort_index()
    tot = (piv["lm_head"] + piv.get("sampler", 0.0)).to_numpy(float) * 1e-6
    x = piv.index.to_numpy(float)
    return [float(np.interp(s, x, tot)) if s <= x[-1] else float(tot[-1] * s / x[-1]) for s in SEQ_GRID]


@cache
def calibrated_efficiencies(raw_root: str) -> dict[str, dict[str, float]]:
    """GEMM efficiencies measured on the GPUs with data: big GEMM (4096 x 12288 x 4096) vs dense peak,
    weight-streaming GEMM (m=1, 16384 x 4096) vs bandwidth."""
    raw = Raw(Path(raw_root))
    out: dict[str, dict[str, float]] = {}
    for gpu in ("a100-80gb", "h100", "l40s"):
        g = get_gpu(gpu)
        gm = raw.aic_gemm(gpu)
        big = gm(4096, 12288, 4096)
        small = gm(1, 16384, 4096)
        out[gpu] = {
            "eff_c": 2 * 4096 * 12288 * 4096 / big / g.peak_flops,
            "eff_m": 16384 * 4096 * 2 / small / g.bandwidth,
        }
    g = get_gpu("v100-32gb")
    gm = raw.apex_gemm()
    pcie_peak = 112e12  # APEX+ measured the PCIe part (112 TF, 900 GB/s)
    out["v100"] = {
        "eff_c": 2 * 4096 * 16384 * 4096 / gm(4096, 16384, 4096) / pcie_peak,
        "eff_m": 16384 * 4096 * 2 / gm(1, 16384, 4096) / g.bandwidth,
    }
    return out


def mean_efficiency(eff: dict[str, dict[str, float]]) -> dict[str, float]:
    """GEMM efficiencies averaged over A100 and L40S (Ampere/Ada), for GPUs without measured GEMMs."""
    return {k: float(np.mean([eff[x][k] for x in ("a100-80gb", "l40s")])) for k in ("eff_c", "eff_m")}


# ------------------------------------------------------------------------------ per-build helpers (Context)
def efficiencies(ctx: Context) -> dict[str, dict[str, float]]:
    return calibrated_efficiencies(str(ctx.raw.root))


def roofline_basis(ctx: Context) -> tuple[Roofline, str]:
    """Roofline with GEMM efficiencies measured on the closest measured architecture, and its description."""
    eff = efficiencies(ctx)
    if ctx.gpu == "titan-rtx":
        e = eff["v100"]
        basis = "V100 (APEX+, pre-Ampere tensor cores)"
    else:
        e = mean_efficiency(eff)
        basis = "A100 and L40S (AIConfigurator, Ampere/Ada)"
    txt = f"roofline, GEMM eff {e['eff_c']:.2f} of peak / {e['eff_m']:.2f} of bandwidth measured on {basis}"
    return Roofline(ctx.spec, e["eff_c"], e["eff_m"]), txt


def lss_data(ctx: Context, gpu_dir: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The LLMServingSim Llama-3.1-8B TP1 tables of ``gpu_dir``, read once per build."""
    return ctx.memo(("lss", gpu_dir), lambda: lss_tables(lss_dir(ctx.raw.root, gpu_dir)))


def lss_own(ctx: Context) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The LLMServingSim tables measured for this build's (GPU, model, TP), read once per build."""
    return ctx.memo(("lss-own",), lambda: lss_tables(lss_run_dir(ctx.raw.root, ctx.gpu, ctx.model.name, ctx.tp)))


def gemm_dense(ctx: Context, gemm) -> list[float]:
    """Dense table from a GEMM-time function (4 GEMMs per layer) plus the elementwise roofline."""
    m, tp, g = ctx.model, ctx.tp, ctx.spec
    return [m.n_layers * (gemm_layer(gemm, m, tp, t) + elementwise_roofline(m, tp, g, t)) for t in TOKEN_GRID]


def a100_40_transfer(ctx: Context) -> tuple[Any, float, str] | None:
    """For the A100-40GB: the A100-80GB build of the same model, bandwidth ratio 40/80 and the source text.

    Same compute as the 80 GB part, memory-bound terms scaled by bandwidth (1,555 / 2,039)."""
    if ctx.gpu != "a100-40gb" or ctx.build_other is None:
        return None
    src80 = ctx.memo("a100-80gb", lambda: ctx.build_other("a100-80gb"))
    bw = get_gpu("a100-40gb").bandwidth / get_gpu("a100-80gb").bandwidth
    src = (
        "A100-80GB profile; memory-bound (weight-streaming / decode attention) "
        f"terms x {1 / bw:.3f} (bandwidth 1,555 vs 2,039 GB/s), compute-bound unchanged"
    )
    return src80, bw, src
