"""The live router's picture of its backends: the last scrape of each, plus its own in-flight bookkeeping,
assembled into the public :class:`~llmsim.state.cluster_state.ClusterState` that simulated policies were trained on.

Between scrapes the router dead-reckons: a backend's request count is the scraped count plus what the router
sent it since, minus what finished since (never below the router's own in-flight count: a backend that only
this router feeds is known exactly); the KV blocks of prompts sent since the scrape are added to the scraped
use. A request is "waiting" until its first token streams back, then "running" with the tokens counted so far
(``computed`` = prompt + generated - 1, as the engine's num_computed_tokens). Backends without vLLM's metric
names are routed on the bookkeeping alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from llmsim.serving.config import BackendConfig
from llmsim.serving.pricing import Pricing, resolve
from llmsim.serving.scrape import BackendMetrics
from llmsim.state.cluster_state import ClusterState, InstanceRequests, InstanceState, RequestState

DEFAULT_MAX_MODEL_LEN = 4096  # a backend whose /v1/models does not say (vLLM always does)
DEFAULT_BLOCK_SIZE = 16


@dataclass
class Flight:
    """One request the router has sent to a backend and not yet seen finish."""

    id: int
    prompt_tokens: int
    predicted_output: float | None
    task: str | None
    arrival: float
    generated: int = 0
    started: bool = False  # first token seen

    def row(self) -> RequestState:
        computed = self.prompt_tokens + self.generated - 1 if self.started else 0
        return RequestState(self.id, self.prompt_tokens, self.generated, max(0, computed), self.predicted_output,
                            self.task, self.arrival)


@dataclass
class Backend:
    """One backend's config, health, last scrape and in-flight requests."""

    idx: int
    cfg: BackendConfig
    model: str = ""
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    up: bool = False
    fails: int = 0  # consecutive failed health checks
    oks: int = 0  # consecutive good ones while ejected
    metrics: BackendMetrics | None = None
    scraped_at: float = 0.0
    throughput: float = 0.0
    step_time: float = 0.0
    flights: dict[int, Flight] = field(default_factory=dict)
    sent_since: int = 0  # requests sent since the last scrape
    done_since: int = 0  # requests finished since the last scrape
    blocks_since: int = 0  # prompt KV blocks sent since the last scrape
    refused_status: int | None = None  # 401 / 403: the backend refuses the router's credentials (misconfigured)
    resolved: Pricing | None = None  # its model as policies price it, for the model name it was resolved for

    def __post_init__(self) -> None:
        self.model = self.model or self.cfg.model or ""

    @property
    def name(self) -> str:
        return self.cfg.name

    @property
    def policy_model(self) -> str:
        """The model name policies see (a trained policy's llmsim name for it; the served name by default)."""
        return self.cfg.policy_model or self.model

    @property
    def pricing(self) -> Pricing:
        """What policies price this backend as: resolved once per model name (a failure too), never per decision."""
        if self.resolved is None or self.resolved.model != self.policy_model:
            self.resolved = resolve(self.cfg, self.policy_model)
        return self.resolved

    @property
    def block_size(self) -> int:
        m = self.metrics
        return m.block_size if m is not None and m.block_size else DEFAULT_BLOCK_SIZE

    @property
    def kv_blocks_total(self) -> int:
        """The engine's KV blocks; unknown (no cache_config_info): as many as a full batch of full contexts."""
        m = self.metrics
        if m is not None and m.num_gpu_blocks:
            return m.num_gpu_blocks
        return math.ceil(self.max_model_len * self.cfg.max_num_seqs / self.block_size)

    @property
    def problem(self) -> str:
        """Why the backend is misconfigured, for /health and client errors (``401 from backend b0``); "" if not."""
        return f"{self.refused_status} from backend {self.name}" if self.refused_status else ""

    def headers(self) -> dict[str, str]:
        """What every request to this backend carries: its bearer token or basic credentials, if it has any."""
        return self.cfg.auth_headers()

    def record_scrape(self, m: BackendMetrics, now: float) -> None:
        """Take a new scrape: throughput and step time are the counters' rates since the previous one."""
        prev, prev_t = self.metrics, self.scraped_at
        if prev is not None and now > prev_t:
            if m.generation_tokens is not None and prev.generation_tokens is not None:
                self.throughput = max(0.0, (m.generation_tokens - prev.generation_tokens) / (now - prev_t))
            if m.tpot_count is not None and prev.tpot_count is not None and m.tpot_count > prev.tpot_count:
                self.step_time = (m.tpot_sum - prev.tpot_sum) / (m.tpot_count - prev.tpot_count)
            elif m.running + m.waiting == 0:
                self.step_time = 0.0
        self.metrics, self.scraped_at = m, now
        self.sent_since = self.done_since = self.blocks_since = 0

    def send(self, f: Flight) -> None:
        """The router sent ``f`` here: counted until the next scrape, whose figures then include it."""
        self.flights[f.id] = f
        self.sent_since += 1
        self.blocks_since += -(-f.prompt_tokens // self.block_size)

    def finish(self, request_id: int) -> None:
        if self.flights.pop(request_id, None) is not None:
            self.done_since += 1

    def instance_state(self) -> InstanceState:
        """This backend as a simulated instance: the last scrape dead-reckoned with what was sent and finished since."""
        own = list(self.flights.values())
        started = [f.row() for f in own if f.started]
        queued = [f.row() for f in own if not f.started]
        total_blocks, bs = self.kv_blocks_total, self.block_size
        m = self.metrics
        if m is None:
            running, waiting, swapped, used = len(started), len(queued), 0, self.blocks_since
        else:
            total = max(len(own), int(m.running + m.waiting + m.swapped) + self.sent_since - self.done_since)
            running = min(total, max(int(m.running), len(started)))
            swapped = min(int(m.swapped), total - running)
            waiting = total - running - swapped
            used = round((m.kv_usage or 0.0) * total_blocks) + self.blocks_since
        used = min(total_blocks, used)
        max_prompt = max(0, min(self.max_model_len, total_blocks * bs) - 1)
        return InstanceState(self.idx, self.name, self.policy_model, self.cfg.gpu or "", self.up, running, waiting,
                             swapped, used, total_blocks, bs, self.cfg.max_num_seqs, self.max_model_len, max_prompt,
                             self.step_time, self.throughput, InstanceRequests(tuple(started), tuple(queued), ()),
                             self.cfg.model_spec)


def cluster_state(backends: list[Backend], now: float, central_queue: int, num_arrived: int,
                  mean_output: float) -> ClusterState:
    """The ClusterState a policy decides on (``taken_at``: the oldest backend scrape)."""
    insts = tuple(b.instance_state() for b in backends)
    taken = min((b.scraped_at for b in backends if b.metrics is not None), default=now)
    return ClusterState(now, min(taken, now), central_queue, False, num_arrived, mean_output, insts)
