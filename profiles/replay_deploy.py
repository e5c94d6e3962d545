"""The deployment a replay reproduces: each engine setting from the flag, the run's ``meta.json`` or a default.

vLLM runs record their engine arguments next to ``requests.jsonl`` in ``meta.json`` (under ``engine_kwargs``,
``engine_args`` or at the top level) with vLLM's own names: ``tensor_parallel_size``, ``data_parallel_size``,
``enable_expert_parallel``, ``enable_chunked_prefill``, ``enable_prefix_caching``, ``block_size``,
``max_num_seqs``, ``max_num_batched_tokens``, ``gpu_memory_utilization``, ``max_model_len``,
``kv_cache_dtype``. A flag overrides the file, and a flag that contradicts it is a warning line: a replay never
silently runs another deployment than the one measured. A setting llmsim does not model (pipeline parallelism,
speculative decoding, fp32 weights) is refused in one line naming the key. vLLM's own balancer between
data-parallel engines is the router ``vllm_data_parallel`` (llmsim.routing.load).
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmsim.errors import TraceError
from llmsim.perf.models import ModelSpec

# setting -> (meta.json keys, flag attribute, default); the flag's name is the attribute with dashes
SETTINGS: dict[str, tuple[tuple[str, ...], str, Any]] = {
    "tp": (("tensor_parallel_size", "tp"), "tp", 1),
    "dp": (("data_parallel_size", "dp"), "dp", 1),
    "expert_parallel": (("enable_expert_parallel",), "enable_expert_parallel", False),
    "chunked_prefill": (("enable_chunked_prefill",), "policy", True),
    "prefix_caching": (("enable_prefix_caching",), "enable_prefix_caching", True),
    "block_size": (("block_size",), "block_size", 16),
    "max_num_seqs": (("max_num_seqs",), "max_num_seqs", 256),
    "max_num_batched_tokens": (("max_num_batched_tokens",), "max_num_batched_tokens", 2048),
    "gpu_memory_utilization": (("gpu_memory_utilization",), "gpu_memory_utilization", 0.9),
    "max_model_len": (("max_model_len",), "max_model_len", None),
    "kv_cache_dtype": (("kv_cache_dtype",), "kv_cache_dtype", "auto"),
}
# engine arguments that change the step times in ways llmsim does not model: key -> (is it set?, what it is)
UNMODELLED: dict[str, tuple[Any, str]] = {
    "pipeline_parallel_size": (lambda v: as_number(v) not in (None, 1), "pipeline parallelism"),
    "speculative_config": (lambda v: v not in (None, {}, "", "None", "null"), "speculative decoding"),
    "speculative_model": (lambda v: v not in (None, "", "None", "null"), "speculative decoding"),
    "num_speculative_tokens": (lambda v: as_number(v) not in (None, 0), "speculative decoding"),
    "dtype": (lambda v: str(v).lower() in ("float32", "float", "fp32"), "fp32 weights and activations"),
}
BOOLEAN = ("expert_parallel", "chunked_prefill", "prefix_caching")
TEXT = ("kv_cache_dtype",)
META_SECTIONS = ("engine_kwargs", "engine_args")


@dataclass(frozen=True)
class Setting:
    value: Any
    source: str  # "flag --tp", "meta.json tensor_parallel_size", "default"


def read_meta(requests: str | Path) -> tuple[Path, dict[str, Any]]:
    """(meta.json path, its engine arguments merged: top level, then ``engine_args``, then ``engine_kwargs``); a
    file that is not a JSON object, or a setting of the wrong type, is one line naming the file and the key."""
    f = Path(requests).parent / "meta.json"
    if not f.is_file():
        return f, {}
    try:
        meta = json.loads(f.read_text())
    except ValueError as e:
        raise TraceError(f"{f}: not JSON ({e}); fix or remove it, or pass every setting as a flag") from None
    if not isinstance(meta, dict):
        raise TraceError(f"{f}: expected a JSON object of engine arguments, got {type(meta).__name__}")
    out = {k: v for k, v in meta.items() if not isinstance(v, dict) or k in UNMODELLED}
    for section in META_SECTIONS:
        if isinstance(meta.get(section), dict):
            out.update(meta[section])
    for key, (is_set, what) in UNMODELLED.items():
        if key in out and is_set(out[key]):
            raise TraceError(f"{f}: {key}={out[key]!r}: llmsim does not model {what}; a replay would compare "
                             "another deployment with the one measured")
    for name, (keys, _, _) in SETTINGS.items():
        for key in keys:
            if out.get(key) is not None:
                out[key] = meta_setting(f, name, key, out[key])
    return f, out


def meta_setting(f: Path, name: str, key: str, v: Any) -> Any:
    """A recorded setting as its type: a boolean (``true`` or the text ``"false"``, never a truthy text), a
    string, or a number (a whole one for sizes; ``"2"`` reads as 2); else one line naming the file and the key,
    since anything else would replay another deployment than the one measured."""
    text = v.strip().lower() if isinstance(v, str) else None
    if name in BOOLEAN:
        got, what = (v if isinstance(v, bool) else {"true": True, "false": False}.get(text or "")), "true or false"
    elif name in TEXT:
        got, what = (v if isinstance(v, str) else None), "a string"
    else:
        fraction = name == "gpu_memory_utilization"
        got, what = as_number(v), "a finite number" if fraction else "a whole number"
        if got is not None and not fraction:
            got = int(got) if got == int(got) else None
        if got is not None and not (0 < got <= 1 if fraction else got >= 1):
            got, what = None, "a number in (0, 1]" if fraction else "a whole number >= 1"
    if got is None:
        raise TraceError(f"{f}: {key}: expected {what}, got {v!r}; fix it or pass the setting as a flag")
    return got


def as_number(v: Any) -> float | None:
    """A JSON number or a text holding one, if finite; None otherwise (booleans are not numbers)."""
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        return None
    try:
        number = float(v)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def meta_value(name: str, meta: dict[str, Any]) -> tuple[Any, str] | None:
    """The run's value of a setting and the key it was under, or None when the run did not record it (read_meta
    gave it its type)."""
    for key in SETTINGS[name][0]:
        if meta.get(key) is not None:
            return meta[key], key
    return None


def flag_value(name: str, args: argparse.Namespace) -> Any:
    """The flag's value (None when not given); ``--policy`` stands for chunked prefill on or off."""
    v = getattr(args, SETTINGS[name][1], None)
    if name == "chunked_prefill" and v is not None:
        return v == "chunked"
    return v


def resolve(args: argparse.Namespace, meta: dict[str, Any]) -> tuple[dict[str, Setting], list[str]]:
    """Every setting with where it came from, and a warning per flag that contradicts the run's meta.json."""
    out: dict[str, Setting] = {}
    warnings: list[str] = []
    for name, (_, attr, default) in SETTINGS.items():
        flag, recorded = flag_value(name, args), meta_value(name, meta)
        flag_name = "--" + attr.replace("_", "-")
        if flag is not None:
            out[name] = Setting(flag, f"flag {flag_name}")
            if recorded is not None and recorded[0] != flag:
                warnings.append(f"{flag_name} {getattr(args, attr)} contradicts meta.json {recorded[1]}="
                                f"{recorded[0]}; replaying with the flag")
        elif recorded is not None:
            out[name] = Setting(recorded[0], f"meta.json {recorded[1]}")
        else:
            out[name] = Setting(default, "default")
    return out, warnings


def describe_settings(settings: dict[str, Setting], model: ModelSpec | None = None) -> list[str]:
    """One line per setting: ``tp = 2 (meta.json tensor_parallel_size)``; ep is derived (vLLM: tp x dp)."""
    lines = [f"{k} = {'the longest request + 16' if s.value is None else s.value} ({s.source})"
             for k, s in settings.items()]
    why = "tp x dp when expert_parallel, else 1"
    if model is not None and not model.is_moe and settings["expert_parallel"].value:
        why = f"{model.name} is dense: vLLM ignores expert_parallel"
    lines.append(f"ep = {expert_parallel_degree(settings, model)} ({why})")
    return lines


def expert_parallel_degree(settings: dict[str, Setting], model: ModelSpec | None = None) -> int:
    """vLLM's EP group: every GPU of every data-parallel engine when expert parallelism is on; 1 for a dense
    ``model`` (vLLM's flag only changes the experts' layers, so a dense run recorded with it had none)."""
    if not settings["expert_parallel"].value or (model is not None and not model.is_moe):
        return 1
    return int(settings["tp"].value) * int(settings["dp"].value)


def profile_parts(description: dict[str, Any]) -> str:
    """Where each part of a profile's step time comes from (measured / fitted / estimated / roofline ...)."""
    parts = description.get("parts") or {}
    if not parts:
        return f"all parts {description.get('kind', 'unknown')}"
    return ", ".join(f"{part}={status}" for part, status in parts.items())
