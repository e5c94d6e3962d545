"""The KV cache's data type (vLLM's ``--kv-cache-dtype``): fp8 stores each cached K / V value in one byte.

Halving the bytes per cached token doubles the tokens the KV budget holds and halves the bytes decode attention
reads. A roofline prices both from the model's KV bytes per token. A measured profile was timed with a 16-bit
cache, so its decode attention's per-context-token cost (memory-bound: the KV reads) and its memory part are
scaled by the ratio of the bytes, and both parts are then marked ``estimated``: nobody measured them in fp8.
Prefill attention is compute-bound and keeps its measured cost.
"""

from __future__ import annotations

import copy
import dataclasses

from llmsim.errors import ConfigError
from llmsim.perf.models import ModelSpec
from llmsim.perf.profile_table import MeasuredProfile

# vLLM's --kv-cache-dtype choices -> bytes per cached value (None: the model's own dtype)
KV_CACHE_DTYPES: dict[str, int | None] = {
    "auto": None, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1,
}


def kv_value_bytes(kv_cache_dtype: str) -> int | None:
    """Bytes per cached K / V value of a vLLM ``kv_cache_dtype`` (None for ``auto``), or a one-line error."""
    key = str(kv_cache_dtype).lower()
    if key not in KV_CACHE_DTYPES:
        raise ConfigError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, got {kv_cache_dtype!r}")
    return KV_CACHE_DTYPES[key]


def model_with_kv_cache_dtype(model: ModelSpec, kv_cache_dtype: str) -> ModelSpec:
    """``model`` whose KV cache holds values of ``kv_cache_dtype`` (``auto``: unchanged)."""
    b = kv_value_bytes(kv_cache_dtype)
    return model if b is None else dataclasses.replace(model, kv_dtype_bytes=b)


def measured_doc_with_kv_ratio(doc: dict, ratio: float, kv_cache_dtype: str) -> dict:
    """A measured profile document with its KV bytes per token and decode attention's context reads scaled by
    ``ratio``, both parts marked estimated (their sources say why)."""
    out = copy.deepcopy(doc)
    out["memory"]["kv_bytes_per_token"] = doc["memory"]["kv_bytes_per_token"] * ratio
    out["decode_attention"]["per_ctx_token"] = doc["decode_attention"]["per_ctx_token"] * ratio
    note = f"kv_cache_dtype {kv_cache_dtype}: KV bytes per token x {ratio:g} of the 16-bit cache it was built with"
    for part, what in (("memory", note), ("decode_attention", note + " (context reads scaled, memory-bound)")):
        old = out.get("parts", {}).get(part, {})
        out.setdefault("parts", {})[part] = {"status": "estimated",
                                             "source": f"{old.get('source', 'profile')}; {what}"}
    return out


def with_kv_cache_dtype(profile, kv_cache_dtype: str):
    """``profile`` (a roofline or measured profile) with its KV cache in ``kv_cache_dtype``; ``auto`` or the
    dtype it already has return it unchanged."""
    model = model_with_kv_cache_dtype(profile.model, kv_cache_dtype)
    if model.kv_bytes_per_token == profile.model.kv_bytes_per_token:
        return profile
    ratio = model.kv_bytes_per_token / profile.model.kv_bytes_per_token
    if isinstance(profile, MeasuredProfile):
        doc = measured_doc_with_kv_ratio(profile.data, ratio, kv_cache_dtype)
        return MeasuredProfile(doc, profile.path, model=model, gpu=profile.gpu, ep=profile.ep)
    if dataclasses.is_dataclass(profile):  # the roofline prices KV from the model
        return dataclasses.replace(profile, model=model, name="")
    raise ConfigError(f"kv_cache_dtype {kv_cache_dtype!r} is not supported by {type(profile).__name__}")
