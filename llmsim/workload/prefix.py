"""Shared-prefix workloads: system prompts, few-shot templates and multi-turn chats that a prefix cache can reuse.

:class:`SharedPrefixWorkload` (``kind: shared_prefix``) draws chat sessions whose requests carry chained
prefix-block ids (:mod:`llmsim.engine.prefix_cache`), so the engine's prefix cache has something to reuse:

- a session starts at each arrival of the arrival process. Its first prompt is a **system prompt** (with
  probability ``system.prob``, one of ``system.count`` prompts of ``system.tokens`` tokens, picked with
  Zipf(``system.zipf``) popularity), then
  optionally a **few-shot template** (with probability ``fewshot.prob``, one of ``fewshot.count`` templates of
  ``fewshot.tokens`` tokens, Zipf popularity), then a user message;
- each later turn's prompt is the previous turn's prompt + output + a new user message (user message and
  output lengths from a length model), so it repeats the whole previous sequence. The turn arrives an
  exponential think time (mean ``think_time``) after the previous turn *arrived*: an open loop that ignores how
  long the previous turn took to serve, so a turn may arrive before its predecessor finished (its blocks are
  then not yet cached). A session has a number of turns drawn from a length model (``turns``) and ends early
  before a turn whose prompt would exceed ``max_prompt`` tokens (the first turn is always issued);
- ``reuse`` in [0, 1] is the share of sessions whose system prompt and template come from the shared pools;
  the others get private ones of the same lengths. Every random draw is made whatever ``reuse`` is, so for a
  seed changing ``reuse`` only turns private blocks into shared ones: the ideal hit rate is non-decreasing in
  ``reuse`` (from the multi-turn reuse alone at 0).

Requests are yielded lazily in arrival order (pending turns of open sessions wait in a heap). Memory is one
entry per open session holding the ids of its context, at most ``(max_prompt + max output) / hash_block``,
plus the ids of the shared prompts (``system.count * (1 + fewshot.count)`` entries at most).

How much of such a stream (or of a trace) any cache could reuse at best: :mod:`llmsim.workload.prefix_hits`.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmsim.errors import ConfigError
from llmsim.request import Request
from llmsim.workload.arrivals import BATCH, ArrivalProcess
from llmsim.workload.base import Workload, WorkloadStats, check_float, check_int
from llmsim.workload.lengths import Fixed, LengthModel, PairModel
from llmsim.workload.sessions import DEFAULT_HASH_BLOCK, IdCounter, check_hash_block, extend_ids
from llmsim.workload.synthetic import MAX_DURATION_REQUESTS

DEFAULT_MAX_PROMPT = 32768


@dataclass(frozen=True)
class PromptPool:
    """``count`` distinct shared segments of ``tokens`` tokens each, picked with P(rank k) ~ k^-zipf (0: uniform),
    included in a session with probability ``prob``."""

    count: int
    tokens: int
    zipf: float = 1.0
    prob: float = 1.0

    def check(self, name: str) -> PromptPool:
        """This pool with its numbers checked (errors name ``<name>.<key>``)."""
        return PromptPool(check_int(f"{name}.count", self.count, ge=1),
                          check_int(f"{name}.tokens", self.tokens, ge=1, le=10**8),
                          check_float(f"{name}.zipf", self.zipf, ge=0.0, le=10.0),
                          check_float(f"{name}.prob", self.prob, ge=0.0, le=1.0))

    def cdf(self) -> np.ndarray:
        w = np.arange(1, self.count + 1, dtype=np.float64) ** -self.zipf
        c = np.cumsum(w / w.sum())
        c[-1] = 1.0
        return c

    def describe(self) -> dict[str, Any]:
        return {"count": self.count, "tokens": self.tokens, "zipf": self.zipf, "prob": self.prob}


class _Session:
    """An open conversation: the ids of its context (last prompt + output), what comes next."""

    __slots__ = ("sid", "ids", "context", "turn", "turns", "user", "output")

    def __init__(self, sid: int, ids: list[int], context: int, turns: int, user: int, output: int) -> None:
        self.sid = sid
        self.ids = ids  # ids of the context; they cover `context` tokens (their full blocks are reused)
        self.context = context
        self.turn = 1
        self.turns = turns
        self.user = user  # the pending turn's new user message and output
        self.output = output


class _Draws:
    """Samples of a length model, drawn in batches (one stream per purpose keeps runs reproducible)."""

    def __init__(self, model: LengthModel | PairModel, rng: np.random.Generator, batch: int) -> None:
        self.model, self.rng, self.batch = model, rng, batch
        self.buf: list[Any] = []
        self.pos = 0

    def next(self) -> Any:
        if self.pos == len(self.buf):
            s = self.model.sample(self.rng, self.batch)
            self.buf = list(zip(s[0].tolist(), s[1].tolist())) if isinstance(s, tuple) else s.tolist()
            self.pos = 0
        self.pos += 1
        return self.buf[self.pos - 1]


class SharedPrefixWorkload(Workload):
    """Chat sessions sharing system prompts and few-shot templates, each turn extending the last (module doc).

    ``lengths`` samples (user message, output) tokens per turn; ``turns`` the turns per session. Stops at
    ``num_requests`` requests and/or at ``duration`` seconds (one is needed unless the arrival schedule is
    finite). Arrivals, session draws, lengths and think times use independent child streams of ``seed``.
    """

    kind = "shared_prefix"

    def __init__(
        self,
        arrival: ArrivalProcess,
        lengths: PairModel,
        seed: int = 0,
        num_requests: int | None = None,
        duration: float | None = None,
        reuse: float = 1.0,
        system: PromptPool | None = PromptPool(16, 1024),
        fewshot: PromptPool | None = None,
        turns: LengthModel | None = None,
        think_time: float = 30.0,
        max_prompt: int = DEFAULT_MAX_PROMPT,
        hash_block: int = DEFAULT_HASH_BLOCK,
        batch: int = BATCH,
    ) -> None:
        super().__init__()
        if not isinstance(arrival, ArrivalProcess):
            raise ConfigError(f"arrival: expected an ArrivalProcess (GammaArrivals, ...), got {arrival!r}")
        if not isinstance(lengths, PairModel):
            raise ConfigError(f"lengths: expected a PairModel (Independent, Empirical, ...), got {lengths!r}")
        turns = Fixed(1) if turns is None else turns
        if not isinstance(turns, LengthModel):
            raise ConfigError(f"turns: expected a LengthModel (Fixed, Uniform, LogNormal), got {turns!r}")
        self.arrival, self.lengths, self.turns = arrival, lengths, turns
        self.seed = check_int("seed", seed, ge=0)
        self.num_requests = None if num_requests is None else check_int("num_requests", num_requests, ge=1)
        self.duration = None if duration is None else check_float("duration", duration, gt=0.0)
        self.reuse = check_float("reuse", reuse, ge=0.0, le=1.0)
        self.system = None if system is None else system.check("system")
        self.fewshot = None if fewshot is None else fewshot.check("fewshot")
        self.think_time = check_float("think_time", think_time, ge=0.0)
        self.max_prompt = check_int("max_prompt", max_prompt, ge=1, le=10**8)
        self.hash_block = check_hash_block(hash_block)
        self.batch = check_int("batch", batch, ge=1)
        self._check_bound()

    def _check_bound(self) -> None:
        """The stream must end: a request count, or a duration in which a sane number of sessions start."""
        if self.num_requests is not None:
            return
        expected = self.arrival.expected_requests(self.duration)
        if self.duration is None and (expected is None or math.isinf(expected)):
            raise ConfigError("num_requests: expected 'num_requests' or 'duration' (the arrival process is endless)")
        if expected is not None and expected > MAX_DURATION_REQUESTS:
            raise ConfigError(f"duration: expects up to {expected:.3g} sessions; expected at most "
                              f"{MAX_DURATION_REQUESTS:.0e} without an explicit 'num_requests'")

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "seed": self.seed, "arrival": self.arrival.describe(),
            "lengths": self.lengths.describe(), "turns": self.turns.describe(), "reuse": self.reuse,
            "system": None if self.system is None else self.system.describe(),
            "fewshot": None if self.fewshot is None else self.fewshot.describe(),
            "think_time": self.think_time, "max_prompt": self.max_prompt, "hash_block": self.hash_block,
            "num_requests": self.num_requests, "duration": self.duration,
        }

    def _starts(self, rng: np.random.Generator) -> Iterator[float]:
        for times in self.arrival.batches(rng, self.batch):
            yield from times.tolist()

    def _iter(self, stats: WorkloadStats) -> Iterator[Request]:
        arr_seq, sess_seq, len_seq, turn_seq, think_seq = np.random.SeedSequence(self.seed).spawn(5)
        starts = self._starts(np.random.default_rng(arr_seq))
        opener = _Opener(self, np.random.default_rng(sess_seq), _Draws(self.lengths, np.random.default_rng(len_seq),
                         self.batch), _Draws(self.turns, np.random.default_rng(turn_seq), self.batch))
        think = np.random.default_rng(think_seq)
        heap: list[tuple[float, int, _Session]] = []
        seq = 0
        next_start = next(starts, None)
        while heap or next_start is not None:
            if heap and (next_start is None or heap[0][0] <= next_start):
                t, _, s = heapq.heappop(heap)
            else:
                t, s = next_start, opener.open()
                next_start = next(starts, None)
            if self.duration is not None and t >= self.duration:
                stats.stopped = "duration"
                break
            stats.rows_read += 1
            stats.yielded += 1
            yield opener.issue(stats.yielded - 1, t, s)
            if self.num_requests is not None and stats.yielded >= self.num_requests:
                stats.stopped = "num_requests"
                break
            if opener.plan_next(s):
                seq += 1
                gap = float(think.exponential(self.think_time)) if self.think_time > 0 else 0.0
                heapq.heappush(heap, (t + gap, seq, s))
        if stats.yielded == 0:
            raise ConfigError(f"shared_prefix workload: expected at least one request, got none (the arrival process "
                              f"{self.arrival.describe()} started no session before duration={self.duration} s)")


class _Opener:
    """Opens sessions and builds their requests' ids for one iteration (shared-prompt ids are memoised)."""

    def __init__(self, wl: SharedPrefixWorkload, rng: np.random.Generator, lengths: _Draws, turns: _Draws) -> None:
        self.wl, self.rng, self.lengths, self.turns = wl, rng, lengths, turns
        self.counter = IdCounter()
        self.shared: dict[tuple[int, int], list[int]] = {}  # (system, template; -1 = none) -> ids of full blocks
        self.sys_cdf = None if wl.system is None else wl.system.cdf()
        self.shot_cdf = None if wl.fewshot is None else wl.fewshot.cdf()
        self.sys_tokens = 0 if wl.system is None else wl.system.tokens
        self.sys_prob = 0.0 if wl.system is None else wl.system.prob
        self.shot_tokens = 0 if wl.fewshot is None else wl.fewshot.tokens
        self.shot_prob = 0.0 if wl.fewshot is None else wl.fewshot.prob
        self.sessions = 0

    def open(self) -> _Session:
        """A new session: which prompts it starts with (all draws made whatever ``reuse`` is), its first turn."""
        u_share, u_sys, u_has, u_shot, u_has_sys = self.rng.random(5).tolist()
        k = -1
        if self.sys_cdf is not None and u_has_sys < self.sys_prob:
            k = int(np.searchsorted(self.sys_cdf, u_sys, side="right"))
        j = -1
        if self.shot_cdf is not None and u_has < self.shot_prob:
            j = int(np.searchsorted(self.shot_cdf, u_shot, side="right"))
        tokens = (0 if k < 0 else self.sys_tokens) + (0 if j < 0 else self.shot_tokens)
        user, output = self.lengths.next()
        sid = self.sessions
        self.sessions += 1
        if u_share < self.wl.reuse and tokens:
            return _Session(sid, self._shared_ids(k, j), tokens, self.turns.next(), tokens + user, output)
        return _Session(sid, [], 0, self.turns.next(), tokens + user, output)

    def _shared_ids(self, k: int, j: int) -> list[int]:
        """Ids of the full hash blocks of system prompt ``k`` followed by template ``j`` (chained: a template's
        ids differ per system prompt, the system prompt's own ids do not depend on the template)."""
        ids = self.shared.get((k, j))
        if ids is None:
            h = self.wl.hash_block
            s_tok = 0 if k < 0 else self.sys_tokens
            base = self._shared_ids(k, -1) if j >= 0 and k >= 0 else []
            total = s_tok + (0 if j < 0 else self.shot_tokens)
            ids = extend_ids(base, s_tok if j >= 0 else 0, total, h, self.counter)[: total // h]
            self.shared[(k, j)] = ids
        return ids

    def issue(self, rid: int, t: float, s: _Session) -> Request:
        """The pending turn of ``s`` as a request arriving at ``t``; its ids become the session's context."""
        prompt = s.context + s.user if s.turn > 1 else s.user  # turn 1: `user` already holds the shared prefix
        total = prompt + s.output
        s.ids = extend_ids(s.ids, s.context, total, self.wl.hash_block, self.counter)
        s.context = total
        return Request(rid, t, prompt, s.output, hash_ids=tuple(s.ids), hash_block=self.wl.hash_block,
                       extra={"session_id": s.sid, "turn": s.turn})

    def plan_next(self, s: _Session) -> bool:
        """Draw the session's next turn; False when it has ended (turns done, or the prompt would not fit)."""
        if s.turn >= s.turns:
            return False
        s.user, s.output = self.lengths.next()
        if s.context + s.user > self.wl.max_prompt:
            return False
        s.turn += 1
        return True


__all__ = ["DEFAULT_MAX_PROMPT", "PromptPool", "SharedPrefixWorkload"]
