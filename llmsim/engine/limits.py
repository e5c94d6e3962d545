"""Which prompts an instance can take: a mixin of :class:`llmsim.engine.instance.Instance` (context window, KV capacity
less the watermark, and the type check of a prompt length), kept apart from the engine's event loop."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING

from llmsim.errors import LLMSimError

if TYPE_CHECKING:
    from llmsim.request import Request


class PromptLimits:
    """Needs ``kv_total``, ``watermark_blocks``, ``block_size``, ``max_model_len`` and ``name``."""

    kv_total: int
    watermark_blocks: int
    block_size: int
    max_model_len: int
    name: str
    prompt_block_cap: int | None = None  # a multi-model instance: the smallest KV cache of its models (model_host)

    def max_prompt_blocks(self) -> int:
        """Largest number of blocks a prompt may take and still be admitted."""
        cap = self.prompt_block_cap
        return self.kv_total - self.watermark_blocks if cap is None else cap

    @property
    def max_servable_prompt(self) -> int:
        """Longest prompt this instance can ever serve (context window and whole KV cache)."""
        return min(self.max_model_len - 1, self.max_prompt_blocks() * self.block_size - 1)

    def can_ever_serve(self, r: Request) -> str:
        """'' if this instance can serve ``r``; otherwise the reason it never could."""
        if r.model is not None and not self.hosts(r.model):  # type: ignore[attr-defined]
            return "model_not_served"
        if r.prompt_tokens >= self.max_model_len:
            return "prompt_exceeds_max_model_len"
        if -(-(r.prompt_tokens + 1) // self.block_size) > self.max_prompt_blocks():
            return "prompt_exceeds_kv_capacity"
        return ""

    def _check_prompt(self, r: Request) -> None:
        """A prompt length must be an integer >= 0 (numpy integers too): anything else would make time run
        backwards or never end."""
        p = r.prompt_tokens
        try:
            ok = not isinstance(p, bool) and operator.index(p) >= 0
        except TypeError:
            ok = False
        if not ok:
            raise LLMSimError(f"instance {self.name}: request {r.id} has prompt_tokens {p!r}; expected an integer >= 0")
