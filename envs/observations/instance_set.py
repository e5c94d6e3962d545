"""A size-agnostic state for routing: one row per instance, padded to ``n_max`` rows, normalised by what each
instance can do, so one network runs on any number of instances and on other hardware or traffic scales.

The flat layout of :class:`~llmsim.envs.observations.flat.FlatObs` grows with the cluster (27 floats for four
instances, 51 for eight) and counts requests and seconds in absolute units, so a policy trained on one cluster
cannot run on another and drifts when rates or GPUs change. Here every quantity is a share of the instance's
own capacity (batch slots, KV blocks) or a time at the instance's own observed iteration time, lengths are on a
log scale, and the rows of absent instances are zero with a mask, as in the graph observation.

Layout (float32 vector; ``G = GLOBAL_FEATURES``, ``F = INSTANCE_FEATURES``):

  [0, G)                 global: request pending (0/1); log1p(prompt) / log1p(4096); log1p(predicted output)
                         / log1p(4096); central queue / batch seats of the cluster (clip 1); how long the request
                         has waited / ``max_wait_s`` (clip 1); instances / n_max; running / seats; waiting / seats
                         (clip 4)
  G + F k + j            instance k's feature j (``INSTANCE_FEATURE_NAMES``): running / max_num_seqs; waiting +
                         swapped / max_num_seqs (clip 8); KV used / KV total; KV demand with the request / KV
                         total (clip 2); queued work in seconds at the instance's observed iteration time, its
                         earliest completion in seconds and the request's predicted latency there (each
                         log1p(s) / log1p(600)); Min-Min's ready time (log1p(s) / log1p(600)); can serve the
                         prompt (0/1); the instance Min-Min, least-work-left and JSQ would pick (one-hot);
                         fastest observed iteration time in the cluster / this instance's
  G + F n_max + k        instance k exists (the mask)

With ``recent_mix: true`` the global part has one more feature at its end (``MIX_FEATURE_NAMES``, so G is
``GLOBAL_FEATURES + 1``; :func:`layout_globals` tells the two layouts apart by length): the share of heavy requests
(predicted output above the predictor's first bucket bound, 250 tokens, as the dedicated split's guide reads it)
among the recent arrivals, each arrival's weight decaying by 1 % per arrival after it (0 before the first). The
dedicated split protects light requests from heavy decodes; where most requests are heavy it only gives the
majority half the cluster, and the split's guide balances instead (agents/nets.py ``Spill.balance_heavy``).

The iteration time of an instance is the ``step_time`` its state reports (the iteration in progress;
``default_step_s`` while it is idle), so queued tokens become seconds at that instance's own speed, over its seats:
``max_num_seqs`` x its KV tokens / the cluster's largest KV cache, at least 1 (on equal GPUs, ``max_num_seqs``). A
16 GB V100 that holds ~4,000 tokens of KV runs a few requests at a time, not the 128 its batch limit allows; counted
at 128 seats, its queue looked short while it preempted. The builder keeps no history: the observation is a
function of the state and the request alone, so the live router (which builds it only at its decisions) sees
exactly what the env (which builds it at every step) saw. The one exception, the recent mix, is counted at each
arrival (``on_arrival``), which the env and the live router both tell the builder of once per request.
The three heuristic picks are computed from the state as the routers compute them (Min-Min's ready time from
each resident request's predicted decode bucket, least work left from prompt and predicted tokens still to
process, JSQ from queue lengths; ties to the lowest index), so a policy can learn "follow Min-Min unless ..."
and an agent can read its guide's action from the observation itself (:data:`GUIDE_COLUMNS`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from llmsim.envs.observations.base import ObsBuilder
from llmsim.errors import ConfigError
from llmsim.routing.load import (
    DECODE_BUCKETS,
    DECODE_STEP,
    DEFAULT_STEP_S,
    GRAD_P,
    bucket_upper,
    kv_seats,
    kv_tokens,
)
from llmsim.routing.split import add_recent

if TYPE_CHECKING:
    from llmsim.envs.context import ObservationContext
    from llmsim.request import Request
    from llmsim.state.cluster_state import ClusterState, InstanceState

GLOBAL_FEATURE_NAMES = ("pending", "log_prompt", "log_predicted_output", "central_queue_per_seat", "wait_share",
                        "instances_share", "running_per_seat", "waiting_per_seat")
INSTANCE_FEATURE_NAMES = ("running_share", "waiting_share", "kv_used", "kv_demand", "log_work_s", "log_next_done_s",
                          "log_latency_s", "log_min_min_ready_s", "can_serve", "pick_min_min",
                          "pick_least_work_left", "pick_jsq", "speed_share")
MIX_FEATURE_NAMES = ("recent_heavy_share",)  # with recent_mix: true, after GLOBAL_FEATURE_NAMES
GLOBAL_FEATURES = len(GLOBAL_FEATURE_NAMES)
INSTANCE_FEATURES = len(INSTANCE_FEATURE_NAMES)
RECENT_HEAVY = GLOBAL_FEATURES  # the recent heavy share's index in a recent_mix layout
# the guide a policy may follow -> its one-hot column among the instance features
GUIDE_COLUMNS = {"min_min": 9, "least_work_left": 10, "jsq": 11}
LOG_TOKENS = math.log1p(4096.0)
LOG_SECONDS = math.log1p(600.0)
# the split's heavy requests: predicted output above the predictor's first bucket bound, on the observation's scale
HEAVY_AT = float(np.float32(math.log1p(DECODE_BUCKETS[0]) / LOG_TOKENS))
MEMO_MAX = 100_000  # waiting requests' terms kept (envs/observations/instance_set.py instance_load)


def layout_size(n_max: int, recent_mix: bool = False) -> int:
    """Length of the observation vector for ``n_max`` instance rows."""
    return GLOBAL_FEATURES + int(recent_mix) + n_max * (INSTANCE_FEATURES + 1)


def layout_globals(dim: int) -> int:
    """How many global features an observation vector of length ``dim`` has (``GLOBAL_FEATURES``, or one more with
    the recent mix; the two lengths never coincide), a ConfigError when neither layout gives it."""
    for g in (GLOBAL_FEATURES, GLOBAL_FEATURES + len(MIX_FEATURE_NAMES)):
        n_max, rest = divmod(dim - g, INSTANCE_FEATURES + 1)
        if not rest and n_max >= 1:
            return g
    raise ConfigError(f"observation of length {dim} is not an instance_set layout "
                      f"({GLOBAL_FEATURES} or {GLOBAL_FEATURES + 1} + n_max x {INSTANCE_FEATURES + 1})")


def split_layout(dim: int) -> int:
    """``n_max`` of an observation vector of length ``dim`` (a ConfigError when no ``n_max`` gives it)."""
    return (dim - layout_globals(dim)) // (INSTANCE_FEATURES + 1)


def heavy_request(pred: float) -> bool:
    """The dedicated split's class of a request predicted ``pred`` output tokens, as its guide reads the
    observation: the float32 feature above the first bucket bound's."""
    return bool(np.float32(min(1.5, math.log1p(pred) / LOG_TOKENS)) > HEAVY_AT)


def log_seconds(s: float) -> float:
    return math.log1p(max(0.0, s)) / LOG_SECONDS


def first_min(values: list[float], candidates: list[int]) -> int:
    """The candidate with the least value, the lowest index on ties (the routers' rule)."""
    best = candidates[0]
    for k in candidates[1:]:
        if values[k] < values[best]:
            best = k
    return best


def request_load(r: Any, default_output: float) -> tuple[float, float]:
    """(work-left tokens, Min-Min's remaining job time in s) of one request row."""
    g = r.generated
    pred = r.predicted_output
    rem = (default_output if pred is None else pred) - g
    work = r.prompt_tokens + g - r.computed + (rem if rem > 1.0 else 1.0)
    if pred is None:
        return work, 0.0
    ub = bucket_upper(pred)
    return work, ((GRAD_P * r.prompt_tokens + DECODE_STEP * ub) * (1.0 - g / ub) if g < ub else 0.0)


def instance_load(inst: InstanceState, default_output: float,
                  memo: dict[int, tuple[int, int, float, float]]) -> tuple[float, float, float, int]:
    """(work-left tokens, Min-Min ready time in s, least predicted tokens left among decoding requests (inf
    without any), tokens the waiting requests will occupy) of one instance, from its request rows.

    ``memo`` keeps each waiting request's terms by id with the (generated, computed) they were computed at: a
    queued request's terms do not change while it waits, and queues are long exactly when decisions matter."""
    work = ready = 0.0
    left = math.inf
    for queue in (inst.running, inst.swapped):
        for r in queue:
            w, t = request_load(r, default_output)
            work += w
            ready += t
            g = r.generated
            if g > 0:
                pred = r.predicted_output
                rem = (default_output if pred is None else pred) - g
                if rem < left:
                    left = rem if rem > 0.0 else 0.0
    waiting_tokens = 0
    for r in inst.waiting:
        g, c = r.generated, r.computed
        m = memo.get(r.id)
        if m is None or m[0] != g or m[1] != c or r.predicted_output is None:
            w, t = request_load(r, default_output)
            m = memo[r.id] = (g, c, w, t)
        work += m[2]
        ready += m[3]
        waiting_tokens += r.prompt_tokens + g
    return work, ready, left, waiting_tokens


class InstanceSetObs(ObsBuilder):
    """``instance_set``: the padded per-instance state above (``n_max`` rows, default 16)."""

    name = "instance_set"

    def __init__(self, n_max: int = 16, max_wait_s: float = 10.0, default_step_s: float = DEFAULT_STEP_S,
                 recent_mix: bool = False) -> None:
        if isinstance(n_max, bool) or not isinstance(n_max, int) or n_max < 1:
            raise ConfigError(f"observation.n_max: expected a positive integer, got {n_max!r}")
        if not isinstance(recent_mix, bool):
            raise ConfigError(f"observation.recent_mix: expected true or false, got {recent_mix!r}")
        self.recent_mix = recent_mix
        self.globals = GLOBAL_FEATURES + int(recent_mix)
        self.mix = [0.0, 0.0]  # recent light and heavy arrivals (decayed counts)
        for key, v in (("max_wait_s", max_wait_s), ("default_step_s", default_step_s)):
            if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0 or not math.isfinite(v):
                raise ConfigError(f"observation.{key}: expected a positive number of seconds, got {v!r}")
        self.n_max = n_max
        self.max_wait_s = float(max_wait_s)
        self.default_step_s = float(default_step_s)

    def bind(self, env: ObservationContext) -> gym.Space:
        if env.num_instances > self.n_max:
            k = env.num_instances  # a trained network's n_max is fixed by its weights: say what can change
            raise ConfigError(f"observation.n_max: {self.n_max} rows cannot hold {k} instances; a network over this "
                              f"observation (a trained checkpoint's included) supports at most {self.n_max} "
                              f"instances: use at most {self.n_max}, or train one with env.observation.n_max={k}")
        self.n = env.num_instances
        self.buf = np.zeros(layout_size(self.n_max, self.recent_mix), np.float32)
        self.mask_at = self.globals + self.n_max * INSTANCE_FEATURES
        self.buf[self.mask_at:self.mask_at + self.n] = 1.0
        self.memo: dict[int, tuple[int, int, float, float]] = {}
        return gym.spaces.Box(0.0, 8.0, self.buf.shape, np.float32)

    def reset(self, env: ObservationContext) -> None:
        self.memo = {}
        self.mix = [0.0, 0.0]

    def on_arrival(self, env: ObservationContext, req: Request) -> None:
        if self.recent_mix:  # the split router's own count (llmsim.routing.split)
            add_recent(self.mix, heavy_request(self.predicted(env, req)))

    @staticmethod
    def predicted(env: ObservationContext, req: Request) -> float:
        """The request's predicted output on the cluster's first model (the one a single-model cluster serves)."""
        lens, _ = env.predictions(req)
        return float(lens[env.inst_model_idx[0]]) if len(lens) > 1 else float(lens[0])

    def build(self, env: ObservationContext, state: ClusterState, req: Request | None) -> np.ndarray:
        b = self.buf
        if len(self.memo) > MEMO_MAX:  # a long-running router: forget, the terms are recomputed on demand
            self.memo = {}
        b[:self.mask_at].fill(0.0)
        insts = state.instances
        tau = [i.step_time if i.step_time > 0 else self.default_step_s for i in insts]
        seats = float(sum(i.max_num_seqs for i in insts)) or 1.0
        b[5] = self.n / self.n_max
        b[6] = sum(i.num_running for i in insts) / seats
        b[7] = min(4.0, sum(i.num_waiting + i.num_swapped for i in insts) / seats)
        if self.recent_mix:
            seen = self.mix[0] + self.mix[1]
            b[RECENT_HEAVY] = self.mix[1] / seen if seen > 0.0 else 0.0
        prompt, pred = 0, 0.0
        if req is not None:
            prompt = req.prompt_tokens
            pred = self.predicted(env, req)
            b[0] = 1.0
            b[1] = min(1.5, math.log1p(prompt) / LOG_TOKENS)
            b[2] = min(1.5, math.log1p(pred) / LOG_TOKENS)
            b[3] = min(1.0, state.central_queue / seats)
            b[4] = min(1.0, max(0.0, state.now - req.arrival) / self.max_wait_s)
        self.fill_instances(state, req, prompt, pred, tau)
        return b.copy()

    def fill_instances(self, state: ClusterState, req: Request | None, prompt: int, pred: float,
                       tau: list[float]) -> None:
        """The per-instance rows and, with a request pending, the three heuristics' picks."""
        b = self.buf
        tau_min = min(tau)
        largest_kv = float(max(kv_tokens(i) for i in state.instances)) or 1.0
        works, readies, queues, fits = [], [], [], []
        for k, inst in enumerate(state.instances):
            o = self.globals + k * INSTANCE_FEATURES
            ms = inst.max_num_seqs
            work, ready, left, waiting_tokens = instance_load(inst, state.mean_output, self.memo)
            works.append(work)
            readies.append(ready)
            queues.append(inst.num_requests)
            fits.append(inst.can_serve(prompt))
            kv = float(kv_tokens(inst)) or 1.0
            work_s = work * tau[k] / kv_seats(inst, largest_kv)  # a smaller KV cache runs fewer requests at once
            b[o] = inst.num_running / ms
            b[o + 1] = min(8.0, (inst.num_waiting + inst.num_swapped) / ms)
            b[o + 2] = inst.kv_blocks_used / inst.kv_blocks_total
            b[o + 3] = min(2.0, (inst.kv_blocks_used * inst.block_size + waiting_tokens + prompt + pred) / kv)
            b[o + 4] = log_seconds(work_s)
            b[o + 5] = 0.0 if left == math.inf else log_seconds(left * tau[k])
            b[o + 6] = log_seconds(work_s + pred * tau[k]) if req is not None else 0.0
            b[o + 7] = log_seconds(ready)
            b[o + 8] = 1.0 if req is not None and fits[-1] else 0.0
            b[o + 12] = tau_min / tau[k]
        if req is None:
            return
        cands = [k for k in range(self.n) if fits[k]] or list(range(self.n))
        for col, values in ((GUIDE_COLUMNS["min_min"], readies), (GUIDE_COLUMNS["least_work_left"], works),
                            (GUIDE_COLUMNS["jsq"], queues)):
            b[self.globals + first_min(values, cands) * INSTANCE_FEATURES + col] = 1.0
