"""RouteBalance's dead-reckoned instance state and latency estimate (the RouteBalance paper's §4.2).

Telemetry is read once per batch; between reads the scheduler updates its own copy after every assignment, so one
batch does not herd onto whichever instance looked idle when the batch formed.

* :class:`Reckoned`: one instance as the scheduler believes it is (the paper's D): running batch size, queue,
  pending decode / prefill tokens, the telemetry's step time, and when it was last assigned a request. It is
  seeded from the view's :class:`~llmsim.state.cluster_state.InstanceState` (a refresh) and updated locally after every
  assignment between refreshes (:meth:`Reckoned.assign`).
* :func:`predicted_latency`: T = tpot x (d / b + L), or tpot x L when the instance has a free decode slot.
* :class:`TpotPriors`: the static per-model decode time per token (the paper's arm-4 prior), with a prior
  derived from the instance's profile for models the table lacks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from llmsim.errors import ConfigError, LLMSimError
from llmsim.perf.profile import profile_for_instance
from llmsim.registry import Registry
from llmsim.routing.base import instance_model, kwarg_number
from llmsim.state.cluster_state import InstanceState

# nominal TPOT, ms/token: the paper's "static per-tier prior" of its isolation arm 4 (the testbed's low-load medians)
DEFAULT_TPOT_MS: dict[str, float] = {"qwen2.5-3b": 12.3, "qwen2.5-7b": 20.6, "qwen2.5-14b": 18.4, "qwen2.5-72b": 47.4}
PROFILE_CONTEXT = 600  # context tokens of the one-sequence decode step a profile-derived prior is read at
# learned TPOT heads: tpot_prior name -> factory(tpot_kwargs) of an object with observe(state) and
# tpot_s(reckoned, prior_s); llmsim.routing.routebalance.predictors registers "xgboost"
TPOT_HEADS: Registry[Callable[[Any], Any]] = Registry("learned TPOT head")
TPOT_HEADS.register_lazy("xgboost", "llmsim.routing.routebalance.predictors:xgb_head")


@dataclass(slots=True)
class Reckoned:
    """One instance in the scheduler's local copy of the telemetry (the paper's "D")."""

    idx: int
    model: str
    up: bool
    running: int  # b_i: the decode batch size (num_running)
    waiting: int  # num_waiting + num_swapped
    pending_decode: float  # d_i: predicted output tokens still to generate
    pending_prefill: int
    max_num_seqs: int
    step_time: float  # telemetry's iteration time (s), 0 when idle
    last_assigned: int = -1  # assignment counter of the last request it got (-1: never); the LRU tiebreak

    @classmethod
    def from_state(cls, inst: InstanceState, last_assigned: int = -1) -> Reckoned:
        return cls(inst.idx, inst.model, bool(inst.up), int(inst.num_running),
                   int(inst.num_waiting + inst.num_swapped), float(inst.pending_decode_tokens),
                   int(inst.pending_prefill_tokens), int(inst.max_num_seqs), float(inst.step_time), last_assigned)

    @property
    def queue(self) -> int:
        """Instantaneous queue depth (running + waiting): the reactive shortest-queue tiebreak."""
        return self.running + self.waiting

    def slot_open(self) -> bool:
        """A free decode slot: fewer running than ``max_num_seqs`` and nobody waiting (the paper's code form)."""
        return self.running < self.max_num_seqs and self.waiting == 0

    def assign(self, prompt_tokens: int, decode_tokens: float, counter: int) -> None:
        """The local update after an assignment (as the paper's code does it): one more waiting, its prompt and
        predicted output."""
        self.waiting += 1
        self.pending_prefill += prompt_tokens
        self.pending_decode += decode_tokens
        self.last_assigned = counter

    def telemetry(self) -> tuple[int, int, float, int, float]:
        """The fields a refresh copies, for comparing D with the view's state."""
        return self.running, self.waiting, self.pending_decode, self.pending_prefill, self.step_time


def telemetry_of(inst: InstanceState) -> tuple[int, int, float, int, float]:
    """What :meth:`Reckoned.telemetry` is right after a refresh from ``inst``."""
    return Reckoned.from_state(inst).telemetry()


def predicted_latency(d: Reckoned, tpot_s: float, length: float, queue_term: bool = True) -> float:
    """Predicted end-to-end latency (s) of a request of ``length`` predicted output tokens on ``d``.

    T = tpot x (d_i / max(b_i, 1) + L), or tpot x L when a decode slot is free or ``queue_term`` is off (the
    static arm 4). d_i / b_i is the number of decode iterations the request waits through."""
    if not queue_term or d.slot_open():
        return tpot_s * length
    return tpot_s * (d.pending_decode / max(d.running, 1) + length)


class TpotPriors:
    """Per-token decode time priors (s) per instance: the ``static_tpot_ms`` table, else the instance's profile.

    ``source="table"``: the table for the models it has (defaults: :data:`DEFAULT_TPOT_MS`), a profile-derived
    prior for the others; ``"profile"``: the profile for every instance. The profile prior is one decode
    step of one sequence at :data:`PROFILE_CONTEXT` tokens of context, read from
    ``llmsim.perf.profile.profile_for_instance`` (the view does not expose tp: it is inferred from the KV cache).
    A model whose profile cannot be loaded needs a table entry (a ConfigError naming
    ``policy.kwargs.static_tpot_ms``)."""

    def __init__(self, table: Mapping[str, Any] | None, source: str) -> None:
        if table is not None and not isinstance(table, Mapping):
            raise ConfigError(f"policy.kwargs.static_tpot_ms: expected a mapping of model to ms/token, got {table!r}")
        if source not in ("table", "profile"):
            raise ConfigError(f"policy.kwargs.tpot_prior: expected 'table' or 'profile', got {source!r}")
        self.table_ms = dict(DEFAULT_TPOT_MS)
        for k, v in (table or {}).items():
            self.table_ms[str(k)] = kwarg_number(f"static_tpot_ms.{k}", v)
        self.source = source
        self._cache: dict[tuple[str, str, str], float] = {}

    def prior_s(self, inst: InstanceState) -> float:
        key = (inst.model, inst.gpu, inst.name, instance_model(inst))
        v = self._cache.get(key)
        if v is None:
            if self.source == "table" and inst.model in self.table_ms:
                v = self.table_ms[inst.model] / 1000.0
            else:
                v = self._from_profile(inst)
            self._cache[key] = v
        return v

    @staticmethod
    def _from_profile(inst: InstanceState) -> float:
        try:
            prof = profile_for_instance(instance_model(inst), inst.gpu, inst.kv_blocks_total, inst.block_size)
        except (LLMSimError, OSError, ValueError) as e:
            raise ConfigError(f"policy.kwargs.static_tpot_ms: no prior for model {inst.model!r} on {inst.gpu} "
                              f"(instance {inst.name}) and its profile does not load ({e}); add "
                              f"static_tpot_ms.{inst.model}") from None
        return float(prof.step_time(1, 1, 0, 0, 1, PROFILE_CONTEXT))
