"""Deadline-aware routing: the SLO-aware baselines the QLM paper compares against (its §8; docs/slo_baselines.md).

* ``edf``: a central earliest-deadline-first queue. Requests are held in the cluster's central queue (WAIT) and an
  instance whose engine waiting queue is shorter than ``max_waiting`` takes the EDF head; the engine then serves
  it with continuous batching. The paper sorts "by their SLO values" (``deadline="slo"``, the default);
  ``deadline="absolute"`` orders by arrival + SLO instead.
* ``shepherd``: SHEPHERD-like fixed batches. An instance gets work only when it is completely idle, and then a
  whole batch at once (no iteration-level joining: nothing more is sent until the batch has finished). The batch
  size and members maximise the number of requests that meet their deadline under a profiled batch execution
  time T(b) (SHEPHERD's goodput ILP, simplified; :func:`choose_batch`).

Why nothing hangs (the rule of llmsim.routing.qlm.router): the cluster re-offers held requests only at completions
(and at an optional tick), so WAIT is answered only while some engine holds work or a batch member still to be
offered in the same pass will make one busy; otherwise the request is routed at once, out of order.

The cluster offers held requests one at a time in arrival order; both routers keep their own record of held
requests in that order (``seq``) so that a batch chosen during a retry pass only takes requests still to be
offered in that pass. Deterministic: ties by request id and instance index; the MILP and the enumeration
return the same canonical batch.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from llmsim.errors import ConfigError, LLMSimError
from llmsim.perf.profile import Profile, profile_for_instance
from llmsim.routing.base import WAIT, Router, instance_model, register_router
from llmsim.routing.base import kwarg_number as _num

if TYPE_CHECKING:
    from llmsim.request import Request
    from llmsim.state.cluster_state import ClusterState, InstanceState
    from llmsim.state.view import RouterView


def _slo_map(name: str, value: Any) -> dict[str, float]:
    """{class: positive number}; a ConfigError naming the key otherwise."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"policy.kwargs.{name}: expected a mapping of class to a number, got {value!r}")
    return {str(k): _num(f"{name}.{k}", v) for k, v in value.items()}


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(f"policy.kwargs.{name}: expected one of {list(allowed)}, got {value!r}")
    return str(value)


def _busy(inst: InstanceState) -> bool:
    return bool(inst.num_running or inst.num_waiting or inst.num_swapped)


def _least_loaded(st: ClusterState, cands: Sequence[int]) -> int:
    """The candidate with the least waiting + running requests, ties by index."""
    return int(min(cands, key=lambda c: (st.instances[c].num_waiting + st.instances[c].num_running, c)))


@dataclass
class _Held:
    """A request held in the central queue, as the routers remember it."""

    id: int
    seq: int  # order of admission = order in the cluster's central queue
    arrival: float
    prompt: int
    slo_class: str | None
    model: str | None
    slo_s: float
    cands: tuple[int, ...]


class _SLORouter(Router):
    """Shared bookkeeping: SLO per class, the held-request record, reset on a new simulation."""

    def __init__(self, seed: int, slo_s: Mapping[str, Any] | None, default_slo_s: float, **kw: Any) -> None:
        super().__init__(seed, **kw)
        self.slo_s = _slo_map("slo_s", slo_s)
        self.default_slo_s = _num("default_slo_s", default_slo_s)
        self._n_inst = -1
        self._clear()

    def _clear(self) -> None:
        self._held: dict[int, _Held] = {}
        self._seq = 0
        self._last_now = -math.inf
        self.stats = {"out_of_order": 0, "routed": 0}

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._clear()

    def _begin(self, view: RouterView) -> float:
        """Start afresh on a new simulation (time went back) or another cluster; return now."""
        now = float(view.now)
        if now < self._last_now or view.num_instances != self._n_inst:
            self._clear()
            self._n_inst = view.num_instances
            self._on_new_cluster(view.num_instances)
        self._last_now = now
        return now

    def _on_new_cluster(self, n: int) -> None:
        """Subclasses size their per-instance records here."""

    def _admit(self, req: Request, view: RouterView) -> _Held:
        h = self._held.get(req.id)
        if h is None:
            cls = req.slo_class
            slo = self.slo_s.get(cls, self.default_slo_s) if cls is not None else self.default_slo_s
            h = _Held(int(req.id), self._seq, float(req.arrival), int(req.prompt_tokens), cls,
                      getattr(req, "model", None), slo, tuple(int(c) for c in view.candidates(req)))
            self._seq += 1
            self._held[h.id] = h
            self._on_admit(h)
        return h

    def _on_admit(self, h: _Held) -> None:
        """Subclasses index a new held request here."""

    def _release(self, h: _Held, inst: int) -> int:
        del self._held[h.id]
        self.stats["routed"] += 1
        return int(inst)


@register_router
class EDFRouter(_SLORouter):
    """EDF baseline (QLM paper section 8): a central queue sorted by SLO value, pulled by instances with room.

    Options (``policy.kwargs``): ``slo_s`` {class: SLO in s}, ``default_slo_s`` for other classes,
    ``max_waiting`` (an instance takes a request while its engine waiting + swapped queue is shorter),
    ``deadline`` "slo" (order by SLO value, ties by arrival; the paper) or "absolute" (arrival + SLO).
    """

    name = "edf"

    def __init__(self, seed: int = 0, slo_s: Mapping[str, Any] | None = None, default_slo_s: float = 600.0,
                 max_waiting: int = 2, deadline: str = "slo", **kw: Any) -> None:
        self.max_waiting = int(_num("max_waiting", max_waiting, lo=1, strict=False, integer=True))
        self.deadline = _choice("deadline", deadline, ("slo", "absolute"))
        super().__init__(seed, slo_s, default_slo_s, **kw)

    def _clear(self) -> None:
        super()._clear()
        self._order: list[tuple[float, float, int]] = []  # (key, arrival, id), sorted: the EDF queue

    def _key(self, h: _Held) -> tuple[float, float, int]:
        k = h.slo_s if self.deadline == "slo" else h.arrival + h.slo_s
        return (k, h.arrival, h.id)

    def _on_admit(self, h: _Held) -> None:
        bisect.insort(self._order, self._key(h))

    def _room(self, inst: InstanceState) -> bool:
        return bool(inst.up) and inst.num_waiting + inst.num_swapped < self.max_waiting

    def route(self, req: Request, view: RouterView) -> int:
        self._begin(view)
        h = self._admit(req, view)
        st = view.state()
        room = [self._room(i) for i in st.instances]
        if any(room):
            for _, _, rid in self._order:  # the EDF head among the requests some instance with room can take
                open_ = [c for c in self._held[rid].cands if room[c]]
                if open_:
                    if rid == h.id:
                        return self._take(h, _least_loaded(st, open_))
                    break
        if not any(_busy(i) for i in st.instances):
            self.stats["out_of_order"] += 1  # nothing in flight: no completion would offer it again
            return self._take(h, _least_loaded(st, h.cands))
        return WAIT

    def _take(self, h: _Held, inst: int) -> int:
        key = self._key(h)
        i = bisect.bisect_left(self._order, key)
        del self._order[i]
        return self._release(h, inst)


# ---------------------------------------------------------------------- SHEPHERD's batch choice
@dataclass(frozen=True)
class BatchChoice:
    """A batch: its size, members (request ids, earliest deadline first), how many meet their deadline, and what
    decided it ("milp", "enumerate", or "none_met" when no request can meet its deadline)."""

    size: int
    members: tuple[int, ...]
    n_met: int
    solver: str


def _canonical(ids: Sequence[int], deadlines: Sequence[float], met: np.ndarray, b: int, n_met: int,
               solver: str) -> BatchChoice:
    """Members for batch size ``b``: the earliest-deadline requests that meet it, then earliest-deadline fillers
    (spare slots are free). With ``n_met == 0`` simply the ``b`` earliest deadlines."""
    order = sorted(range(len(ids)), key=lambda k: (deadlines[k], ids[k]))
    hit = [k for k in order if met[k, b - 1]][:b] if n_met else []
    chosen = set(hit)
    fill = [k for k in order if k not in chosen][: b - len(hit)]
    members = sorted(hit + fill, key=lambda k: (deadlines[k], ids[k]))
    return BatchChoice(b, tuple(int(ids[k]) for k in members), n_met, solver)


def _enumerate(met: np.ndarray, bmax: int) -> tuple[int, int]:
    """(best batch size, requests met): max over b of min(b, #met at b); ties: the largest b."""
    counts = [min(b, int(met[:, b - 1].sum())) for b in range(1, bmax + 1)]
    best = max(counts)
    return max(b for b in range(1, bmax + 1) if counts[b - 1] == best), best


def _milp(met: np.ndarray, bmax: int, time_limit_s: float) -> tuple[int, int] | None:
    """SHEPHERD's ILP: max sum x_i s.t. sum x <= sum b y_b, x_i <= sum_b y_b met[i, b], one-hot y.
    A tiny bonus eps * b (eps * bmax < 1) picks the largest optimal b, as the enumeration does. None: failed."""
    n = met.shape[0]
    bs = np.arange(1, bmax + 1, dtype=float)
    eps = 0.5 / bmax
    c = np.concatenate([-np.ones(n), -eps * bs])
    rows = [np.concatenate([np.zeros(n), np.ones(bmax)]),  # sum y = 1
            np.concatenate([np.ones(n), -bs])]  # sum x - sum b y <= 0
    lo, hi = [1.0, -np.inf], [1.0, 0.0]
    for i in range(n):
        r = np.zeros(n + bmax)
        r[i] = 1.0
        r[n:] = -met[i, :bmax].astype(float)
        rows.append(r)
        lo.append(-np.inf)
        hi.append(0.0)
    try:
        res = milp(c, constraints=LinearConstraint(np.array(rows), lo, hi), integrality=np.ones(n + bmax),
                   bounds=Bounds(0, 1), options={"time_limit": time_limit_s, "mip_rel_gap": 0.0})
    except (ValueError, TypeError):
        return None
    if res.status != 0 or res.x is None:
        return None
    b = int(np.argmax(res.x[n:])) + 1
    return b, int(round(float(res.x[:n].sum())))


def choose_batch(ids: Sequence[int], deadlines: Sequence[float], met: np.ndarray, max_batch: int,
                 solver: str = "milp", time_limit_s: float = 1.0) -> BatchChoice:
    """The goodput-maximising batch of SHEPHERD (simplified), a pure function.

    ``met[i, b-1]``: request i meets its deadline when run in a batch of size b (now + T_i(b) <= d_i).
    Batch sizes 1..min(max_batch, len(ids)). ``solver`` "milp" (scipy HiGHS, exact enumeration when it fails)
    or "enumerate". If nobody can meet a deadline, the largest batch of earliest deadlines goes anyway."""
    n = len(ids)
    if n == 0:
        raise ValueError("choose_batch: no requests")
    bmax = max(1, min(int(max_batch), n))
    met = np.asarray(met, dtype=bool)[:, :bmax]
    got = _milp(met, bmax, time_limit_s) if solver == "milp" and met.any() else None
    used = "milp" if got is not None else "enumerate" if met.any() else "none_met"
    b, n_met = got if got is not None else _enumerate(met, bmax)
    if n_met == 0:
        b = bmax  # nobody can make it: progress with the earliest deadlines (SLO violations)
    return _canonical(ids, deadlines, met, b, n_met, used)


# ---------------------------------------------------------------------- the SHEPHERD router
@register_router
class ShepherdRouter(_SLORouter):
    """SHEPHERD-like baseline: whole fixed batches to completely idle instances, sized by :func:`choose_batch`.

    Options (``policy.kwargs``): ``slo_s`` {class: SLO in s}, ``default_slo_s``; ``max_batch`` (also capped by
    the instance's max_num_seqs); ``output_tokens`` (output-length estimate) and ``class_output`` {class:
    tokens}; ``typical_prompt`` (decode context of the step-time estimate); ``solver`` "milp" | "enumerate";
    ``milp_time_limit_s``. Deadline of a request: arrival + its class's SLO.
    """

    name = "shepherd"

    def __init__(self, seed: int = 0, slo_s: Mapping[str, Any] | None = None, default_slo_s: float = 600.0,
                 max_batch: int = 32, output_tokens: float = 256.0, class_output: Mapping[str, Any] | None = None,
                 typical_prompt: int = 512, solver: str = "milp", milp_time_limit_s: float = 1.0,
                 **kw: Any) -> None:
        self.max_batch = int(_num("max_batch", max_batch, lo=1, strict=False, integer=True))
        self.output_tokens = _num("output_tokens", output_tokens)
        self.class_output = _slo_map("class_output", class_output)
        self.typical_prompt = int(_num("typical_prompt", typical_prompt, integer=True))
        self.solver = _choice("solver", solver, ("milp", "enumerate"))
        self.milp_time_limit_s = _num("milp_time_limit_s", milp_time_limit_s)
        self._profiles: dict[tuple[str, str], Profile] = {}
        self._decode: dict[tuple[str, str, int], float] = {}
        self._prefill: dict[tuple[str, str, int, int], float] = {}
        super().__init__(seed, slo_s, default_slo_s, **kw)

    def _clear(self) -> None:
        super()._clear()
        self.stats.update({"batches": 0, "milp": 0, "enumerate": 0, "none_met": 0, "batched_requests": 0,
                           "met_planned": 0})
        n = max(self._n_inst, 0)
        self._reserved: dict[int, int] = {}  # request id -> instance of the batch being dispatched
        self._pending: list[int] = [0] * n  # per instance: members of that batch not yet offered
        self._stamp: list[float] = [-math.inf] * n  # when that batch was chosen
        self._last_send: list[float] = [-math.inf] * n
        self.batch_log: list[tuple[float, int, tuple[int, ...]]] = []  # (time, instance, members), for analysis

    def _on_new_cluster(self, n: int) -> None:
        self._pending, self._stamp, self._last_send = [0] * n, [-math.inf] * n, [-math.inf] * n

    def route(self, req: Request, view: RouterView) -> int:
        now = self._begin(view)
        h = self._admit(req, view)
        st = view.state()
        self._expire(now)
        stale = bool(getattr(view, "stale", False))
        for i, inst in enumerate(st.instances):
            if self._free(i, inst, st, stale):
                self._dispatch(i, inst, h.seq, now)
        i = self._reserved.pop(h.id, None)
        if i is not None:
            self._pending[i] -= 1
            return self._send(h, i, now)
        # batch members still to be offered in this pass (after this one) will make an engine busy
        later = any(self._held[r].seq > h.seq for r in self._reserved)
        if not later and not any(_busy(x) for x in st.instances):
            self.stats["out_of_order"] += 1
            return self._send(h, _least_loaded(st, h.cands), now)
        return WAIT

    def _free(self, i: int, inst: InstanceState, st: ClusterState, stale: bool) -> bool:
        """Completely idle, no batch being dispatched, and (stale view) observed idle after the last send."""
        if not inst.up or _busy(inst) or self._pending[i]:
            return False
        return not stale or st.taken_at > self._last_send[i]

    def _expire(self, now: float) -> None:
        """A batch not fully offered within its instant (not expected) gives its members back: never join later."""
        for i, t in enumerate(self._stamp):
            if self._pending[i] and now > t:
                for rid in [r for r, j in self._reserved.items() if j == i]:
                    del self._reserved[rid]
                self._pending[i] = 0

    def _send(self, h: _Held, i: int, now: float) -> int:
        self._last_send[i] = now
        return self._release(h, i)

    def _dispatch(self, i: int, inst: InstanceState, seq: int, now: float) -> None:
        """Choose a batch for idle instance ``i`` among held requests still to be offered in this pass."""
        pool = [h for h in self._held.values() if h.seq >= seq and i in h.cands and h.id not in self._reserved]
        if not pool:
            return
        model = inst.model
        first = min(pool, key=lambda h: (h.arrival + h.slo_s, h.id))
        key = first.model or model
        pool = [h for h in pool if (h.model or model) == key]
        slots = int(inst.max_num_seqs) or self.max_batch
        bmax = max(1, min(self.max_batch, slots, len(pool), self._kv_cap(inst, pool)))
        deadlines = [h.arrival + h.slo_s for h in pool]
        times = self._exec_times(inst, pool, bmax)
        met = now + times <= np.asarray(deadlines)[:, None]
        choice = choose_batch([h.id for h in pool], deadlines, met, bmax, self.solver, self.milp_time_limit_s)
        for rid in choice.members:
            self._reserved[rid] = i
        self._pending[i] = len(choice.members)
        self._stamp[i] = now
        self.stats["batches"] += 1
        self.stats[choice.solver] += 1
        self.stats["batched_requests"] += len(choice.members)
        self.stats["met_planned"] += choice.n_met
        self.batch_log.append((now, i, choice.members))

    # ------------------------------------------------------------------ T_i(b) from the profile
    def _profile(self, inst: InstanceState) -> Profile:
        model = instance_model(inst)  # (as loaded: its own context length and KV cache, not the registry's)
        key = (model, inst.gpu, inst.kv_blocks_total)
        p = self._profiles.get(key)
        if p is None:
            try:
                p = self._profiles[key] = profile_for_instance(model, inst.gpu, inst.kv_blocks_total,
                                                               inst.block_size)
            except LLMSimError as e:
                raise ConfigError(f"policy shepherd: no profile for instance {inst.idx}'s batch times: {e}") from e
        return p

    def _kv_cap(self, inst: InstanceState, pool: list[_Held]) -> int:
        """Batch size whose prompts + estimated outputs fit the KV cache: a fixed batch must fit at once."""
        kv = int(inst.kv_blocks_total) * int(inst.block_size)
        per = sum(h.prompt + self._output(h) for h in pool) / len(pool)
        return max(1, int(kv // per)) if kv > 0 else self.max_batch

    def _output(self, h: _Held) -> float:
        return self.class_output.get(h.slo_class, self.output_tokens) if h.slo_class is not None \
            else self.output_tokens

    def _exec_times(self, inst: InstanceState, pool: list[_Held], bmax: int) -> np.ndarray:
        """T_i(b) = prefill of b prompts (the pool's mean) in one step + o_i decode steps at batch b."""
        prof = self._profile(inst)
        m, g = inst.model, inst.gpu
        p = max(1, int(round(sum(h.prompt for h in pool) / len(pool) / 16.0)) * 16)
        ctx = self.typical_prompt + int(self.output_tokens) // 2
        pre, dec = np.empty(bmax), np.empty(bmax)
        for b in range(1, bmax + 1):
            kp = (m, g, b, p)
            if kp not in self._prefill:
                self._prefill[kp] = float(prof.step_time(b * p, b, b * p * p, 0, 0, 0))
            kd = (m, g, b)
            if kd not in self._decode:
                self._decode[kd] = float(prof.step_time(b, b, 0, 0, b, b * ctx))
            pre[b - 1], dec[b - 1] = self._prefill[kp], self._decode[kd]
        out = np.array([self._output(h) for h in pool])
        return pre[None, :] + out[:, None] * dec[None, :]
