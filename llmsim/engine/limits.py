"""Which prompts an instance can take: its context window, its KV capacity less the watermark (or, on a multi-model
instance, the smallest KV cache of its catalog) and the type check of a prompt length."""

from __future__ import annotations

import operator
from numbers import Integral
from typing import TYPE_CHECKING

from llmsim.errors import LLMSimError

if TYPE_CHECKING:
    from llmsim.engine.components import ComponentEngine
    from llmsim.request import Request


class PromptLimits:
    """The engine's limits on prompts (``Instance.limits``), read from its current KV cache and config."""

    __slots__ = ("engine", "prompt_block_cap", "peers")

    def __init__(self, engine: ComponentEngine) -> None:
        self.engine = engine
        self.prompt_block_cap: int | None = None  # a multi-model instance: the smallest KV cache of its models
        # a prefill instance of a disaggregated cluster: the engines its KV copies may go to. A request it prefills
        # must also fit one of them (window and KV cache), or its copy could never land anywhere
        self.peers: list[ComponentEngine] | None = None

    def max_prompt_blocks(self) -> int:
        """Largest number of blocks a prompt may take and still be admitted."""
        cap = self.prompt_block_cap
        e = self.engine
        return e.kv_total - e.watermark_blocks if cap is None else cap

    def max_servable_prompt(self) -> int:
        """Longest prompt this instance can ever serve (context window and whole KV cache)."""
        e = self.engine
        own = min(e.max_model_len - 1, self.max_prompt_blocks() * e.block_size - 1)
        if self.peers is None:
            return own
        return min(own, max(p.limits.max_servable_prompt() for p in self.peers))

    def hosts(self, model: str | None) -> bool:
        """Whether the instance can serve a request that needs ``model`` (None: any model)."""
        if model is None:
            return True
        e = self.engine
        return e.host.can_load(model) if e.host is not None else model == e.profile.model.name

    def reason_unservable(self, r: Request) -> str:
        """'' if the instance can serve ``r``; otherwise the reason it never could."""
        e = self.engine
        if r.model is not None and not self.hosts(r.model):
            return "model_not_served"
        if r.prompt_tokens >= e.max_model_len:
            return "prompt_exceeds_max_model_len"
        if -(-(r.prompt_tokens + 1) // e.block_size) > self.max_prompt_blocks():
            return "prompt_exceeds_kv_capacity"
        if self.peers is not None:
            why = [p.limits.reason_unservable(r) for p in self.peers]
            if all(why):
                return f"decode_{why[0]}"  # no decode instance could ever take its KV
        return ""

    def set_target(self, r: Request) -> None:
        """``r.target_tokens`` on this engine: its output for the engine's model, within its token cap and the
        context window (``truncated`` when the window cuts it), at least one token. A bad prompt length raises."""
        e = self.engine
        p = r.prompt_tokens
        if p.__class__ is not int or p < 0:
            self.check_prompt(r)
        # a prefill instance returns one token (vLLM's proxy asks it for max_tokens=1): the decode instance's window
        # cuts the output; until the copy lands and sets it there, the widest window a copy may go to
        window = e.max_model_len if self.peers is None else max(q.max_model_len for q in self.peers)
        limit = window - p
        target = r.output_tokens if r.outputs_by_model is None else r.output_for(e.profile.model.name)
        cap = r.max_tokens if r.token_cap is None else r.output_cap()  # (a router's cap for this run: token_cap)
        if cap is not None and target > cap:
            target = cap  # finishes by length, as vLLM does at max_tokens (not a truncation by the context)
        if target > limit:
            target = limit
            r.truncated = True
        if target.__class__ is not int and isinstance(target, Integral):
            target = int(target)  # (a numpy integer: the engine's counts are Python ints)
        r.target_tokens = target if target > 0 else 1

    def check_prompt(self, r: Request) -> None:
        """A prompt length must be an integer >= 0 (numpy integers too): anything else would make time run
        backwards or never end."""
        p = r.prompt_tokens
        try:
            ok = not isinstance(p, bool) and operator.index(p) >= 0
        except TypeError:
            ok = False
        if not ok:
            raise LLMSimError(f"instance {self.engine.name}: request {r.id} has prompt_tokens {p!r}; expected an "
                              "integer >= 0")
        r.prompt_tokens = operator.index(p)  # (a numpy integer becomes the Python int the engine counts in)
