"""Measured operator times of every GPU with vLLM operator tables, as one kind of record: (GPU, operator class,
FLOPs, bytes, seconds), the input of the calibrated estimate (:mod:`llmsim.profiles.providers.calibrated`).

Operator classes: ``gemm`` (FLOPs ``2 m n k``, bytes ``(n k + m (n + k)) x 2``), ``elementwise`` (norms,
activation, rotary, embedding: bytes read and written), ``attention_prefill`` (causal FLOPs of a chunk over
itself and its cached context), ``attention_decode`` (KV bytes read) and ``sampler`` (vLLM's GPU sampler after
lm_head: bytes of the fp32 logits it reads, sequences x vocabulary x 4). Sources (vLLM kernels in bf16 unless said):

* LLMServingSim's profiler tables (vLLM 0.19, eager): RTX 4090 (Llama-3.1-8B), RTX PRO 6000 (Llama-3.1-8B,
  Qwen3-32B, Qwen3-30B-A3B), TP 1: dense.csv, attention.csv (pure prefill and pure decode rows),
  per_sequence.csv (lm_head, a GEMM; the sampler).
* AIConfigurator's collector (vLLM 0.14 / 0.24): GEMMs and context / generation attention of A100-80GB, H100,
  L40S and RTX PRO 6000.
* LLMServingSim's older v0 tables (HF Transformers, PyTorch profiler): :mod:`.hf_layers` reads them into the same
  records; the calibration takes their GEMMs (RTX 3090, RTX A6000; ``estimate_check.calibration_records``).

Each record names its source and the GPU it was measured on, so a leave-one-GPU-out
check can drop everything a GPU measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from llmsim.perf.models import ModelSpec, get_model

from .raw import AIC_SYSTEMS, LSS_RUNS, Raw, lss_run_dir, lss_tables

CLASSES = ("gemm", "elementwise", "attention_prefill", "attention_decode", "sampler")
GEMM_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)  # AIConfigurator rows kept
LSS_TOKENS = (1, 4, 16, 64, 256, 1024, 2048)
BF16 = 2
FP32 = 4


@dataclass(frozen=True)
class OpRecord:
    """One measured operator: what it does (FLOPs, bytes) and how long it took on ``gpu``."""

    gpu: str
    cls: str
    flops: float
    bytes: float
    seconds: float
    source: str
    label: str = ""  # operator name and size, for the iteration composites


def gemm_cost(m: float, n: float, k: float) -> tuple[float, float]:
    return 2.0 * m * n * k, (n * k + m * (n + k)) * BF16


def elementwise_bytes(op: str, model: ModelSpec, tokens: float) -> float | None:
    """Bytes an LLMServingSim elementwise op reads and writes for ``tokens`` tokens (None: not elementwise)."""
    h, q, kv = model.hidden, model.q_dim, model.kv_dim
    per_token = {
        "layernorm": 2 * h,
        "final_layernorm": 2 * h,
        "qk_norm": 2 * (q + kv),
        "rotary_emb": 2 * (q + kv),
        "act_fn": 3 * model.intermediate,
        "embedding": h,
    }.get(op)
    return None if per_token is None else per_token * tokens * BF16


def gemm_shape(op: str, model: ModelSpec) -> tuple[int, int] | None:
    """(n, k) of an LLMServingSim dense GEMM op at TP 1 (None: not a GEMM)."""
    h, q, kv, inter = model.hidden, model.q_dim, model.kv_dim, model.intermediate
    return {"qkv_proj": (q + 2 * kv, h), "o_proj": (h, q), "gate_up_proj": (2 * inter, h),
            "down_proj": (h, inter)}.get(op)


def prefill_cost(model: ModelSpec, heads: float, kv_heads: float, chunk: float, cached: float) -> tuple[float, float]:
    """One layer's causal prefill attention: QK^T and PV over chunk^2/2 + chunk x cached pairs."""
    d = model.head_dim
    flops = 4.0 * heads * d * (0.5 * chunk * chunk + chunk * cached)
    byts = (2 * chunk * heads * d + 2 * (chunk + cached) * kv_heads * d) * BF16
    return flops, byts


def sampler_bytes(model: ModelSpec, seqs: float) -> float:
    """Bytes of the logits vLLM's sampler reads for ``seqs`` sequences: fp32, the whole vocabulary (gathered from
    every TP shard before sampling)."""
    return seqs * model.vocab * FP32


def decode_cost(model: ModelSpec, heads: float, kv_heads: float, n: float, ctx: float) -> tuple[float, float]:
    """One layer's decode attention of ``n`` sequences of ``ctx`` KV tokens each."""
    d = model.head_dim
    return 4.0 * heads * d * n * ctx, (2 * n * ctx * kv_heads * d + 2 * n * heads * d) * BF16


# ------------------------------------------------------------------------------------- LLMServingSim tables
def lss_dense_records(gpu: str, model: ModelSpec, dense: pd.DataFrame, src: str) -> list[OpRecord]:
    """Every GEMM and elementwise op of dense.csv at LSS_TOKENS."""
    med = dense.groupby(["layer", "tokens"]).time_us.median()
    out = []
    for (op, t), us in med.items():
        if t not in LSS_TOKENS:
            continue
        nk = gemm_shape(op, model)
        if nk is not None:
            f, b = gemm_cost(t, *nk)
            out.append(OpRecord(gpu, "gemm", f, b, us * 1e-6, src, f"{op}@{t}"))
            continue
        b = elementwise_bytes(op, model, t)
        if b is not None:
            out.append(OpRecord(gpu, "elementwise", 0.0, b, us * 1e-6, src, f"{op}@{t}"))
    return out


def lss_attention_records(gpu: str, model: ModelSpec, att: pd.DataFrame, src: str) -> list[OpRecord]:
    """Pure prefill rows (no decodes) and pure decode rows (no prefill chunk) of attention.csv."""
    out = []
    h, kvh = model.n_heads, model.n_kv_heads
    pf = att[(att.n_decode == 0) & (att.prefill_chunk > 0)].groupby(["prefill_chunk", "kv_prefill"]).time_us.median()
    for (c, p), us in pf.items():
        f, b = prefill_cost(model, h, kvh, c, p)
        out.append(OpRecord(gpu, "attention_prefill", f, b, us * 1e-6, src, f"prefill@{c}+{p}"))
    dec = att[(att.prefill_chunk == 0) & (att.n_decode > 0) & (att.kv_decode > 0)]
    for (n, kv), us in dec.groupby(["n_decode", "kv_decode"]).time_us.median().items():
        f, b = decode_cost(model, h, kvh, n, kv)
        out.append(OpRecord(gpu, "attention_decode", f, b, us * 1e-6, src, f"decode@{n}x{kv}"))
    return out


def lss_lm_head_records(gpu: str, model: ModelSpec, per_seq: pd.DataFrame, src: str) -> list[OpRecord]:
    """per_sequence.csv: the lm_head GEMM and the sampler by number of sequences."""
    rows = per_seq[per_seq.layer == "lm_head"].groupby("sequences").time_us.median()
    out = []
    for s, us in rows.items():
        f, b = gemm_cost(s, model.vocab, model.hidden)
        out.append(OpRecord(gpu, "gemm", f, b, us * 1e-6, src, f"lm_head@{s}"))
    for s, us in per_seq[per_seq.layer == "sampler"].groupby("sequences").time_us.median().items():
        out.append(OpRecord(gpu, "sampler", 0.0, sampler_bytes(model, s), us * 1e-6, src, f"sampler@{s}"))
    return out


def lss_records(raw: Raw) -> list[OpRecord]:
    """Records of every TP 1 LLMServingSim table (RTX 4090, RTX PRO 6000)."""
    out: list[OpRecord] = []
    for (gpu, name), tps in LSS_RUNS.items():
        d = lss_run_dir(raw.root, gpu, name, 1)
        if 1 not in tps or not d.is_dir():
            continue
        model = get_model(name)
        dense, att, per_seq = lss_tables(d)
        src = f"llmservingsim:{gpu}:{name}"
        out += lss_dense_records(gpu, model, dense, src)
        out += lss_attention_records(gpu, model, att, src)
        out += lss_lm_head_records(gpu, model, per_seq, src)
    return out


# ------------------------------------------------------------------------------------------ AIConfigurator
def aic_gemm_records(raw: Raw, gpu: str) -> list[OpRecord]:
    out = []
    for (n, k), (xs, ys) in raw.aic_gemm(gpu).t.items():
        for m, s in zip(xs, ys):
            if m in GEMM_TOKENS:
                f, b = gemm_cost(m, n, k)
                out.append(OpRecord(gpu, "gemm", f, b, float(s), f"aiconfigurator:{gpu}", f"gemm {m}x{n}x{k}"))
    return out


def aic_attention_records(raw: Raw, gpu: str) -> list[OpRecord]:
    """Context (prefill, batch x isl, no cache) and generation (decode, batch x kv) attention, head_dim 128."""
    shape = get_model("llama-3.1-8b")  # head_dim 128: only head_dim enters the costs
    out = []
    ctx = raw.aic_attn(gpu, "context")
    for r in ctx[ctx.isl >= 16].itertuples():
        f, b = prefill_cost(shape, r.num_heads, r.num_key_value_heads, r.isl, 0)
        out.append(OpRecord(gpu, "attention_prefill", f * r.batch_size, b * r.batch_size, r.latency * 1e-3,
                            f"aiconfigurator:{gpu}"))
    gen = raw.aic_attn(gpu, "generation")
    for r in gen[gen.step >= 15].itertuples():
        f, b = decode_cost(shape, r.num_heads, r.num_key_value_heads, r.batch_size, r.step + 1)
        out.append(OpRecord(gpu, "attention_decode", f, b, r.latency * 1e-3, f"aiconfigurator:{gpu}"))
    return out


@cache
def all_records(raw_root: str) -> tuple[OpRecord, ...]:
    """Every record of every source (computed once per raw directory and process)."""
    raw = Raw(Path(raw_root))
    out = lss_records(raw)
    for gpu in AIC_SYSTEMS:
        if gpu == "h200":
            continue  # no H200 in the other sources' GPUs; kept out so each held-out GPU is one of the table's
        out += aic_gemm_records(raw, gpu) + aic_attention_records(raw, gpu)
    return tuple(r for r in out if r.seconds > 0)


def records_frame(records: tuple[OpRecord, ...] | list[OpRecord]) -> pd.DataFrame:
    """The records as a table (one row each)."""
    if not records:
        return pd.DataFrame(columns=list(OpRecord.__annotations__))
    return pd.DataFrame([r.__dict__ for r in records])


def measured_gpus(records) -> list[str]:
    return sorted({r.gpu for r in records})


def log2_bin(x: np.ndarray | float) -> np.ndarray:
    return np.floor(np.log2(np.maximum(np.asarray(x, float), 1e-12)))
