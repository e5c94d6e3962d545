"""Small helpers for tests and notebooks: a hand-checkable step-time model and a list workload."""

from __future__ import annotations

from dataclasses import dataclass, field

from llmsim.perf.hardware import GpuSpec, get_gpu
from llmsim.perf.models import ModelSpec, get_model
from llmsim.request import Request


@dataclass
class LinearProfile:
    """step = base + per_token * tokens + per_ctx * decode context + per_seq * sequences.

    Lets tests compute latencies by hand; the KV capacity is fixed (``kv_tokens``).
    """

    base: float = 0.01
    per_token: float = 0.001
    per_ctx: float = 0.0
    per_seq: float = 0.0
    kv_tokens: int = 1_000_000
    model: ModelSpec = field(default_factory=lambda: get_model("llama-2-7b"))
    gpu: GpuSpec = field(default_factory=lambda: get_gpu("a100-80gb"))
    tp: int = 1
    name: str = "linear-test-profile"
    estimated: bool = False

    def step_time(
        self, n_tokens: int, n_seqs: int, prefill_c2: int, prefill_cp: int, n_decode: int, decode_ctx: int
    ) -> float:
        return self.base + self.per_token * n_tokens + self.per_ctx * decode_ctx + self.per_seq * n_seqs

    def kv_capacity_tokens(self, gpu_memory_utilization: float) -> int:
        return self.kv_tokens

    def describe(self) -> dict:
        return {"name": self.name, "kind": "linear-test", "model": self.model.name, "gpu": self.gpu.name}


def requests(rows: list[tuple[float, int, int]]) -> list[Request]:
    """Requests from (arrival, prompt_tokens, output_tokens) rows, ids in order."""
    return [Request(i, float(a), int(p), int(o)) for i, (a, p, o) in enumerate(rows)]
