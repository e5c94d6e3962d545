"""Engine configuration (one serving instance), mirroring vLLM's engine arguments."""

from __future__ import annotations

from dataclasses import dataclass

from llmsim.errors import ConfigError

POLICIES_WITH_WATERMARK = {"vllm_v0"}


@dataclass
class EngineConfig:
    """vLLM-style engine settings.

    ``max_num_batched_tokens`` defaults to max(max_model_len, 2048) for ``vllm_v0`` (vLLM V0 needs a
    whole prompt to fit one iteration) and to 2048 for ``chunked`` (vLLM V1's chunked-prefill budget).
    ``num_gpu_blocks`` overrides the capacity derived from the profile (tests, what-if studies).
    ``step_time_scale`` multiplies every iteration's step time: a knob to emulate a slower (or faster)
    serving stack than the one the profile was measured on, e.g. to calibrate to a paper's testbed.
    """

    policy: str = "vllm_v0"
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    watermark: float = 0.01
    preemption: str = "recompute"
    swap_space_gb: float = 4.0
    num_gpu_blocks: int | None = None
    fast_path: bool = True
    step_time_scale: float = 1.0

    def resolved(self, model_max_len: int) -> EngineConfig:
        """A copy with defaults filled in and every field checked; errors name the field."""
        from llmsim.scheduling import BATCH_POLICIES

        if self.policy not in BATCH_POLICIES:
            raise ConfigError(
                f"engine.policy: unknown batch policy {self.policy!r}; expected one of {sorted(BATCH_POLICIES)}"
            )
        if self.preemption not in ("recompute", "swap"):
            raise ConfigError(f"engine.preemption must be 'recompute' or 'swap', got {self.preemption!r}")
        for key in ("max_num_seqs", "block_size"):
            if int(getattr(self, key)) < 1:
                raise ConfigError(f"engine.{key} must be >= 1, got {getattr(self, key)}")
        if not 0 <= self.watermark < 1:
            raise ConfigError(f"engine.watermark must be in [0, 1), got {self.watermark}")
        if self.swap_space_gb < 0:
            raise ConfigError(f"engine.swap_space_gb must be >= 0, got {self.swap_space_gb}")
        max_len = int(self.max_model_len or model_max_len)
        if max_len < 2:
            raise ConfigError(f"engine.max_model_len must be >= 2, got {max_len}")
        mbt = self.max_num_batched_tokens
        if mbt is None:
            mbt = max(max_len, 2048) if self.policy == "vllm_v0" else 2048
        mbt = int(mbt)
        if mbt < 1:
            raise ConfigError(f"engine.max_num_batched_tokens must be >= 1, got {mbt}")
        if self.policy == "vllm_v0" and mbt < max_len:
            raise ConfigError(
                f"engine.max_num_batched_tokens ({mbt}) is smaller than max_model_len ({max_len}) with the "
                "vllm_v0 policy, which prefills whole prompts: raise it, lower max_model_len, or use "
                "policy=chunked"
            )
        if not self.step_time_scale > 0:
            raise ConfigError(f"engine.step_time_scale must be > 0, got {self.step_time_scale}")
        if self.num_gpu_blocks is not None and int(self.num_gpu_blocks) < 1:
            raise ConfigError(f"engine.num_gpu_blocks must be >= 1, got {self.num_gpu_blocks}")
        return EngineConfig(
            policy=self.policy,
            max_num_seqs=int(self.max_num_seqs),
            max_num_batched_tokens=mbt,
            max_model_len=max_len,
            block_size=int(self.block_size),
            gpu_memory_utilization=float(self.gpu_memory_utilization),
            watermark=float(self.watermark) if self.policy in POLICIES_WITH_WATERMARK else 0.0,
            preemption=self.preemption,
            swap_space_gb=float(self.swap_space_gb),
            num_gpu_blocks=None if self.num_gpu_blocks is None else int(self.num_gpu_blocks),
            fast_path=bool(self.fast_path),
            step_time_scale=float(self.step_time_scale),
        )
