"""LLMServingSim's older (v0) per-layer tables as operator records for the calibrated estimate.

``profiler/v0/perf_models/<HW>/meta-llama/Llama-3.1-8B/tp1/layers.csv`` (llmservingsim PROVENANCE.md section 2):
``layer_name, input, kv_cache, tp_size, latency(ns)``, one row per HF Transformers module of one Llama-3.1-8B
decoder layer (plus embedding, final norm and lm_head), timed with PyTorch profiler hooks, on H100, RTX 3090 and
RTX A6000. Checked against the data before use:

* ``latency(ns)`` is nanoseconds: the H100 table's q_proj at 1 token is 16.1 us, AIConfigurator's H100 GEMM of the
  same shape 16.0 us. Over its eight GEMMs at 1-256 tokens the v0 / AIConfigurator ratio has a median of 1.00-1.05
  per size (0.82-1.20 in all), at 512-2,048 tokens 1.04-1.17 (up to 1.23): the same kernels, with no per-op
  overhead in the times (the profiler times CUDA kernels, not the Python around them).
* ``input`` is the number of tokens, every integer 1-2,048 (GEMM times grow with it as the M of a GEMM; lm_head
  runs on every token, as an HF forward does); ``kv_cache`` is 0 in every row, so ``attn`` is a prefill of
  ``input`` tokens over no cached context and nothing of decode attention can be read.
* GEMMs are single cuBLAS calls (torch ``F.linear``), the kernels vLLM runs: they need no floor of their own.
  The other modules are HF's, not vLLM's kernels: RMSNorm and ``apply_rotary_pos_emb`` are chains of PyTorch
  kernels in fp32 (5-12 times what the estimate's vLLM elementwise class gives at every size: a separate floor of
  ~15-20 us and a lower rate), ``act_fn`` is a bare SiLU without the multiply (1.5-2.5 times), and ``attn`` is HF's
  attention path (0.7-1.6 times AIConfigurator's vLLM attention on the H100, 16-2,048 tokens, growing with the
  size). They get classes of their own (:data:`HF_ELEMENTWISE`, :data:`HF_ATTENTION`) so that they
  never mix with the vLLM classes an estimate is priced with.

The A6000 directory also has a Vidur-format attention.csv; it is not read: its decode rows break the DRAM bound
(32 sequences x 4,096 KV tokens in 80 us is 6.7 TB/s on a 768 GB/s GPU) while one sequence reads its KV at
85 GB/s, and its prefill rows with cached context scale at that same 85 GB/s.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from llmsim.errors import ProfileError
from llmsim.perf.models import ModelSpec, get_model

from .operators import BF16, OpRecord, gemm_cost, prefill_cost

# llmsim GPU name -> the v0 table's hardware directory (PROVENANCE.md section 2 of llmservingsim)
V0_GPUS = {"h100": "H100", "rtx3090": "RTX3090", "rtx-a6000": "A6000"}
V0_MODEL = "llama-3.1-8b"
COLUMNS = ("layer_name", "input", "kv_cache", "tp_size", "latency(ns)")
V0_TOKENS = tuple(2**i for i in range(12))  # 1 .. 2,048: a record set the size of the other sources' per GPU
HF_ELEMENTWISE = "hf_elementwise"
HF_ATTENTION = "hf_attention_prefill"


def v0_dir(root: Path, gpu: str) -> Path:
    """The v0 table directory of ``gpu`` (an llmsim GPU name of :data:`V0_GPUS`)."""
    return root / "llmservingsim/profiler/v0/perf_models" / V0_GPUS[gpu] / "meta-llama/Llama-3.1-8B/tp1"


def op_shapes(m: ModelSpec) -> dict[str, tuple[str, int, int]]:
    """layer_name -> (class, n, k) of a GEMM, or (class, bytes per token, 0) of an elementwise module."""
    h, q, kv, inter = m.hidden, m.q_dim, m.kv_dim, m.intermediate
    gemms = {"q_proj": (q, h), "k_proj": (kv, h), "v_proj": (kv, h), "o_proj": (h, q), "gate_proj": (inter, h),
             "up_proj": (inter, h), "down_proj": (h, inter), "lm_head": (m.vocab, h)}
    out = {name: ("gemm", n, k) for name, (n, k) in gemms.items()}
    per_token = {"input_layernorm": 2 * h, "post_layernorm": 2 * h, "final_layernorm": 2 * h, "rope": 2 * (q + kv),
                 "act_fn": 2 * inter, "embedding": h}  # elements read and written (act_fn: SiLU of the gate)
    out.update({name: (HF_ELEMENTWISE, n * BF16, 0) for name, n in per_token.items()})
    out["attn"] = (HF_ATTENTION, 0, 0)
    return out


def read_layers(path: Path, shapes: dict) -> pd.DataFrame:
    """layers.csv, checked row by row; a bad row stops the read with one line naming file, line and reason."""
    try:
        df = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise ProfileError(f"{path}: unreadable v0 layers table ({' '.join(str(e).split())})") from None
    if tuple(df.columns) != COLUMNS:
        raise ProfileError(f"{path}: columns {list(df.columns)}, expected {list(COLUMNS)}")
    num = df[list(COLUMNS[1:])].apply(pd.to_numeric, errors="coerce")
    counts = num[["input", "kv_cache", "tp_size"]]
    bad = (~df.layer_name.isin(list(shapes)) | num.isna().any(axis=1) | (counts % 1 != 0).any(axis=1)
           | (num["input"] < 1) | (num["kv_cache"] < 0) | (num["tp_size"] != 1) | (num["latency(ns)"] <= 0))
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ProfileError(f"{path}:{i + 2}: bad v0 row {df.iloc[i].tolist()} (need a known layer_name, whole "
                           "input >= 1 and kv_cache >= 0, tp_size 1, latency(ns) > 0)")
    return pd.DataFrame({"layer": df.layer_name, "tokens": num["input"].astype(int),
                         "kv": num["kv_cache"].astype(int), "seconds": num["latency(ns)"] * 1e-9})


def v0_records(root: Path, gpu: str) -> list[OpRecord]:
    """The operator records of one GPU's v0 table at :data:`V0_TOKENS`, labelled ``<op>@<tokens>``: GEMMs and
    elementwise modules (whose time does not depend on ``kv_cache``) by tokens, attention by tokens and cached
    context, from 16 tokens as AIConfigurator's; none when the table is absent."""
    path = v0_dir(root, gpu) / "layers.csv"
    if not path.is_file():
        return []
    m = get_model(V0_MODEL)
    shapes = op_shapes(m)
    df = read_layers(path, shapes)
    df = df[df.tokens.isin(V0_TOKENS)]
    src, out = f"llmservingsim-v0:{gpu}:{V0_MODEL}", []
    att = df.layer == "attn"
    for (op, t), s in df[~att].groupby(["layer", "tokens"]).seconds.median().items():
        cls, a, b = shapes[op]
        f, byts = gemm_cost(t, a, b) if cls == "gemm" else (0.0, float(a * t))
        out.append(OpRecord(gpu, cls, f, byts, float(s), src, f"{op}@{t}"))
    for (t, kv), s in df[att & (df.tokens >= 16)].groupby(["tokens", "kv"]).seconds.median().items():
        f, byts = prefill_cost(m, m.n_heads, m.n_kv_heads, t, kv)
        out.append(OpRecord(gpu, HF_ATTENTION, f, byts, float(s), src, f"attn@{t}+{kv}"))
    return out
