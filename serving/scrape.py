"""Reading a backend's state from its vLLM ``/metrics`` (Prometheus text) and ``/v1/models``.

vLLM's names (V0 and V1 spellings both accepted; samples summed over label sets, e.g. several engines):

  vllm:num_requests_running / _waiting / _swapped      gauges -> num_running / num_waiting / num_swapped
  vllm:gpu_cache_usage_perc (V0), vllm:kv_cache_usage_perc (V1)   0..1 -> kv_blocks_used / kv_blocks_total
  vllm:cache_config_info{num_gpu_blocks, block_size}   labels -> kv_blocks_total, block_size
  vllm:generation_tokens_total                         counter -> throughput (its rate between scrapes)
  vllm:inter_token_latency_seconds (_sum, _count)      histogram -> step_time (mean over the scrape window)
  vllm:time_per_output_token_seconds (_sum, _count)    the same, per gap, as vLLM named it before 0.11 (read only
                                                       when the first is absent: 0.11 exports both, one sample each)

A backend without some of them (another OpenAI-compatible server) still routes: missing gauges read 0 and the
router's own bookkeeping carries the load (see serving/tracker.py).

Only those samples go through prometheus_client's parser (pure Python, ~0.1 ms a sample): a vLLM exposition has
hundreds of histogram buckets and process metrics the router never reads, and parsing them all at every scrape of
every backend cost the router as much CPU as the requests it routed. The other lines are checked for the form of a
sample (name, optional labels, a number), so a page that is not an exposition is still refused.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

_GAUGES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_requests_swapped": "swapped",
}
_KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
_ITL = ("vllm:inter_token_latency_seconds_sum", "vllm:inter_token_latency_seconds_count")
# its pre-0.11 name (deprecated in 0.11, hidden in 0.12); never vllm:request_time_per_output_token_seconds, whose one
# observation per request (its mean gap) weighs a short answer as much as a long one
_OLD_ITL = ("vllm:time_per_output_token_seconds_sum", "vllm:time_per_output_token_seconds_count")
MAX_GAUGE = 1e9  # requests a backend may count: more (or fewer than none) is not a load, and would overflow sums
_READ = (*_GAUGES, *_KV, "vllm:cache_config_info", "vllm:generation_tokens_total",
         *_ITL, *_OLD_ITL)
_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?[ \t]+(\S+)(?:[ \t]+-?\d+)?[ \t]*")


@dataclass(frozen=True)
class BackendMetrics:
    """One scrape of one backend (None: the backend does not export it)."""

    running: float = 0.0
    waiting: float = 0.0
    swapped: float = 0.0
    kv_usage: float | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    generation_tokens: float | None = None
    tpot_sum: float | None = None
    tpot_count: float | None = None


class MetricsParseError(ValueError):
    pass


def parse_metrics(text: str) -> BackendMetrics:
    """The fields of :class:`BackendMetrics` from a Prometheus text exposition."""
    vals: dict[str, float] = {}
    kv: dict[str, list[float]] = {}
    info: dict[str, int] = {}
    try:
        for fam in text_string_to_metric_families(samples_read(text)):
            for s in fam.samples:
                name, v = s.name, float(s.value)
                if not math.isfinite(v) or (name in _GAUGES and not 0 <= v <= MAX_GAUGE):
                    raise ValueError(f"{name} is {s.value}; expected a finite number"
                                     + (f" in [0, {MAX_GAUGE:g}]" if name in _GAUGES else ""))
                if name in _GAUGES:
                    vals[_GAUGES[name]] = vals.get(_GAUGES[name], 0.0) + v
                elif name in _KV:
                    kv.setdefault(name, []).append(v)
                elif name == "vllm:cache_config_info":
                    for key in ("num_gpu_blocks", "block_size"):
                        if s.labels.get(key, "").isdigit():
                            info[key] = int(s.labels[key])
                elif name == "vllm:generation_tokens_total":
                    vals["gen"] = vals.get("gen", 0.0) + v
                elif name in _ITL or name in _OLD_ITL:
                    key = ("tpot_" if name in _ITL else "old_tpot_") + ("sum" if name.endswith("_sum") else "count")
                    vals[key] = vals.get(key, 0.0) + v
    except ValueError as e:
        raise MetricsParseError(f"not a Prometheus text exposition ({e})") from None
    usage = next((sum(kv[k]) / len(kv[k]) for k in _KV if kv.get(k)), None)
    for key, v in vals.items():  # each sample finite, yet their sum may not be
        if not math.isfinite(v):
            raise MetricsParseError(f"not a usable exposition (vllm:... {key} adds up to {v}; expected a finite "
                                    "number)")
    return BackendMetrics(
        running=vals.get("running", 0.0), waiting=vals.get("waiting", 0.0), swapped=vals.get("swapped", 0.0),
        kv_usage=usage, num_gpu_blocks=info.get("num_gpu_blocks"), block_size=info.get("block_size"),
        generation_tokens=vals.get("gen"), tpot_sum=vals.get("tpot_sum", vals.get("old_tpot_sum")),
        tpot_count=vals.get("tpot_count", vals.get("old_tpot_count")))


def samples_read(text: str) -> str:
    """The sample lines of ``text`` that :func:`parse_metrics` reads, after checking that every line is a comment or
    has a sample's form (a ValueError naming the first that is not)."""
    keep = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.fullmatch(line)
        try:
            if m is None:
                raise ValueError
            float(m.group(3))
        except ValueError:
            raise MetricsParseError(f"line {i} is not a sample: {line[:80]!r}") from None
        if m.group(1) in _READ:
            keep.append(line)
    return "\n".join(keep) + "\n" if keep else ""


def parse_models(body: object) -> tuple[str | None, int | None]:
    """(first model id, its max_model_len) from an OpenAI ``/v1/models`` answer (vLLM adds max_model_len)."""
    if not isinstance(body, dict) or not isinstance(body.get("data"), list) or not body["data"]:
        return None, None
    first = body["data"][0]
    if not isinstance(first, dict):
        return None, None
    mml = first.get("max_model_len")
    ok = isinstance(mml, int) and not isinstance(mml, bool) and mml > 0
    return (str(first["id"]) if "id" in first else None), (mml if ok else None)
