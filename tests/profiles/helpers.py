"""What the profiles room's tests share: its paths, the skip for absent raw data, and a tiny measurement directory."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO, SHARED

RAW = SHARED / "profiles_raw"
DATA = REPO / "profiles" / "data"
REPORT = REPO / "profiles" / "VALIDATION.md"
needs_raw = pytest.mark.skipif(
    not RAW.is_dir(), reason=f"raw measurements {RAW} absent (../shared/profiles_raw is only in the dev/CI workspace)"
)
DENSE_OPS = (
    "embedding",
    "layernorm",
    "qkv_proj",
    "rotary_emb",
    "o_proj",
    "gate_up_proj",
    "act_fn",
    "down_proj",
    "final_layernorm",
)


def tiny_raw(root: Path) -> None:
    """A tiny fake measurement directory in the layout ``python -m llmsim.profiles measure`` writes."""
    root.mkdir(parents=True)
    with open(root / "dense.csv", "w") as f:
        f.write("layer,tokens,time_us\n")
        for t in (1, 16, 256, 2048):
            for op in DENSE_OPS:
                f.write(f"{op},{t},{5 + t * 0.1}\n")
    with open(root / "attention.csv", "w") as f:
        f.write("prefill_chunk,kv_prefill,n_decode,kv_decode,time_us\n")
        for c in (16, 256, 2048):
            for p in (0, 1024):
                f.write(f"{c},{p},0,0,{5 + c * c * 1e-5 + c * p * 2e-5}\n")
        for b in (1, 8, 64):
            for kv in (16, 1024):
                f.write(f"0,0,{b},{kv},{5 + b * kv * 1e-3}\n")
    with open(root / "per_sequence.csv", "w") as f:
        f.write("layer,sequences,time_us\n")
        for s in (1, 16, 256):
            f.write(f"lm_head,{s},{100 + s}\nsampler,{s},{10 + s}\n")
    (root / "meta.yaml").write_text(
        yaml.safe_dump(
            {"model": "llama-2-7b", "gpu": "a10", "tp": 1, "device_name": "fake", "software": {"torch": "x"}}
        )
    )
