"""A Hugging Face ``config.json`` -> the fields of a :class:`llmsim.perf.models.ModelSpec`, or a one-line refusal.

Only architectures whose cost llmsim can model are accepted: decoder-only transformers with (grouped-query or
multi-head) attention and a dense or mixture-of-experts MLP. Everything else - an unknown ``model_type``, an
encoder-decoder, multi-head latent attention, a multimodal wrapper, quantised weights, a missing key - is refused
in one line naming the file and what is missing: a model llmsim cannot price is never priced as a dense model.

This module knows the file format and where a config is: which model names are paths (:func:`looks_like_path`), the
file a path or a Hugging Face id in the local hub cache gives (:func:`config_path`) and that file's identity
(:func:`config_identity`); ``llmsim.perf.models`` builds and registers the spec.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

from llmsim.errors import ConfigError, read_text_file

# decoder families with a dense MLP: model_type -> (gated MLP, tied embeddings when the config does not say)
DENSE_TYPES: dict[str, tuple[bool, bool]] = {
    "llama": (True, False), "mistral": (True, False), "qwen2": (True, False), "qwen3": (True, False),
    "gemma": (True, True), "gemma2": (True, True), "phi3": (True, False), "phi": (False, False),
    "opt": (False, True), "gpt2": (False, True), "gpt_neox": (False, False), "gptj": (False, False),
    "mpt": (False, True), "chatglm": (False, False), "starcoder2": (False, True),
}
# mixture-of-experts families: model_type -> the keys of (experts, top-k, expert width); all gated
MOE_TYPES: dict[str, tuple[str, str, str]] = {
    "mixtral": ("num_local_experts", "num_experts_per_tok", "intermediate_size"),
    "phimoe": ("num_local_experts", "num_experts_per_tok", "intermediate_size"),
    "qwen2_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
    "qwen3_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
    "deepseek": ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size"),
    "deepseek_v2": ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size"),
    "deepseek_v3": ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size"),
}
DEEPSEEK_TYPES = ("deepseek", "deepseek_v2", "deepseek_v3")
LATENT_ATTENTION_KEYS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
ENCODER_DECODER_TYPES = ("t5", "mt5", "bart", "mbart", "whisper", "pegasus", "marian", "encoder-decoder")
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 2, "fp16": 2, "bf16": 2, "float8": 1, "int8": 1}
LAYER_KEYS = ("num_hidden_layers", "n_layers", "num_layers", "n_layer")
MAX_NUMBER = 2 ** 53  # every size and factor is below it (and so finite)
# a config.json is kilobytes; anything far larger is another file (a GGUF model, a log), refused before reading it
MAX_CONFIG_BYTES = 16 * 1024 * 1024
SUPPORTED = f"dense: {', '.join(DENSE_TYPES)}; mixture-of-experts: {', '.join(MOE_TYPES)}"


def read_config(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """The JSON object in ``path`` (a ``config.json`` or the folder holding one), or one line naming the file."""
    p = Path(path)
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ConfigError(f"HF config {p}: is a folder without a config.json file")
        p = p / "config.json"
    if not p.is_file():
        raise ConfigError(f"HF config {p}: no such file")
    size = p.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"HF config {p}: {size / 2**20:.0f} MiB, not a config.json (expected a JSON file of at "
                          f"most {MAX_CONFIG_BYTES // 2**20} MiB)")
    text = read_text_file(p)  # its own one line: missing, unreadable or not UTF-8
    try:
        cfg = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"HF config {p}: not JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"HF config {p}: expected a JSON object, got {type(cfg).__name__}")
    return p, cfg


class HFConfig:
    """One parsed config and the file it came from, so every error names both the file and the key."""

    def __init__(self, path: Path, cfg: dict[str, Any]) -> None:
        self.path, self.cfg = path, cfg
        self.model_type = str(cfg.get("model_type", "")).lower()

    def refuse(self, what: str) -> ConfigError:
        return ConfigError(f"HF config {self.path}: {what}; llmsim models {SUPPORTED}")

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def num(self, *keys: str, default: float | None = None, integer: bool = True) -> Any:
        """The first of ``keys`` present (a positive finite number; a whole one when ``integer``), else
        ``default``, else a refusal naming the keys."""
        for k in keys:
            v = self.cfg.get(k)
            if v is None:
                continue
            return self.checked(k, v, 0, integer, positive=True)
        if default is None:
            raise ConfigError(f"HF config {self.path}: missing key {' or '.join(keys)} (model_type "
                              f"{self.model_type!r}); cannot model it without")
        return default

    def switch(self, key: str, default: bool | None = False) -> bool | None:
        """An optional JSON boolean (``default`` when absent or null), else a refusal naming the key: a string
        ``"false"`` read as truthy would change the model silently."""
        v = self.cfg.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise ConfigError(f"HF config {self.path}: {key} must be true or false, got {v!r}")
        return v

    def whole(self, key: str, minimum: int = 0) -> int:
        """An optional whole number >= ``minimum`` (0 when absent or null), else a refusal naming the key."""
        v = self.cfg.get(key)
        return 0 if v is None else int(self.checked(key, v, minimum, True))

    def checked(self, key: str, v: Any, minimum: float, integer: bool, positive: bool = False) -> Any:
        """``v`` if it is a number >= ``minimum`` (> 0 when ``positive``; whole when ``integer``: 4096.0 is 4096) and
        below 2**53 (no model is that large, and the products of such sizes would overflow a float), else one line
        naming the file and the key."""
        ok = not isinstance(v, bool) and isinstance(v, int | float) and -MAX_NUMBER < v < MAX_NUMBER
        ok = ok and (v > 0 if positive else v >= minimum) and (not integer or v == int(v))
        if not ok:
            what = "a positive number" if positive else f"a number >= {minimum}"
            got = repr(v) if len(repr(v)) <= 40 else repr(v)[:40] + "..."
            raise ConfigError(f"HF config {self.path}: {key} must be {what}{' (whole)' if integer else ''} below "
                              f"2**53, got {got}")
        return int(v) if integer else v


def check_modelable(c: HFConfig) -> None:
    """Refuse what llmsim cannot price: wrappers, encoder-decoders, latent attention, quantisation, unknown types."""
    if "text_config" in c.cfg and c.model_type not in DENSE_TYPES and c.model_type not in MOE_TYPES:
        raise c.refuse(f"model_type {c.model_type!r} is a multimodal wrapper; pass its language model's config")
    if c.switch("is_encoder_decoder") or c.model_type in ENCODER_DECODER_TYPES:
        raise c.refuse(f"model_type {c.model_type!r} is an encoder-decoder; only decoder-only models are modelled")
    latent = c.has("kv_lora_rank") or c.model_type in ("deepseek_v2", "deepseek_v3")
    missing = [k for k in LATENT_ATTENTION_KEYS if not c.has(k)]
    if latent and missing:
        raise c.refuse(f"multi-head latent attention without {', '.join(missing)}: its KV cache cannot be sized")
    check_quantization(c)
    if not c.model_type:
        raise c.refuse("missing key model_type")
    if c.model_type not in DENSE_TYPES and c.model_type not in MOE_TYPES:
        raise c.refuse(f"unknown model_type {c.model_type!r}")
    if c.model_type in DENSE_TYPES and any(c.whole(k) > 1 for k in EXPERT_KEYS):
        raise c.refuse(f"model_type {c.model_type!r} is dense but the config has experts "
                       f"({', '.join(k for k in EXPERT_KEYS if c.has(k))})")
    if c.cfg.get("mlp_only_layers"):
        raise c.refuse("mlp_only_layers (dense layers between MoE ones) is not modelled")


def check_quantization(c: HFConfig) -> None:
    """Only fp8 weights and an fp8 KV cache are modelled: ``quant_method: fp8``, or ``compressed-tensors`` whose
    every config group quantises its weights to 8-bit floats (``type: float``, ``num_bits: 8``), which vLLM serves
    as fp8, and whose ``kv_cache_scheme``, if any, is an 8-bit float one (a KV-only checkpoint may have no config
    group); anything else is one line naming the key (an int8 or 4-bit checkpoint priced as fp8 would be silently
    wrong)."""
    quant = c.cfg.get("quantization_config")
    if quant is None:
        return
    if not isinstance(quant, dict):
        raise c.refuse(f"quantization_config must be an object with a quant_method, got {quant!r}")
    method = str(quant.get("quant_method", "")).lower()
    if method == "fp8":
        return
    if method != "compressed-tensors":
        raise c.refuse(f"quantised weights ({quant.get('quant_method', '?')}) are not modelled; only fp8 is")
    kv = quant.get("kv_cache_scheme")
    if kv is not None and not (isinstance(kv, dict) and kv.get("type") == "float" and kv.get("num_bits") == 8):
        what = (f"type {kv.get('type')!r} with num_bits {kv.get('num_bits')!r}" if isinstance(kv, dict)
                else repr(kv))
        raise c.refuse(f"quantization_config.kv_cache_scheme: a KV cache of {what} is not modelled; only fp8 "
                       "(type 'float', num_bits 8)")
    groups = quant.get("config_groups")
    if kv is not None and groups in (None, {}):
        return  # the KV cache alone is quantised; the weights keep their dtype
    if not isinstance(groups, dict) or not groups:
        raise c.refuse(f"quantization_config.config_groups must be a non-empty object (compressed-tensors), "
                       f"got {groups!r}")
    for name, group in groups.items():
        weights = group.get("weights") if isinstance(group, dict) else None
        kind, bits = (weights.get("type"), weights.get("num_bits")) if isinstance(weights, dict) else (None, None)
        if kind != "float" or bits != 8:
            raise c.refuse(f"quantization_config.config_groups.{name}.weights: compressed-tensors weights of type "
                           f"{kind!r} with num_bits {bits!r} are not modelled; only fp8 (type 'float', num_bits 8)")


def precision_fields(c: HFConfig) -> tuple[int, int]:
    """(bytes per weight, bytes per cached K / V value, 0 for the weights'), as vLLM serves the checkpoint: fp8
    weights are one byte and keep a 16-bit cache unless compressed-tensors declares a ``kv_cache_scheme``, which
    vLLM's ``kv_cache_dtype: auto`` then caches in fp8 (check_quantization refused every other scheme)."""
    cfg = c.cfg
    dtype = DTYPE_BYTES.get(str(cfg.get("torch_dtype", cfg.get("dtype", "float16"))), 2)
    quant = cfg.get("quantization_config")
    if not isinstance(quant, dict):
        return dtype, 0
    method = str(quant.get("quant_method", "")).lower()
    if method == "fp8" or quant.get("config_groups"):
        dtype = 1
    if method == "compressed-tensors" and quant.get("kv_cache_scheme"):
        return dtype, 1
    return dtype, 2 if dtype == 1 else 0


def dense_fields(c: HFConfig) -> dict[str, Any]:
    """Attention, MLP, vocabulary and precision: what every decoder has."""
    cfg, mt = c.cfg, c.model_type
    h = c.num("hidden_size", "d_model", "n_embd")
    heads = c.num("num_attention_heads", "n_heads", "n_head")
    kv = heads if c.switch("multi_query_attention", None) is False else c.num(
        "num_key_value_heads", "multi_query_group_num", default=heads)
    if kv > heads or heads % kv:
        raise ConfigError(f"HF config {c.path}: num_key_value_heads={kv} must divide num_attention_heads={heads} "
                          "(each KV head serves a whole group of query heads)")
    n_layers = c.num(*LAYER_KEYS)
    gated, tied_default = DENSE_TYPES.get(mt, (True, False))
    if mt == "chatglm" and "ffn_hidden_size" in cfg:  # ChatGLM2/3 use a gated (SwiGLU) MLP
        gated = True
    if mt == "mpt":
        inter = int(c.num("expansion_ratio", default=4, integer=False) * h)
    else:
        inter = c.num("intermediate_size", "ffn_dim", "ffn_hidden_size", "inner_hidden_size", "n_inner",
                      default=4 * h)
    dtype, kv_dtype = precision_fields(c)
    window, every_layer = window_fields(c, n_layers)
    return {
        "n_layers": n_layers,
        "hidden": h, "n_heads": heads, "n_kv_heads": kv, "intermediate": inter,
        "vocab": c.num("vocab_size", "padded_vocab_size"), "gated_mlp": gated,
        "head_dim": c.whole("head_dim") or c.whole("kv_channels") or h // heads, "dtype_bytes": dtype,
        "kv_dtype_bytes": kv_dtype,
        "tied_embeddings": c.switch("tie_word_embeddings", tied_default),
        "max_position": context_length(c),
        "sliding_window": window, "window_every_layer": every_layer,
        "attention_bias": c.switch("attention_bias", c.switch("bias")),
        "embed_dim": 0 if c.whole("word_embed_proj_dim") in (0, h) else c.whole("word_embed_proj_dim"),
        "architecture": mt,
    }


# the keys vLLM reads a model's length from (each family names it its own way), and its length when none is there
LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
               "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
DEFAULT_CONTEXT = 2048
# rope scalings whose config already states the extended length in max_position_embeddings (as vLLM reads them)
ROPE_STATED_LENGTH = ("su", "longrope", "llama3", "default", "mrope")


def context_length(c: HFConfig) -> int:
    """Positions the model takes, derived as vLLM does: the smallest of the length keys the config has (Command-R
    states 8,192 positions and a 131,072-token ``model_max_length``: vLLM serves 8,192) times a linear, dynamic or
    YaRN ``rope_scaling`` factor (YaRN's from its ``original_max_position_embeddings``)."""
    present = [c.checked(k, c.cfg[k], 0, True, positive=True) for k in LENGTH_KEYS if c.cfg.get(k) is not None]
    if not present:
        warnings.warn(f"HF config {c.path}: no context length key ({', '.join(LENGTH_KEYS)}); assumed "
                      f"{DEFAULT_CONTEXT} positions, as vLLM does", stacklevel=3)
    positions = min(present, default=DEFAULT_CONTEXT)
    rope = c.cfg.get("rope_scaling")
    if rope is None:
        return positions
    if not isinstance(rope, dict):
        raise ConfigError(f"HF config {c.path}: rope_scaling must be an object or null, got {rope!r}")
    kind = str(rope.get("rope_type", rope.get("type", "default"))).lower()
    if kind in ROPE_STATED_LENGTH:
        return positions
    factor = c.checked("rope_scaling.factor", rope.get("factor", 1.0), 1, False)
    if kind == "yarn":
        if rope.get("original_max_position_embeddings") is None:
            raise ConfigError(f"HF config {c.path}: rope_scaling of type yarn needs original_max_position_embeddings")
        positions = c.checked("rope_scaling.original_max_position_embeddings",
                              rope["original_max_position_embeddings"], 1, True)
    return int(positions * factor)


# families that alternate windowed and full-attention layers whatever their config's other keys say
ALTERNATING_WINDOW_TYPES = ("gemma2", "gemma3", "gemma3_text", "cohere2")


def window_fields(c: HFConfig, n_layers: int) -> tuple[int, bool]:
    """(sliding window in tokens, 0 for none; whether every layer uses it). A window on only some layers: a
    ``layer_types`` list with full-attention entries, a ``sliding_window_pattern``, Qwen2's ``max_window_layers``
    above 0, or a family that alternates (Gemma-2/3, Cohere-2). A window no layer uses is none."""
    cfg = c.cfg
    use = c.switch("use_sliding_window", None)
    window = 0 if use is False else c.whole("sliding_window")
    if not window:
        return 0, True
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        windowed = sum(t == "sliding_attention" for t in types)
        return (window, windowed == len(types)) if windowed else (0, True)
    alternating = c.model_type in ALTERNATING_WINDOW_TYPES
    if alternating or c.whole("sliding_window_pattern") > 1:
        return window, False
    if use and cfg.get("max_window_layers") is not None:
        max_window = c.whole("max_window_layers")  # (Qwen2: the layers from max_window_layers on use the window)
        return (window, max_window == 0) if max_window < n_layers else (0, True)
    return window, True


def count_moe_layers(n_layers: int, first_dense: int, freq: int, architecture: str) -> int:
    """Layers with a MoE block: from ``first_dense`` on, DeepSeek's layers ``i % freq == 0``, Qwen's (and the other
    families') ``(i + 1) % freq == 0`` (each family's modelling code)."""
    offset = 0 if architecture in DEEPSEEK_TYPES else 1
    return sum(1 for i in range(first_dense, n_layers) if (i + offset) % freq == 0)


def moe_fields(c: HFConfig) -> dict[str, Any]:
    """Experts, top-k, expert width, shared experts and the dense-layer pattern of a MoE family; a pattern that
    leaves no MoE layer is refused (it would be a dense model under a MoE name)."""
    experts_key, topk_key, width_key = MOE_TYPES[c.model_type]
    out: dict[str, Any] = {
        "n_experts": c.num(experts_key),
        "experts_per_token": c.num(topk_key),
        "moe_intermediate": c.num(width_key),
        "gated_mlp": True,
    }
    if out["experts_per_token"] > out["n_experts"]:
        raise ConfigError(f"HF config {c.path}: {topk_key}={out['experts_per_token']} exceeds "
                          f"{experts_key}={out['n_experts']}")
    if c.model_type == "qwen2_moe":
        out["shared_intermediate"] = c.whole("shared_expert_intermediate_size")
    first = 0
    if c.model_type in DEEPSEEK_TYPES:
        out["n_shared_experts"] = c.whole("n_shared_experts")
        out["first_dense_layers"] = first = c.whole("first_k_dense_replace")
    freq_key = "decoder_sparse_step" if c.has("decoder_sparse_step") else "moe_layer_freq"
    out["moe_layer_freq"] = freq = c.whole(freq_key) or 1
    n_layers = c.num(*LAYER_KEYS)
    if not count_moe_layers(n_layers, first, freq, c.model_type):
        raise ConfigError(f"HF config {c.path}: no MoE layer among {n_layers} (first_k_dense_replace={first}, "
                          f"{freq_key}={freq}); a dense model is not priced as a mixture of experts")
    return out


def latent_attention_fields(c: HFConfig) -> dict[str, Any]:
    """Multi-head latent attention's ranks and head sizes (check_modelable made sure they are all there)."""
    return {
        "kv_lora_rank": c.num("kv_lora_rank"),
        "q_lora_rank": c.whole("q_lora_rank"),
        "head_dim": c.num("qk_nope_head_dim"),
        "qk_rope_head_dim": c.num("qk_rope_head_dim"),
        "v_head_dim": c.num("v_head_dim"),
        "n_kv_heads": c.num("num_attention_heads"),
    }


def saved_name(cfg: dict[str, Any]) -> str:
    """``_name_or_path`` when it names something (``org/name`` or a folder), else "" (absent, not a string, or a
    bare ``.``, ``./`` or ``/`` as ``save_pretrained`` may leave it)."""
    v = cfg.get("_name_or_path")
    if not isinstance(v, str) or v.rstrip("/").split("/")[-1] in ("", ".", ".."):
        return ""
    return v


def default_name(path: Path, cfg: dict[str, Any]) -> str:
    """``_name_or_path``'s last part; else the file's stem (``Qwen3-32B.json``), the hub cache's repository name
    (``models--Qwen--Qwen3-32B``) or the folder holding ``config.json``; lower case."""
    if saved_name(cfg):
        return saved_name(cfg).rstrip("/").split("/")[-1].lower()
    if path.name != "config.json":
        return path.stem.lower()
    for part in reversed(path.parts):
        if part.startswith("models--"):
            return part.split("--")[-1].lower()
    return path.resolve().parent.name.lower() or path.stem.lower()


def spec_fields(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """(the config file, ModelSpec keyword arguments) of a Hugging Face config, or a one-line ConfigError."""
    p, cfg = read_config(path)
    c = HFConfig(p, cfg)
    check_modelable(c)
    fields = dense_fields(c)
    if c.model_type in MOE_TYPES:
        fields.update(moe_fields(c))
    if c.has("kv_lora_rank"):
        fields.update(latent_attention_fields(c))
    fields["name"] = default_name(p, cfg)
    fields["hf_id"] = saved_name(cfg)
    return p, fields


def hub_cache_dir() -> Path:
    """Where ``huggingface_hub`` keeps downloads: ``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface"
    return Path(home) / "hub"


def hub_cache_config(hf_id: str) -> Path | None:
    """The cached ``config.json`` of the hub repository ``org/name``, if it was downloaded here: the snapshot its
    ``refs/main`` names (what ``huggingface_hub`` and vLLM load for the id), else the newest one."""
    if hf_id.count("/") != 1:
        return None
    repo = hub_cache_dir() / f"models--{hf_id.replace('/', '--')}"
    try:
        main = repo / "snapshots" / (repo / "refs" / "main").read_text(encoding="ascii").strip() / "config.json"
    except (OSError, ValueError):
        main = None
    if main is not None and main.is_file():
        return main
    snapshots = repo / "snapshots"
    found = sorted(snapshots.glob("*/config.json"), key=lambda f: f.stat().st_mtime) if snapshots.is_dir() else []
    return found[-1] if found else None


PATH_FORMS = "a path starts with /, ./, ../ or ~, or ends in .json"


def looks_like_path(name: str) -> bool:
    """A model given by a file system path rather than by a name or a Hugging Face id (``org/name``): only such a
    name is read from disk, so a plain name never means a file that happens to be in the working directory."""
    return name.startswith(("/", "./", "../", "~")) or name.endswith(".json") or name.count("/") > 1


def config_path(name: str) -> Path | None:
    """The file or folder ``name`` gives a config by: an explicit path (:func:`looks_like_path`), else a Hugging
    Face id in the hub cache; None when there is none, a name the file system cannot even look up included (a
    routed backend may name its model so)."""
    try:
        if not looks_like_path(name):
            return hub_cache_config(name)
        path = Path(name).expanduser()
        return path if path.exists() else None
    except (OSError, RuntimeError):  # (a file name over NAME_MAX: ENAMETOOLONG; ~user of no such user)
        return None


def config_identity(found: Path) -> tuple[Path, tuple[int, int, int]]:
    """The config file ``found`` gives, resolved (one file however it is spelled), and its (inode, modification
    time, size); a folder without a config.json, or a file that cannot be looked at, is the reader's one line."""
    file = found / "config.json" if found.is_dir() else found
    try:
        st = file.stat()
        resolved = file.resolve()
    except (OSError, RuntimeError):
        read_config(found)  # (its own one line: a folder without config.json, no such file)
        raise ConfigError(f"HF config {file}: cannot be read") from None
    return resolved, (st.st_ino, st.st_mtime_ns, st.st_size)
