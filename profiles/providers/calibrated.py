"""The calibrated estimate: operator time = roofline time / efficiency, the efficiency measured across GPUs.

For each operator class (GEMM, elementwise, prefill attention, decode attention), regime (memory-bound when the
bytes take longer than the FLOPs on the datasheet roofline, else compute-bound) and size (the roofline time in
powers of two of seconds: small kernels are dominated by their fixed cost), the efficiency is the median over
the calibration GPUs of each GPU's median of ``roofline / measured`` (every GPU counts once, however many
records it has). A cell no calibration GPU measured takes the nearest size of its class and regime.

Nothing here is fitted to a serving run: the records are operator tables
(:mod:`llmsim.profiles.providers.operators`), and the error of the estimate on a GPU it did not see is
measured by leaving that GPU out (``llmsim.profiles.estimate_check.operator_error_rows``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from llmsim.perf.hardware import GpuSpec, get_gpu
from llmsim.perf.models import ModelSpec

from .fits import fit_nnls
from .operators import BF16, decode_cost, gemm_cost, log2_bin, prefill_cost, records_frame


def roofline_terms(frame: pd.DataFrame) -> pd.DataFrame:
    """``roofline`` seconds, ``regime`` and ``size`` bin of every record on its GPU's datasheet."""
    peak = frame.gpu.map(lambda g: get_gpu(g).peak_flops)
    bw = frame.gpu.map(lambda g: get_gpu(g).bandwidth)
    return with_roofline(frame, peak.to_numpy(float), bw.to_numpy(float))


def with_roofline(frame: pd.DataFrame, peak: np.ndarray, bw: np.ndarray) -> pd.DataFrame:
    out = frame.copy()
    t_c = out.flops.to_numpy(float) / peak
    t_m = out.bytes.to_numpy(float) / bw
    out["roofline"] = np.maximum(t_c, t_m)
    out["regime"] = np.where(t_c > t_m, "compute", "memory")
    out["size"] = log2_bin(out.roofline.to_numpy(float))
    return out


@dataclass
class EfficiencyModel:
    """Median efficiency by (class, regime, size bin), and the GPUs it was calibrated on."""

    table: dict[tuple[str, str, float], float]
    gpus: tuple[str, ...]

    def efficiency(self, cls: str, regime: str, size: float) -> float:
        """The cell's efficiency, else the nearest size of (class, regime), else of the class."""
        v = self.table.get((cls, regime, size))
        if v is not None:
            return v
        near = [(abs(s - size), e) for (c, r, s), e in self.table.items() if c == cls and r == regime]
        if not near:
            near = [(abs(s - size), e) for (c, _, s), e in self.table.items() if c == cls]
        if not near:
            raise LookupError(f"no calibration record of operator class {cls!r}")
        return min(near)[1]

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        """Predicted seconds of every record of ``frame`` (with roofline terms)."""
        eff = [self.efficiency(c, r, s) for c, r, s in zip(frame.cls, frame.regime, frame["size"])]
        return frame.roofline.to_numpy(float) / np.asarray(eff)

    def op_seconds(self, gpu: GpuSpec, cls: str, flops: float, byts: float) -> float:
        """Estimated seconds of one operator on ``gpu`` (any GPU of the hardware table)."""
        t_c, t_m = flops / gpu.peak_flops, byts / gpu.bandwidth
        roof = max(t_c, t_m)
        return roof / self.efficiency(cls, "compute" if t_c > t_m else "memory", float(log2_bin(roof)))


def calibrate(records, leave_out: tuple[str, ...] = ()) -> EfficiencyModel:
    """The efficiency model of every record whose GPU is not in ``leave_out``."""
    frame = records_frame([r for r in records if r.gpu not in leave_out])
    frame = roofline_terms(frame)
    frame["eff"] = frame.roofline / frame.seconds
    per_gpu = frame.groupby(["cls", "regime", "size", "gpu"]).eff.median()
    cells = per_gpu.groupby(level=[0, 1, 2]).median()
    table = {(c, r, float(s)): float(e) for (c, r, s), e in cells.items()}
    return EfficiencyModel(table, tuple(sorted(frame.gpu.unique())))


# ----------------------------------------------------------------------- an estimated profile from the model
PREFILL_GRID = [(c, p) for c in (16, 64, 256, 1024, 2048) for p in (0, 1024, 4096)]
DECODE_GRID = [(n, kv) for n in (1, 4, 16, 64, 256) for kv in (256, 1024, 4096, 16384)]


def layer_ops(m: ModelSpec, tp: int, tokens: float) -> list[tuple[str, float, float]]:
    """(class, FLOPs, bytes) of one decoder layer's non-attention ops on one TP shard (experts excluded)."""
    h, q, kv = m.hidden, m.q_dim / tp, m.kv_dim / tp
    ops = [gemm_cost(tokens, q + 2 * kv, h), gemm_cost(tokens, h, q)]
    out = [("gemm", f, b) for f, b in ops]
    if m.intermediate and not m.is_moe:
        inter = m.intermediate / tp
        out += [("gemm", *gemm_cost(tokens, (2 if m.gated_mlp else 1) * inter, h)),
                ("gemm", *gemm_cost(tokens, h, inter)),
                ("elementwise", 0.0, (3 if m.gated_mlp else 2) * inter * tokens * BF16)]
    out += [("elementwise", 0.0, 2 * h * tokens * BF16)] * 2  # the two norms
    out += [("elementwise", 0.0, 2 * (q + kv) * tokens * BF16)]  # rotary
    return out


def dense_seconds(model: EfficiencyModel, m: ModelSpec, gpu: GpuSpec, tp: int, tokens: float) -> float:
    layer = sum(model.op_seconds(gpu, c, f, b) for c, f, b in layer_ops(m, tp, tokens))
    once = 2 * model.op_seconds(gpu, "elementwise", 0.0, 2 * m.hidden * tokens * BF16)  # embedding, final norm
    return m.n_layers * layer + once


def attention_coefficients(model: EfficiencyModel, m: ModelSpec, gpu: GpuSpec, tp: int) -> tuple[dict, dict]:
    """The profile's attention coefficients fitted (NNLS, as for measured tables) to the estimated operators."""
    h, kvh = m.n_heads / tp, max(1.0, m.n_kv_heads / tp)
    pf = np.array([model.op_seconds(gpu, "attention_prefill", *prefill_cost(m, h, kvh, c, p)) for c, p in PREFILL_GRID])
    c, p = (np.array(x, float) for x in zip(*PREFILL_GRID))
    cp = fit_nnls(np.stack([np.ones_like(c), c * c, c * p], 1), pf) * m.n_layers
    dec = np.array([model.op_seconds(gpu, "attention_decode", *decode_cost(m, h, kvh, n, kv)) for n, kv in DECODE_GRID])
    n, kv = (np.array(x, float) for x in zip(*DECODE_GRID))
    cd = fit_nnls(np.stack([np.ones_like(n), n, n * kv], 1), dec) * m.n_layers
    return ({"fixed": cp[0], "c2": cp[1], "cp": cp[2]}, {"fixed": cd[0], "per_seq": cd[1], "per_ctx_token": cd[2]})


def moe_seconds(model: EfficiencyModel, m: ModelSpec, gpu: GpuSpec, tp: int, tokens: float, experts: float) -> float:
    """All MoE layers' experts for ``tokens`` tokens reaching ``experts`` distinct experts: grouped GEMMs whose
    FLOPs are the routed tokens' and whose weight bytes are the distinct experts' (per TP shard)."""
    flops = 2.0 * tokens * m.experts_per_token * m.expert_params / tp
    byts = (experts * m.expert_params / tp + tokens * m.experts_per_token * 2 * m.hidden) * BF16
    return m.n_moe_layers * model.op_seconds(gpu, "gemm", flops, byts)
