"""Measured (model, GPU, TP) profiles loaded from the compact YAML files in ``profiles/data``.

File format ``llmsim-profile/1`` (all times in seconds, for the whole model on one TP shard):

* ``dense``: ``tokens`` / ``seconds`` - non-attention work (all layers' GEMMs, norms, activations, RoPE,
  residual adds, embedding, final norm and TP all-reduces) versus tokens in the iteration.
* ``prefill_attention``: ``fixed`` (once per iteration that has a prefill chunk), ``c2`` (per unit of
  sum chunk_len**2) and ``cp`` (per unit of sum chunk_len * cached_context).
* ``decode_attention``: ``fixed`` (once per iteration with decodes), ``per_seq`` and ``per_ctx_token``
  (per KV token read).
* ``lm_head``: ``seqs`` / ``seconds`` - lm_head GEMM plus sampler versus sequences with logits.
* ``overhead``: ``per_iteration`` and ``per_seq`` CPU-side framework time (scheduler, input prep,
  output processing) not hidden behind the GPU.
* ``memory``: ``weight_bytes``, ``kv_bytes_per_token`` (whole model, before TP sharding) and
  ``reserved_bytes`` (activations, CUDA graphs, allocator slack per GPU).
* ``moe`` (mixture-of-experts models only): the expert computation of all MoE layers, as a small grid of
  curves ``tokens`` / ``seconds``, one per number of distinct ``experts`` a batch activates (LLMServingSim's
  moe.csv); a batch of ``t`` tokens is timed at the expected distinct experts of ``t`` tokens
  (:func:`llmsim.perf.moe.expected_distinct_experts`, ``n_experts`` and ``experts_per_token`` recorded here).
* With expert parallelism (``ep`` > 1 when loading) the ``moe`` curves are read at one GPU's share of the EP group
  and an estimated ``alltoall`` part is added (:mod:`llmsim.perf.expert_parallel`).
* ``allreduce`` (tensor-parallel profiles whose operator tables time one GPU's shard only): ``tokens`` /
  ``seconds`` of every layer's all-reduces, on the dense part's token grid (added to it on load).
* ``decode_skew`` (tables that measured skewed decode batches): ``pure``, ``mixed`` and ``mixed_per_inv_n``, the
  fraction of ``t_max - t_mean`` a batch of unequal contexts adds (:mod:`llmsim.perf.decode_skew`).
* ``parts``: for each of the parts above, ``status`` (``measured``, ``fitted`` or ``transferred`` from
  measurements, ``estimated``, ``roofline``) and ``source``; ``provenance``: source data, commits, licenses,
  measurement software.

Evaluation is O(1) after warm-up: tables are Python lists searched with ``bisect`` and the dense and
lm_head terms are cached per integer argument.
"""

from __future__ import annotations

import math
import os
from bisect import bisect_right
from pathlib import Path
from typing import Any

from llmsim.errors import ProfileError, load_yaml_file
from llmsim.perf.decode_skew import DecodeSkew, parse_decode_skew
from llmsim.perf.expert_parallel import ExpertParallelExperts, expert_parallel_weight_bytes
from llmsim.perf.hardware import GpuSpec, get_gpu
from llmsim.perf.kv_budget import kv_capacity_from_bytes
from llmsim.perf.models import ModelSpec, architecture_twins, get_model
from llmsim.perf.moe import expected_distinct_experts
from llmsim.perf.parallel import check_degrees
from llmsim.resources import profile_data_dir

FORMAT = "llmsim-profile/1"
PART_NAMES = ("dense", "prefill_attention", "decode_attention", "lm_head", "overhead", "memory")
STEP_PARTS = ("dense", "prefill_attention", "decode_attention", "lm_head")
# present only where they apply (MoE models, TP shards timed alone, tables that measured skewed decode batches)
OPTIONAL_PARTS = ("moe", "allreduce", "decode_skew")
STATUSES = ("measured", "fitted", "transferred", "estimated", "roofline")
NOT_MEASURED = ("estimated", "roofline")
ALLTOALL_SOURCE = "expert-parallel dispatch + combine per MoE layer over the hardware table's link (perf.parallel)"


class Table:
    """Non-decreasing piecewise-linear function of a positive integer, linear extrapolation past the end."""

    __slots__ = ("xs", "ys", "_cache", "_slope_end", "_slope_start")

    def __init__(self, xs: list[float], ys: list[float]) -> None:
        self.xs = [float(x) for x in xs]
        self.ys = [float(y) for y in ys]
        self._cache: dict[int, float] = {}
        if len(self.xs) >= 2:
            self._slope_end = max(0.0, (self.ys[-1] - self.ys[-2]) / (self.xs[-1] - self.xs[-2]))
            self._slope_start = max(0.0, (self.ys[1] - self.ys[0]) / (self.xs[1] - self.xs[0]))
        else:
            self._slope_end = self._slope_start = 0.0

    def __call__(self, x: int) -> float:
        v = self._cache.get(x)
        if v is not None:
            return v
        xs, ys = self.xs, self.ys
        if x <= xs[0]:
            v = max(0.0, ys[0] - self._slope_start * (xs[0] - x)) if x > 0 else 0.0
            # keep f(0) = 0 <= f(1): a table always starts at x >= 1
        elif x >= xs[-1]:
            v = ys[-1] + self._slope_end * (x - xs[-1])
        else:
            i = bisect_right(xs, x)
            x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
            v = y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        if len(self._cache) < 1_000_000:
            self._cache[x] = v
        return v


def _err(path: Path | str, key: str, msg: str) -> ProfileError:
    return ProfileError(f"profile {path}: key {key!r}: {msg}")


def _get(d: dict, key: str, path: Path | str, prefix: str = "") -> Any:
    full = f"{prefix}.{key}" if prefix else key
    if not isinstance(d, dict) or key not in d:
        raise _err(path, full, "missing")
    return d[key]


def _num(d: dict, key: str, path: Path | str, prefix: str, minimum: float = 0.0) -> float:
    v = _get(d, key, path, prefix)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < minimum:
        raise _err(path, f"{prefix}.{key}", f"expected a finite number >= {minimum}, got {v!r}")
    return float(v)


def _table(d: dict, xkey: str, key: str, path: Path | str) -> Table:
    sub = _get(d, key, path)
    xs = _get(sub, xkey, path, key)
    ys = _get(sub, "seconds", path, key)
    for k, v in ((xkey, xs), ("seconds", ys)):
        if (
            not isinstance(v, list)
            or not v
            or not all(
                isinstance(a, (int, float)) and not isinstance(a, bool) and math.isfinite(a) and a >= 0
                for a in v
            )
        ):
            raise _err(path, f"{key}.{k}", "expected a non-empty list of non-negative numbers")
    if len(xs) != len(ys):
        raise _err(path, key, f"{xkey} has {len(xs)} entries but seconds has {len(ys)}")
    if any(b <= a for a, b in zip(xs, xs[1:])) or xs[0] < 1:
        raise _err(path, f"{key}.{xkey}", "must be strictly increasing and start at >= 1")
    if any(b < a for a, b in zip(ys, ys[1:])):
        raise _err(path, f"{key}.seconds", "must be non-decreasing (step time is monotone)")
    if not any(ys):
        raise _err(path, f"{key}.seconds", "all zero (no timing data)")
    return Table(xs, ys)


def _part_statuses(data: dict, path: Path | str) -> dict[str, str]:
    """``parts.<name>.status`` of every part: where each number came from (measured / transferred / estimated)."""
    parts = _get(data, "parts", path)
    out: dict[str, str] = {}
    for p in PART_NAMES:
        st = _get(_get(parts, p, path, "parts"), "status", path, f"parts.{p}")
        if st not in STATUSES:
            raise _err(path, f"parts.{p}.status", f"expected one of {STATUSES}, got {st!r}")
        out[p] = st
    for p in OPTIONAL_PARTS:
        if p in data:
            st = _get(_get(parts, p, path, "parts"), "status", path, f"parts.{p}")
            if st not in STATUSES:
                raise _err(path, f"parts.{p}.status", f"expected one of {STATUSES}, got {st!r}")
            out[p] = st
    return out


class MoeTable:
    """Time of all MoE layers' experts for a batch of ``t`` tokens: the measured curves of the two numbers of
    distinct experts that bracket the expected number ``t`` tokens activate, interpolated linearly between them."""

    __slots__ = ("n_experts", "top_k", "experts", "rows")

    def __init__(self, n_experts: int, top_k: int, experts: list[float], rows: list[Table]) -> None:
        self.n_experts, self.top_k = n_experts, top_k
        self.experts, self.rows = experts, rows

    def __call__(self, tokens: int) -> float:
        """Uncached: :class:`DenseWithExperts` keeps one value per token count for the hot path."""
        if tokens <= 0:
            return 0.0
        return self.at(tokens, expected_distinct_experts(tokens, self.n_experts, self.top_k))

    def at(self, tokens: float, distinct: float) -> float:
        """The time of ``tokens`` tokens with ``distinct`` experts activated: the bracketing curves, interpolated."""
        xs = self.experts
        if distinct <= xs[0] or len(xs) == 1:
            return self.rows[0](tokens)
        if distinct >= xs[-1]:
            return self.rows[-1](tokens)
        i = bisect_right(xs, distinct)
        f = (distinct - xs[i - 1]) / (xs[i] - xs[i - 1])
        return (1 - f) * self.rows[i - 1](tokens) + f * self.rows[i](tokens)


class DenseWithExperts:
    """The dense table plus the MoE experts, one cached value per token count (the engine's hot path)."""

    __slots__ = ("dense", "moe", "_cache")

    def __init__(self, dense: Table, moe: MoeTable) -> None:
        self.dense, self.moe = dense, moe
        self._cache: dict[int, float] = {}

    def __call__(self, tokens: int) -> float:
        v = self._cache.get(tokens)
        if v is None:
            v = self.dense(tokens) + self.moe(tokens)
            if len(self._cache) < 1_000_000:
                self._cache[tokens] = v
        return v


def _moe_table(data: dict, path: Path | str) -> MoeTable:
    """The ``moe`` section: ``n_experts``, ``experts_per_token``, ``experts`` and one curve per experts value."""
    sec = _get(data, "moe", path)
    n = _num(sec, "n_experts", path, "moe", 1.0)
    k = _num(sec, "experts_per_token", path, "moe", 1.0)
    experts = _get(sec, "experts", path, "moe")
    curves = _get(sec, "curves", path, "moe")
    if not isinstance(experts, list) or not isinstance(curves, list) or len(experts) != len(curves) or not experts:
        raise _err(path, "moe.curves", "expected one curve per entry of moe.experts")
    if any(b <= a for a, b in zip(experts, experts[1:])):
        raise _err(path, "moe.experts", "must be strictly increasing")
    rows = [_table({"curve": c}, "tokens", "curve", f"{path} moe.curves[{i}]") for i, c in enumerate(curves)]
    return MoeTable(int(n), int(k), [float(e) for e in experts], rows)


def _dense_part(data: dict, path: Path | str):
    """The dense table, with the all-reduces added (same token grid) and the MoE experts when present."""
    dense = _table(data, "tokens", "dense", path)
    if "allreduce" in data:
        ar = _table(data, "tokens", "allreduce", path)
        if ar.xs != dense.xs:
            raise _err(path, "allreduce.tokens", "must equal dense.tokens")
        dense = Table(dense.xs, [d + a for d, a in zip(dense.ys, ar.ys)])
    return DenseWithExperts(dense, _moe_table(data, path)) if "moe" in data else dense


class MeasuredProfile:
    """Profile built from measured operator data; implements :class:`llmsim.perf.profile.Profile`."""

    def __init__(
        self,
        data: dict,
        path: Path | str = "<dict>",
        model: ModelSpec | None = None,
        gpu: GpuSpec | None = None,
        ep: int = 1,
    ) -> None:
        if not isinstance(data, dict):
            raise ProfileError(f"profile {path}: expected a mapping at top level, got {type(data).__name__}")
        fmt = _get(data, "format", path)
        if fmt != FORMAT:
            raise _err(path, "format", f"expected {FORMAT!r}, got {fmt!r}")
        self.path = str(path)
        self.data = data
        try:
            self.model = model or get_model(str(_get(data, "model", path)))
            self.gpu = gpu or get_gpu(str(_get(data, "gpu", path)))
        except ProfileError:
            raise
        except Exception as e:  # ConfigError from the registries
            raise ProfileError(f"profile {path}: {e}") from e
        tp = _get(data, "tp", path)
        if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
            raise _err(path, "tp", f"expected an integer >= 1, got {tp!r}")
        self.tp = tp
        self._dense = _dense_part(data, path)
        self._lm = _table(data, "seqs", "lm_head", path)
        pa = _get(data, "prefill_attention", path)
        self._pf_fixed = _num(pa, "fixed", path, "prefill_attention")
        self._pf_c2 = _num(pa, "c2", path, "prefill_attention")
        self._pf_cp = _num(pa, "cp", path, "prefill_attention")
        da = _get(data, "decode_attention", path)
        self._dec_fixed = _num(da, "fixed", path, "decode_attention")
        self._dec_seq = _num(da, "per_seq", path, "decode_attention")
        self._dec_ctx = _num(da, "per_ctx_token", path, "decode_attention")
        ov = _get(data, "overhead", path)
        self._ov_iter = _num(ov, "per_iteration", path, "overhead")
        self._ov_seq = _num(ov, "per_seq", path, "overhead")
        self._check_not_all_zero(path)
        mem = _get(data, "memory", path)
        self.weight_bytes = _num(mem, "weight_bytes", path, "memory", 1.0)
        self.kv_bytes_per_token = _num(mem, "kv_bytes_per_token", path, "memory", 1.0)
        self.reserved_bytes = _num(mem, "reserved_bytes", path, "memory")
        self.parts = _part_statuses(data, path)
        self.decode_skew: DecodeSkew | None = parse_decode_skew(data, path, self._dec_ctx)
        self.ep = ep
        self._spread_experts(path)
        # A profile counts as estimated when a step-time part (GPU work, experts included) is; the CPU overhead,
        # the memory and the all-reduce are modelled and listed separately in describe()["estimated_parts"].
        self.estimated = any(self.parts[p] in NOT_MEASURED for p in (*STEP_PARTS, "moe") if p in self.parts)
        kind = "estimated" if self.estimated else "measured"
        # the registered model measured, when this profile serves another model of the same architecture
        declared = str(data.get("model", ""))
        self.measured_as = declared if model is not None and declared.lower() not in model_names(self.model) else ""
        origin = f" as {self.measured_as}: same architecture" if self.measured_as else ""
        self.name = (f"{self.model.name}@{self.gpu.name}" + (f"-tp{tp}" if tp > 1 else "")
                     + (f"-ep{ep}" if ep > 1 else "") + f" ({kind}{origin})")
        self.provenance = data.get("provenance", {})

    def _check_not_all_zero(self, path: Path | str) -> None:
        """An all-zero group of coefficients is a failed fit or a placeholder, not a measurement."""
        for key, coefs in (
            ("prefill_attention", (self._pf_fixed, self._pf_c2, self._pf_cp)),
            ("decode_attention", (self._dec_fixed, self._dec_seq, self._dec_ctx)),
            ("overhead", (self._ov_iter, self._ov_seq)),
        ):
            if not any(coefs):
                raise _err(path, key, "all coefficients are zero (no timing data)")

    @property
    def expert_curves(self) -> MoeTable | None:
        """The measured ``moe`` curves (None for a dense model), as loaded, before any expert parallelism."""
        moe = self._dense.moe if isinstance(self._dense, DenseWithExperts) else None
        return moe.curves if isinstance(moe, ExpertParallelExperts) else moe

    def _spread_experts(self, path: Path | str) -> None:
        """Expert parallelism over ``ep`` GPUs (llmsim.perf.expert_parallel): the measured experts' curves read at
        this GPU's share, the all-to-alls added (estimated), the routed experts' weights split by ``ep``."""
        if self.ep == 1:
            return
        check_degrees(self.model, self.tp, self.ep)
        if not isinstance(self._dense, DenseWithExperts):
            raise _err(path, "moe", f"expert parallelism (ep={self.ep}) needs the experts' curves; none here")
        self._dense = DenseWithExperts(self._dense.dense,
                                       ExpertParallelExperts(self._dense.moe, self.model, self.gpu, self.tp, self.ep))
        self.weight_bytes = expert_parallel_weight_bytes(self.model, self.weight_bytes, self.tp, self.ep)
        self.parts["alltoall"] = "estimated"

    def with_overhead(self, per_iteration: float | None = None, per_seq: float | None = None,
                      source: str = "override") -> MeasuredProfile:
        """A copy with another CPU overhead (replay what-ifs, llmsim.profiles.calibrate); the rest is shared data."""
        ov = dict(self.data["overhead"])
        if per_iteration is not None:
            ov["per_iteration"] = float(per_iteration)
        if per_seq is not None:
            ov["per_seq"] = float(per_seq)
        parts = dict(self.data["parts"])
        parts["overhead"] = {"status": "estimated", "source": source}
        return MeasuredProfile({**self.data, "overhead": ov, "parts": parts}, f"{self.path} ({source})", self.model,
                               self.gpu, self.ep)

    def without_decode_skew(self) -> MeasuredProfile:
        """A copy without its ``decode_skew`` part: the summed-context model alone (replay what-ifs)."""
        data = {k: v for k, v in self.data.items() if k != "decode_skew"}
        data["parts"] = {k: v for k, v in self.data["parts"].items() if k != "decode_skew"}
        return MeasuredProfile(data, f"{self.path} (no decode_skew)", self.model, self.gpu, self.ep)

    def step_time(
        self, n_tokens: int, n_seqs: int, prefill_c2: int, prefill_cp: int, n_decode: int, decode_ctx: int
    ) -> float:
        t = self._dense(n_tokens) + self._lm(n_seqs) + self._ov_iter + self._ov_seq * n_seqs
        if prefill_c2:
            t += self._pf_fixed + self._pf_c2 * prefill_c2 + self._pf_cp * prefill_cp
        if n_decode:
            t += self._dec_fixed + self._dec_seq * n_decode + self._dec_ctx * decode_ctx
        return t

    def decode_step_fn(self, n: int, spread: int = 0):
        """``ctx -> step_time(n, n, 0, 0, n, ctx)``, bit-identical, with the per-``n`` terms folded once; with a
        ``decode_skew`` part and ``spread = n * max_ctx - sum_ctx`` (constant along a decode run) plus its term.

        step_time adds ``t += fixed + per_seq * n + per_ctx * ctx`` to ``t`` and the engine adds the skew term
        after it; the closure keeps that association so the fast path plans exactly the times stepping computes.
        """
        t0 = self._dense(n) + self._lm(n) + self._ov_iter + self._ov_seq * n
        fs = self._dec_fixed + self._dec_seq * n
        per_ctx = self._dec_ctx
        skew = self.decode_skew
        if spread and skew is not None:
            e = skew.pure_extra(spread)
            return lambda ctx: t0 + (fs + per_ctx * ctx) + e
        return lambda ctx: t0 + (fs + per_ctx * ctx)

    def kv_capacity_tokens(self, gpu_memory_utilization: float) -> int:
        return kv_capacity_from_bytes(
            self.model.name,
            self.gpu,
            self.tp,
            gpu_memory_utilization,
            self.weight_bytes,
            self.kv_bytes_per_token,
            self.reserved_bytes,
            self.model.kv_shards(self.tp),
        )

    def describe(self) -> dict:
        return {
            "name": self.name,
            "kind": "measured",
            "file": self.path,
            "model": self.model.name,
            "gpu": self.gpu.name,
            "tp": self.tp,
            **({"ep": self.ep} if self.ep > 1 else {}),
            "estimated": self.estimated,
            **({"measured_as": self.measured_as} if self.measured_as else {}),
            "parts": dict(self.parts),
            "part_sources": {p: self.data["parts"].get(p, {}).get("source", ALLTOALL_SOURCE if p == "alltoall" else "")
                             for p in self.parts},
            "estimated_parts": [p for p, s in self.parts.items() if s in NOT_MEASURED],
            "source": self.provenance.get("summary", ""),
        }


def model_names(model: ModelSpec) -> set[str]:
    """Every name a profile file may declare ``model`` by (lower case)."""
    return {model.name.lower(), model.hf_id.lower(), *(a.lower() for a in model.aliases)} - {""}


def load_profile_file(path: str | Path, ep: int = 1, model: ModelSpec | None = None) -> MeasuredProfile:
    """Parse and validate one profile YAML (``ep``: its experts spread over that many GPUs; ``model``: the model it
    prices when not the one it declares, one of the same architecture); every error names the file and the key."""
    p = Path(path)
    if p.is_dir():
        raise ProfileError(f"profile file {p}: is a directory; expected a profile YAML file (<gpu>/<model>[-tpN].yaml)")
    if not p.is_file():
        raise ProfileError(f"profile file {p} does not exist")
    return MeasuredProfile(load_yaml_file(p, ProfileError), p, model=model, ep=ep)


def profile_dirs() -> list[Path]:
    """Directories holding ``<gpu>/<model>[-tpN].yaml``: those of ``LLMSIM_PROFILE_PATH`` (os.pathsep
    separated) first, then the shipped profile data (package data, see :mod:`llmsim.resources`)."""
    extra = [Path(d) for d in os.environ.get("LLMSIM_PROFILE_PATH", "").split(os.pathsep) if d]
    return extra + [profile_data_dir()]


def profile_filename(model: str, tp: int) -> str:
    return f"{model}-tp{tp}.yaml" if tp > 1 else f"{model}.yaml"


def find_profile_file(model: str, gpu: str, tp: int = 1) -> Path | None:
    name = profile_filename(model, tp)
    for d in profile_dirs():
        f = d / gpu / name
        if f.is_file():
            return f
    return None


# by the model itself, not its name: two configs may share a name (a file named after a registered model)
_CACHE: dict[tuple[ModelSpec, str, int, int], MeasuredProfile] = {}


def measured_loader(model: ModelSpec, gpu: GpuSpec, tp: int, ep: int = 1) -> MeasuredProfile | None:
    """Loader for :func:`llmsim.perf.profile.register_profile_loader`: the profile file or None; ``ep`` > 1 spreads
    a MoE profile's measured experts over that many GPUs. A model without a file of its own takes the file of a
    registered model of exactly its architecture (a fine-tune, an instruct variant), named as such."""
    key = (model, gpu.name, tp, ep)
    prof = _CACHE.get(key)
    if prof is None:
        f = find_profile_file(model.name, gpu.name, tp)
        if f is not None:
            prof = load_profile_file(f, ep)
            check_declared(prof, f, model, gpu, tp)
            if prof.model != model:  # a config of the registered model with its own context length
                prof = load_profile_file(f, ep, model)
        else:
            twin = next((m for m in architecture_twins(model) if find_profile_file(m.name, gpu.name, tp)), None)
            if twin is None:
                return None
            f = find_profile_file(twin.name, gpu.name, tp)
            prof = load_profile_file(f, ep, model)
            check_declared(load_profile_file(f, ep), f, twin, gpu, tp)
        _CACHE[key] = prof
    return prof


def check_declared(prof: MeasuredProfile, f: Path, model: ModelSpec, gpu: GpuSpec, tp: int) -> None:
    """A profile file declares the model, GPU and TP degree its path names; anything else is one line."""
    if prof.model.name != model.name or prof.gpu.name != gpu.name or prof.tp != tp:
        raise ProfileError(
            f"profile {f}: declares model={prof.model.name!r} gpu={prof.gpu.name!r} tp={prof.tp} "
            f"but its path is for model={model.name!r} gpu={gpu.name!r} tp={tp}"
        )


def available_profiles() -> list[tuple[str, str, int]]:
    """(model, gpu, tp) of every profile file found."""
    out = set()
    for d in profile_dirs():
        for f in d.glob("*/*.yaml") if d.is_dir() else []:
            stem = f.stem
            tp = 1
            if "-tp" in stem and stem.rsplit("-tp", 1)[1].isdigit():
                stem, t = stem.rsplit("-tp", 1)
                tp = int(t)
            out.add((stem, f.parent.name, tp))
    return sorted(out)
