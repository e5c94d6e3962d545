"""Registry of model layer shapes, from the models' public ``config.json`` files.

Step-time models index on these shapes, so two models with the same layers (Vicuna-7B and
Llama-2-7B) share measured operator data.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from llmsim.errors import ConfigError
from llmsim.perf.hf_config import (
    PATH_FORMS,
    config_identity,
    config_path,
    count_moe_layers,
    hub_cache_dir,
    looks_like_path,
    spec_fields,
)


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
    # mixture of experts (0 experts: a dense model); the defaults keep every dense model as it was
    n_experts: int = 0  # routed experts per MoE layer
    experts_per_token: int = 0  # top-k
    moe_intermediate: int = 0  # one routed expert's MLP width
    n_shared_experts: int = 0  # experts every token passes through (DeepSeek-style)
    shared_intermediate: int = 0  # the shared experts' total MLP width (0: n_shared_experts * moe_intermediate)
    first_dense_layers: int = 0  # leading layers with a dense MLP (DeepSeek's first_k_dense_replace)
    moe_layer_freq: int = 1  # every n-th layer after those is MoE (Qwen's decoder_sparse_step)
    sliding_window: int = 0  # attention window in tokens (0: full attention)
    window_every_layer: bool = True  # the window is on every layer (False: on some, e.g. Gemma-2's alternation)
    attention_bias: bool = False
    architecture: str = ""  # the HF model_type it came from ("" for the hand-written registry)
    # multi-head latent attention (DeepSeek-V2/V3): the cache holds one latent of kv_lora_rank + qk_rope_head_dim
    # per token and layer; head_dim is then the no-position part of a query / key head (qk_nope_head_dim)
    kv_lora_rank: int = 0  # 0: ordinary (grouped-query) attention
    q_lora_rank: int = 0  # 0: queries projected directly from the hidden state
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    kv_dtype_bytes: int = 0  # bytes per cached K / V value when not the weights' (fp8 weights: 2; fp8 KV: 1)
    # the token embeddings' width when narrower than hidden (OPT-350m's word_embed_proj_dim: 512 for 1024), with a
    # project_in (embeddings -> hidden) and a project_out (hidden -> the LM head); 0: the embeddings are hidden wide
    embed_dim: int = 0

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
    def attention_flops_per_pair(self) -> int:
        """FLOPs of one (query, key) pair over every head of a layer: QK^T and PV at 2 FLOPs per multiply-add.
        Latent attention's prefill runs decompressed: keys of head_dim + qk_rope_head_dim, values of v_head_dim."""
        qk = self.head_dim + self.qk_rope_head_dim
        return 2 * self.n_heads * (qk + (self.v_head_dim or self.head_dim))

    def kv_shards(self, tp: int) -> int:
        """Over how many of ``tp`` ranks the KV cache is split. vLLM gives each rank its share of the KV heads but
        at least one (heads are replicated when ``tp`` exceeds them), and every rank keeps the whole latent of
        multi-head latent attention; a GPU's KV bytes per token are ``kv_bytes_per_token / kv_shards(tp)``."""
        if self.kv_lora_rank:
            return 1
        return max(1, min(tp, self.n_kv_heads))

    @property
    def attention_params(self) -> int:
        """One layer's attention GEMM weights (QKV and output projection)."""
        if self.kv_lora_rank:
            return self.latent_attention_params
        return self.hidden * (self.q_dim + 2 * self.kv_dim) + self.q_dim * self.hidden

    @property
    def latent_attention_params(self) -> int:
        """Multi-head latent attention's projections: queries (through a low-rank ``q_lora_rank`` when set), the
        shared KV latent and its per-head up-projection, and the output (DeepSeek-V2's layout)."""
        qk_head = self.head_dim + self.qk_rope_head_dim
        q = self.n_heads * qk_head
        q_proj = self.hidden * self.q_lora_rank + self.q_lora_rank * q if self.q_lora_rank else self.hidden * q
        kv_down = self.hidden * (self.kv_lora_rank + self.qk_rope_head_dim)
        kv_up = self.kv_lora_rank * self.n_heads * (self.head_dim + self.v_head_dim)
        return q_proj + kv_down + kv_up + self.n_heads * self.v_head_dim * self.hidden

    def mlp_params(self, width: int) -> int:
        """Weights of one MLP of ``width`` (gate, up and down when gated; up and down otherwise)."""
        return (3 if self.gated_mlp else 2) * self.hidden * width

    @property
    def layer_linear_params(self) -> int:
        """Weights of the per-layer GEMMs (QKV, O, MLP); norms and biases are negligible. For a MoE model, the
        per-layer average of the weights one token uses (so ``2 * n_layers * layer_linear_params`` is its FLOPs)."""
        if self.is_moe:
            return round(self.active_linear_params / self.n_layers)
        return self.attention_params + self.mlp_params(self.intermediate)

    @property
    def embed_width(self) -> int:
        return self.embed_dim or self.hidden

    @property
    def embed_projection_params(self) -> int:
        """project_in and project_out between narrower embeddings and the hidden size (0 without)."""
        return 2 * self.hidden * self.embed_dim if self.embed_dim and self.embed_dim != self.hidden else 0

    @property
    def vocab_params(self) -> int:
        """The token embeddings and, untied, the LM head's own vocabulary projection."""
        return self.vocab * self.embed_width * (1 if self.tied_embeddings else 2)

    @property
    def embedding_params(self) -> int:
        return self.vocab_params + self.embed_projection_params

    @property
    def lm_head_params(self) -> int:
        """The weights a token's logits pass through: project_out (when the embeddings are narrower) and the
        vocabulary projection."""
        return self.vocab * self.embed_width + self.embed_projection_params // 2

    @property
    def n_params(self) -> int:
        """Every weight (a MoE model's total, all experts counted)."""
        if self.is_moe:
            return self.linear_params(self.n_experts) + self.embedding_params
        return self.n_layers * self.layer_linear_params + self.embedding_params

    @property
    def active_params(self) -> int:
        """The weights one token passes through: a MoE model's top-k routed experts, not all of them."""
        if self.is_moe:
            return self.active_linear_params + self.embedding_params
        return self.n_params

    # -- mixture of experts --------------------------------------------------------------------------------------

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def n_moe_layers(self) -> int:
        """Layers whose MLP is a MoE block: after ``first_dense_layers``, every ``moe_layer_freq``-th."""
        if not self.is_moe:
            return 0
        return count_moe_layers(self.n_layers, self.first_dense_layers, self.moe_layer_freq, self.architecture)

    @property
    def n_dense_layers(self) -> int:
        return self.n_layers - self.n_moe_layers

    @property
    def expert_params(self) -> int:
        """One routed expert's MLP weights."""
        return self.mlp_params(self.moe_intermediate) if self.is_moe else 0

    @property
    def shared_expert_params(self) -> int:
        """The shared experts' MLP weights in one MoE layer (0 without shared experts)."""
        width = self.shared_intermediate or self.n_shared_experts * self.moe_intermediate
        return self.mlp_params(width) if self.is_moe and width else 0

    @property
    def router_params(self) -> int:
        """One MoE layer's gate: hidden x experts."""
        return self.hidden * self.n_experts

    @property
    def routed_expert_params_total(self) -> int:
        """Every routed expert of every MoE layer: what expert parallelism spreads over GPUs."""
        return self.n_moe_layers * self.n_experts * self.expert_params

    def linear_params(self, experts: int) -> int:
        """All layers' GEMM weights counting ``experts`` routed experts per MoE layer."""
        moe = self.router_params + experts * self.expert_params + self.shared_expert_params
        return (self.n_layers * self.attention_params + self.n_dense_layers * self.mlp_params(self.intermediate)
                + self.n_moe_layers * moe)

    @property
    def active_linear_params(self) -> int:
        return self.linear_params(self.experts_per_token) if self.is_moe else self.n_layers * self.layer_linear_params

    @property
    def activation_bytes(self) -> int:
        """Bytes per hidden-state value between layers, what all-reduces and all-to-alls move: 16-bit, also for
        fp8 weights (vLLM keeps the hidden states in the model's 16-bit dtype)."""
        return max(2, self.dtype_bytes)

    @property
    def embedding_dtype_bytes(self) -> int:
        """Bytes per embedding / vocabulary-projection weight: 16-bit also in an fp8 checkpoint (vLLM quantises its
        linear layers; compressed-tensors targets them and ignores lm_head)."""
        return max(2, self.dtype_bytes)

    @property
    def weight_bytes(self) -> int:
        return (self.n_params - self.vocab_params) * self.dtype_bytes + self.vocab_params * self.embedding_dtype_bytes

    @property
    def lm_head_bytes(self) -> int:
        """The bytes the LM head reads: its vocabulary projection and, with narrower embeddings, project_out."""
        return (self.vocab * self.embed_width * self.embedding_dtype_bytes
                + self.embed_projection_params // 2 * self.dtype_bytes)

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V for every layer: 2 * L * n_kv * d_head * dtype bytes (latent attention: one latent of
        kv_lora_rank + qk_rope_head_dim per layer)."""
        dtype = self.kv_dtype_bytes or self.dtype_bytes
        if self.kv_lora_rank:
            return self.n_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * dtype
        return 2 * self.n_layers * self.kv_dim * dtype


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
    _llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000, max_position=32768, sliding_window=4096,
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
    # Models people serve today, from their HF config.json (parameters checked against the published sizes in
    # tests/perf): Llama-3.1-70B, Qwen3-32B, and three mixtures of experts.
    _llama("llama-3.1-70b", 80, 8192, 64, 8, 28672, 128256, max_position=131072,
           hf_id="meta-llama/Llama-3.1-70B", architecture="llama"),
    _llama("qwen3-32b", 64, 5120, 64, 8, 25600, 151936, head_dim=128, max_position=40960, hf_id="Qwen/Qwen3-32B",
           architecture="qwen3"),
    _llama("qwen3-30b-a3b", 48, 2048, 32, 4, 6144, 151936, head_dim=128, max_position=262144,
           hf_id="Qwen/Qwen3-30B-A3B", aliases=("qwen3-30b-a3b-instruct-2507", "Qwen/Qwen3-30B-A3B-Instruct-2507"),
           n_experts=128, experts_per_token=8, moe_intermediate=768, architecture="qwen3_moe"),
    _llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, max_position=32768, hf_id="mistralai/Mixtral-8x7B-v0.1",
           aliases=("mixtral-8x7b-v0.1",), n_experts=8, experts_per_token=2, moe_intermediate=14336,
           architecture="mixtral"),
    _llama("phi-mini-moe", 32, 4096, 32, 8, 960, 32064, head_dim=128, max_position=4096,
           hf_id="microsoft/Phi-mini-MoE-instruct", aliases=("phi-mini-moe-instruct",), n_experts=16,
           experts_per_token=2, moe_intermediate=960, sliding_window=2047, attention_bias=True,
           architecture="phimoe"),
]

MODELS: dict[str, ModelSpec] = {m.name: m for m in _MODELS}
# the hand-written registry: their profiles are their own files or the roofline, so their results never move
BUILTIN: frozenset[ModelSpec] = frozenset(_MODELS)


def register_model(spec: ModelSpec) -> None:
    """Add a model (e.g. from a HF ``config.json``); later definitions replace earlier ones."""
    MODELS[spec.name.lower()] = spec


@dataclass(frozen=True)
class _ReadConfig:
    """A config file's model and the file's identity when it was read: (inode, modification time, size)."""

    stamp: tuple[int, int, int]
    spec: ModelSpec


# configs read from disk, by the resolved path of the config.json: one file is read once however it is spelled, and
# again once it changed (another inode, modification time or size: an edit, a file replaced, a new download)
_FROM_FILES: dict[Path, _ReadConfig] = {}
# names a config file registered for its model: name -> (that file, its model), so the file's next version takes
# its name over, and another file's model of the same name is told apart (registered_twin)
_NAMED_BY_FILE: dict[str, tuple[Path, ModelSpec]] = {}


def get_model(name: str) -> ModelSpec:
    """A model by registry name, alias or Hugging Face id; or by a ``config.json`` path (file or folder); or by a
    Hugging Face id whose config is in the local hub cache. Anything else is one line listing the three forms.
    A path always gives the model of the file at that path now (:func:`model_of_config`), never a registered one."""
    known = None if looks_like_path(name) else registered_model(name)
    if known is not None and (name.lower() in MODELS or name_source(known) is None):
        return known
    found = config_path(name)  # (an id a config file gave its model: the hub cache's snapshot now comes first)
    if found is not None:
        return model_of_config(found)
    if known is None:
        raise ConfigError(
            f"unknown model {name[:200]!r}: give a registered name ({', '.join(sorted(MODELS))}), a Hugging Face "
            f"id (org/name) whose config.json is in the local hub cache ({hub_cache_dir()}), or the path of a "
            f"config.json or its folder ({PATH_FORMS}; a plain name is never read from the working directory; "
            "Python: llmsim.perf.models.from_hf_config)")
    return known


def registered_model(name: str) -> ModelSpec | None:
    """The registered model of that name, alias or Hugging Face id (case-insensitive), if any."""
    key = name.lower()
    if key in MODELS:
        return MODELS[key]
    for spec in MODELS.values():
        if key in (a.lower() for a in spec.aliases) or key == spec.hf_id.lower():
            return spec
    return None


def model_of_config(found: Path) -> ModelSpec:
    """The model of the config file (or folder) ``found`` as the file is now, read once per version of the file.
    Its name is registered (planning and the profiles pass names on) unless another model holds it: then a model
    of other shapes is named after the file's absolute path instead (:func:`registered_twin`)."""
    file, stamp = config_identity(found)
    cached = _FROM_FILES.get(file)
    if cached is None or cached.stamp != stamp:
        _FROM_FILES.pop(file, None)
        release_names(file)  # (its earlier version is not another model of its name)
        spec = registered_twin(from_hf_config(str(found)), os.path.abspath(found))
        cached = _FROM_FILES[file] = _ReadConfig(stamp, spec)
    claim_name(cached.spec, file)
    return cached.spec


def release_names(file: Path) -> None:
    """Unregister the names ``file`` registered for its model: the file is read again and names its model anew."""
    for key, (owner, spec) in list(_NAMED_BY_FILE.items()):
        if owner == file:
            del _NAMED_BY_FILE[key]
            if MODELS.get(key) is spec:
                del MODELS[key]


def claim_name(spec: ModelSpec, file: Path) -> None:
    """Register a config's model by its name unless the name is taken or a path (a path reaches the file)."""
    key = spec.name.lower()
    if key not in MODELS and not looks_like_path(spec.name):
        register_model(spec)
        _NAMED_BY_FILE[key] = (file, spec)


def name_source(spec: ModelSpec) -> Path | None:
    """The config file a registered model was read from (None: the hand-written registry or register_model)."""
    entry = _NAMED_BY_FILE.get(spec.name.lower())
    return entry[0] if entry is not None and entry[1] is spec and MODELS.get(spec.name.lower()) is spec else None


# fields that do not change what a step costs: names, and the context length (a limit, not a shape)
NOT_ARCHITECTURE = ("name", "hf_id", "aliases", "architecture", "max_position")


def architecture_diff(a: ModelSpec, b: ModelSpec) -> list[str]:
    """The fields in which two specs differ in compute or memory (every field but names and context length): an
    empty list means a profile measured for one is the other's measurement."""
    diff = [f.name for f in fields(ModelSpec)
            if f.name not in NOT_ARCHITECTURE and getattr(a, f.name) != getattr(b, f.name)]
    if not diff and a.n_moe_layers != b.n_moe_layers:  # (the MoE layer pattern depends on the family)
        diff.append("architecture")
    return diff


def same_architecture(a: ModelSpec, b: ModelSpec) -> bool:
    """Whether two specs cost the same, step for step and byte for byte (window, dtype and bias included)."""
    return not architecture_diff(a, b)


def architecture_twins(spec: ModelSpec) -> list[ModelSpec]:
    """Registered models under another name with exactly ``spec``'s architecture, those of its context length
    first (the closest kin: Llama-3.1-8B for a Llama-3.1-8B fine-tune, not Llama-3-8B), then in registry order:
    their measured profiles are ``spec``'s (llmsim.perf.profile_table.measured_loader). None for a model of the
    hand-written registry: Vicuna-7B keeps the roofline where only Llama-2-7B was measured, as before."""
    if spec in BUILTIN:
        return []
    twins = [m for m in MODELS.values() if m.name != spec.name and same_architecture(m, spec)]
    return sorted(twins, key=lambda m: m.max_position != spec.max_position)


def registered_twin(spec: ModelSpec, source: str) -> ModelSpec:
    """The registered model a config describes (by name, alias or HF id, with the same architecture), so its
    measured profiles apply; a config that reuses a registered name with another architecture (any dimension,
    dtype or window) is modelled from its own numbers and renamed after its file, so no profile measured for the
    registered model is ever applied to it, and a warning names the differing keys."""
    keys = {spec.name.lower(), spec.hf_id.lower()} - {""}
    for known in MODELS.values():
        names = {known.name.lower(), known.hf_id.lower(), *(a.lower() for a in known.aliases)}
        if keys & names:
            diff = architecture_diff(known, spec)
            if not diff:  # (its own context length wins: a config may extend it with rope_scaling)
                return known if known.max_position == spec.max_position else replace(
                    known, max_position=spec.max_position)
            if diff == ["kv_dtype_bytes"]:  # an fp8 KV cache: the profiles apply, scaled (llmsim.perf.profile)
                return replace(spec, name=source)
            differs = ", ".join(f"{k}={getattr(spec, k)} (not {getattr(known, k)})" for k in diff)
            other = name_source(known)
            if other is None:
                warnings.warn(f"HF config {source}: named like the registered model {known.name!r} but its "
                              f"{differs}; modelled from its own config, no profile of {known.name} applies",
                              stacklevel=4)
            else:
                warnings.warn(f"HF config {source}: its model is named {known.name!r} like the model of {other} "
                              f"but its {differs}; it is named {source} instead ({known.name!r} stays the model "
                              f"of {other})", stacklevel=4)
            return replace(spec, name=source)
    return spec


def from_hf_config(path: str, name: str | None = None, register: bool = False) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face ``config.json`` (a file or the folder holding one).

    ``name`` defaults to the config's ``_name_or_path`` or the file's / folder's name. Architectures llmsim cannot
    model (llmsim.perf.hf_config) are refused with a ConfigError naming the file and what is missing.
    """
    _, kwargs = spec_fields(path)
    if name:
        kwargs["name"] = name
    spec = ModelSpec(**kwargs)
    if register:
        register_model(spec)
    return spec
