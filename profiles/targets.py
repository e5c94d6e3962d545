"""What the build makes and from where: the (model, GPU, TP) targets, the raw-data directory and profiles/data.

Every target that fits its GPU becomes ``profiles/data/<gpu>/<model>[-tpN].yaml``; the list is the one place to
add a model or a GPU (``python -m llmsim.profiles build`` then checks or writes it).
"""

from __future__ import annotations

from pathlib import Path

from llmsim.errors import ProfileError
from llmsim.perf.hardware import get_gpu
from llmsim.perf.kv_budget import kv_capacity_from_bytes
from llmsim.perf.models import get_model
from llmsim.profiles.providers.memory import reserved_bytes

PACKAGE = Path(__file__).resolve().parent  # profiles/ (shipped as llmsim.profiles)
REPO = PACKAGE.parent
DEFAULT_RAW = REPO.parent / "shared" / "profiles_raw"
DEFAULT_OUT = PACKAGE / "data"

MODELS_7B = [
    "llama-2-7b",
    "vicuna-7b",
    "llama-3-8b",
    "llama-3.1-8b",
    "mistral-7b",
    "qwen2.5-7b",
    "qwen2.5-3b",
    "opt-6.7b",
    "opt-1.3b",
    "opt-125m",
]
EXPERTS = ["alpaca-native", "chatglm-6b", "mpt-7b-instruct", "koala-7b", "baize-7b", "mpt-7b"]
BIG = ["llama-2-13b", "vicuna-13b", "opt-13b", "qwen2.5-14b"]
TARGETS: dict[str, list[str]] = {
    "a100-80gb": MODELS_7B + BIG + ["llama-2-70b", "llama-3-70b", "qwen2.5-72b"],
    "h100": MODELS_7B + BIG + ["llama-2-70b", "llama-3-70b", "qwen2.5-72b"],
    "rtx4090": MODELS_7B + EXPERTS,
    "rtx-pro-6000": ["llama-3.1-8b", "qwen3-32b", "qwen3-30b-a3b"],
    "v100-32gb": [
        "llama-2-7b",
        "vicuna-7b",
        "llama-2-13b",
        "opt-6.7b",
        "opt-1.3b",
        "opt-125m",
        "mistral-7b",
        "llama-3.1-8b",
    ],
    "v100-16gb": ["llama-2-7b", "vicuna-7b", "opt-6.7b", "opt-1.3b", "opt-125m"],
    "titan-rtx": ["opt-125m", "opt-1.3b", "opt-6.7b", "llama-2-7b"],
    "l40s": ["llama-2-7b", "llama-3.1-8b", "mistral-7b", "qwen2.5-7b", "opt-6.7b", "llama-2-13b", "opt-13b"],
    "a40": ["llama-2-7b", "llama-2-13b", "opt-6.7b", "llama-3.1-8b"],
    "a100-40gb": ["llama-2-7b", "llama-3.1-8b", "mistral-7b", "opt-6.7b", "llama-2-13b", "opt-13b"],
    "a30": ["llama-2-7b", "llama-3.1-8b", "opt-6.7b", "opt-1.3b"],
    "a10": ["llama-2-7b", "llama-3.1-8b", "opt-6.7b", "opt-1.3b", "mistral-7b"],  # mistral-7b: QLM's A10 model
}
TP_TARGETS = [
    ("llama-2-70b", "a100-80gb", 2),
    ("llama-2-70b", "a100-80gb", 4),
    ("llama-2-70b", "a100-80gb", 8),
    ("llama-2-70b", "h100", 2),
    ("llama-2-70b", "h100", 4),
    ("llama-2-70b", "h100", 8),
    ("llama-3-70b", "a100-80gb", 4),
    ("llama-2-13b", "a100-80gb", 2),
    ("vicuna-13b", "a10", 2),  # QLM's Vicuna-13B on A10s: 26 GB of weights need two 24 GB GPUs
    ("qwen3-32b", "rtx-pro-6000", 2),  # LLMServingSim's TP 2 tables
    ("qwen3-30b-a3b", "rtx-pro-6000", 2),
]


def all_targets() -> list[tuple[str, str, int]]:
    """Every (model, GPU, TP) the build tries, TP1 first (those that do not fit their GPU are skipped later)."""
    out = [(mdl, gpu, 1) for gpu, mdls in TARGETS.items() for mdl in mdls]
    return out + TP_TARGETS


def fits_gpu(model: str, gpu: str, tp: int, util: float = 0.9) -> bool:
    """Whether the weights of ``model`` leave room for a KV cache on ``tp`` x ``gpu`` at ``util`` (vLLM's rule)."""
    m, g = get_model(model), get_gpu(gpu)
    try:
        kv_capacity_from_bytes(m.name, g, tp, util, m.weight_bytes, m.kv_bytes_per_token, reserved_bytes(m, tp),
                               m.kv_shards(tp))
    except ValueError:
        return False
    return True


BUILD_SOURCES = ("vidur", "aiconfigurator", "llmservingsim", "apex_plus")  # what build and estimate read
HELD_OUT_SOURCES = ("llm-inference-bench", "splitwise-sim", "distserve")  # what validate reads as well


def check_raw_dir(raw: Path, sources: tuple[str, ...] = BUILD_SOURCES) -> None:
    """A one-line ProfileError when the raw measurements, or a source folder of them, are absent (not shipped)."""
    if not Path(raw).is_dir():
        raise ProfileError(
            f"--raw {raw}: not a directory; the public measurements the profiles are derived from live in "
            "../shared/profiles_raw (the dev workspace), pass --raw DIR to use another copy"
        )
    missing = [s for s in sources if not (Path(raw) / s).is_dir()]
    if missing:
        raise ProfileError(
            f"--raw {raw}: source folder(s) {', '.join(missing)} missing; expected a copy of "
            "../shared/profiles_raw (the dev workspace)"
        )
