"""The instance table (:func:`instance_table`, saved as ``instances.csv``): how loaded each engine was, in two
ways, because one number misleads: ``busy_fraction`` (share of the run with a batch on the GPU; a memory-bound
decode batch keeps it near 1 even at light load) and ``token_throughput_vs_peak`` (tokens processed per second over
what the profile can reach; low at light load, and below 1 even at saturation when decodes dominate). Read them
together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from llmsim.metrics.sources import EngineSettings, MeasuredCluster
    from llmsim.perf.profile import Profile

PEAK_PROMPT_TOKENS = 512
"""Prompt length of the reference batch that defines ``peak_token_throughput`` (see that function)."""

_KIND_SUFFIXES = (" (measured)", " (roofline)", " (estimated)")


def profile_label(name: str) -> str:
    """A profile's name without the loader's kind suffix: "llama-2-7b@v100-32gb (measured)" names a profile
    *file* whose step times may still be estimated, which reads as a contradiction next to the estimated flag.
    Whether step times are measured is said once, by ``profile_estimated``. A profile measured for another model
    of the same architecture keeps that origin: "... (as llama-3.1-8b: same architecture)"."""
    for suffix in _KIND_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
        kind = suffix[:-1] + " as "
        if name.endswith(")") and kind in name:
            return name.replace(kind, " (as ", 1)
    return name


def peak_token_throughput(profile: Profile, config: EngineSettings) -> float:
    """Tokens/s of the reference peak batch: one prefill-only iteration that fills the token budget.

    The batch is ``k`` prompts of ``p = min(PEAK_PROMPT_TOKENS, max_num_batched_tokens, max_model_len)`` tokens,
    ``k = min(max_num_batched_tokens // p, max_num_seqs)``, no cached context; its step time comes from the
    instance's profile times ``engine.step_time_scale`` (co-location slowdown excluded). A full-budget prefill
    is the engine's most token-efficient iteration (decode batches process one token per sequence and read the
    whole KV cache for it), so no served mix of requests exceeds this rate by more than a few per cent.
    """
    budget = int(config.max_num_batched_tokens or 0)
    p = max(1, min(PEAK_PROMPT_TOKENS, budget, int(config.max_model_len or PEAK_PROMPT_TOKENS)))
    k = max(1, min(budget // p, int(config.max_num_seqs)))
    n = k * p
    t = profile.step_time(n, k, k * p * p, 0, 0, 0) * config.step_time_scale
    return n / t if t > 0 else float("nan")


INSTANCE_COLUMNS: dict[str, str] = {
    "instance": "index of the instance in the cluster",
    "name": "instance name (cluster.instances[].name, or model@gpu#replica)",
    "device": "device shared with co-located instances (empty: a GPU of its own)",
    "model": "model name",
    "gpu": "GPU name",
    "tp": "tensor-parallel degree",
    "profile": "step-time profile, model@gpu[-tpN]",
    "profile_estimated": "True when some GPU step-time part of the profile is estimated (roofline), not measured",
    "policy": "engine batch policy (engine.policy)",
    "role": "mixed, prefill or decode (prefill/decode disaggregation, llmsim.cluster.disagg)",
    "kv_total_blocks": "KV-cache blocks of the instance",
    "finished": "requests completed on it",
    "iterations": "engine iterations run",
    "busy_time_s": "simulated seconds with a batch running",
    "busy_fraction": "busy_time_s / run duration (first arrival to last answer, drops included): near 1 whenever "
                     "requests are always in flight, even at light load",
    "prefill_tokens": "prompt tokens computed (recomputation after preemption included)",
    "output_tokens": "tokens generated",
    "token_throughput": "(prefill_tokens + output_tokens) / run duration, tokens/s",
    "peak_token_throughput": "tokens/s of one full-budget prefill iteration (peak_token_throughput())",
    "token_throughput_vs_peak": "token_throughput / peak_token_throughput: the share of the profile's peak "
                                "token rate used, 0..~1",
    "preemptions": "preemptions on it",
    "swap_outs": "preemptions that swapped to CPU memory",
    "prefix_cache_queries": "prompt tokens looked up in the prefix cache at admission (vLLM prefix_cache_queries)",
    "prefix_cache_hits": "of which found cached: not prefilled (vLLM prefix_cache_hits)",
    "prefix_cache_hit_rate": "prefix_cache_hits / prefix_cache_queries (0 without queries)",
    "prefix_cache_evictions": "cached blocks evicted to make room for new ones",
}
"""The columns of ``instances.csv`` in order, with their meaning (the README's table is generated from this)."""


def instance_table(cluster: MeasuredCluster, duration: float) -> pd.DataFrame:
    """One row per instance, the columns of :data:`INSTANCE_COLUMNS`, over a run of ``duration`` seconds."""
    rows = []
    for inst in cluster.instances:
        prof = inst.profile
        tokens = inst.prefill_tokens + inst.tokens_out
        peak = peak_token_throughput(prof, inst.config)
        throughput = tokens / duration if duration > 0 else 0.0
        name = inst.name
        rows.append({
            "instance": inst.idx, "name": profile_label(name), "device": cluster.instance_configs[inst.idx].device,
            "model": prof.model.name, "gpu": prof.gpu.name, "tp": prof.tp, "profile": profile_label(prof.name),
            "profile_estimated": bool(getattr(prof, "estimated", False)), "policy": inst.config.policy,
            "role": inst.role,
            "kv_total_blocks": inst.kv_total, "finished": inst.finished, "iterations": inst.iterations,
            "busy_time_s": inst.busy_time, "busy_fraction": inst.busy_time / duration if duration > 0 else 0.0,
            "prefill_tokens": inst.prefill_tokens, "output_tokens": inst.tokens_out, "token_throughput": throughput,
            "peak_token_throughput": peak, "token_throughput_vs_peak": throughput / peak if peak > 0 else float("nan"),
            "preemptions": inst.preemptions, "swap_outs": inst.swap_outs,
            "prefix_cache_queries": inst.prefix_queries, "prefix_cache_hits": inst.prefix_hits,
            "prefix_cache_hit_rate": inst.prefix_hits / inst.prefix_queries if inst.prefix_queries else 0.0,
            "prefix_cache_evictions": inst.prefix_evictions,
        })
    return pd.DataFrame(rows, columns=list(INSTANCE_COLUMNS))


def instance_means(inst_df: pd.DataFrame) -> dict[str, float]:
    """Cluster-level summary keys: the instances' mean busy fraction and mean token throughput vs peak."""
    if not len(inst_df):
        return {"mean_busy_fraction": 0.0, "mean_token_throughput_vs_peak": 0.0}
    q, h = int(inst_df["prefix_cache_queries"].sum()), int(inst_df["prefix_cache_hits"].sum())
    return {"mean_busy_fraction": float(inst_df["busy_fraction"].mean()),
            "mean_token_throughput_vs_peak": float(inst_df["token_throughput_vs_peak"].mean()),
            "prefix_cache_queries": q, "prefix_cache_hits": h, "prefix_cache_hit_rate": h / q if q else 0.0}


def profile_notes(cluster: MeasuredCluster) -> list[str]:
    """A note naming the profiles with estimated step times (absolute latencies are less certain there)."""
    estimated = sorted({profile_label(i.profile.name) for i in cluster.instances if getattr(i.profile, "estimated",
                                                                                            False)})
    if not estimated:
        return []
    return ["step times estimated (roofline), not measured, for: " + ", ".join(estimated)]
