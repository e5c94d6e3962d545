"""The calibrated estimate: an operator's time from its FLOPs and bytes on a GPU's datasheet, by a small model per
operator class whose few constants are fitted across the GPUs with measured operators.

For an operator class (GEMM, elementwise, prefill attention, decode attention, sampler) the time on a GPU is

    t = floor + (t_c^p + t_m^p)^(1/p),    t_c = FLOPs / (e_c x peak),    t_m = bytes / (e_m x bandwidth)

* ``floor``: the launch and latency cost every kernel pays however small (a few microseconds); it is what makes
  small operators look inefficient, so efficiency needs no size bins.
* ``e_c``, ``e_m``: the shares of the datasheet peak and bandwidth the class reaches once large, one for the
  compute-bound and one for the memory-bound side; where an operator falls between them is its arithmetic
  intensity relative to the GPU's ridge point (peak / bandwidth), not its absolute size.
* ``p``: how sharply the two sides meet at the ridge (large p: the plain roofline max; small p: both count).
* for the classes in :data:`CACHED_CLASSES`, the share of the bytes that fits in L2 is read at an on-chip rate
  proportional to SMs x clock (:mod:`llmsim.profiles.providers.gpu_features`) instead of DRAM bandwidth:
  ``t_m = bytes (1 - h) / (e_m bw) + bytes h / (r SMs clock)``, ``h = min(1, s L2 / bytes)^q``. For elementwise
  operators the fitted rate is above DRAM bandwidth (why GDDR GPUs with a large L2, L40S and RTX PRO 6000, outrun
  their datasheet on small operators); for prefill attention it is below (short prefills are limited by each
  SM's throughput, which scales with SMs x clock, not by DRAM).
* for GEMMs and decode attention (:data:`L2_AFTER`) the same L2 term, for the bytes an operator benchmark reads
  again at every timed call (a one-layer model's weights; the one KV cache of :data:`KV_REREAD_SOURCES`' decode
  benchmark): bytes within reach of the L2 are read at the on-chip rate, but never slower than from DRAM (an L2
  hit is not slower than a DRAM read). Its three constants are fitted **after** the shared ones, with those fixed:
  fitted jointly they pulled the shared ``e_m`` and floor and made the HBM GPUs' and the RTX 4090's GEMMs and
  decode attention worse; fitted after, an operator beyond the reach, or on a GPU whose on-chip rate is below its
  DRAM bandwidth, is timed as without the term. Decode attention gets it only for records of a benchmark that
  re-reads one KV cache (:data:`KV_REREAD`): LLMServingSim's tables do not show it, and a serving step reads a
  layer's KV once, after every other layer's KV and weights went through the L2.
* on a GeForce card (:data:`llmsim.profiles.providers.gpu_features.GEFORCE`) the clock-bound figures, tensor peak
  and SMs x clock, are multiplied by one GeForce factor. Its bf16 rate with fp32 accumulate (what vLLM's GEMMs
  and attention run at, the hardware table's peak) is half its FP16 rate, so tensor work draws about half the
  power per clock and GPU Boost holds a clock above the rated boost one, where the workstation and datacenter
  parts, listed at the full rate, are power-limited at or below theirs. The factor is that clock ratio times
  the throttling the shared ``e_c`` carries from the power-limited GPUs. It is fitted after the shared
  constants, on the GeForce training GPUs' GEMMs alone (the one class with more than one GeForce GPU), so the
  estimate of every other GPU is the same with or without it.

The constants are fitted by robust least squares on log time, each calibration GPU weighted equally however many
records it has. Nothing here is fitted to a serving run: the records are operator tables
(:mod:`llmsim.profiles.providers.operators`), and the error of the estimate on a GPU it did not see is measured
by leaving that GPU out (``llmsim.profiles.estimate_check.operator_error_rows``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from llmsim.perf.hardware import GpuSpec, get_gpu
from llmsim.perf.models import ModelSpec

from .fits import fit_nnls
from .gpu_features import gpu_features
from .operators import BF16, decode_cost, gemm_cost, log2_bin, prefill_cost, records_frame

CACHED_CLASSES = ("attention_prefill", "elementwise")  # the L2 term fitted with the shared constants
L2_AFTER = ("gemm", "attention_decode")  # the L2 term fitted after the shared constants, never below DRAM's rate
# Decode attention: the L2 term only for records of a benchmark that re-reads one KV cache call after call
# (AIConfigurator's generation attention); LLMServingSim's tables and an estimated profile's serving steps get none.
KV_REREAD = ("attention_decode",)
KV_REREAD_SOURCES = ("aiconfigurator:",)
# Starting point of the fit: floor 5 us, efficiencies 0.73 / 0.73, p = 4; L2 rate 64 bytes per SM-cycle, reach 1,
# exponent 1 (each in the log / logit form the fit works in).
START = (np.log(5e-6), 1.0, 1.0, np.log(3.0), np.log(64.0), 0.0, 0.0)
# Starting points of the L2 term fitted after the shared constants: 4 bytes per SM-cycle within 0.1 x L2, 16 within
# 1 x L2 (its rate floored at DRAM's leaves flat regions where one start alone can stall; from 64 every fit did;
# the other two pairings ended at most 1 % lower in cost, with the same table of errors).
L2_STARTS = [(np.log(4.0), np.log(0.1), 0.0), (np.log(16.0), 0.0, 0.0)]
# the L2 term's valley is flat: with scipy's default tolerances where a start stops in it depended on the platform's
# last bits (a held-out row of the report moved by 2 % between two installs); tight ones run each start to its minimum
L2_TOLERANCES = {"ftol": 1e-12, "xtol": 1e-12, "gtol": 1e-12, "max_nfev": 2000}


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


@dataclass(frozen=True)
class Hardware:
    """Per-record GPU figures the model reads: datasheet peak and bandwidth, L2 bytes, SMs x clock, GeForce or not."""

    peak: np.ndarray
    bw: np.ndarray
    l2: np.ndarray
    sm_clock: np.ndarray
    geforce: np.ndarray

    @classmethod
    def of(cls, gpus) -> Hardware:
        names = list(gpus)
        figures = {g: (get_gpu(g).peak_flops, get_gpu(g).bandwidth, gpu_features(g).l2_bytes, gpu_features(g).sm_clock,
                       gpu_features(g).geforce) for g in set(names)}
        return cls(*(np.array(x, float) for x in zip(*[figures[g] for g in names])))

    def without_l2(self, keep: np.ndarray) -> Hardware:
        """The same figures with no L2 where ``keep`` is false."""
        return Hardware(self.peak, self.bw, np.where(keep, self.l2, 0.0), self.sm_clock, self.geforce)

    def boosted(self, factor: float) -> Hardware:
        """The GeForce GPUs' clock-bound figures (tensor peak, SMs x clock) times ``factor``."""
        f = np.where(self.geforce > 0, factor, 1.0)
        return Hardware(self.peak * f, self.bw, self.l2, self.sm_clock * f, self.geforce)


def class_seconds(theta: np.ndarray, flops: np.ndarray, byts: np.ndarray, hw: Hardware, cached: bool,
                  over_dram: bool = False) -> np.ndarray:
    """The model's seconds for operators of one class (``theta``: the fitted constants, in fit form;
    ``over_dram``: the L2 rate is never below the DRAM rate)."""
    floor, e_c, e_m = np.exp(theta[0]), 1 / (1 + np.exp(-theta[1])), 1 / (1 + np.exp(-theta[2]))
    p = 1 + np.exp(theta[3])  # 1: the two sides add up; large: the roofline's max
    t_c = flops / (e_c * hw.peak)
    if cached:
        hit = np.minimum(1.0, np.exp(theta[5]) * hw.l2 / np.maximum(byts, 1.0)) ** np.exp(theta[6])
        l2_rate = np.exp(theta[4]) * 1e9 * hw.sm_clock
        if over_dram:
            l2_rate = np.maximum(l2_rate, e_m * hw.bw)
        t_m = byts * (1 - hit) / (e_m * hw.bw) + byts * hit / l2_rate
    else:
        t_m = byts / (e_m * hw.bw)
    hi = np.maximum(t_c, t_m)
    lo = np.minimum(t_c, t_m) / np.where(hi > 0, hi, 1.0)
    return floor + hi * (1 + lo**p) ** (1 / p)  # (t_c^p + t_m^p)^(1/p), without overflow


@dataclass(frozen=True)
class ClassFit:
    """The fitted constants of one operator class (see the module docstring)."""

    theta: tuple[float, ...]
    cached: bool
    geforce_factor: float = 1.0  # the GeForce factor (module docstring); 1: no GeForce GPU calibrated it
    over_dram: bool = False  # the L2 rate never below DRAM's (L2_AFTER)

    def seconds(self, flops: np.ndarray, byts: np.ndarray, hw: Hardware) -> np.ndarray:
        return class_seconds(np.asarray(self.theta), flops, byts, hw.boosted(self.geforce_factor), self.cached,
                             self.over_dram)

    def describe(self) -> dict[str, float]:
        """The constants in plain units (floor in microseconds)."""
        t = self.theta
        out = {"floor_us": float(np.exp(t[0]) * 1e6), "eff_compute": float(1 / (1 + np.exp(-t[1]))),
               "eff_memory": float(1 / (1 + np.exp(-t[2]))), "sharpness": float(1 + np.exp(t[3]))}
        out["geforce_factor"] = self.geforce_factor
        if self.cached:
            out.update({"l2_bytes_per_sm_cycle": float(np.exp(t[4])), "l2_reach": float(np.exp(t[5])),
                        "l2_exponent": float(np.exp(t[6]))})
        return out


def hardware_of(frame: pd.DataFrame) -> Hardware:
    """The records' GPU figures; for a class of KV_REREAD no L2 unless the benchmark re-read one KV cache."""
    hw = Hardware.of(frame.gpu)
    if len(frame) and frame.cls.iloc[0] in KV_REREAD:
        hw = hw.without_l2(frame.source.str.startswith(KV_REREAD_SOURCES).to_numpy())
    return hw


def fit_class(frame: pd.DataFrame, cached: bool) -> ClassFit:
    """Robust least squares on log seconds of one class's records, every GPU weighted equally."""
    hw = hardware_of(frame)
    flops, byts = frame.flops.to_numpy(float), frame.bytes.to_numpy(float)
    y = np.log(frame.seconds.to_numpy(float))
    w = np.sqrt(1.0 / frame.groupby("gpu").gpu.transform("size").to_numpy(float))
    start = np.array(START if cached else START[:4])
    res = least_squares(lambda th: (np.log(class_seconds(th, flops, byts, hw, cached)) - y) * w, start,
                        loss="soft_l1", f_scale=0.1)
    return ClassFit(tuple(float(x) for x in res.x), cached)


def soft_l1_cost(resid: np.ndarray, f_scale: float) -> float:
    """``scipy.optimize.least_squares``'s cost of residuals ``resid`` under its ``soft_l1`` loss."""
    z = (resid / f_scale) ** 2
    return float(0.5 * f_scale**2 * np.sum(2 * (np.sqrt(1 + z) - 1)))


def fit_l2_after(fit: ClassFit, frame: pd.DataFrame) -> ClassFit:
    """``fit`` with the L2 term of :data:`L2_AFTER`: its three constants by robust least squares on log
    seconds of ``frame`` (every GPU weighted equally), the shared constants of ``fit`` fixed; the best of
    :data:`L2_STARTS`. ``fit`` unchanged when the term does not lower the cost (no calibration GPU's on-chip rate
    beats its DRAM: the term would be unidentified, and carried to a held-out GPU it would be a guess)."""
    hw, shared = hardware_of(frame), np.asarray(fit.theta[:4])
    flops, byts = frame.flops.to_numpy(float), frame.bytes.to_numpy(float)
    y = np.log(frame.seconds.to_numpy(float))
    w = np.sqrt(1.0 / frame.groupby("gpu").gpu.transform("size").to_numpy(float))

    def resid(x: np.ndarray) -> np.ndarray:
        return (np.log(class_seconds(np.concatenate([shared, x]), flops, byts, hw, True, True)) - y) * w

    best = min((least_squares(resid, np.array(s), loss="soft_l1", f_scale=0.1, **L2_TOLERANCES) for s in L2_STARTS),
               key=lambda r: r.cost)
    without = (np.log(class_seconds(shared, flops, byts, hw, False)) - y) * w
    if best.cost >= soft_l1_cost(without, 0.1) * (1 - 1e-3):
        return fit
    return replace(fit, theta=tuple(float(x) for x in (*shared, *best.x)), cached=True, over_dram=True)


def fit_geforce_factor(fit: ClassFit, frame: pd.DataFrame) -> float:
    """The GeForce factor: with ``fit``'s shared constants fixed, robust least squares on log seconds of the
    GeForce GPUs' records of ``frame`` alone, each GPU weighted equally (1 when there is none)."""
    sub = frame[[gpu_features(g).geforce for g in frame.gpu]]
    if sub.empty:
        return 1.0
    hw, theta = Hardware.of(sub.gpu), np.asarray(fit.theta)
    flops, byts = sub.flops.to_numpy(float), sub.bytes.to_numpy(float)
    y = np.log(sub.seconds.to_numpy(float))
    w = np.sqrt(1.0 / sub.groupby("gpu").gpu.transform("size").to_numpy(float))

    def resid(x: np.ndarray) -> np.ndarray:
        boosted = hw.boosted(float(np.exp(x[0])))
        return (np.log(class_seconds(theta, flops, byts, boosted, fit.cached, fit.over_dram)) - y) * w

    return float(np.exp(least_squares(resid, np.zeros(1), loss="soft_l1", f_scale=0.1).x[0]))


@dataclass
class EfficiencyModel:
    """One fitted :class:`ClassFit` per operator class, and the GPUs it was calibrated on."""

    fits: dict[str, ClassFit]
    gpus: tuple[str, ...]

    def fit_of(self, cls: str) -> ClassFit:
        if cls not in self.fits:
            raise LookupError(f"no calibration record of operator class {cls!r}")
        return self.fits[cls]

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        """Predicted seconds of every record of ``frame`` (columns gpu, cls, flops, bytes)."""
        out = np.zeros(len(frame))
        for cls in frame.cls.unique():
            sel = (frame.cls == cls).to_numpy()
            sub = frame[sel]
            out[sel] = self.fit_of(cls).seconds(sub.flops.to_numpy(float), sub.bytes.to_numpy(float),
                                                hardware_of(sub))
        return out

    def op_seconds(self, gpu: GpuSpec, cls: str, flops: float, byts: float) -> float:
        """Estimated seconds of one operator on ``gpu`` (any GPU of the hardware table)."""
        hw = Hardware.of([gpu.name])
        if cls in KV_REREAD:  # a serving step reads each layer's KV once, after the other layers' passed
            hw = hw.without_l2(np.zeros(1, bool))
        return float(self.fit_of(cls).seconds(np.array([flops], float), np.array([byts], float), hw)[0])


def calibrate(records, leave_out: tuple[str, ...] = ()) -> EfficiencyModel:
    """The model fitted to every record whose GPU is not in ``leave_out``."""
    frame = records_frame([r for r in records if r.gpu not in leave_out])
    fits = {cls: fit_class(sub, cls in CACHED_CLASSES) for cls, sub in frame.groupby("cls")}
    fits.update({cls: fit_l2_after(fits[cls], frame[frame.cls == cls]) for cls in L2_AFTER if cls in fits})
    if "gemm" in fits:
        factor = fit_geforce_factor(fits["gemm"], frame[frame.cls == "gemm"])
        fits = {cls: replace(f, geforce_factor=factor) for cls, f in fits.items()}
    return EfficiencyModel(fits, tuple(sorted(frame.gpu.unique())))


# ----------------------------------------------------------------------- an estimated profile from the model
PREFILL_GRID = [(c, p) for c in (16, 64, 256, 1024, 2048) for p in (0, 1024, 4096)]
DECODE_GRID = [(n, kv) for n in (1, 4, 16, 64, 256) for kv in (256, 1024, 4096, 16384)]


def unpriced(m: ModelSpec) -> list[str]:
    """What of ``m`` the estimate's operators (grouped-query attention, one dense MLP shape or routed experts,
    16-bit weights) leave out; a profile without it would look complete and cost too little."""
    missing = ["multi-head latent attention"] if m.kv_lora_rank else []
    if m.is_moe and m.shared_expert_params:
        missing.append("shared experts")
    if m.is_moe and m.n_dense_layers:
        missing.append(f"the dense MLP of {m.n_dense_layers} non-MoE layers")
    if m.dtype_bytes != BF16:
        missing.append(f"{m.dtype_bytes}-byte weights")
    return missing


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
