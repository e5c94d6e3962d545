"""Registry of model layer shapes, from the models' public ``config.json`` files.

Step-time models index on these shapes, so two models with the same layers (Vicuna-7B and
Llama-2-7B) share measured operator data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from llmsim.errors import ConfigError


@dataclass(frozen=True)
class ModelSpec:
    name: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    intermediate: int
    vocab: int
    gated_mlp: bool = True
    head_dim: int = 0
    dtype_bytes: int = 2
    tied_embeddings: bool = False
    max_position: int = 4096
    hf_id: str = ""
    aliases: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden // self.n_heads)

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def layer_linear_params(self) -> int:
        """Weights of the per-layer GEMMs (QKV, O, MLP); norms and biases are negligible."""
        qkv = self.hidden * (self.q_dim + 2 * self.kv_dim)
        o = self.q_dim * self.hidden
        mlp = (3 if self.gated_mlp else 2) * self.hidden * self.intermediate
        return qkv + o + mlp

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def n_params(self) -> int:
        return self.n_layers * self.layer_linear_params + self.embedding_params

    @property
    def weight_bytes(self) -> int:
        return self.n_params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V for every layer: 2 * L * n_kv * d_head * dtype bytes."""
        return 2 * self.n_layers * self.kv_dim * self.dtype_bytes


def _llama(name: str, L: int, h: int, heads: int, kv: int, inter: int, vocab: int, **kw) -> ModelSpec:
    return ModelSpec(name, L, h, heads, kv, inter, vocab, **kw)


def _opt(name: str, L: int, h: int, heads: int, vocab: int = 50272, **kw) -> ModelSpec:
    return ModelSpec(name, L, h, heads, heads, 4 * h, vocab, gated_mlp=False, max_position=2048,
                     tied_embeddings=True, **kw)


_MODELS: list[ModelSpec] = [
    _llama("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, hf_id="meta-llama/Llama-2-7b-hf"),
    _llama("llama-2-13b", 40, 5120, 40, 40, 13824, 32000, hf_id="meta-llama/Llama-2-13b-hf"),
    _llama("llama-2-70b", 80, 8192, 64, 8, 28672, 32000, hf_id="meta-llama/Llama-2-70b-hf"),
    _llama("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, max_position=8192,
           hf_id="meta-llama/Meta-Llama-3-8B"),
    _llama("llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256, max_position=131072,
           hf_id="meta-llama/Llama-3.1-8B"),
    _llama("llama-3-70b", 80, 8192, 64, 8, 28672, 128256, max_position=8192,
           hf_id="meta-llama/Meta-Llama-3-70B"),
    _llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000, max_position=32768,
           hf_id="mistralai/Mistral-7B-v0.1"),
    _llama("vicuna-7b", 32, 4096, 32, 32, 11008, 32000, hf_id="lmsys/vicuna-7b-v1.5"),
    _llama("vicuna-13b", 40, 5120, 40, 40, 13824, 32000, hf_id="lmsys/vicuna-13b-v1.5"),
    _opt("opt-125m", 12, 768, 12, hf_id="facebook/opt-125m"),
    _opt("opt-1.3b", 24, 2048, 32, hf_id="facebook/opt-1.3b"),
    _opt("opt-6.7b", 32, 4096, 32, hf_id="facebook/opt-6.7b"),
    _opt("opt-13b", 40, 5120, 40, hf_id="facebook/opt-13b"),
    _llama("qwen2.5-3b", 36, 2048, 16, 2, 11008, 151936, tied_embeddings=True, max_position=32768,
           hf_id="Qwen/Qwen2.5-3B"),
    _llama("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064, max_position=32768, hf_id="Qwen/Qwen2.5-7B"),
    _llama("qwen2.5-14b", 48, 5120, 40, 8, 13824, 152064, max_position=32768,
           hf_id="Qwen/Qwen2.5-14B"),
    _llama("qwen2.5-72b", 80, 8192, 64, 8, 29568, 152064, max_position=32768,
           hf_id="Qwen/Qwen2.5-72B"),
    # The ~7B experts of the QoS-aware edge router ("QoS-Aware LLM Routing for Edge Computing with Multiple Experts"),
    # from their HF configs.
    _llama("llama-7b", 32, 4096, 32, 32, 11008, 32000, max_position=2048, hf_id="huggyllama/llama-7b"),
    _llama("alpaca-native", 32, 4096, 32, 32, 11008, 32001, max_position=2048,
           hf_id="chavinlo/alpaca-native"),
    _llama("koala-7b", 32, 4096, 32, 32, 11008, 32000, max_position=2048, hf_id="TheBloke/koala-7B-HF",
           aliases=("koala-7B-HF",)),
    _llama("baize-7b", 32, 4096, 32, 32, 11008, 32000, max_position=2048,
           hf_id="project-baize/baize-lora-7B", aliases=("llama-7b-hf-baize-lora-bf16",)),
    # ChatGLM-6B: 28 layers, MHA, GELU MLP 16384 (not gated), vocab 130528, untied lm_head.
    ModelSpec("chatglm-6b", 28, 4096, 32, 32, 16384, 130528, gated_mlp=False, max_position=2048,
              hf_id="THUDM/chatglm-6b"),
    # MPT-7B: 32 layers, MHA, expansion 4 GELU MLP, vocab 50432, tied embeddings.
    ModelSpec("mpt-7b", 32, 4096, 32, 32, 16384, 50432, gated_mlp=False, tied_embeddings=True,
              max_position=2048, hf_id="mosaicml/mpt-7b"),
    ModelSpec("mpt-7b-instruct", 32, 4096, 32, 32, 16384, 50432, gated_mlp=False, tied_embeddings=True,
              max_position=2048, hf_id="mosaicml/mpt-7b-instruct"),
    # ~7B members of the other mix-instruct families, for the QoS-aware edge router's N > 6 experts
    # (llmsim.envs.tasks.QOS_MORE_EXPERTS).
    # Dolly v2 7B = Pythia-6.9B (GPT-NeoX): 32 layers, MHA, GELU MLP 16384, vocab 50432, untied.
    ModelSpec("dolly-v2-7b", 32, 4096, 32, 32, 16384, 50432, gated_mlp=False, max_position=2048,
              hf_id="databricks/dolly-v2-7b"),
    # StableLM-Tuned-Alpha 7B (GPT-NeoX): 16 layers, hidden 6144, 48 heads, GELU MLP 24576, vocab 50432.
    ModelSpec("stablelm-tuned-alpha-7b", 16, 6144, 48, 48, 24576, 50432, gated_mlp=False, max_position=4096,
              hf_id="stabilityai/stablelm-tuned-alpha-7b"),
    # Open Assistant's SFT of StableLM-Alpha 7B (the same shape; mix-instruct used its 12B Pythia sibling).
    ModelSpec("oasst-stablelm-7b", 16, 6144, 48, 48, 24576, 50288, gated_mlp=False, max_position=4096,
              hf_id="OpenAssistant/stablelm-7b-sft-v7-epoch-3"),
]

MODELS: dict[str, ModelSpec] = {m.name: m for m in _MODELS}


def register_model(spec: ModelSpec) -> None:
    """Add a model (e.g. from a HF ``config.json``); later definitions replace earlier ones."""
    MODELS[spec.name.lower()] = spec


def get_model(name: str) -> ModelSpec:
    key = name.lower()
    if key in MODELS:
        return MODELS[key]
    for spec in MODELS.values():
        if key in (a.lower() for a in spec.aliases) or key == spec.hf_id.lower():
            return spec
    raise ConfigError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS))}")


_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "fp16": 2, "bf16": 2, "float8": 1, "int8": 1}


def from_hf_config(path: str, name: str | None = None, register: bool = False) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face ``config.json`` (Llama/Mistral/Qwen2, OPT, MPT, ChatGLM, GPT-2).

    ``name`` defaults to the config's ``_name_or_path`` or the parent directory's name. Raises a
    ConfigError naming the file and the missing key for configs it cannot read.
    """
    p = Path(path)
    try:
        cfg = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read HF config {p}: {e}") from e

    def get(*keys: str, default: object = None) -> object:
        for k in keys:
            if k in cfg and cfg[k] is not None:
                return cfg[k]
        if default is None:
            raise ConfigError(f"HF config {p}: none of the keys {keys} is present")
        return default

    mtype = str(cfg.get("model_type", "")).lower()
    L = int(get("num_hidden_layers", "n_layers", "num_layers", "n_layer"))  # type: ignore[arg-type]
    h = int(get("hidden_size", "d_model", "n_embd"))  # type: ignore[arg-type]
    heads = int(get("num_attention_heads", "n_heads", "n_head"))  # type: ignore[arg-type]
    kv = int(get("num_key_value_heads", "multi_query_group_num", default=heads))  # type: ignore[arg-type]
    if cfg.get("multi_query_attention") is False:
        kv = heads
    gated = mtype not in ("opt", "mpt", "gpt2", "gpt_neox", "chatglm", "gptj", "bloom", "falcon")
    if mtype == "chatglm" and "ffn_hidden_size" in cfg:  # ChatGLM2/3 use a gated (SwiGLU) MLP
        gated = True
    if mtype == "mpt":
        inter = int(cfg.get("expansion_ratio", 4) * h)
    else:
        inter = int(get("intermediate_size", "ffn_dim", "ffn_hidden_size", "inner_hidden_size", "n_inner",
                        default=4 * h))  # type: ignore[arg-type]
    vocab = int(get("vocab_size", "padded_vocab_size"))  # type: ignore[arg-type]
    head_dim = int(cfg.get("head_dim") or cfg.get("kv_channels") or h // heads)
    tied = bool(cfg.get("tie_word_embeddings", mtype in ("opt", "mpt", "gpt2")))
    max_pos = int(get("max_position_embeddings", "max_seq_len", "seq_length", "n_positions", default=4096))  # type: ignore[arg-type]
    dtype = _DTYPE_BYTES.get(str(cfg.get("torch_dtype", cfg.get("dtype", "float16"))), 2)
    if dtype == 4:
        dtype = 2  # served in 16-bit
    nm = name or str(cfg.get("_name_or_path") or p.parent.name or p.stem).split("/")[-1].lower()
    spec = ModelSpec(nm, L, h, heads, kv, inter, vocab, gated_mlp=gated, head_dim=head_dim, dtype_bytes=dtype,
                     tied_embeddings=tied, max_position=max_pos, hf_id=str(cfg.get("_name_or_path", "")))
    if register:
        register_model(spec)
    return spec
