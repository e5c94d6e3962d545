"""The request record that flows through workloads, routers and engines.

A plain ``__slots__`` class rather than a dataclass: millions of these are created and the engine
mutates the lifecycle fields on its hot path, so attribute access must be as cheap as possible.
Construction does not validate (workload readers build millions); the cluster checks every request
when it arrives (:func:`check_request` is the slow path of that check).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from numbers import Integral, Real
from typing import Any

from llmsim.errors import ConfigError

NOT_SET = -1.0
MAX_TOKENS = 10**8  # per prompt or output; far above any context window, far below overflow
# Simulated times stay below this (~31,700 years): there float64 still resolves a 10 us step time, so an
# iteration always moves the clock forward. Beyond it time could stand still, hence a clear error instead.
MAX_SIM_TIME = 1e12


class Request:
    """One inference request: what the client sent, hidden ground truth, and its lifecycle."""

    __slots__ = (
        # identity and client-visible fields
        "id",
        "arrival",
        "prompt_tokens",
        "output_tokens",
        "task",
        "tenant",
        "slo_class",
        "model",  # the model it must be served by (None: any; llmsim.engine.model_host)
        "hash_ids",  # chained prefix-block ids: hash_ids[i] names tokens [0, (i + 1) * hash_block) (prefix_cache)
        "hash_block",  # tokens per hash id (Mooncake: 512)
        "max_tokens",  # the client's cap on output tokens (OpenAI max_tokens; None: no cap beyond the context)
        # ground truth per model, hidden from policies (None when the workload has none)
        "outputs_by_model",
        "quality_by_model",
        # predictor output attached by a router or env (never read by the engine)
        "predicted_output",
        # prompt tokens the engine found in its prefix cache at the last admission (llmsim.engine.prefix_cache)
        "cached_tokens",
        "prefix_state",  # what the engine keeps about its blocks (llmsim.engine.prefix_cache.State)
        # lifecycle, written by the cluster and the engine
        "token_cap",  # an output cap a router imposed for this run (RouteBalance's budget clamp); None: none
        "routed_time",
        "instance",
        "first_scheduled",
        "first_token",
        "finish",
        "preemptions",
        "swaps",
        "evictions",
        "target_tokens",
        "generated",
        "computed",
        "blocks",
        "admit_seq",
        "last_token_time",
        "lazy_mark",
        "lazy_id",
        "swapped",
        "n_new",
        "truncated",
        "dropped",
        "extra",
    )

    def __init__(
        self,
        id: int,
        arrival: float,
        prompt_tokens: int,
        output_tokens: int,
        task: str | None = None,
        tenant: str | None = None,
        slo_class: str | None = None,
        hash_ids: tuple[int, ...] | None = None,
        outputs_by_model: dict[str, int] | None = None,
        quality_by_model: dict[str, float] | None = None,
        extra: dict[str, Any] | None = None,
        model: str | None = None,
        hash_block: int = 512,
        max_tokens: int | None = None,
    ) -> None:
        self.id = id
        self.arrival = arrival
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.task = task
        self.tenant = tenant
        self.slo_class = slo_class
        self.model = model
        self.hash_ids = hash_ids
        self.hash_block = hash_block
        self.max_tokens = max_tokens
        self.outputs_by_model = outputs_by_model
        self.quality_by_model = quality_by_model
        self.extra = extra
        self.predicted_output: float | None = None
        self.reset_lifecycle()

    def reset_lifecycle(self) -> None:
        """Forget any earlier simulation of this request (everything the cluster and engine write)."""
        self.token_cap: int | None = None
        self.routed_time = NOT_SET
        self.instance = -1
        self.first_scheduled = NOT_SET
        self.first_token = NOT_SET
        self.finish = NOT_SET
        self.preemptions = 0
        self.swaps = 0
        self.evictions = 0  # times a policy sent it back to the central queue (llmsim.engine.ops)
        self.target_tokens = self.output_tokens
        self.generated = 0
        self.computed = 0
        self.blocks = 0
        self.admit_seq = 0
        self.last_token_time = NOT_SET
        self.lazy_mark: int | None = None  # a member of an engine's decode cohort: counts exact as of this clock
        self.lazy_id = 0  # that membership's id (llmsim.engine.cohort)
        self.swapped = False
        self.n_new = 0
        self.truncated = False
        self.dropped = ""
        self.cached_tokens = 0
        self.prefix_state: Any = None

    def output_for(self, model: str) -> int:
        """Output length this request would have on ``model`` (per-model ground truth if known)."""
        if self.outputs_by_model is not None:
            n = self.outputs_by_model.get(model)
            if n is not None:
                return n
        return self.output_tokens

    def output_cap(self) -> int | None:
        """The output cap in force: the client's ``max_tokens`` or a router's tighter ``token_cap`` (None: none)."""
        m, t = self.max_tokens, self.token_cap
        if t is not None and (m is None or t < m):
            return t
        return m

    def __repr__(self) -> str:
        return (
            f"Request(id={self.id}, arrival={self.arrival:.6f}, prompt={self.prompt_tokens}, "
            f"output={self.output_tokens}, instance={self.instance})"
        )


class SeenIds:
    """How many requests arrived and their ids, to refuse a second request with one of them: every result (the
    requests and dropped tables, routers' and engines' bookkeeping) is keyed by id, so two requests sharing one
    would be mixed. A workload numbered ``k, k + 1, k + 2, ...`` (every built-in one) costs two integers; other ids
    are kept in a set."""

    __slots__ = ("count", "first", "next", "others")

    def __init__(self) -> None:
        self.count = 0
        self.first: int | None = None
        self.next: int | None = None  # ids [first, next) have arrived, and those in ``others``
        self.others: set[int] = set()

    def add(self, rid: int) -> None:
        """Record the id of the next arriving request; ConfigError if an earlier one had it."""
        self.count += 1
        if rid == self.next and rid not in self.others:
            self.next = rid + 1
        elif self.first is None or self.next is None:
            self.first, self.next = rid, rid + 1
        elif self.first <= rid < self.next or rid in self.others:
            raise ConfigError(f"request {rid}: duplicate id (arrival #{self.count} has the id of an earlier request); "
                              "results are keyed by id, so give every request its own (e.g. number them in order)")
        else:
            self.others.add(rid)


def iter_workload(workload: Any) -> Iterator[Any]:
    """The workload's iterator; a non-iterable (``None``, a single request) is one clear error, not a TypeError."""
    if not isinstance(workload, Iterable):
        raise ConfigError(f"workload: expected an iterable of llmsim.Request, got {type(workload).__name__}")
    return iter(workload)


def check_request(r: Any, prev_arrival: float, first: bool) -> Request:
    """Validate one arriving request: raise naming the request and field, or normalise numpy scalars.

    ``prev_arrival`` is the previous request's arrival (for the first one, the simulation start). The
    cluster calls this only when its one-line fast check fails, so a valid Python-typed request costs
    nothing here; numpy integers and floats are converted in place so later arithmetic stays exact.
    """
    if not isinstance(r, Request):
        raise ConfigError(f"workload yielded {type(r).__name__} {r!r:.80}; expected an llmsim.request.Request")
    rid = r.id
    if isinstance(rid, bool) or not isinstance(rid, Integral):
        raise ConfigError(f"request {rid!r}: id must be an integer, got {type(rid).__name__}")
    r.id = rid = int(rid)
    for name in ("prompt_tokens", "output_tokens"):
        v = getattr(r, name)
        if isinstance(v, bool) or not isinstance(v, Integral) or not 1 <= v <= MAX_TOKENS:
            raise ConfigError(f"request {rid}: {name} must be an integer in [1, {MAX_TOKENS}], got {v!r}")
        setattr(r, name, int(v))
    m = r.max_tokens
    if m is not None:
        if isinstance(m, bool) or not isinstance(m, Integral) or not 1 <= m <= MAX_TOKENS:
            raise ConfigError(f"request {rid}: max_tokens must be None or an integer in [1, {MAX_TOKENS}], got {m!r}")
        r.max_tokens = int(m)
    if r.hash_ids is not None:
        h = r.hash_block
        if isinstance(h, bool) or not isinstance(h, Integral) or h < 1:
            raise ConfigError(f"request {rid}: hash_block must be an integer >= 1 (tokens per hash id), got {h!r}")
        r.hash_block = int(h)
    a = r.arrival
    if isinstance(a, bool) or not isinstance(a, Real) or not math.isfinite(a):
        raise ConfigError(f"request {rid}: arrival must be a finite number of seconds, got {a!r}")
    a = float(a)
    if a > MAX_SIM_TIME:
        raise ConfigError(f"request {rid}: arrival {a:g} s is past the simulated horizon of {MAX_SIM_TIME:g} s "
                          "(where float64 time cannot resolve a step); are the arrivals absurdly far apart "
                          "(e.g. a tiny workload.rate)?")
    if a < prev_arrival:
        if first:
            raise ConfigError(f"request {rid}: arrival must be >= {prev_arrival} (when the simulation starts), "
                              f"got {a}")
        raise ConfigError(f"workload is not sorted by arrival: request {rid} arrives at {a} after a request at "
                          f"{prev_arrival}")
    r.arrival = a
    return r
