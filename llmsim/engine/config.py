"""Engine configuration (one serving instance), mirroring vLLM's engine arguments.

``EngineConfig`` is the ``engine`` config group's schema: constructing one checks every field (types,
finiteness, ranges) and raises :class:`ConfigError` naming the key. What depends on the model (its context
length) and on the batch policy (token-budget and watermark defaults) is settled by :meth:`resolved`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

from pydantic import BeforeValidator, Field, StrictBool

from llmsim.engine.scheduling import BATCH_POLICIES
from llmsim.errors import ConfigError
from llmsim.schema import (
    Fraction,
    NonNegFloat,
    PosFloat,
    PosInt,
    Schema,
    TokenCount,
    check_choice,
    finite_float,
    not_bool,
)

if TYPE_CHECKING:
    from llmsim.perf.hardware import GpuSpec


class EngineConfig(Schema):
    """vLLM-style engine settings.

    ``max_num_batched_tokens`` and ``max_num_seqs`` default to what the batch policy declares for the instance's GPU
    (vLLM V0, which prefills whole prompts: max(max_model_len, 2048) and 256; chunked prefill, as ``vllm serve``:
    8,192 and 1,024 on a GPU of >= 70 GiB other than an A100, else 2,048 and 256). ``watermark`` applies only to
    policies that declare one (V0). ``num_gpu_blocks`` overrides the KV capacity derived from the profile (tests,
    what-if studies). ``step_time_scale`` multiplies every iteration's step time: a knob to emulate a slower (or
    faster) serving stack than the one the profile was measured on, e.g. to calibrate to a paper's testbed.
    ``enable_prefix_caching`` (on by default, as in vLLM V1) reuses cached KV blocks of requests that carry
    prefix-block ids (llmsim.engine.prefix_cache); requests without ids are unaffected.
    """

    where: ClassVar[str] = "engine"
    policy: str = "vllm_v0"
    max_num_seqs: PosInt | None = None
    max_num_batched_tokens: TokenCount | None = None
    max_model_len: Annotated[int, BeforeValidator(not_bool), Field(ge=2, le=10**8)] | None = None
    block_size: Annotated[int, BeforeValidator(not_bool), Field(ge=1, le=4096)] = 16
    gpu_memory_utilization: Fraction = 0.9
    watermark: Annotated[float, BeforeValidator(finite_float), Field(ge=0, lt=1)] = 0.01
    preemption: Literal["recompute", "swap"] = "recompute"
    swap_space_gb: NonNegFloat = 4.0
    num_gpu_blocks: PosInt | None = None
    fast_path: StrictBool = True
    step_time_scale: PosFloat = 1.0
    enable_prefix_caching: StrictBool = True

    def resolved(self, model_max_len: int, model_name: str = "the model", gpu: GpuSpec | None = None) -> EngineConfig:
        """A copy with the model-, GPU- and policy-dependent defaults filled in (``gpu``: the instance's; None: the
        defaults of a small GPU); errors name the key."""
        check_choice(self.policy, BATCH_POLICIES, "engine.policy")
        policy = BATCH_POLICIES[self.policy]
        max_len = self.max_model_len or model_max_len
        if max_len > model_max_len:
            raise ConfigError(
                f"engine.max_model_len: {max_len} exceeds the context length of {model_name} ({model_max_len} "
                "positions); lower it or leave it null for the model's own"
            )
        mbt, seqs = policy.batch_limits(max_len, gpu, self.max_num_batched_tokens, self.max_num_seqs)
        if policy.prefills_whole_prompts and mbt < max_len:
            raise ConfigError(
                f"engine.max_num_batched_tokens ({mbt}) is smaller than max_model_len ({max_len}) with the "
                f"{self.policy} policy, which prefills whole prompts: raise it, lower max_model_len, or use "
                "policy=chunked"
            )
        return self.model_copy(update={
            "max_num_batched_tokens": mbt,
            "max_num_seqs": seqs,
            "max_model_len": max_len,
            "watermark": self.watermark if policy.uses_watermark else 0.0,
        })

    def replace(self, **changes: object) -> EngineConfig:
        """A validated copy with some fields changed."""
        return EngineConfig(**{**self.model_dump(), **changes})

