"""The public, versioned snapshot of a cluster: what any decision (router, env observation, reward) may read.

One type, three producers:

* the simulator builds it from its instances (:meth:`llmsim.cluster.view.ClusterView.state`, or
  ``live_state`` for the exact current state);
* with ``sim.view_staleness = s`` the instance part is the one scraped every ``s`` seconds
  (``taken_at``), as a router behind Prometheus endpoints sees it; the cluster-level part (``now``, the
  router's own queue) is always current;
* a live router builds the same object from plain values: each backend's vLLM ``/metrics`` plus its own
  in-flight bookkeeping (see the table below), so a policy trained on the envs runs unchanged in front of
  real backends.

Layout (``LAYOUT_VERSION = 2``; version 2 appended ``InstanceState.model_spec``): three named tuples (immutable;
a tuple costs a tenth of a frozen dataclass to build, which matters at tens of thousands of states per simulated
minute). Add fields only at the end and bump ``LAYOUT_VERSION`` on any change, so a saved policy can refuse a
layout it was not trained on.
Per-request data hangs off each instance as an :class:`InstanceRequests` (its running, waiting and swapped
requests, and sums over them); the simulator's is filled lazily from the engine at the instant the state
describes, and reading it after the simulation has moved on raises :class:`StaleStateError` (the stale
snapshots of ``view_staleness`` are filled eagerly, at their scrape).

Fields, and where a live router gets each one (``<-``):

ClusterState (the cluster, as the router itself knows it)
  ``now``            time the state describes (s) <- the router's clock
  ``taken_at``       time of the instance metrics (== now when fresh) <- time of the last scrape
  ``central_queue``  requests held undecided by the router, the one being decided included <- its own queue
  ``arrivals_done``  no request will arrive any more <- False (live traffic never ends)
  ``num_arrived``    requests arrived so far <- its counter
  ``mean_output``    mean output tokens of the requests finished so far <- its completions
InstanceState (one engine; the per-request part comes from the router's in-flight bookkeeping)
  ``idx``, ``name``, ``model``, ``gpu``  <- its backend list, ``/v1/models``, the deployment
  ``up``             healthy; the simulator's instances always are <- ``/health`` or scrape success
  ``num_running``, ``num_waiting``  <- ``vllm:num_requests_running``, ``vllm:num_requests_waiting``
  ``num_swapped``    <- ``vllm:num_requests_swapped`` (vLLM V0), else 0
  ``kv_blocks_used`` <- ``vllm:gpu_cache_usage_perc`` (V1: ``vllm:kv_cache_usage_perc``) x ``kv_blocks_total``
  ``kv_blocks_total``, ``block_size``  <- ``vllm:cache_config_info`` labels ``num_gpu_blocks``, ``block_size``
  ``max_num_seqs``   the engine's batch-slot limit <- engine arguments
  ``max_model_len``  context window <- ``/v1/models`` ``max_model_len``
  ``max_prompt_tokens``  longest prompt it can ever serve <- min(max_model_len, blocks x block_size) - 1
  ``step_time``      duration of the engine iteration in progress, 0 when idle <- mean of
                     ``vllm:inter_token_latency_seconds`` over the scrape window
  ``throughput``     output tokens/s over the last scrape interval <- rate of ``vllm:generation_tokens_total``
  ``model_spec``     the model the instance serves, as loaded (a ``llmsim.perf.models.ModelSpec``: its own config's
                     context length and KV bytes per token, its kv_cache_dtype applied), so a router never takes
                     the registry's model of the same name for it; None when unknown (routers then look
                     ``model`` up by name) <- the backend's ``llmsim_model`` (its config.json,
                     ``llmsim.perf.models.get_model``) and ``kv_cache_dtype`` in the router config
  ``detail``         an :class:`InstanceRequests`: ``running``, ``waiting``, ``swapped`` (tuples of
                     RequestState; the queue a request is in is its state) <- its bookkeeping ("waiting"
                     until the first token streams back, then "running")
  derived (properties): ``requests`` (all three queues), ``pending_prefill_tokens`` (prompt and recompute
                     tokens not yet in the KV cache), ``pending_decode_tokens`` (predicted output tokens
                     still to generate, over requests with a prediction), ``context_tokens`` (prompt +
                     generated), ``progress`` (sum of min(1, generated / predicted)), ``num_requests``,
                     ``kv_used_fraction``; ``can_serve(prompt_tokens)``
RequestState (what a router may know of a request; never its true output length)
  ``id``, ``prompt_tokens``, ``task``, ``arrival``  <- the request it received
  ``generated``      output tokens so far <- tokens streamed back
  ``computed``       its context tokens already in the KV cache <- prompt + generated - 1 once the first
                     token has streamed back, else 0
  ``predicted_output``  the predictor's output length, None without one <- its predictor
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from llmsim.errors import ConfigError, LLMSimError
from llmsim.state.request_sums import (
    phase_summary_of,
    sum_context,
    sum_pending_decode,
    sum_pending_prefill,
    sum_progress,
)

LAYOUT_VERSION = 2


class StaleStateError(LLMSimError):
    """Per-request data of a simulator ClusterState read after the simulation moved past its instant."""


class RequestState(NamedTuple):
    """One request on an instance, as a router may know it (never the true output length)."""

    id: int
    prompt_tokens: int
    generated: int
    computed: int  # context tokens already in the KV cache (vLLM's num_computed_tokens)
    predicted_output: float | None
    task: str | None
    arrival: float

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


class InstanceRequests:
    """The requests on one instance (running, waiting, swapped, each in queue order) and sums over them.

    Built from plain tuples of :class:`RequestState` (a live router's bookkeeping). The simulator uses a
    subclass whose rows are the engine's own request objects, read only when asked (they have the same
    attribute names); sums are computed on first use and kept."""

    __slots__ = ("_running", "_waiting", "_swapped", "_memo")

    def __init__(self, running: tuple[RequestState, ...] = (), waiting: tuple[RequestState, ...] = (),
                 swapped: tuple[RequestState, ...] = ()) -> None:
        # (Any: the simulator's subclass keeps the engine's request objects here, read when first asked for)
        self._running: Any = tuple(running)
        self._waiting: Any = tuple(waiting)
        self._swapped: Any = tuple(swapped)
        self._memo: dict[Any, Any] = {}

    @property
    def running(self) -> tuple[RequestState, ...]:
        return self._running

    @property
    def waiting(self) -> tuple[RequestState, ...]:
        return self._waiting

    @property
    def swapped(self) -> tuple[RequestState, ...]:
        return self._swapped

    def _rows(self) -> tuple[Any, Any, Any]:
        """The three queues as sequences of objects with RequestState's attribute names."""
        return self._running, self._waiting, self._swapped

    def head(self, queue: str, n: int) -> tuple[RequestState, ...]:
        """The first ``n`` requests of ``queue`` ("running", "waiting" or "swapped")."""
        return getattr(self, queue)[:n]

    def pending_prefill_tokens(self) -> int:
        v = self._memo.get("prefill")
        if v is None:
            v = self._memo["prefill"] = sum_pending_prefill(*self._rows())
        return v

    def pending_decode_tokens(self) -> float:
        v = self._memo.get("decode")
        if v is None:
            v = self._memo["decode"] = sum_pending_decode(*self._rows())
        return v

    def context_tokens(self) -> int:
        v = self._memo.get("context")
        if v is None:
            v = self._memo["context"] = sum_context(*self._rows())
        return v

    def progress(self) -> float:
        v = self._memo.get("progress")
        if v is None:
            v = self._memo["progress"] = sum_progress(*self._rows())
        return v

    def phase_summary(self, edges: tuple[float, ...], default_prediction: float) -> tuple[int, list[int], float, int]:
        """(requests in prefill, decoding requests per predicted-output bin, least predicted tokens left among
        the decoding ones (inf without any), prompt + generated tokens of the running and swapped ones).

        In prefill: waiting, or running / swapped without an output token yet; the bins are
        ``[0, e0), [e0, e1), ..., [e_last, inf)``; ``default_prediction`` stands in for a missing prediction.
        (Not kept: an observation asks once per state.)"""
        return phase_summary_of(*self._rows(), edges, default_prediction)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, InstanceRequests) and (self.running, self.waiting, self.swapped) == (
            other.running, other.waiting, other.swapped)

    def __hash__(self) -> int:
        return hash((self.running, self.waiting, self.swapped))

    def __repr__(self) -> str:
        n = (len(self.running), len(self.waiting), len(self.swapped))
        return f"InstanceRequests(running={n[0]}, waiting={n[1]}, swapped={n[2]})"


NO_REQUESTS = InstanceRequests()


class InstanceState(NamedTuple):
    """One serving instance (module docstring: meaning and live source of each field)."""

    idx: int
    name: str
    model: str
    gpu: str
    up: bool
    num_running: int
    num_waiting: int
    num_swapped: int
    kv_blocks_used: int
    kv_blocks_total: int
    block_size: int
    max_num_seqs: int
    max_model_len: int
    max_prompt_tokens: int
    step_time: float
    throughput: float
    detail: InstanceRequests = NO_REQUESTS
    model_spec: Any = None  # a llmsim.perf.models.ModelSpec (typed loosely: the state sits beside perf, not above)

    @property
    def running(self) -> tuple[RequestState, ...]:
        return self.detail.running

    @property
    def waiting(self) -> tuple[RequestState, ...]:
        return self.detail.waiting

    @property
    def swapped(self) -> tuple[RequestState, ...]:
        return self.detail.swapped

    @property
    def requests(self) -> tuple[RequestState, ...]:
        """Running, then waiting, then swapped requests."""
        d = self.detail
        return d.running + d.waiting + d.swapped

    @property
    def pending_prefill_tokens(self) -> int:
        """Prompt (and recompute) tokens not yet in the KV cache; a decoding request's one token is not counted."""
        return self.detail.pending_prefill_tokens()

    @property
    def pending_decode_tokens(self) -> float:
        """Predicted output tokens still to generate, over the requests that have a prediction."""
        return self.detail.pending_decode_tokens()

    @property
    def context_tokens(self) -> int:
        """Prompt + generated tokens of every request on the instance."""
        return self.detail.context_tokens()

    @property
    def progress(self) -> float:
        """Sum over requests with a prediction of min(1, generated / predicted output)."""
        return self.detail.progress()

    @property
    def num_requests(self) -> int:
        """Running + waiting + swapped: the queue length that join-shortest-queue compares."""
        return self.num_running + self.num_waiting + self.num_swapped

    @property
    def kv_used_fraction(self) -> float:
        return self.kv_blocks_used / self.kv_blocks_total

    def to_dict(self) -> dict[str, Any]:
        """The instance's fields and its request rows as plain dicts (``detail`` stays out: it is the lazy source)."""
        d = {k: v for k, v in self._asdict().items() if k != "detail"}
        spec = self.model_spec
        if dataclasses.is_dataclass(spec) and not isinstance(spec, type):  # (its fields; ModelSpec(**them) rebuilds it)
            d["model_spec"] = dataclasses.asdict(spec)
        d.update({q: [r.to_dict() for r in getattr(self, q)] for q in ("running", "waiting", "swapped")})
        return d

    def can_serve(self, prompt_tokens: int) -> bool:
        """Whether a prompt of this length fits the context window and the whole KV cache."""
        return prompt_tokens <= self.max_prompt_tokens


class ClusterState(NamedTuple):
    """The cluster as a decision may see it (module docstring). Construct it from plain values."""

    now: float
    taken_at: float
    central_queue: int
    arrivals_done: bool
    num_arrived: int
    mean_output: float
    instances: tuple[InstanceState, ...]
    version: int = LAYOUT_VERSION

    @property
    def num_instances(self) -> int:
        return len(self.instances)

    @property
    def age(self) -> float:
        """How old the instance metrics are (0 when fresh)."""
        return self.now - self.taken_at

    def queue_lengths(self) -> list[int]:
        return [i.num_running + i.num_waiting + i.num_swapped for i in self.instances]

    def check_version(self) -> ClusterState:
        """This state, if its layout is the one this code reads; else a ConfigError naming both versions."""
        if self.version != LAYOUT_VERSION:
            raise ConfigError(f"ClusterState layout version {self.version!r}; this code reads version {LAYOUT_VERSION}")
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain dicts and lists (JSON-ready), e.g. to log a decision or ship a state to a policy server."""
        d = self._asdict()
        d["instances"] = [i.to_dict() for i in self.instances]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClusterState:
        """Inverse of :meth:`to_dict`; a missing or unknown key, or another layout version, is a ConfigError."""
        try:
            insts = []
            for i in d["instances"]:
                i = dict(i)
                queues = [tuple(RequestState(**r) for r in i.pop(q, ())) for q in ("running", "waiting", "swapped")]
                insts.append(InstanceState(**i, detail=InstanceRequests(*queues)))
            return cls(**{**d, "instances": tuple(insts)}).check_version()
        except (KeyError, TypeError) as e:
            raise ConfigError(f"ClusterState.from_dict: {e}") from None
