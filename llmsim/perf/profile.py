"""Step-time and memory model of one (model, GPU, tensor-parallel degree).

The engine calls :meth:`Profile.step_time` once per iteration, so implementations precompute and
cache: the batch arrives already reduced to a handful of sums.

Batch composition passed to ``step_time``:

* ``n_tokens``  - tokens processed this iteration (prefill chunk tokens + one per decode sequence)
* ``n_seqs``    - sequences whose logits are computed (decodes + prefill chunks)
* ``prefill_c2`` - sum over prefill chunks of chunk_len**2 (causal self-attention inside the chunk)
* ``prefill_cp`` - sum over prefill chunks of chunk_len * cached_context (attention to earlier KV)
* ``n_decode``  - decode sequences
* ``decode_ctx`` - sum of the decode sequences' context lengths (KV tokens read)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

from llmsim.errors import ConfigError, ProfileError
from llmsim.perf.hardware import GpuSpec, get_gpu
from llmsim.perf.kv_budget import kv_capacity_from_bytes
from llmsim.perf.kv_cache_dtype import kv_value_bytes, with_kv_cache_dtype
from llmsim.perf.models import ModelSpec, get_model
from llmsim.perf.moe import moe_layer_flops, moe_layer_weight_bytes
from llmsim.perf.parallel import (
    ALLREDUCES_PER_LAYER,
    alltoall_s,
    check_degrees,
    expert_shards,
    link_bandwidth,
    weight_bytes_per_gpu,
)
from llmsim.perf.profile_table import measured_loader, profile_dirs

# the step-time parts a roofline prices from datasheet numbers (their names as in measured profiles' ``parts``)
ROOFLINE_PARTS = ("dense", "prefill_attention", "decode_attention", "lm_head", "memory")


@runtime_checkable
class Profile(Protocol):
    name: str
    model: ModelSpec
    gpu: GpuSpec
    tp: int
    estimated: bool

    def step_time(
        self, n_tokens: int, n_seqs: int, prefill_c2: int, prefill_cp: int, n_decode: int, decode_ctx: int
    ) -> float: ...

    def kv_capacity_tokens(self, gpu_memory_utilization: float) -> int: ...

    def describe(self) -> dict: ...


def kv_capacity_tokens(
    model: ModelSpec, gpu: GpuSpec, tp: int, gpu_memory_utilization: float, reserved_bytes: float
) -> int:
    """Tokens of KV cache that fit: (util * memory - weight shard - reserve) / KV bytes per token.

    Raises a ConfigError naming the model and GPU when the weights alone do not fit.
    """
    return kv_capacity_from_bytes(model.name, gpu, tp, gpu_memory_utilization, model.weight_bytes,
                                  model.kv_bytes_per_token, reserved_bytes, model.kv_shards(tp))


@dataclass
class RooflineProfile:
    """Analytic roofline: each op costs max(FLOPs / (eff_c * peak), bytes / (eff_m * BW)) + launch.

    Efficiencies default to the values measured on A100/H100/L40S/4090 in shared/specs/profiles_data.md
    section 5; CPU overheads follow vidur's cpu_overheads.csv for vLLM. Marked ``estimated``.

    Parallelism (llmsim.perf.parallel): ``tp`` shards every GEMM and adds two all-reduces per layer; ``ep`` (the
    expert-parallel group, a multiple of ``tp``; vLLM's TP x DP) spreads a MoE model's experts over that many
    GPUs and adds each MoE layer's all-to-all. A MoE layer reads the weights of the distinct experts the step's
    tokens activate (llmsim.perf.moe); with ``ep > tp`` the other ranks of the group (``ep / tp`` data-parallel
    replicas) are assumed as loaded as this one.
    """

    model: ModelSpec
    gpu: GpuSpec
    tp: int = 1
    eff_gemm: float = 0.8
    eff_weight_bw: float = 0.8
    eff_prefill_attn: float = 0.5
    eff_decode_attn: float = 0.85
    kernel_launch_s: float = 8e-6
    kernels_per_layer: int = 7
    iteration_overhead_s: float = 2.0e-3
    per_seq_overhead_s: float = 2.0e-5
    reserved_bytes: float = 1.5e9
    name: str = ""
    estimated: bool = True
    ep: int = 1
    _dense_cache: dict[int, float] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.tp < 1:
            raise ConfigError(f"tensor-parallel degree must be >= 1, got {self.tp}")
        if self.ep > 1:
            check_degrees(self.model, self.tp, self.ep)
        m, g, tp = self.model, self.gpu, self.tp
        if not self.name:
            self.name = f"{m.name}@{g.name}" + (f"-tp{tp}" if tp > 1 else "") + (f"-ep{self.ep}" if self.ep > 1 else "")
        self._flops_per_token = 2.0 * m.n_layers * m.layer_linear_params / tp
        self._weight_read_s = m.n_layers * m.layer_linear_params * m.dtype_bytes / tp / (
            self.eff_weight_bw * g.bandwidth
        )
        self._gemm_rate = self.eff_gemm * g.peak_flops
        self._launch = m.n_layers * self.kernels_per_layer * self.kernel_launch_s
        # causal prefill attention per (query, key) pair: QK^T and PV over this GPU's tp-th of the heads
        self._pf_attn_flop = m.n_layers * m.attention_flops_per_pair / tp
        self._pf_attn_rate = self.eff_prefill_attn * g.peak_flops
        self._kv_bytes_tok = m.kv_bytes_per_token / m.kv_shards(tp)
        # keys an attention layer reads per query at most (0: all); a window on only some layers (Gemma-2) caps
        # none: full attention bounds the truth from above, as the KV accounting does
        self._window = m.sliding_window if m.window_every_layer else 0
        self._dec_attn_bw = self.eff_decode_attn * g.bandwidth
        lm = m.lm_head_params / tp
        self._lm_flop = 2.0 * lm
        self._lm_read_s = m.lm_head_bytes / tp / (self.eff_weight_bw * g.bandwidth)
        # two all-reduces per layer over NVLink/PCIe when sharded (llmsim.perf.parallel.allreduce_s, per token)
        self._ar_bytes_tok = 0.0 if tp == 1 else 2 * m.n_layers * m.hidden * m.activation_bytes * 2 * (tp - 1) / tp
        self._ar_bw = link_bandwidth(g)
        self._ar_latency = m.n_layers * ALLREDUCES_PER_LAYER * g.interconnect_latency_s
        if m.is_moe:
            self._init_moe()

    def _init_moe(self) -> None:
        """Split a MoE model's GEMMs: the shared part (attention, dense layers) and the expert layers."""
        m, tp = self.model, self.tp
        shared = m.n_layers * m.attention_params + m.n_dense_layers * m.mlp_params(m.intermediate)
        self._flops_per_token = 2.0 * shared / tp
        self._weight_read_s = shared * m.dtype_bytes / tp / (self.eff_weight_bw * self.gpu.bandwidth)
        self._expert_shards = expert_shards(tp, self.ep)
        self._ep_group = self.ep // tp if self.ep > 1 else 1  # data-parallel ranks whose tokens meet here

    def _linear_time(self, n_tokens: int) -> float:
        """The GEMMs (weights streamed or compute bound, whichever is slower), kernel launches and collectives."""
        compute = self._flops_per_token * n_tokens / self._gemm_rate
        t = max(compute, self._weight_read_s) + self._launch
        if self._ar_bytes_tok:
            t += self._ar_bytes_tok * n_tokens / self._ar_bw + self._ar_latency
        if self.model.is_moe:
            t += self._experts_time(n_tokens)
        return t

    def _experts_time(self, n_tokens: int) -> float:
        """Every MoE layer: its experts (FLOPs of top-k, weights of the distinct experts activated) and, with
        expert parallelism, the dispatch and combine all-to-all."""
        m = self.model
        group_tokens = n_tokens * self._ep_group
        compute = moe_layer_flops(m, group_tokens) / self._expert_shards / self._gemm_rate
        read = moe_layer_weight_bytes(m, group_tokens) / self._expert_shards / (self.eff_weight_bw * self.gpu.bandwidth)
        routed = n_tokens * m.experts_per_token * m.hidden * m.activation_bytes / self.tp
        return m.n_moe_layers * (max(compute, read) + alltoall_s(routed, self.ep, self.gpu))

    def _dense(self, n_tokens: int) -> float:
        t = self._dense_cache.get(n_tokens)
        if t is None:
            t = self._linear_time(n_tokens)
            self._dense_cache[n_tokens] = t
        return t

    def step_time(
        self, n_tokens: int, n_seqs: int, prefill_c2: int, prefill_cp: int, n_decode: int, decode_ctx: int
    ) -> float:
        t = self._dense(n_tokens) + self.iteration_overhead_s + self.per_seq_overhead_s * n_seqs
        window = self._window
        if prefill_c2:
            # chunk attends to itself causally (c^2 / 2 pairs) and to its cached context (c * p); a sliding
            # window caps each chunk token's cached keys at the window (a bound: the engine passes sums only)
            if window:
                prefill_cp = min(prefill_cp, (n_tokens - n_decode) * window)
            t += self._pf_attn_flop * (0.5 * prefill_c2 + prefill_cp) / self._pf_attn_rate
        if n_decode:
            # a sliding window reads at most ``window`` keys per sequence (the same bound over the batch's sum)
            ctx = decode_ctx if not window else min(decode_ctx, n_decode * window)
            t += self._kv_bytes_tok * ctx / self._dec_attn_bw
        lm_compute = self._lm_flop * n_seqs / self._gemm_rate
        t += lm_compute if lm_compute > self._lm_read_s else self._lm_read_s
        return t

    def kv_capacity_tokens(self, gpu_memory_utilization: float) -> int:
        if self.ep <= 1:
            return kv_capacity_tokens(self.model, self.gpu, self.tp, gpu_memory_utilization, self.reserved_bytes)
        weights = weight_bytes_per_gpu(self.model, self.tp, self.ep) * self.tp
        return kv_capacity_from_bytes(self.model.name, self.gpu, self.tp, gpu_memory_utilization, weights,
                                      self.model.kv_bytes_per_token, self.reserved_bytes,
                                      self.model.kv_shards(self.tp))

    def describe(self) -> dict:
        return {
            "name": self.name,
            "kind": "roofline",
            "model": self.model.name,
            "gpu": self.gpu.name,
            "tp": self.tp,
            "ep": self.ep,
            "estimated": True,
            "parts": {**dict.fromkeys(ROOFLINE_PARTS, "roofline"), "overhead": "assumed"},
            "estimated_parts": [],
            "source": "analytic roofline with efficiencies from shared/specs/profiles_data.md s5",
        }


_PROFILE_LOADERS: list = []


def register_profile_loader(loader) -> None:
    """Let profiles/ plug in measured profiles: ``loader(model, gpu, tp, ep) -> Profile | None``."""
    _PROFILE_LOADERS.append(loader)


def load_profile(model: str | ModelSpec, gpu: str, tp: int = 1, kind: str = "auto", ep: int = 1,
                 kv_cache_dtype: str = "auto") -> Profile:
    """Measured profile when one exists (``kind='auto'`` or ``'measured'``), else the roofline.

    ``model`` is anything :func:`llmsim.perf.models.get_model` resolves: a registered name, a Hugging Face id or a
    ``config.json`` path; or a ModelSpec itself (an instance's model as loaded, which its name may not give).
    ``ep`` > 1 spreads a MoE model's experts over that many GPUs (the roofline prices it; a measured profile reads
    its experts' curves at one GPU's share, llmsim.perf.expert_parallel).
    ``kv_cache_dtype`` is vLLM's (``fp8``: one byte per cached value; llmsim.perf.kv_cache_dtype)."""
    try:
        m = model if isinstance(model, ModelSpec) else get_model(model)
        g = get_gpu(gpu)
        check_degrees(m, tp, ep)  # (vLLM refuses a tp that does not divide the heads)
        kv_value_bytes(kv_cache_dtype)
    except ConfigError as e:
        raise ProfileError(f"cannot load a profile: {e}") from e
    if m.kv_dtype_bytes == 1 and kind in ("auto", "measured"):
        # a checkpoint that declares an fp8 KV cache (llmsim.perf.hf_config): the measured profile of the same
        # model with a 16-bit cache, its cache then made fp8 as kv_cache_dtype fp8 makes it (an explicit one wins)
        prof = _measured(replace(m, kv_dtype_bytes=2 if m.dtype_bytes == 1 else 0), g, tp, ep)
        if prof is not None:
            return with_kv_cache_dtype(prof, "fp8" if kv_cache_dtype == "auto" else kv_cache_dtype)
    return with_kv_cache_dtype(_load(m, g, tp, kind, ep), kv_cache_dtype)


def _measured(m: ModelSpec, g: GpuSpec, tp: int, ep: int) -> Profile | None:
    """The first registered loader's measured profile of ``m``, if any."""
    for loader in _PROFILE_LOADERS:
        prof = loader(m, g, tp, ep)
        if prof is not None:
            return prof
    return None


def _load(m: ModelSpec, g: GpuSpec, tp: int, kind: str, ep: int) -> Profile:
    """load_profile's choice between a measured profile and the roofline."""
    if kind not in ("auto", "measured", "roofline"):
        raise ProfileError(f"profile kind must be auto, measured or roofline, got {kind!r}")
    if kind != "roofline":
        prof = _measured(m, g, tp, ep)
        if prof is not None:
            return prof
        if kind == "measured":
            raise ProfileError(
                f"no measured profile for model {m.name!r} on {g.name} with tp={tp}: expected a file "
                f"<gpu>/{m.name}{f'-tp{tp}' if tp > 1 else ''}.yaml in {_profile_dirs_text()}; "
                "build one with `python -m llmsim.profiles build` or measure it with "
                "`python -m llmsim.profiles measure`"
            )
    return RooflineProfile(m, g, tp, ep=ep)


def profile_for_instance(model: str | ModelSpec, gpu: str, kv_blocks: int = 0, block_size: int = 16) -> Profile:
    """The profile of an instance a router knows only by its public state (model, GPU, KV blocks): its tensor
    parallelism is not reported, so among the degrees the model loads at (1, 2, 4, 8) take the one whose KV cache
    (at the default 0.9 memory use) is closest to ``kv_blocks`` (the smallest when ``kv_blocks`` is 0).

    ``model``: the state's ``model_spec`` when it has one (``llmsim.routing.base.instance_model``), else its model
    name: a config that reuses a registered name (another context length, an fp8 KV cache) is then priced as
    itself, not as the registry's model of that name."""
    found: list[tuple[float, int, Profile]] = []
    last: ProfileError | None = None
    for tp in (1, 2, 4, 8):
        try:
            p = load_profile(model, gpu, tp)
            blocks = p.kv_capacity_tokens(0.9) // max(1, block_size)
        except (ProfileError, ConfigError) as e:
            last = e if isinstance(e, ProfileError) else ProfileError(str(e))
            continue
        if blocks <= 0:
            continue
        found.append((abs(blocks - kv_blocks) if kv_blocks else 0.0, tp, p))
    if not found:
        name = model.name if isinstance(model, ModelSpec) else model
        raise last or ProfileError(f"no profile for model {name!r} on {gpu} at tensor parallelism 1, 2, 4 or 8")
    return min(found, key=lambda x: (x[0], x[1]))[2]


def _profile_dirs_text() -> str:
    return ", ".join(str(d) for d in profile_dirs())


# Measured profiles (profiles/data/<gpu>/<model>[-tpN].yaml) take precedence over the roofline.
register_profile_loader(measured_loader)
