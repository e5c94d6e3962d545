"""QLM as an llmsim router (the QLM paper, "One Queue Is All You Need: Resolving Head-of-Line Blocking in Large
Language Model Serving"): request groups, virtual queues, pulling, re-planning.

What happens to a request (paper sections 3.1, 4, 5):

1. On arrival it joins the open request group of its key (model, SLO class, the instances that can serve it),
   FCFS inside the group. A group that holds delta x avg_batch_size requests is closed and the next arrival of
   its key opens a new one (Algorithm 1's split; the key plays the k-means clusters' part, as the public code's
   exact (model, SLO) grouping does). A new group goes to the tail of the virtual queue (VQ) of the instance
   with the least estimated work (load balancing) or, with load balancing off, of the next instance in turn.
2. The completion-time estimator (:mod:`~llmsim.routing.qlm.estimator`) and :func:`~llmsim.routing.qlm.plan.evaluate`
   score the current VQs; when a group's P(completion > SLO) exceeds ``trigger_prob`` the plan generator
   (:mod:`~llmsim.routing.qlm.plan`: EDF, or :mod:`~llmsim.routing.qlm.milp`) re-plans
   the order and placement of every group. Re-plans are rate-limited (``replan_interval_s``, sim time) unless
   the arrival opened a group: in overload every arrival predicts a violation.
3. The request is held in the cluster's central queue (WAIT) and *pulled*: an instance whose engine waiting
   queue is shorter than ``max_waiting`` takes the head request of the head group of its VQ. llmsim offers held
   requests one by one in arrival order, so a request that is not that head answers WAIT.

Why nothing starves or hangs: WAIT is answered only while some engine holds work (else the request is routed
to its VQ's instance at once, out of order), so a completion - and with it a new offer of every held request -
is always ahead. Each instance with room takes its VQ head whenever that head is offered, and an instance with
room and an empty VQ takes the tail group (or half the only group) of the fullest VQ (load balancing). No loop
here runs without consuming a group, a request or an instance.

Determinism: groups, plans and ties are ordered by ids and indices, and the default planner is EDF, so a run is
bit-for-bit reproducible. ``planner="milp"`` (the paper's plan generator) runs HiGHS under a wall-clock budget
and keeps a plan only when it is proven optimal, else EDF: the same on every machine unless a proof lands near
the budget, which a loaded machine can cross where an idle one does not (HiGHS exposes no deterministic work
limit through scipy; a node limit does not bound the root node's time). With one model the MILP found nothing
better than EDF (docs/qlm.md), hence the deterministic default.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from llmsim.engine.config import EngineConfig
from llmsim.errors import ConfigError, LLMSimError
from llmsim.perf.profile import profile_for_instance
from llmsim.routing.base import WAIT, Router, instance_model, register_router
from llmsim.routing.base import kwarg_number as _num
from llmsim.routing.qlm.estimator import EngineRates, OutputLengthModel, group_completion, rates_from_profile
from llmsim.routing.qlm.milp import solve_plan
from llmsim.routing.qlm.ops import QLMOperations
from llmsim.routing.qlm.plan import Plan, PlanProblem, RequestGroup, VirtualQueue, edf_plan, evaluate

if TYPE_CHECKING:
    from llmsim.perf.models import ModelSpec
    from llmsim.request import Request
    from llmsim.state.cluster_state import ClusterState, InstanceState
    from llmsim.state.model_host import ModelHostState
    from llmsim.state.view import SimulatorView

OPS = ("pulling", "load_balancing", "eviction", "state_swapping", "warm_start")


def check_ops(ops: Mapping[str, Any] | None) -> dict[str, bool]:
    """The five operations' switches; unknown names, non-booleans and unavailable ones raise a ConfigError."""
    out = dict.fromkeys(OPS, True)
    if ops is None:
        return out
    if not isinstance(ops, Mapping):
        raise ConfigError(f"policy.kwargs.ops: expected a mapping of {list(OPS)} to booleans, got {ops!r}")
    for k, v in ops.items():
        if k not in OPS:
            raise ConfigError(f"policy.kwargs.ops.{k}: unknown operation; known: {list(OPS)}")
        if not isinstance(v, bool):
            raise ConfigError(f"policy.kwargs.ops.{k}: expected true or false, got {v!r}")
        out[k] = v
    return out


@dataclass
class _Group:
    """A request group: its key, SLO and held members (request id, arrival, prompt tokens), FCFS. ``started``: a
    member has been sent to ``queue``'s instance, so the group stays there (load balancing is not preemptive)."""

    id: str
    key: tuple[str, str | None, tuple[int, ...]]
    slo_s: float
    queue: int
    members: deque[tuple[int, float, int]] = field(default_factory=deque)
    started: bool = False

    @property
    def model(self) -> str:
        return self.key[0]

    @property
    def candidates(self) -> tuple[int, ...]:
        return self.key[2]


@register_router
class QLMRouter(QLMOperations, Router):
    """QLM: virtual queues of request groups, pulled by instances, ordered by the plan generator.

    Options (``policy.kwargs``): ``slo_s`` {class: end-to-end SLO in s} (match ``slo.classes.*.e2el_ms``) and
    ``default_slo_s`` for other classes; ``delta`` and ``avg_batch_size`` (None: the estimator's full batch) for
    the group cap; ``max_waiting`` engine-queue length under which an instance pulls; ``planner`` "milp" or
    "edf", ``plan_budget_s``, ``milp_max_groups`` (more groups: EDF), ``alpha``, ``violation_weight`` (None:
    hard chance constraints), ``trigger_prob``, ``replan_interval_s``; ``output_mean`` / ``output_std`` (prior
    output tokens) and ``class_output`` {class: [mean, std]}; ``typical_prompt``; ``ops`` (module OPS).
    """

    name = "qlm"

    def __init__(self, seed: int = 0, slo_s: Mapping[str, Any] | None = None, default_slo_s: float = 600.0,
                 delta: float = 4.0, avg_batch_size: int | None = None, max_waiting: int = 2,
                 planner: str = "edf", plan_budget_s: float = 0.05, milp_max_groups: int = 8,
                 alpha: float = 0.05, violation_weight: float | None = 10.0, trigger_prob: float = 0.5,
                 replan_interval_s: float = 1.0, output_mean: float = 256.0, output_std: float = 128.0,
                 class_output: Mapping[str, Any] | None = None, typical_prompt: int = 512,
                 ops: Mapping[str, Any] | None = None, **kw: Any) -> None:
        super().__init__(seed, **kw)
        if slo_s is not None and not isinstance(slo_s, Mapping):
            raise ConfigError(f"policy.kwargs.slo_s: expected a mapping of class to seconds, got {slo_s!r}")
        self.slo_s = {str(k): _num(f"slo_s.{k}", v) for k, v in (slo_s or {}).items()}
        self.default_slo_s = _num("default_slo_s", default_slo_s)
        self.delta = _num("delta", delta)
        self.avg_batch_size = None if avg_batch_size is None else _num("avg_batch_size", avg_batch_size,
                                                                       integer=True)
        self.max_waiting = int(_num("max_waiting", max_waiting, lo=1, strict=False, integer=True))
        if planner not in ("milp", "edf"):
            raise ConfigError(f"policy.kwargs.planner: expected 'milp' or 'edf', got {planner!r}")
        self.planner = planner
        self.plan_budget_s = _num("plan_budget_s", plan_budget_s, strict=False)
        self.milp_max_groups = int(_num("milp_max_groups", milp_max_groups, integer=True))
        self.alpha = _num("alpha", alpha)
        if self.alpha >= 0.5:
            raise ConfigError(f"policy.kwargs.alpha: expected 0 < alpha < 0.5, got {alpha!r}")
        self._z = NormalDist().inv_cdf(1.0 - self.alpha)  # chance level of the plans and of making room
        self.violation_weight = None if violation_weight is None else _num("violation_weight", violation_weight,
                                                                           strict=False)
        self.trigger_prob = _num("trigger_prob", trigger_prob, strict=False)
        if self.trigger_prob >= 1:
            raise ConfigError(f"policy.kwargs.trigger_prob: expected 0 <= p < 1, got {trigger_prob!r}")
        self.replan_interval_s = _num("replan_interval_s", replan_interval_s, strict=False)
        self.output_prior = (_num("output_mean", output_mean), _num("output_std", output_std, strict=False))
        self.class_output = self._check_class_output(class_output)
        self.typical_prompt = int(_num("typical_prompt", typical_prompt, integer=True))
        self.ops = check_ops(ops)
        self._rates: dict[tuple, EngineRates] = {}
        self._clear()

    @staticmethod
    def _check_class_output(class_output: Mapping[str, Any] | None) -> dict[str, OutputLengthModel]:
        out: dict[str, OutputLengthModel] = {}
        if class_output is not None and not isinstance(class_output, Mapping):
            raise ConfigError(f"policy.kwargs.class_output: expected a mapping of class to [mean, std] output "
                              f"tokens, got {class_output!r:.80}")
        for k, v in (class_output or {}).items():
            if not isinstance(v, (list, tuple)) or len(v) != 2:
                raise ConfigError(f"policy.kwargs.class_output.{k}: expected [mean, std], got {v!r}")
            mean = _num(f"class_output.{k}", v[0])
            std = _num(f"class_output.{k}", v[1], strict=False)
            out[str(k)] = OutputLengthModel(prior_mean=mean, prior_std=std)
        return out

    def _clear(self) -> None:
        self._groups: dict[str, _Group] = {}
        self._open: dict[tuple, str] = {}
        self._held: dict[int, str] = {}
        self._vq: list[list[str]] = []
        self._gid = 0
        self._rr = 0
        self._last_plan = -math.inf
        self._last_now = -math.inf
        self.stats = {"plans": 0, "milp": 0, "edf": 0, "solve_s": 0.0, "groups": 0, "out_of_order": 0}
        self._hosts: tuple[ModelHostState | None, ...] = ()
        self._view: SimulatorView | None = None
        self._hosts_at = -math.inf
        self._clear_ops()

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._clear()

    # ------------------------------------------------------------------ routing
    def route(self, req: Request, view: SimulatorView) -> int:
        now = float(view.now)
        if now < self._last_now or len(self._vq) != view.num_instances:
            self._clear()  # a new simulation (time went back) or another cluster: start afresh
            self._vq = [[] for _ in range(view.num_instances)]
        self._last_now = now
        st = view.state()
        if now != self._hosts_at or view is not self._view:
            hosts = getattr(view, "model_hosts", None)  # (a view without multi-model instances may lack it)
            self._hosts = hosts() if hosts is not None else ()  # once per instant: a pass offers every held one
            self._hosts_at = now
        self._view = view
        gid = self._held.get(req.id)
        if gid is None:
            gid = self._admit(req, view, st, now)
            if not self.ops["pulling"]:
                return self._take(req.id, self._groups[gid])  # immediate routing: the engine orders (FCFS)
        g = self._groups[gid]
        if self.ops["load_balancing"]:
            self._steal(st)
        q = g.queue
        if self._vq[q][0] == g.id and g.members[0][0] == req.id:
            room = self._room(st.instances[q])
            swap = self._loaded(q, st) != g.model
            if not room:  # make room for the head's requests (not for a model swap alone: measured to thrash)
                self._make_room(view, st, q, g, now, swap)
            if room:
                return self._take(req.id, g)
        if not any(i.num_running + i.num_waiting + i.num_swapped for i in st.instances):
            self.stats["out_of_order"] += 1  # nothing in flight: no completion would offer it again
            return self._take(req.id, g)
        return WAIT

    def _room(self, inst: InstanceState) -> bool:
        h = self._hosts[inst.idx] if self._hosts else None
        held = h.num_held if h is not None else 0
        return inst.up and inst.num_waiting + inst.num_swapped + held < self.max_waiting

    def _loaded(self, q: int, st: ClusterState) -> str:
        """The model instance ``q`` serves next: the one being swapped in, else the loaded one."""
        h = self._hosts[q] if self._hosts else None
        return st.instances[q].model if h is None else (h.swapping_to or h.loaded)

    def _take(self, rid: int, g: _Group) -> int:
        """Remove request ``rid`` from its group (the head, unless routed out of order) and route it."""
        if g.members[0][0] == rid:
            g.members.popleft()
        else:
            g.members = deque(m for m in g.members if m[0] != rid)
        del self._held[rid]
        g.started = True
        if not g.members:
            self._vq[g.queue].remove(g.id)
            del self._groups[g.id]
            if self._open.get(g.key) == g.id:
                del self._open[g.key]
        return int(g.queue)

    # ------------------------------------------------------------------ groups and placement
    def _admit(self, req: Request, view: SimulatorView, st: ClusterState, now: float) -> str:
        """Put a new arrival in its group (opening one when needed) and re-plan if a violation is likely."""
        cands = tuple(int(c) for c in view.candidates(req))
        context = int(req.prompt_tokens) + int(req.generated)  # an evicted request comes back with its tokens
        if context > req.prompt_tokens:  # (its one recompute prefill must fit where it goes next)
            cands = tuple(c for c in cands if context <= st.instances[c].max_prompt_tokens) or cands
        cls = req.slo_class
        key = (req.model if req.model is not None else st.instances[cands[0]].model, cls, cands)
        gid = self._open.get(key)
        # a full group is split (Algorithm 1); a started one is closed: it is pinned to its instance (no preemptive
        # load balancing), and arrivals that joined it would be pinned there too instead of being placed by the plan
        opened = gid is None or len(self._groups[gid].members) >= self._group_cap(st) or self._groups[gid].started
        if opened:
            gid = f"g{self._gid}"
            self._gid += 1
            self.stats["groups"] += 1
            slo = self.slo_s.get(cls, self.default_slo_s) if cls is not None else self.default_slo_s
            q = self._initial_queue(st, cands, key[0])
            self._groups[gid] = _Group(gid, key, slo, q)
            self._open[key] = gid
            self._vq[q].append(gid)  # FCFS placement until a plan says otherwise (paper section 3.1)
        g = self._groups[gid]
        g.members.append((req.id, float(req.arrival), int(req.prompt_tokens)))
        self._held[req.id] = gid
        self._note_slo(req.id, g.slo_s, st)
        if self.ops["pulling"] and (opened or now - self._last_plan >= self.replan_interval_s):
            self._maybe_replan(st, now)
        if opened:
            self._warm(view, self._hosts)
        return gid

    def _group_cap(self, st: ClusterState) -> float:
        """delta x average batch size (Algorithm 1); the batch is the estimator's full batch unless given, averaged
        over the up instances (a down one is no candidate, and a live one may be unpriceable)."""
        batch = self.avg_batch_size
        if batch is None:
            sizes = [self._rates_of(i).batch_size for i in (tuple(i for i in st.instances if i.up) or st.instances)]
            batch = sum(sizes) / len(sizes)
        return max(1.0, self.delta * batch)

    def _initial_queue(self, st: ClusterState, cands: tuple[int, ...], model: str) -> int:
        """Least estimated work, counting the model swap a group needs behind what the queue ends with."""
        if not self.ops["load_balancing"]:
            self._rr += 1
            return cands[(self._rr - 1) % len(cands)]
        work = {q: self._backlog(st.instances[q])[0] + self._vq_work(q, st.instances[q])
                + self._swap_cost(q, st, model) for q in cands}
        return min(cands, key=lambda q: (work[q], q))

    def _swap_cost(self, q: int, st: ClusterState, model: str) -> float:
        """Seconds to load ``model`` on instance ``q`` after the last group of its VQ (0 if that is the model)."""
        h = self._hosts[q] if self._hosts else None
        if h is None or model not in h.catalog:
            return 0.0
        last = self._groups[self._vq[q][-1]].model if self._vq[q] else self._loaded(q, st)
        return 0.0 if last == model else h.swap_s[h.catalog.index(model)]

    def _vq_work(self, q: int, inst: InstanceState) -> float:
        """Mean seconds of the output tokens held in VQ ``q``."""
        theta = self._rates_of(inst).theta
        return sum(len(self._groups[g].members) * self._output(self._groups[g]).mean for g in self._vq[q]) / theta

    def _steal(self, st: ClusterState) -> None:
        """Load balancing: an instance with room and an empty VQ takes the tail group (or half of the only group)
        of the VQ holding the most requests it can serve, if that group has not started (the paper's load balancing
        is not preemptive: a group that started on an instance is never migrated)."""
        for i, inst in enumerate(st.instances):
            if self._vq[i] or not self._room(inst):
                continue
            donors = [(sum(len(self._groups[g].members) for g in vq), -j, j) for j, vq in enumerate(self._vq)
                      if j != i and vq and i in self._groups[vq[-1]].candidates and not self._groups[vq[-1]].started
                      and self._worth_moving(self._groups[vq[-1]], j, i, st)]
            if not donors:
                continue
            n, _, j = max(donors)
            tail = self._groups[self._vq[j][-1]]
            if len(self._vq[j]) >= 2:
                self._vq[j].pop()
                tail.queue = i
                self._vq[i].append(tail.id)
            elif n >= 2:
                half = _Group(f"g{self._gid}", tail.key, tail.slo_s, i)
                self._gid += 1
                self.stats["groups"] += 1
                keep = len(tail.members) - len(tail.members) // 2
                while len(tail.members) > keep:
                    half.members.appendleft(tail.members.pop())
                for rid, _, _ in half.members:
                    self._held[rid] = half.id
                self._groups[half.id] = half
                self._vq[i].append(half.id)
                if self._open.get(tail.key) == tail.id:
                    self._open[tail.key] = half.id  # later arrivals stay behind the moved half (FCFS)

    def _worth_moving(self, g: _Group, src: int, dst: int, st: ClusterState) -> bool:
        """Stealing a group that needs a model swap pays only if its source queue holds more work than the swap."""
        cost = self._swap_cost(dst, st, g.model)
        return cost == 0.0 or self._vq_work(src, st.instances[src]) > cost

    # ------------------------------------------------------------------ estimator and plan generator
    def _rates_of(self, inst: InstanceState, model: str | None = None) -> EngineRates:
        """Theta, eps, d, P of the instance's (model, GPU, engine limits) from the profile table, cached.
        ``model``: another model the instance could load (its KV cache then sized from the profile), priced as
        its host would load it (the catalog's spec: its kv_cache_dtype applied), else by name."""
        other = model is not None and model != inst.model
        name = model if other else inst.model
        spec = self._catalog_spec(inst.idx, model) if other else instance_model(inst)  # (as loaded, not by name)
        blocks = 0 if other else inst.kv_blocks_total
        key = (name, inst.gpu, inst.max_num_seqs, blocks, inst.block_size, spec)
        r = self._rates.get(key)
        if r is None:
            try:
                profile = profile_for_instance(spec, inst.gpu, blocks, inst.block_size)  # (tp not in the state)
            except LLMSimError as e:
                raise ConfigError(f"policy qlm: no profile for the estimator of instance {inst.idx}: {e}") from e
            cfg = EngineConfig(max_num_seqs=max(1, inst.max_num_seqs), block_size=max(1, inst.block_size),
                               num_gpu_blocks=max(1, blocks) if blocks else None)
            r = self._rates[key] = rates_from_profile(profile, cfg, typical_prompt=self.typical_prompt,
                                                      typical_output=int(max(1.0, self.output_prior[0])))
        return r

    def _catalog_spec(self, q: int, model: str) -> str | ModelSpec:
        """``model`` as instance ``q``'s host would load it (its catalog's spec), else its name (no host, or a host
        that does not publish specs)."""
        h = self._hosts[q] if q < len(self._hosts) else None
        if h is None or model not in h.catalog or len(h.specs) != len(h.catalog):
            return model
        return h.specs[h.catalog.index(model)]

    def _output(self, g: _Group) -> OutputLengthModel:
        m = self.class_output.get(g.key[1]) if g.key[1] is not None else None
        return m if m is not None else OutputLengthModel(prior_mean=self.output_prior[0],
                                                         prior_std=self.output_prior[1])

    def _backlog(self, inst: InstanceState) -> tuple[float, float]:
        """Seconds (mean, std) of the tokens still to generate by the requests queued on the engine: the
        waiting and swapped ones (the running batch is not ahead, docs/qlm_estimator.md)."""
        rows = inst.waiting + inst.swapped
        if not rows:
            return 0.0, 0.0
        om = OutputLengthModel(prior_mean=self.output_prior[0], prior_std=self.output_prior[1])
        mean, var = om.remaining([r.generated for r in rows])
        theta = self._rates_of(inst).theta
        return float(mean.sum()) / theta, math.sqrt(float(var.sum())) / theta

    def _problem(self, st: ClusterState, now: float) -> PlanProblem:
        """The plan generator's input: every group on every queue it may use (W, C from the estimator). Only those
        queues are priced: a down instance no group is on (the live router's may be unpriceable) is not."""
        queues = []
        held_on = {self._groups[g].queue for vq in self._vq for g in vq}
        for q, inst in enumerate(st.instances):
            b_mean, b_std = self._backlog(inst) if inst.up or q in held_on else (0.0, 0.0)
            h = self._hosts[q] if self._hosts else None
            swap = {} if h is None else dict(zip(h.catalog, h.swap_s))  # a single-model one never swaps
            queues.append(VirtualQueue(str(q), self._loaded(q, st), swap_s=swap, default_swap_s=0.0,
                                       backlog_mean_s=b_mean + (h.swap_ends - now if h and h.swapping_to else 0.0),
                                       backlog_std_s=b_std))
        groups = []
        for gid in (g for vq in self._vq for g in vq):
            g = self._groups[gid]
            om, n = self._output(g), len(g.members)
            prompt = sum(m[2] for m in g.members) / n
            s_mean, s_std, c_mean, c_std = [], [], [], []
            for q, inst in enumerate(st.instances):
                # a started group stays where it runs (the paper: load balancing is not preemptive)
                ok = q == g.queue or (q in g.candidates and self.ops["load_balancing"] and not g.started)
                if not ok and not inst.up:  # (its times would be unused: never priced)
                    theta, cm, cs = math.inf, math.inf, 0.0
                else:
                    theta = self._rates_of(inst, g.model).theta
                    cm, cs = group_completion(self._rates_of(inst, g.model), n, prompt, om.mean, om.std)  # Eq. 5
                s_mean.append(n * om.mean / theta if ok else math.inf)
                s_std.append(math.sqrt(n) * om.std / theta)
                c_mean.append(cm if ok else math.inf)
                c_std.append(cs)
            deadline = g.members[0][1] + g.slo_s - now
            groups.append(RequestGroup(gid, g.model, n, deadline, tuple(s_mean), tuple(s_std),
                                       tuple(c_mean), tuple(c_std)))
        return PlanProblem(tuple(groups), tuple(queues), alpha=self.alpha, violation_weight=self.violation_weight)

    def _maybe_replan(self, st: ClusterState, now: float) -> None:
        """Estimate the current VQs; if some group likely misses its SLO, re-plan (MILP within budget, else EDF)."""
        if not self._groups:
            return
        problem = self._problem(st, now)
        current = evaluate(problem, [list(vq) for vq in self._vq])
        if max(current.violation_prob.values(), default=0.0) <= self.trigger_prob:
            return
        self._last_plan = now
        plan = self._solve(problem)
        if not plan.fallback and plan.objective > current.objective - 1e-9 and current.feasible >= plan.feasible:
            return  # no better than what the VQs hold: keep them (fewer needless reorders)
        self._vq = [list(ids) for ids in plan.queues]
        for q, ids in enumerate(self._vq):
            for gid in ids:
                self._groups[gid].queue = q
        if self._view is not None:
            self._warm(self._view, self._hosts)

    def _solve(self, problem: PlanProblem) -> Plan:
        self.stats["plans"] += 1
        if self.planner == "milp" and len(problem.groups) <= self.milp_max_groups:
            plan = solve_plan(problem, time_budget_s=self.plan_budget_s)
            self.stats["solve_s"] += plan.solve_time_s
            if plan.status == "optimal" and not plan.fallback:
                self.stats["milp"] += 1
                return plan
        self.stats["edf"] += 1
        return edf_plan(problem)
