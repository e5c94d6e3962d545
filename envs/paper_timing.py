"""Step-time models fitted by the papers themselves, for reproducing their regimes.

The QoS-aware edge router paper ("QoS-Aware LLM Routing for Edge Computing with Multiple Experts",
Eqs. 13-14, the released code's per-expert constants): a prefill costs k1 s per prompt
token and a decode iteration k2 s per context token held by the running batch. The paper gives no
intercept; with none, a lone request decodes faster than an RTX 4090 can
read a 7B model's weights (300 tokens of context: 7.5 ms/token, against ~13.4 ms to stream 13.5 GB at
1 TB/s). :func:`measured_intercept` supplies the part of an iteration that does not scale with tokens:
the measured profile's step for one sequence at zero context (weights read + per-iteration overhead,
~14-15 ms on the 4090). Under that model the 30 ms/token limit binds once a batch holds ~600 context
tokens, i.e. at the paper's load (docs/testbeds.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llmsim.perf.hardware import GpuSpec, get_gpu
from llmsim.perf.models import ModelSpec, get_model
from llmsim.perf.profile import RooflineProfile, kv_capacity_tokens, load_profile

# the QoS-aware edge router's released code (k1 prefill s/token, k2 decode s/context token)
QOS_EDGE_K = {
    "alpaca-native": (7.2e-5, 2.5e-5),
    "chatglm-6b": (6.8e-5, 2.5e-5),
    "mpt-7b-instruct": (7.2e-5, 2.5e-5),
    "koala-7b": (7.2e-5, 2.5e-5),
    "baize-7b": (7.2e-5, 2.5e-5),
    "mpt-7b": (7.2e-5, 2.5e-5),
    # N > 6 (llmsim.envs.tasks.QOS_MORE_EXPERTS): the code has no constants for these; its ~7B values, a choice.
    "vicuna-7b": (7.2e-5, 2.5e-5),
    "oasst-stablelm-7b": (7.2e-5, 2.5e-5),
    "stablelm-tuned-alpha-7b": (7.2e-5, 2.5e-5),
    "dolly-v2-7b": (7.2e-5, 2.5e-5),
}


@dataclass
class PaperLinearProfile:
    """step = base + k1 * prefill tokens + k2 * decode context tokens; KV capacity from the real GPU."""

    model: ModelSpec
    gpu: GpuSpec
    k1: float
    k2: float
    base: float = 0.0
    tp: int = 1
    name: str = ""
    estimated: bool = True
    reserved_bytes: float = 1.5e9

    def __post_init__(self) -> None:
        self.name = self.name or f"{self.model.name}@{self.gpu.name}-paper-linear"

    def step_time(
        self, n_tokens: int, n_seqs: int, prefill_c2: int, prefill_cp: int, n_decode: int, decode_ctx: int
    ) -> float:
        return self.base + self.k1 * (n_tokens - n_decode) + self.k2 * decode_ctx

    def decode_step_fn(self, n: int, spread: int = 0) -> Callable[[int], float]:
        """``ctx -> step_time(n, n, 0, 0, n, ctx)``, bit-identical (the same association), with the constant part
        folded once: the decode fast path plans a run's iterations with it. This model has no skewed-decode term,
        so ``spread`` adds nothing."""
        fixed = self.base + self.k1 * 0
        k2 = self.k2
        return lambda ctx: fixed + k2 * ctx

    def kv_capacity_tokens(self, gpu_memory_utilization: float) -> int:
        return kv_capacity_tokens(self.model, self.gpu, self.tp, gpu_memory_utilization, self.reserved_bytes)

    def describe(self) -> dict:
        return {"name": self.name, "kind": "paper-linear", "k1": self.k1, "k2": self.k2, "base": self.base,
                "model": self.model.name, "gpu": self.gpu.name, "estimated": True,
                "source": "QoS-aware edge router paper, Eqs. 13-14 (constants of its released code)"}


def measured_intercept(model: str, gpu: str) -> float:
    """Step time of one sequence at zero context in the measured (model, gpu) profile: the fixed cost of an
    iteration (reading the weights, launch and scheduling overhead) that Eqs. 13-14 leave out. Without a measured
    profile, the roofline's, scaled as the measured experts' fixed costs compare with their rooflines."""
    def fixed_cost(m: str, kind: str = "auto") -> tuple[float, bool]:
        prof = load_profile(m, gpu, kind=kind)
        return float(prof.step_time(1, 1, 0, 0, 1, 0)), not isinstance(prof, RooflineProfile)

    fixed, measured = fixed_cost(model)
    if measured:
        return fixed
    # No measurement (three of the N > 6 experts): the roofline's fixed cost times the median measured / roofline
    # ratio of the experts measured on this GPU (0.74 on the RTX 4090), so no expert is slower for want of data.
    ratios = sorted(c / fixed_cost(m, "roofline")[0] for m in QOS_EDGE_K for c, ok in [fixed_cost(m)] if ok)
    return fixed * (ratios[len(ratios) // 2] if ratios else 1.0)


def qos_edge_paper_profile(expert: str, gpu: str = "rtx4090", base: float | None = 0.0) -> PaperLinearProfile:
    """The paper's linear step model for ``expert``; ``base`` = the per-iteration intercept in seconds
    (``None``: :func:`measured_intercept`; 0: the paper's equations exactly)."""
    k1, k2 = QOS_EDGE_K[expert]
    b = measured_intercept(expert, gpu) if base is None else float(base)
    return PaperLinearProfile(get_model(expert), get_gpu(gpu), k1, k2, b)
