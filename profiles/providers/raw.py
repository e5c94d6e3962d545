# ruff: noqa: B019 - lru_cache on Raw methods: one short-lived Raw per build run
"""Access to the raw public measurements in ../shared/profiles_raw (sources, units and overlaps:
shared/specs/profiles_data.md): CSV readers, the measured-GEMM interpolator and the source citations."""

from __future__ import annotations

import gzip
import io
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from llmsim.errors import ProfileError, load_yaml_file

SOURCES = {
    "vidur": (
        "microsoft/vidur",
        "7d47513363ec447a741ac5e47241580b47724fbf",
        "MIT",
        "sarathi-serve (vLLM fork) operator profiler, 2024; CUDA, 16-bit",
    ),
    "vidur-history": (
        "microsoft/vidur",
        "e2d00e9afba96cec9f0e7ea560bbfc4a539fae6a",
        "MIT",
        "sarathi-serve/vLLM CPU-overhead profiler on an A40 host, 2024",
    ),
    "aiconfigurator": (
        "ai-dynamo/aiconfigurator",
        "095f58a51c4ca8e61b66ec108d86f223f8d559ce",
        "Apache-2.0",
        "AIConfigurator silicon collector inside vLLM 0.14.0 (A100/H100/L40S) or 0.24.0, bf16",
    ),
    "llmservingsim": (
        "casys-kaist/LLMServingSim",
        "5daddb21a545658d5150b535712d0494584b5278",
        "MIT",
        "vLLM 0.19.0 profiler (enforce_eager), bf16, CUDA 12.8/13.0",
    ),
    "apex_plus": (
        "microsoft/apex_plus",
        "8769096536a34e8b3010fd444021f13858663a93",
        "MIT",
        "torch.matmul fp16, 100 runs after 5 warm-ups, CUDA 12.1, V100-PCIE-16GB",
    ),
    "llm-analysis": (
        "cli99/llm-analysis",
        "d841e40aec8c84b9e76ba9cfbce67418adb172bd",
        "Apache-2.0",
        "datasheet numbers",
    ),
}

AIC_SYSTEMS = {
    "a100-80gb": ("a100_sxm", "0.14.0"),
    "h100": ("h100_sxm", "0.14.0"),
    "l40s": ("l40s", "0.14.0"),
    "rtx-pro-6000": ("rtx_pro_6000_server", "0.24.0"),
    "h200": ("h200_sxm", "0.24.0"),
}
VIDUR_GPUS = {"a100-80gb": "a100", "h100": "h100", "a40": "a40"}
VIDUR_MODELS = {  # per-layer shape twin in vidur's tables
    "llama-2-7b": "meta-llama/Llama-2-7b-hf",
    "vicuna-7b": "meta-llama/Llama-2-7b-hf",
    "llama-7b": "meta-llama/Llama-2-7b-hf",
    "koala-7b": "meta-llama/Llama-2-7b-hf",
    "baize-7b": "meta-llama/Llama-2-7b-hf",
    "alpaca-native": "meta-llama/Llama-2-7b-hf",
    "llama-2-13b": "internlm/internlm-20b",
    "vicuna-13b": "internlm/internlm-20b",
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B",
    "llama-3.1-8b": "meta-llama/Meta-Llama-3-8B",
    "mistral-7b": "meta-llama/Meta-Llama-3-8B",
    "llama-2-70b": "meta-llama/Llama-2-70b-hf",
    "llama-3-70b": "meta-llama/Meta-Llama-3-70B",
}
LSS_GPUS = {"rtx4090": "RTX4090", "rtx-pro-6000": "RTXPRO6000"}
LSS_MODEL = "llama-3.1-8b"
LSS_TWINS = ("llama-3.1-8b", "llama-3-8b", "mistral-7b")  # identical layer shapes
LSS_MODEL_DIRS = {  # llmsim model -> <org>/<model> directory of LLMServingSim's profiler tables
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B",
    "qwen3-32b": "Qwen/Qwen3-32B",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B-Instruct-2507",
}
# (GPU, model) -> the TP degrees whose tables the profiles use (PROVENANCE.md of llmservingsim, sections 1 and 4)
LSS_RUNS: dict[tuple[str, str], tuple[int, ...]] = {
    ("rtx4090", "llama-3.1-8b"): (1,),
    ("rtx-pro-6000", "llama-3.1-8b"): (1,),
    ("rtx-pro-6000", "qwen3-32b"): (1, 2),
    ("rtx-pro-6000", "qwen3-30b-a3b"): (1, 2),
}
VIDUR_NET = {"a100-80gb": "a100_dgx", "h100": "h100_dgx"}


def read_csv(path: Path) -> pd.DataFrame:
    if path.suffix == ".gz":
        with gzip.open(path, "rt") as f:
            txt = f.read()
        return pd.read_csv(io.StringIO(txt), comment="#")
    return pd.read_csv(path)


class Gemm:
    """Time (s) of one GEMM with ``tokens`` rows, ``n`` outputs and ``k`` inputs, from a measured grid.

    Interpolation is linear in tokens and bilinear in (n, k) between grid points (exact for a time that is
    proportional to n*k, which both the memory- and the compute-bound regimes are)."""

    def __init__(self, df: pd.DataFrame, label: str) -> None:
        # df columns: tokens, n, k, seconds
        self.label = label
        df = df.groupby(["n", "k", "tokens"], as_index=False)["seconds"].median()
        self.ns = sorted(df.n.unique())
        self.ks = sorted(df.k.unique())
        self.t: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        for (n, k), g in df.groupby(["n", "k"]):
            g = g.sort_values("tokens")
            self.t[(int(n), int(k))] = (g.tokens.to_numpy(float), g.seconds.to_numpy(float))

    def _at(self, n: int, k: int, tokens: float) -> float:
        xs, ys = self.t[(n, k)]
        if tokens >= xs[-1]:  # extrapolate proportionally (compute-bound)
            return float(ys[-1] * tokens / xs[-1])
        return float(np.interp(tokens, xs, ys))

    @staticmethod
    def _axis(grid: list, v: int) -> list[tuple[int, float]]:
        """Grid points and weights for v; outside the grid, scale the edge value proportionally."""
        if v <= grid[0]:
            return [(grid[0], v / grid[0])]
        if v >= grid[-1]:
            return [(grid[-1], v / grid[-1])]
        i = int(np.searchsorted(grid, v))
        if grid[i] == v:
            return [(v, 1.0)]
        f = (v - grid[i - 1]) / (grid[i] - grid[i - 1])
        return [(grid[i - 1], 1 - f), (grid[i], f)]

    def __call__(self, tokens: float, n: float, k: float) -> float:
        tot = 0.0
        for nn, wn in self._axis(self.ns, int(round(n))):
            for kk, wk in self._axis(self.ks, int(round(k))):
                if (nn, kk) not in self.t:
                    raise KeyError(f"{self.label}: no GEMM rows for n={nn} k={kk}")
                tot += wn * wk * self._at(nn, kk, tokens)
        return tot


class Raw:
    def __init__(self, root: Path) -> None:
        self.root = root
        if not root.is_dir():
            raise SystemExit(f"raw data directory {root} does not exist (pass --raw)")

    # --- AIConfigurator
    def aic_dir(self, system: str) -> Path:
        return self.root / "aiconfigurator/csv_gz/aic-core/src/aiconfigurator_core/systems/data" / system

    @cache
    def aic_gemm(self, gpu: str) -> Gemm:
        system, ver = AIC_SYSTEMS[gpu]
        df = read_csv(self.aic_dir(system) / f"gemm/vllm/{ver}/gemm_perf.csv.gz")
        if "gemm_dtype" in df.columns:
            df = df[df.gemm_dtype == "bfloat16"]
        df = df.rename(columns={"m": "tokens"})
        df["seconds"] = df.latency * 1e-3
        return Gemm(df[["tokens", "n", "k", "seconds"]], f"aiconfigurator {system} {ver}")

    @cache
    def aic_attn(self, gpu: str, kind: str) -> pd.DataFrame:
        system, ver = AIC_SYSTEMS[gpu]
        df = read_csv(self.aic_dir(system) / f"attention/vllm/{ver}/{kind}_attention_perf.csv.gz")
        for col, val in (("head_dim", 128), ("window_size", 0), ("kv_cache_dtype", "bfloat16")):
            if col in df.columns:
                df = df[df[col] == val]
        if "attn_dtype" in df.columns:
            df = df[df.attn_dtype == "bfloat16"]
        return df

    # --- APEX+ V100
    @cache
    def apex_gemm(self) -> Gemm:
        df = read_csv(self.root / "apex_plus/profile/comp/V100-PCIE-16GB/gemm_0.csv")
        df = df.rename(columns={"m": "n_out", "n": "tokens"})
        df = pd.DataFrame({"tokens": df.tokens, "n": df.n_out, "k": df.k, "seconds": df["time(us)"] * 1e-6})
        return Gemm(df, "apex_plus V100-PCIE-16GB")

    # --- vidur
    @cache
    def vidur_mlp(self, gpu: str, model_dir: str) -> pd.DataFrame | None:
        p = self.root / f"vidur/data/profiling/compute/{VIDUR_GPUS[gpu]}/{model_dir}/mlp.csv"
        return pd.read_csv(p) if p.is_file() else None

    @cache
    def vidur_allreduce(self, gpu: str) -> pd.DataFrame:
        return pd.read_csv(self.root / f"vidur/data/profiling/network/{VIDUR_NET[gpu]}/all_reduce.csv")

    @cache
    def vidur_cpu(self) -> pd.DataFrame:
        return pd.read_csv(self.root / "vidur/history-e2d00e9/data/profiling/a40/cpu_overheads.csv")


def lss_dir(root: Path, gpu_dir: str, model_dir: str = LSS_MODEL_DIRS[LSS_MODEL], tp: int = 1) -> Path:
    """An LLMServingSim profiler table directory: ``perf/<HW>/<org>/<model>/bf16/tp<N>``."""
    return root / f"llmservingsim/profiler/perf/{gpu_dir}/{model_dir}/bf16/tp{tp}"


def lss_tables(d: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """dense.csv, attention.csv and per_sequence.csv of an LLMServingSim-layout directory."""
    return pd.read_csv(d / "dense.csv"), pd.read_csv(d / "attention.csv"), pd.read_csv(d / "per_sequence.csv")


def lss_table_model(model: str) -> str:
    """The measured model whose tables serve ``model`` (a shape twin of Llama-3.1-8B uses Llama-3.1-8B's)."""
    return LSS_MODEL if model in LSS_TWINS else model


def lss_measured(gpu: str, model: str, tp: int) -> bool:
    """True when LLMServingSim's profiler measured this GPU at this TP for this model's layer shapes."""
    return tp in LSS_RUNS.get((gpu, lss_table_model(model)), ())


def lss_run_dir(root: Path, gpu: str, model: str, tp: int) -> Path:
    """The table directory of a measured (GPU, model, TP) (see :func:`lss_measured`)."""
    return lss_dir(root, LSS_GPUS[gpu], LSS_MODEL_DIRS[lss_table_model(model)], tp)


def lss_meta(root: Path, gpu: str, model: str) -> dict:
    """meta.yaml of a measured (GPU, model): engine version, eager mode, grids (one file for every TP)."""
    f = lss_run_dir(root, gpu, model, 1).parent / "meta.yaml"
    return load_yaml_file(f, ProfileError) if f.is_file() else {}


def lss_source(gpu: str, model: str = LSS_MODEL, tp: int = 1) -> str:
    name = LSS_MODEL_DIRS[lss_table_model(model)].split("/")[-1]
    return f"LLMServingSim {LSS_GPUS[gpu]} {name} bf16 tp{tp} (vLLM 0.19, eager)"
