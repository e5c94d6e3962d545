"""Prometheus metrics of one emulated engine, under vLLM's names, in a registry of its own.

Gauges and counters are read from the engine when scraped (a collector that advances the engine to now first),
so a scrape sees the engine state at that instant. The latency histograms are observed as vLLM (0.11 and later)
observes them: the inter-token latency once per gap between two tokens of a request, as its tokens are released;
time to first token once per request, as its first token is out (a request aborted later included); time per
output token and end-to-end latency once per request that finishes (``length`` or ``stop``: vLLM V1's client
aborts leave its output processor without entering any per-request statistic). (vLLM's
``vllm:time_per_output_token_seconds``, the same per-gap histogram under its old name, deprecated in 0.11 and
hidden from 0.12 unless ``--show-hidden-metrics-for-version=0.11``, is not exported.) Durations are wall seconds
as a client measures them against this server: simulated durations / speedup.
Each app has its own :class:`prometheus_client.CollectorRegistry`, so several emulators can share a process.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llmsim.emulator.engine import RealTimeEngine, Ticket

# vLLM's buckets (vllm/v1/metrics/loggers.py), in seconds
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
# (inter-token latency and per-request time per output token alike)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
               960.0, 1920.0, 7680.0)


class _EngineCollector(Collector):
    """Gauges and counters computed from the engine at scrape time."""

    def __init__(self, engine: RealTimeEngine, model_name: str) -> None:
        self.engine = engine
        self.model_name = model_name

    def collect(self) -> Iterator[Metric]:
        e = self.engine
        s = e.snapshot()
        lab = ["model_name"]
        val = [self.model_name]

        def gauge(name: str, doc: str, v: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=lab)
            g.add_metric(val, v)
            return g

        def counter(name: str, doc: str, v: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=lab)
            c.add_metric(val, v)
            return c

        yield gauge("vllm:num_requests_running", "Requests in the running batch.", s["running"])
        yield gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.", s["waiting"])
        yield gauge("vllm:num_requests_swapped", "Requests swapped out to CPU memory.", s["swapped"])
        yield gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage, 0..1 (1 = full).", s["kv_usage"])
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage, 0..1 (1 = full).", s["kv_usage"])
        inst = e.inst
        info = GaugeMetricFamily("vllm:cache_config_info", "Information of the KV cache configuration.",
                                 labels=["model_name", "block_size", "num_gpu_blocks"])
        info.add_metric([self.model_name, str(inst.block_size), str(inst.kv_total)], 1.0)
        yield info
        yield counter("vllm:generation_tokens", "Generated tokens (engine side, aborted requests included).",
                      s["generation_tokens"])
        yield counter("vllm:prompt_tokens", "Prefilled prompt tokens (counted once per request).", s["prompt_tokens"])
        yield counter("vllm:num_preemptions", "Preemptions by the engine.", s["preemptions"])
        ok = CounterMetricFamily("vllm:request_success", "Finished requests by finish reason.",
                                 labels=["model_name", "finished_reason"])
        for reason, n in sorted(e.success.items()):
            ok.add_metric([self.model_name, reason], float(n))
        yield ok
        yield gauge("llmsim:speedup", "Simulated seconds per wall second.", e.speedup)
        yield gauge("llmsim:simulated_time_seconds", "The engine's simulated clock.", s["sim_time"])


class EmulatorMetrics:
    """The registry of one emulator: the engine collector plus the latency histograms."""

    def __init__(self, engine: RealTimeEngine, model_name: str) -> None:
        self.registry = CollectorRegistry()
        self.model_name = model_name
        self.engine = engine
        self.registry.register(_EngineCollector(engine, model_name))
        lab = ["model_name"]
        reg = self.registry
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token (wall seconds).", lab,
                              buckets=TTFT_BUCKETS, registry=reg).labels(model_name)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Inter-token latency, one observation per gap "
                             "between two tokens of a request (wall seconds).", lab, buckets=TPOT_BUCKETS,
                             registry=reg).labels(model_name)
        self.tpot = Histogram("vllm:request_time_per_output_token_seconds", "Mean time per output token after the "
                              "first, one observation per request (0 for a one-token answer; wall seconds).", lab,
                              buckets=TPOT_BUCKETS, registry=reg).labels(model_name)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "End-to-end request latency (wall seconds).", lab,
                             buckets=E2E_BUCKETS, registry=reg).labels(model_name)
        engine.listeners.append(self.observe)
        engine.first_token_listeners.append(self.observe_first_token)
        engine.gap_listeners.append(self.observe_gaps)

    def observe_gaps(self, span: float, gaps: int) -> None:
        """``gaps`` inter-token gaps of one request spanning ``span`` simulated seconds (one gap but where the
        driver's wake-ups merged iterations: their mean, so the sum and count stay exact)."""
        v = span / gaps / self.engine.speedup
        for _ in range(gaps):
            self.itl.observe(v)

    def observe_first_token(self, t: Ticket) -> None:
        """A request's time to first token, observed as its first token is out (as vLLM V1: at the engine step
        that produced it, so a request aborted later is in it too); wall seconds."""
        r = t.req
        self.ttft.observe((r.first_token - r.arrival) / self.engine.speedup)

    def observe(self, t: Ticket) -> None:
        """Record a finished request's per-request latencies (not an aborted one's: vLLM V1 drops a request the
        client aborted from every per-request statistic), simulated durations mapped to wall seconds."""
        r = t.req
        k = self.engine.speedup
        if r.first_token >= 0:
            self.tpot.observe((r.finish - r.first_token) / (r.generated - 1) / k if r.generated > 1 else 0.0)
        self.e2e.observe((r.finish - r.arrival) / k)

    def render(self) -> bytes:
        """The Prometheus text exposition (the engine is advanced to now by the collector)."""
        return generate_latest(self.registry)
