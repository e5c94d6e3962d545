"""Real-time driver of one llmsim engine: simulated time tracks (wall time since start) x speedup.

One :class:`~llmsim.engine.instance.Instance` runs on its own :class:`~llmsim.event_loop.SimEnv`. Nothing here steps the
engine ahead of the wall clock: :meth:`RealTimeEngine.advance` processes every engine event up to *now*
(simulated), moves the clock to now and materialises the decode run in progress up to its last boundary <= now,
so requests, KV blocks and counters are exactly what the engine has at this instant. HTTP arrivals are submitted
at that instant, so continuous batching, preemption and KV limits are the real engine's.

Token release: after each advance, every open request's newly generated tokens are handed to its stream. The
driver sleeps (an asyncio timer, never a busy loop) until the next thing that can change a stream: the next
engine event or the next boundary of the decode run in progress (each fast-path iteration end is known in
advance, ``DecodeRun.bounds``), but never less than ``min_tick`` wall seconds. A token is therefore released at
its simulated time mapped to wall time, late by at most ``min_tick`` plus event-loop latency, never early.
An arrival or abort wakes the driver at once (it advances and re-plans its timer).

Simulation results do not depend on when the driver wakes: events are processed in simulated order whatever
the lateness; only arrival instants come from the wall clock.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import os
import random
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from llmsim.cluster import InstanceConfig
from llmsim.emulator.model_names import model_source
from llmsim.engine.config import EngineConfig
from llmsim.engine.instance import Instance
from llmsim.errors import ConfigError
from llmsim.event_loop import OBSERVE, ROUTE, SimEnv
from llmsim.metrics.recorder import Recorder
from llmsim.request import Request

log = logging.getLogger("llmsim.emulator")

OUTPUT_LEN_MODES = ("max_tokens", "sampled")
SAMPLED_MEDIAN = 150.0  # --output-len sampled: lognormal output lengths with this median (tokens) ...
SAMPLED_SIGMA = 0.9  # ... and this log-space deviation (mean ~225 tokens, a long tail like chat answers)
MAX_SPEEDUP = 1e6

_WORDS = (
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not", "he",
    "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "they", "you", "were", "her", "she",
    "there", "been", "one", "all", "we", "their", "has", "would", "when", "if", "so", "no", "what", "can", "more",
    "will", "about", "model", "token", "engine", "batch", "cache", "request", "server", "time", "data", "value",
    "system", "result", "first", "other", "then", "these", "into", "some", "only", "could", "very", "after", "most",
    "over", "such", "our", "may", "any", "also", "new", "just", "where", "those", "well", "way",
)


@dataclass
class EmulatorOptions:
    """What the emulator serves and how; :meth:`validate` names the CLI option at fault (``--speedup``...)."""

    model: str = "llama-3.1-8b"
    gpu: str = "a100-80gb"
    tp: int = 1
    expert_parallel: bool = False  # vLLM's --enable-expert-parallel: a MoE model's experts spread over the tp GPUs
    speedup: float = 1.0
    max_num_seqs: int | None = None
    engine: str | None = None  # llmsim batch policy; None = llmsim's default (EngineConfig.policy)
    max_model_len: int | None = None
    num_gpu_blocks: int | None = None
    gpu_memory_utilization: float | None = None  # vLLM's --gpu-memory-utilization; None = llmsim's (0.9)
    served_model_name: str | None = None
    output_len: str = "max_tokens"
    seed: int = 0
    chars_per_token: float = 4.0
    api_key: str | None = field(default=None, repr=False)  # a secret: never in a repr or a log line
    max_body_bytes: int = 4 * 1024 * 1024
    min_tick: float = 0.002  # wall seconds: the driver never wakes more often than this

    @property
    def name(self) -> str:
        """The model id clients send and /v1/models lists."""
        return self.served_model_name or self.model

    def validate(self) -> None:
        """Raise ConfigError naming the option for anything the engine builders would not catch first."""
        def num(v: Any) -> bool:
            return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)

        for flag, v, optional in (("--model", self.model, False), ("--gpu", self.gpu, False),
                                  ("--served-model-name", self.served_model_name, True),
                                  ("--api-key", self.api_key, True)):
            if not (isinstance(v, str) or optional and v is None):
                shown = "a value of another type" if flag == "--api-key" else repr(v)  # (a key is never shown)
                raise ConfigError(f"{flag}: expected a string, got {shown} ({type(v).__name__})")
        if not isinstance(self.expert_parallel, bool):
            raise ConfigError(f"--enable-expert-parallel: expected true or false, got {self.expert_parallel!r}")
        if not num(self.speedup) or not 0 < self.speedup <= MAX_SPEEDUP:
            raise ConfigError(f"--speedup: expected a number > 0 and <= {MAX_SPEEDUP:g} (times faster than real "
                              f"time), got {self.speedup!r}")
        if not num(self.chars_per_token) or not self.chars_per_token > 0:
            raise ConfigError(f"--chars-per-token: expected a number > 0, got {self.chars_per_token!r}")
        if self.output_len not in OUTPUT_LEN_MODES:
            raise ConfigError(f"--output-len: expected one of {', '.join(OUTPUT_LEN_MODES)}, got {self.output_len!r}")
        for flag, v, lo in (("--tp", self.tp, 1), ("--max-num-seqs", self.max_num_seqs, 1),
                            ("--max-model-len", self.max_model_len, 2), ("--num-gpu-blocks", self.num_gpu_blocks, 1),
                            ("--seed", self.seed, 0), ("max_body_bytes", self.max_body_bytes, 1)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < lo):
                raise ConfigError(f"{flag}: expected an integer >= {lo}, got {v!r}")
        if not num(self.min_tick) or not 0 < self.min_tick <= 1:
            raise ConfigError(f"min_tick: expected wall seconds in (0, 1], got {self.min_tick!r}")
        if self.served_model_name is not None and not str(self.served_model_name).strip():
            raise ConfigError("--served-model-name: expected a non-empty name")
        check_key(self.api_key, "--api-key")  # never empty (no auth), visible ASCII as HTTP carries it

    def engine_config(self) -> EngineConfig:
        """llmsim's EngineConfig for these options (its own checks; errors renamed to the CLI flags)."""
        fields: dict[str, Any] = {}
        for key, v in (("policy", self.engine), ("max_num_seqs", self.max_num_seqs),
                       ("max_model_len", self.max_model_len), ("num_gpu_blocks", self.num_gpu_blocks),
                       ("gpu_memory_utilization", self.gpu_memory_utilization)):
            if v is not None:
                fields[key] = v
        return EngineConfig.parse(fields, "engine")


def build_instance(opts: EmulatorOptions, env: SimEnv, recorder: Recorder) -> Instance:
    """The one engine, built by llmsim's own builders (InstanceConfig -> profile, EngineConfig -> Instance)."""
    opts.validate()
    ecfg = opts.engine_config()
    ic = InstanceConfig(model=model_source(opts.model), gpu=opts.gpu, tp=opts.tp, engine=ecfg, name=opts.name,
                        ep=opts.tp if opts.expert_parallel else 1)
    prof = ic.build_profile()
    return Instance(0, env, prof, ecfg, recorder, opts.name)


class StreamingRecorder(Recorder):
    """Keeps no per-request rows (a server runs for ever): outcomes only go to the observers (the driver)."""

    def finish(self, r: Request) -> None:
        for f in self.finish_observers:
            f(r)

    def drop(self, r: Request, reason: str, now: float) -> None:
        r.dropped = reason
        for f in self.drop_observers:
            f(r, reason, now)


@dataclass(eq=False)
class Ticket:
    """One HTTP request's view of its engine request: tokens available so far, and how it ended."""

    id: str  # random (vLLM's answers are ``cmpl-<uuid4 hex>``): unique across emulators and restarts; read by nothing
    req: Request  # ... in the simulation, whose requests are numbered in arrival order
    max_tokens: int  # what the client asked for (after the context cap)
    seed: int
    event: asyncio.Event = field(default_factory=asyncio.Event)
    available: int = 0  # tokens generated by the engine up to the last advance
    last_token: float = -1.0  # simulated time of the last of them (its inter-token gaps are observed from there)
    done: bool = False
    aborted: bool = False
    prompt_counted: bool = False
    error: str | None = None
    error_status: int = 500  # the HTTP status of ``error``: 500 the engine failed, 503 the emulator is stopping

    @property
    def finish_reason(self) -> str:
        """'length' when max_tokens (or the context) ended it, 'stop' when a sampled length ended it sooner."""
        return "length" if self.req.target_tokens >= self.max_tokens else "stop"


def check_key(v: str | None, flag: str) -> None:
    """A bearer token as HTTP carries it: non-empty visible ASCII without spaces (ConfigError naming ``flag``, never
    the value). An empty key would turn authentication off, so it is an error, not a way to say "none". The live
    router's config checks its keys with it too."""
    if v is None:
        return
    if not v:
        raise ConfigError(f"{flag}: expected a non-empty key (an empty key would turn authentication off; leave "
                          "it out for none)")
    if not all(33 <= ord(c) <= 126 for c in v):
        raise ConfigError(f"{flag}: expected visible ASCII characters without spaces (a key of {len(v)} characters "
                          "has others)")


def read_key(v: str | None, flag: str) -> str | None:
    """``v`` itself, or for ``env:NAME`` the environment variable NAME (a key kept out of the process list);
    ConfigError naming ``flag`` if the variable is unset or empty, never showing a value."""
    if v is None or not v.startswith("env:"):
        return v
    name = v[len("env:"):]
    if not name:
        raise ConfigError(f"{flag}: expected env:<variable name>, got 'env:'")
    if not os.environ.get(name):
        state = "empty" if name in os.environ else "not set"
        raise ConfigError(f"{flag}: environment variable {name!r} is {state} (an empty key would turn "
                          "authentication off; leave the option out for none)")
    return os.environ[name]


def request_seed(seed: int, *parts: object) -> int:
    """A stable 64-bit seed from the server seed and the request's content (same request, same answer)."""
    h = hashlib.blake2b(repr((seed, *parts)).encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little")


def sampled_length(seed: int) -> int:
    """An EOS-like output length: lognormal (median SAMPLED_MEDIAN, sigma SAMPLED_SIGMA), at least 1."""
    rng = random.Random(seed ^ 0x5EED)
    return max(1, round(rng.lognormvariate(math.log(SAMPLED_MEDIAN), SAMPLED_SIGMA)))


class SyntheticText:
    """A request's generated text: one word per token, with a leading space, drawn from a seeded stream (the same
    request and server seed give the same text; there is no model, so it means nothing)."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def take(self, n: int) -> list[str]:
        """The next ``n`` tokens' texts."""
        choice = self._rng.choice
        return [" " + choice(_WORDS) for _ in range(n)]


class EngineFailed(RuntimeError):
    """The engine raised: the emulator cannot serve any more (the message says why)."""


class RealTimeEngine:
    """The llmsim engine advanced against the asyncio loop's clock (see the module docstring)."""

    def __init__(self, opts: EmulatorOptions) -> None:
        self.opts = opts
        self.speedup = float(opts.speedup)
        self.env = SimEnv()
        self.recorder = StreamingRecorder()
        self.recorder.subscribe(self._on_finish, self._on_drop)
        self.inst = build_instance(opts, self.env, self.recorder)
        self.max_model_len: int = self.inst.max_model_len
        self.tickets: dict[int, Ticket] = {}
        self.finished_log: deque[dict[str, Any]] = deque(maxlen=10_000)  # simulated times, for tests and debugging
        self.listeners: list[Any] = []  # fn(ticket) on every finish but an abort (the per-request histograms)
        self.first_token_listeners: list[Any] = []  # fn(ticket) at a request's first token (its TTFT), aborted or not
        self.gap_listeners: list[Any] = []  # fn(simulated span, gaps) as a request's new tokens are released
        self.failed: str | None = None
        self.prompt_tokens_total = 0
        self.success: dict[str, int] = {"length": 0, "stop": 0, "abort": 0}
        self.wakeups = 0
        self._next_id = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._t0 = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._stopped = False

    # ------------------------------------------------------------------ clock
    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Bind to ``loop`` (default: the running loop): simulated time 0 is now on its clock. The driver uses
        only the loop's ``time()`` and ``call_at()``, so a test can pass a loop with a clock of its own."""
        if self._loop is None:
            self._loop = loop or asyncio.get_running_loop()
            self._t0 = self._loop.time()

    @property
    def t0(self) -> float:
        """Loop time (time.monotonic) at simulated time 0."""
        return self._t0

    def sim_now(self) -> float:
        """Simulated seconds now: (wall since start) x speedup, never behind the engine's clock."""
        self.start()
        assert self._loop is not None
        return max((self._loop.time() - self._t0) * self.speedup, self.env.now)

    def wall_of(self, sim_t: float) -> float:
        """Loop time at which simulated time ``sim_t`` happens."""
        return self._t0 + sim_t / self.speedup

    # ------------------------------------------------------------------ driving
    def advance(self) -> float:
        """Process the engine up to now and publish new tokens; returns simulated now."""
        if self.failed is not None or self._stopped:
            return self.env.now
        now = self.sim_now()
        env = self.env
        try:
            env.call_bookkeeping_at(now, _noop)  # so the clock lands exactly on now, in phase OBSERVE
            while env.peek() <= now:
                env.step()
            self.inst.sync(now, OBSERVE)
        except Exception as e:  # an engine bug or impossible state: fail loudly, never hang the streams
            self._fail(f"the llmsim engine failed at t={now:.6f} s: {type(e).__name__}: {e}")
            return now
        for t in self.tickets.values():
            if t.req.generated != t.available:
                self._release(t)
                t.event.set()
        return now

    def _release(self, t: Ticket) -> None:
        """Take the request's tokens generated since the last advance: its prompt counted once, and its new gaps
        between tokens (after the first) handed to ``gap_listeners`` as one span over that many gaps (the driver
        wakes at each iteration end, so that is one gap, unless ``min_tick`` or a late wake-up merged a few)."""
        r = t.req
        self._count_prompt(t)
        n = r.generated
        since, prev = (t.available, t.last_token) if t.available > 0 else (1, r.first_token)
        if n > since and r.first_token >= 0 and r.last_token_time >= prev:
            for fn in self.gap_listeners:
                fn(r.last_token_time - prev, n - since)
        if n > 0:
            t.last_token = r.last_token_time if n > 1 else r.first_token
        t.available = n

    def _count_prompt(self, t: Ticket) -> None:
        """vllm:prompt_tokens_total counts a prompt once, when its prefill has produced the first token; that is
        also when vLLM observes the time to first token (of a request aborted later too)."""
        if not t.prompt_counted and t.req.first_token >= 0:
            t.prompt_counted = True
            self.prompt_tokens_total += t.req.prompt_tokens
            for fn in self.first_token_listeners:
                fn(t)

    def _on_timer(self) -> None:
        self._timer = None
        self.wakeups += 1
        self.advance()
        self._replan()

    def _replan(self) -> None:
        """Sleep until the next engine event or decode boundary (at least min_tick away), or until kicked."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._stopped or self.failed is not None or self._loop is None:
            return
        nxt = self.env.peek()
        run = self.inst.decode_run
        if run is not None and run.applied < len(run.bounds):
            nxt = min(nxt, run.bounds[run.applied])
        if nxt == math.inf:
            return  # idle: the next submission wakes us
        loop = self._loop
        when = max(self.wall_of(nxt), loop.time() + self.opts.min_tick)
        self._timer = loop.call_at(when, self._on_timer)

    def submit(self, prompt_tokens: int, output_tokens: int, max_tokens: int, seed: int) -> Ticket:
        """Queue a request at simulated now; the caller has checked :meth:`prompt_error` first."""
        if self.failed is not None:
            raise EngineFailed(self.failed)
        if self._stopped:
            raise EngineFailed("the emulator is shutting down")
        now = self.advance()
        self._next_id += 1
        rid = self._next_id
        r = Request(rid, now, prompt_tokens, max(1, output_tokens))
        r.routed_time = now
        t = Ticket(uuid.uuid4().hex, r, max_tokens=min(max_tokens, self.max_model_len - prompt_tokens), seed=seed)
        self.tickets[rid] = t
        self.inst.submit(r, now, ROUTE)
        self._replan()
        return t

    def prompt_error(self, prompt_tokens: int) -> str:
        """'' if a prompt of this length can ever be served; otherwise vLLM-like words for the 400 answer."""
        if prompt_tokens >= self.max_model_len:
            return (f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                    f"{prompt_tokens} tokens in the prompt, leaving no room for a completion. Please reduce the "
                    "length of the prompt.")
        probe = Request(0, 0.0, prompt_tokens, 1)
        if self.inst.can_ever_serve(probe):
            inst = self.inst
            limits = inst.limits
            return (f"The prompt ({prompt_tokens} tokens) does not fit in the KV cache of this engine even when it "
                    f"is empty ({limits.max_prompt_blocks()} usable blocks of {inst.block_size} tokens, i.e. at most "
                    f"{limits.max_servable_prompt()} prompt tokens). Please reduce the length of the prompt.")
        return ""

    def fit_error(self, prompt_tokens: int, output_tokens: int) -> str:
        """'' if a request of this length fits the whole KV cache; otherwise words for a 400. Only reachable when
        max_model_len exceeds what the cache holds (vLLM refuses to start then): the engine would otherwise drop
        the request once it has grown past the cache, mid-answer."""
        inst = self.inst
        usable = inst.limits.max_prompt_blocks()
        if inst.kv.blocks_for(prompt_tokens + output_tokens) <= usable:
            return ""
        return (f"This request needs {prompt_tokens} + {output_tokens} tokens of KV cache, more than this engine's "
                f"whole cache holds ({usable} usable blocks of {inst.block_size} tokens, i.e. "
                f"{usable * inst.block_size} tokens, less than its max_model_len of {self.max_model_len}). Please "
                "reduce max_tokens or the length of the prompt.")

    def abort(self, t: Ticket) -> None:
        """The client went away: a queued request leaves the queue now, a prefilling one at the end of the
        iteration in flight; a decoding one finishes at its next sampled token (``Instance.cancel``)."""
        if t.done or t.aborted or self._stopped or self.failed is not None:
            return
        t.aborted = True
        self.advance()
        r = t.req
        if r.finish >= 0 or r.dropped:
            return
        if self.inst.cancel(r, self.env.now):
            self._finished(t, "abort")
        self._replan()

    @property
    def stopped(self) -> bool:
        """:meth:`stop` has been called: nothing more is served."""
        return self._stopped

    def stop(self) -> None:
        """Stop the timer and end every open request with an error (HTTP 503: the server is going away; counted
        as aborted): nothing is left waiting."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._stopped:
            if self._loop is not None:  # (never started: nothing to bring up to date)
                self.advance()
            self._stopped = True
            for t in list(self.tickets.values()):
                if t.error is None:
                    t.error, t.error_status = "the emulator is shutting down", 503
                self._finished(t, "abort")

    # ------------------------------------------------------------------ engine callbacks
    def _on_finish(self, r: Request) -> None:
        t = self.tickets.get(r.id)
        if t is not None:
            self._release(t)
            self._finished(t, "abort" if t.aborted else t.finish_reason)

    def _on_drop(self, r: Request, reason: str, now: float) -> None:
        t = self.tickets.get(r.id)
        if t is not None:
            t.error = f"the engine could not schedule this request ({reason})"
            self._finished(t, None)

    def _finished(self, t: Ticket, reason: str | None) -> None:
        self.tickets.pop(t.req.id, None)
        self._count_prompt(t)
        t.done = True
        t.event.set()
        r = t.req
        if reason is not None:
            self.success[reason] = self.success.get(reason, 0) + 1
        if reason in ("length", "stop"):
            self.finished_log.append({"id": t.id, "arrival": r.arrival, "first_token": r.first_token,
                                      "finish": r.finish, "generated": r.generated, "prompt_tokens": r.prompt_tokens,
                                      "preemptions": r.preemptions})
            for fn in self.listeners:
                fn(t)

    def _fail(self, msg: str) -> None:
        log.error(msg)
        self.failed = msg
        for t in list(self.tickets.values()):
            t.error = msg
            self._finished(t, None)

    # ------------------------------------------------------------------ observers
    def snapshot(self) -> dict[str, float]:
        """Engine state at this instant (advanced to now first): what /metrics reports."""
        self.advance()
        inst = self.inst
        return {
            "running": float(len(inst.running)),
            "waiting": float(len(inst.waiting)),
            "swapped": float(len(inst.swapped)),
            "kv_usage": (inst.kv_total - inst.kv.free) / inst.kv_total,
            "generation_tokens": float(inst.tokens_out),
            "prompt_tokens": float(self.prompt_tokens_total),
            "preemptions": float(inst.preemptions),
            "sim_time": self.env.now,
        }


def _noop() -> None:
    """A bookkeeping event that only moves the clock."""


__all__ = ["EmulatorOptions", "EngineFailed", "RealTimeEngine", "Ticket", "build_instance",
           "SyntheticText", "request_seed", "sampled_length"]
