"""Measure a model's operator shapes on this machine's GPU (or CPU) with PyTorch; no weights are downloaded.

    python -m llmsim.profiles measure --model llama-2-7b --device cuda [--gpu-name a100-80gb] [--out DIR]
    python -m llmsim.profiles build --from-raw DIR --write     # -> profiles/data/<gpu>/<model>.yaml

Needs PyTorch, which comes with the rl extra: ``pip install 'llmsim[rl]'`` (a CUDA build of torch to measure a GPU).

``--model`` is a registry name or a Hugging Face ``config.json`` path. One decoder layer is timed with
random fp16/bf16 tensors: fused QKV, O, (gate+)up and down GEMMs, RMS/LayerNorm, RoPE-like elementwise,
activation, embedding gather, final norm (``dense.csv``); attention through
``torch.nn.functional.scaled_dot_product_attention`` (FlashAttention's ``flash_attn_func`` when importable)
for prefill chunks with cached context and for decode batches with KV length (``attention.csv``); lm_head
GEMM and a greedy/top-k sampler vs number of sequences (``per_sequence.csv``). Output uses the
LLMServingSim v1 layout (times in microseconds) plus ``meta.yaml`` with hardware and software metadata.

Timing: on CUDA, CUDA events around ``iters`` launches after warm-up, with ``torch.cuda.synchronize()``;
on CPU, ``time.perf_counter``. Median of ``repeats``.

Full grid cost on a GPU: 152 dense token counts x 9 ops + 8x12 prefill + 10x12 decode attention points +
40 lm_head points ~ 1,600 measurements; at ~25 ms each (warm-up + 10 timed launches + 3 repeats) plus
allocation, about 2-4 minutes for a 7B model on an A100/H100 (longest: 16k-context attention), and under
10 minutes on smaller GPUs. ``--quick`` uses a coarse grid (~150 points, seconds).
"""

# ruff: noqa: B023 - the timed closures are called inside the loop iteration that defines them
from __future__ import annotations

import argparse
import csv
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from tqdm import tqdm

from llmsim.errors import LLMSimError, ProfileError
from llmsim.perf.models import ModelSpec, from_hf_config, get_model

DENSE_TOKENS = sorted(
    set(list(range(1, 17)) + list(range(20, 65, 4)) + list(range(80, 257, 16)) + list(range(288, 2049, 32)))
)
QUICK_TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
CHUNKS = [16, 32, 64, 128, 256, 512, 1024, 2048]
CTXS = [0, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
DECODE_B = [1, 2, 4, 8, 16, 32, 64, 128, 256]
SEQS = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256]


def _timer(torch, device: str, iters: int, repeats: int):
    def run(fn) -> float:
        for _ in range(2):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
            vals = []
            for _ in range(repeats):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(iters):
                    fn()
                end.record()
                torch.cuda.synchronize()
                vals.append(start.elapsed_time(end) * 1e3 / iters)  # ms -> us
            return statistics.median(vals)
        vals = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            vals.append((time.perf_counter() - t0) * 1e6 / iters)
        return statistics.median(vals)

    return run


def require_torch(device: str):
    """Import torch and check the device; a ProfileError (one line) when it cannot be used."""
    try:
        import torch  # optional: the rl extra
    except ImportError as e:
        raise ProfileError(f"PyTorch is needed to measure ({e}): pip install 'llmsim[rl]'") from None
    if device == "cuda" and not torch.cuda.is_available():
        raise ProfileError(
            f"--device cuda: CUDA is not available to PyTorch {torch.__version__} (no GPU or driver, or a CPU-only "
            "build); run on a GPU host, or use --device cpu for a test run"
        )
    return torch


@dataclass
class _Setup:
    """torch handles, timer and the random weights of one decoder layer."""

    torch: Any
    F: Any
    dev: Any
    dtype: Any
    device: str
    timer: Callable[[Callable[[], Any]], float]
    flash_attn_func: Any
    w: dict[str, Any]
    emb: Any
    norm_w: Any


def _setup(m: ModelSpec, device: str, iters: int, repeats: int) -> _Setup:
    torch = require_torch(device)
    F = torch.nn.functional
    try:
        from flash_attn import flash_attn_func  # type: ignore[import-not-found]  # optional: FlashAttention kernels
    except Exception:  # noqa: BLE001 - optional
        flash_attn_func = None
    dev = torch.device(device)
    dtype = (
        torch.bfloat16
        if device == "cuda" and torch.cuda.is_bf16_supported()
        else (torch.float16 if device == "cuda" else torch.float32)
    )
    timer = _timer(torch, device, iters, repeats)
    h, qd, kvd = m.hidden, m.q_dim, m.kv_dim
    up = (2 if m.gated_mlp else 1) * m.intermediate
    w = {
        "qkv_proj": torch.randn(qd + 2 * kvd, h, device=dev, dtype=dtype) * 0.02,
        "o_proj": torch.randn(h, qd, device=dev, dtype=dtype) * 0.02,
        "gate_up_proj": torch.randn(up, h, device=dev, dtype=dtype) * 0.02,
        "down_proj": torch.randn(h, m.intermediate, device=dev, dtype=dtype) * 0.02,
    }
    emb = torch.randn(m.vocab, h, device=dev, dtype=dtype) * 0.02
    norm_w = torch.ones(h, device=dev, dtype=dtype)
    return _Setup(torch, F, dev, dtype, device, timer, flash_attn_func, w, emb, norm_w)


def _profile_dense(s: _Setup, m: ModelSpec, tokens: list[int], path: Path) -> None:
    """dense.csv: the per-layer ops, embedding and final norm versus tokens."""
    torch, F, dev, dtype, w = s.torch, s.F, s.dev, s.dtype, s.w
    h, qd, kvd = m.hidden, m.q_dim, m.kv_dim
    up = (2 if m.gated_mlp else 1) * m.intermediate

    def norm(x):
        if m.gated_mlp:
            return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * s.norm_w
        return F.layer_norm(x, (h,), s.norm_w)

    act = (lambda x: F.silu(x[..., : m.intermediate]) * x[..., m.intermediate :]) if m.gated_mlp else F.relu
    with open(path, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["layer", "tokens", "time_us"])
        for t in tokens:
            x = torch.randn(t, h, device=dev, dtype=dtype)
            ids = torch.randint(0, m.vocab, (t,), device=dev)
            q = torch.randn(t, qd + kvd, device=dev, dtype=dtype)
            a = torch.randn(t, up, device=dev, dtype=dtype)
            cos = torch.randn(t, qd + kvd, device=dev, dtype=dtype)
            xo = torch.randn(t, qd, device=dev, dtype=dtype)
            ops = {
                "embedding": lambda: F.embedding(ids, s.emb),
                "layernorm": lambda: norm(x),
                "qkv_proj": lambda: x @ w["qkv_proj"].T,
                "rotary_emb": lambda: q * cos + q.roll(1, -1) * cos,
                "o_proj": lambda: xo @ w["o_proj"].T,
                "gate_up_proj": lambda: x @ w["gate_up_proj"].T,
                "act_fn": lambda: act(a),
                "down_proj": lambda: a[:, : m.intermediate] @ w["down_proj"].T,
                "final_layernorm": lambda: norm(x),
            }
            for name, fn in ops.items():
                wr.writerow([name, t, f"{s.timer(fn):.3f}"])


def _attention_fn(s: _Setup, m: ModelSpec):
    """attn(q, k, v, causal): FlashAttention when importable on CUDA, else SDPA (GQA expanded, prefix mask)."""
    torch, F = s.torch, s.F
    heads, kvh = m.n_heads, m.n_kv_heads

    def attn(q, k, v, causal: bool):
        if s.flash_attn_func is not None and s.device == "cuda":
            return s.flash_attn_func(q, k, v, causal=causal)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        if kvh != heads:
            k = k.repeat_interleave(heads // kvh, 1)
            v = v.repeat_interleave(heads // kvh, 1)
        if causal and k.shape[2] != q.shape[2]:
            # chunk with cached prefix: query i sees prefix + i; use an explicit mask
            L, S = q.shape[2], k.shape[2]
            mask = torch.ones(L, S, device=q.device, dtype=torch.bool).tril(S - L)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return attn


def _profile_attention(s: _Setup, m: ModelSpec, chunks: list[int], ctxs: list[int], bs: list[int], path: Path) -> None:
    """attention.csv: prefill chunks with cached context, then decode batches with KV length."""
    torch, dev, dtype = s.torch, s.dev, s.dtype
    heads, kvh, hd = m.n_heads, m.n_kv_heads, m.head_dim
    attn = _attention_fn(s, m)
    with open(path, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us"])
        for c in chunks:
            for p in ctxs:
                q = torch.randn(1, c, heads, hd, device=dev, dtype=dtype)
                k = torch.randn(1, c + p, kvh, hd, device=dev, dtype=dtype)
                v = torch.randn(1, c + p, kvh, hd, device=dev, dtype=dtype)
                wr.writerow([c, p, 0, 0, f"{s.timer(lambda: attn(q, k, v, True)):.3f}"])
        for b in bs:
            for kv in ctxs:
                if kv == 0 or b * kv > 2**21:
                    continue
                q = torch.randn(b, 1, heads, hd, device=dev, dtype=dtype)
                k = torch.randn(b, kv, kvh, hd, device=dev, dtype=dtype)
                v = torch.randn(b, kv, kvh, hd, device=dev, dtype=dtype)
                wr.writerow([0, 0, b, kv, f"{s.timer(lambda: attn(q, k, v, False)):.3f}"])


def _profile_lm_head(s: _Setup, m: ModelSpec, seqs: list[int], path: Path) -> None:
    """per_sequence.csv: lm_head GEMM and a softmax + top-k sampler versus sequences."""
    torch, dev, dtype = s.torch, s.dev, s.dtype
    with open(path, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["layer", "sequences", "time_us"])
        for n in seqs:
            x = torch.randn(n, m.hidden, device=dev, dtype=dtype)
            logits = torch.randn(n, m.vocab, device=dev, dtype=torch.float32)
            wr.writerow(["lm_head", n, f"{s.timer(lambda: x @ s.emb.T):.3f}"])
            wr.writerow(["sampler", n, f"{s.timer(lambda: torch.softmax(logits, -1).topk(50, -1)):.3f}"])


def _meta(s: _Setup, m: ModelSpec, gpu_name: str | None, register_name: str | None, grid: dict, timing: dict) -> dict:
    """meta.yaml: what was measured, where, with which software."""
    torch, device = s.torch, s.device
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        dev_name, mem = props.name, int(props.total_memory)
    else:
        dev_name, mem = platform.processor() or platform.machine(), 0
    return {
        "format": "llmsim-raw/1",
        "model": register_name or m.name,
        "gpu": gpu_name or ("cpu" if device == "cpu" else dev_name.lower().replace("nvidia ", "").replace(" ", "-")),
        "tp": 1,
        "device": device,
        "device_name": dev_name,
        "hardware": {
            "device_name": dev_name,
            "memory_bytes": mem,
            "host": platform.node(),
            "cpu": platform.processor(),
            "platform": platform.platform(),
        },
        "software": {
            "torch": str(torch.__version__),
            "cuda": str(torch.version.cuda),
            "python": platform.python_version(),
            "flash_attn": s.flash_attn_func is not None,
            "dtype": str(s.dtype).replace("torch.", ""),
        },
        "shape": {
            "n_layers": m.n_layers,
            "hidden": m.hidden,
            "n_heads": m.n_heads,
            "n_kv_heads": m.n_kv_heads,
            "intermediate": m.intermediate,
            "vocab": m.vocab,
            "gated_mlp": m.gated_mlp,
            "head_dim": m.head_dim,
            "tied_embeddings": m.tied_embeddings,
            "max_position": m.max_position,
        },
        "grid": grid,
        "timing": {
            "method": "cuda events + synchronize" if device == "cuda" else "perf_counter",
            **timing,
            "statistic": "median",
            "units": "microseconds",
        },
        "note": "one decoder layer with random weights; tp=1",
    }


@contextmanager
def _progress(s: _Setup, total: int, desc: str, enabled: bool) -> Iterator[None]:
    """A bar over the timed shapes (each shape is one timer call), so a long CPU or GPU run shows its pace."""
    timer = s.timer
    with tqdm(total=total, desc=desc, unit="shape", disable=not enabled, mininterval=1.0) as bar:

        def timed(fn: Callable[[], Any]) -> float:
            t = timer(fn)
            bar.update()
            return t

        s.timer = timed
        try:
            yield
        finally:
            s.timer = timer


def profile_model(
    m: ModelSpec,
    device: str,
    out: Path,
    gpu_name: str | None = None,
    quick: bool = False,
    max_tokens: int = 2048,
    max_ctx: int = 16384,
    max_batch: int = 256,
    iters: int = 10,
    repeats: int = 3,
    register_name: str | None = None,
    progress: bool = True,
) -> Path:
    """Time one decoder layer of ``m`` on ``device``; write dense.csv, attention.csv, per_sequence.csv and
    meta.yaml to ``out``. Raises ProfileError when torch or the device is not usable."""
    s = _setup(m, device, iters, repeats)
    tokens = [t for t in (QUICK_TOKENS if quick else DENSE_TOKENS) if t <= max_tokens]
    out.mkdir(parents=True, exist_ok=True)
    chunks = [c for c in (CHUNKS[::2] if quick else CHUNKS) if c <= max_tokens]
    ctxs = [c for c in (CTXS[::3] if quick else CTXS) if c <= max_ctx]
    bs = [b for b in (DECODE_B[::2] if quick else DECODE_B) if b <= max_batch]
    seqs = [n for n in (SEQS[::3] if quick else SEQS) if n <= max_batch]
    shapes = 9 * len(tokens) + len(chunks) * len(ctxs) + sum(kv and b * kv <= 2**21 for b in bs for kv in ctxs)
    with _progress(s, shapes + 2 * len(seqs), f"profiling {m.name} on {device}", progress):
        _profile_dense(s, m, tokens, out / "dense.csv")
        _profile_attention(s, m, chunks, ctxs, bs, out / "attention.csv")
        _profile_lm_head(s, m, seqs, out / "per_sequence.csv")
    grid = {"tokens": tokens, "chunks": chunks, "contexts": ctxs, "decode_batches": bs}
    meta = _meta(s, m, gpu_name, register_name, grid, {"iters": iters, "repeats": repeats})
    (out / "meta.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    return out


def resolve_model(spec: str) -> ModelSpec:
    if spec.endswith(".json") or Path(spec).is_file():
        return from_hf_config(spec, register=True)
    return get_model(spec)


def positive_int(text: str) -> int:
    """A grid size or count flag: 0 or a negative would time nothing (or silently fall back to the default)."""
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return v


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``measure`` verb's flags."""
    ap.add_argument("--model", required=True, help="registry name or HF config.json")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--gpu-name", help="llmsim GPU name to file the profile under (default: from the device)")
    ap.add_argument("--out", type=Path, help="output dir (default: profiles/raw_local/<gpu>/<model>)")
    ap.add_argument("--quick", action="store_true", help="coarse grid")
    ap.add_argument("--max-tokens", type=positive_int, default=2048)
    ap.add_argument("--max-ctx", type=positive_int, default=None,
                    help="default 16384 (2048 for --device cpu --quick)")
    ap.add_argument("--max-batch", type=positive_int, default=None, help="default 256 (32 for --device cpu --quick)")
    ap.add_argument("--iters", type=positive_int, default=None,
                    help="timed calls per repeat (default 10; 2 for --device cpu --quick)")
    ap.add_argument("--repeats", type=positive_int, default=None,
                    help="repeats, median taken (default 3; 1 for cpu --quick)")


def run(a: argparse.Namespace) -> int:
    """Measure into ``--out`` and say how to build the profile from it; exit 2 (one line) without torch / CUDA."""
    cpu_quick = a.device == "cpu" and a.quick  # a test run of the pipeline: minutes, not hours, on a laptop
    a.iters = a.iters or (2 if cpu_quick else 10)
    a.repeats = a.repeats or (1 if cpu_quick else 3)
    # decode shapes hold batch x context x kv_dim floats three times over: on a host, keep them to ~1 GB
    a.max_ctx = a.max_ctx or (2048 if cpu_quick else 16384)
    a.max_batch = a.max_batch or (32 if cpu_quick else 256)
    try:
        m = resolve_model(a.model)
        require_torch(a.device)
        out = a.out or Path("profiles/raw_local") / (a.gpu_name or a.device) / m.name
        t0 = time.perf_counter()
        profile_model(m, a.device, out, a.gpu_name, a.quick, a.max_tokens, a.max_ctx, a.max_batch, a.iters, a.repeats)
    except LLMSimError as e:
        print(f"{a.prog}: error: {e}", file=sys.stderr)
        return 2
    print(
        f"wrote {out} in {time.perf_counter() - t0:.1f} s; next: python -m llmsim.profiles build --from-raw {out} "
        "--write (or --out DIR)"
    )
    return 0
