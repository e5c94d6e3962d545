"""RouteBalance as an llmsim router (the RouteBalance paper, "fused model routing and load balancing";
docs/routebalance.md): each request gets the instance - hence also the model - that maximises a weighted sum of
predicted quality, cost and latency, over heterogeneous instances.

What happens to a request (the paper's §4.1-§4.3 and Algorithm 1):

1. On arrival it joins the open batch and is held in the cluster's central queue (WAIT). The batch closes when
   it holds ``max_batch_size`` requests or ``batch_timeout`` has passed since its first request; with
   ``batching="adaptive"`` both follow the share of instances with waiting requests at the last telemetry
   read (< 0.3: 4 / 50 ms, < 0.7: 16 / 100 ms, else 32 / 200 ms; initially 8 / 100 ms).
2. When the batch closes, the estimator (:mod:`llmsim.routing.routebalance.estimators`) gives every request a
   quality and an output length per candidate model; requests are taken longest predicted output first (LPT, key
   max over models) and each takes the candidate instance that maximises Eq. 1
   (:mod:`llmsim.routing.routebalance.objective`) on the dead-reckoned state D
   (:mod:`llmsim.routing.routebalance.state`), among those whose predicted cost fits the request's budget
   (Eq. 2); D is updated after each assignment.
3. Each held request then gets its instance when the cluster offers it again (one at a time, in arrival
   order, at completions and at ``sim.central_queue_tick`` ticks).

Windows close only when the router is called, so a window is as precise as the tick: run with
``sim.central_queue_tick`` at or below the smallest window (0.004 s is fine). Nothing hangs with or without
a tick: WAIT is answered only while some engine holds work (a completion, hence a new offer, is ahead);
otherwise the batch is decided at once and the request routed, which makes that engine busy.

Deterministic: LPT ties by arrival, instance ties by queue, last assignment and index; the noisy estimator
draws from a generator seeded by (seed, request id, model).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llmsim.errors import ConfigError
from llmsim.routing.base import WAIT, Router, register_router
from llmsim.routing.base import kwarg_flag as _flag
from llmsim.routing.base import kwarg_number as _num
from llmsim.routing.routebalance.estimators import make_estimator, predict_batch
from llmsim.routing.routebalance.objective import Candidate, parse_prices, parse_weights, score_candidates
from llmsim.routing.routebalance.state import TPOT_HEADS, Reckoned, TpotPriors, predicted_latency

if TYPE_CHECKING:
    from llmsim.request import Request
    from llmsim.state.cluster_state import ClusterState
    from llmsim.state.view import RouterView

# adaptive batching (the paper's §4.1, as its code sizes it): busy-ratio upper bound -> (max_batch_size, timeout s)
BATCH_LEVELS = ((0.3, 4, 0.050), (0.7, 16, 0.100), (math.inf, 32, 0.200))


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(f"policy.kwargs.{name}: expected one of {list(allowed)}, got {value!r}")
    return str(value)


# ---------------------------------------------------------------------- the router
@dataclass(slots=True)
class Assignment:
    """A request whose batch has been decided, until the cluster offers it again."""

    instance: int
    length: float  # predicted output tokens on the chosen model (attached as Request.predicted_output)
    prompt: int
    max_tokens: int  # after the budget clamp (the paper's §4.1 budget handling)
    score: float
    clamp: bool = False  # a budget applied: the engine gets max_tokens as the request's cap at dispatch


@register_router
class RouteBalanceRouter(Router):
    """RouteBalance: batched, LPT-ordered greedy assignment maximising Eq. 1 (quality, cost, latency) on
    dead-reckoned instance state (module docstring).

    Options (``policy.kwargs``; docs/routebalance.md): ``weights``, ``prices``, ``estimator``, ``estimator_kwargs``,
    ``quality_norm``, ``norm``, ``cost_budget``, ``budget_filter``, ``max_tokens``, ``batching``, ``max_batch_size``,
    ``batch_timeout_ms``, ``lpt``, ``telemetry_period_s``, ``latency``, ``static_tpot_ms``, ``tpot_prior``,
    ``tpot_kwargs``, ``tiebreak``, ``reckon_tokens``."""

    name = "routebalance"

    def __init__(self, seed: int = 0, weights: Any = "uniform", prices: Any = None, estimator: Any = "oracle",
                 estimator_kwargs: Mapping[str, Any] | None = None, quality_norm: str = "raw", norm: str = "max",
                 cost_budget: float | None = None, max_tokens: int = 1024, batching: str = "adaptive",
                 max_batch_size: int = 8, batch_timeout_ms: float = 100.0, lpt: bool = True,
                 telemetry_period_s: float = 0.0, latency: str = "telemetry", static_tpot_ms: Any = None,
                 tpot_prior: str = "table", tiebreak: str = "queue", reckon_tokens: str = "chosen",
                 tpot_kwargs: Any = None, budget_filter: bool = True, **kw: Any) -> None:
        super().__init__(seed, **kw)
        self.weights = parse_weights(weights)
        self.prices = parse_prices(prices)
        self.estimator = make_estimator(estimator, seed, estimator_kwargs)
        self.quality_norm = _choice("quality_norm", quality_norm, ("raw", "minmax"))
        self.norm = _choice("norm", norm, ("max", "minmax"))
        self.cost_budget = None if cost_budget is None else _num("cost_budget", cost_budget)
        self.budget_filter = _flag("budget_filter", budget_filter)  # False: the dispatch clamp only (an arm)
        self.max_tokens = int(_num("max_tokens", max_tokens, integer=True))
        self.batching = _choice("batching", batching, ("adaptive", "fixed", "off"))
        self.init_batch = (int(_num("max_batch_size", max_batch_size, integer=True)),
                           _num("batch_timeout_ms", batch_timeout_ms, strict=False) / 1000.0)
        self.lpt = _flag("lpt", lpt)
        self.telemetry_period_s = _num("telemetry_period_s", telemetry_period_s, strict=False)
        self.latency = _choice("latency", latency, ("telemetry", "static"))
        learned = isinstance(tpot_prior, str) and tpot_prior in TPOT_HEADS  # e.g. xgboost (predictors.py)
        head = TPOT_HEADS[tpot_prior] if learned else None
        if head is None and tpot_kwargs is not None:
            raise ConfigError(f"policy.kwargs.tpot_kwargs: only for a learned tpot_prior ({sorted(TPOT_HEADS)})")
        self.tpot_head = head(tpot_kwargs) if head is not None else None
        self.priors = TpotPriors(static_tpot_ms, "table" if head is not None else tpot_prior)
        self.tiebreak = _choice("tiebreak", tiebreak, ("queue", "latency"))
        self.reckon_tokens = _choice("reckon_tokens", reckon_tokens, ("chosen", "lpt_key"))
        # called as on_batch(state, D, undispatched) after each refresh (tests, tracing)
        self.on_batch: Callable[[ClusterState, list[Reckoned], int], None] | None = None
        self._clear()

    def _clear(self) -> None:
        self._open: list[Request] = []
        self._open_ids: set[int] = set()
        self._open_since = 0.0
        self._assigned: dict[int, Assignment] = {}
        self._D: list[Reckoned] = []
        self._refreshed_at = -math.inf
        self._counter = 0
        self._batch = self.init_batch
        self._last_now = -math.inf
        self._checked_prices = False
        self._prior_list: list[float] = []
        self.budget_log: dict[int, tuple[int, bool]] = {}  # request id -> (clamped max_tokens, exhausted)
        self.stats: dict[str, float] = {
            "batches": 0, "decisions": 0, "decide_s": 0.0, "route_s": 0.0, "refreshes": 0, "idle_closes": 0,
            "no_quality": 0, "budgeted": 0, "filtered": 0, "budget_fallbacks": 0, "clamped": 0, "exhausted": 0,
            "routed": 0, "estimate_s": 0.0, "estimate_calls": 0}

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        if seed is not None and hasattr(self.estimator, "seed"):
            self.estimator.seed = seed  # the noisy estimator's draws follow the new seed
        self._clear()

    @property
    def mean_decision_ms(self) -> float:
        """Wall time of the batch decisions per request decided, ms (the paper's amortised per-request figure)."""
        n = self.stats["decisions"]
        return 1000.0 * self.stats["decide_s"] / n if n else 0.0

    @property
    def held(self) -> int:
        """Requests the router holds (open batch + decided, not yet offered again)."""
        return len(self._open) + len(self._assigned)

    # ------------------------------------------------------------------ routing
    def route(self, req: Request, view: RouterView) -> int:
        t0 = time.perf_counter()
        try:
            return self._route(req, view)
        finally:
            self.stats["route_s"] += time.perf_counter() - t0

    def _route(self, req: Request, view: RouterView) -> int:
        now = float(view.now)
        if now < self._last_now or len(self._D) not in (0, view.num_instances):
            self._clear()  # a new simulation (time went back) or another cluster; not a new view object: a live
        self._last_now = now  # router builds one per request (serving), and the state must carry over
        a = self._assigned.pop(req.id, None)
        if a is not None:
            return self._dispatch(req, a)
        if req.id not in self._open_ids:
            if not self._open:
                self._open_since = now
            self._open.append(req)
            self._open_ids.add(req.id)
        st = view.state()
        if not self._should_close(now, view, st):
            return WAIT
        self._decide(view, st, now)
        return self._dispatch(req, self._assigned.pop(req.id))

    def _dispatch(self, req: Request, a: Assignment) -> int:
        req.predicted_output = a.length  # the telemetry's pending decode tokens count it from now on
        if a.clamp and (req.max_tokens is None or a.max_tokens < req.max_tokens):
            req.token_cap = a.max_tokens  # the engine stops there; never above the client's own cap
        self.stats["routed"] += 1
        return int(a.instance)

    def _should_close(self, now: float, view: RouterView, st: ClusterState) -> bool:
        size, timeout = self._batch
        if self.batching == "off" or len(self._open) >= size or now - self._open_since >= timeout - 1e-12:
            return True
        if not _engines_busy(view, st):
            self.stats["idle_closes"] += 1  # no completion ahead: decide now (the no-hang rule)
            return True
        return False

    # ------------------------------------------------------------------ one batch (Algorithm 1)
    def _decide(self, view: RouterView, st: ClusterState, now: float) -> None:
        t0 = time.perf_counter()
        batch, self._open, self._open_ids = self._open, [], set()
        self._refresh(st, now)
        self._prior_cache(st)
        preds = self._predict_all(batch, view)
        order = range(len(batch))
        if self.lpt:  # longest predicted output first; ties by arrival (the batch is in arrival order)
            order = sorted(order, key=lambda k: -max(c.length for c in preds[k]))
        for k in order:
            self._assign(batch[k], preds[k])
        self.stats["batches"] += 1
        self.stats["decisions"] += len(batch)
        self.stats["decide_s"] += time.perf_counter() - t0

    def _refresh(self, st: ClusterState, now: float) -> None:
        """Seed D from the telemetry every ``telemetry_period_s`` (0: every batch), keeping the LRU stamps and
        adding the requests decided but not yet dispatched; adapt the batch size to the busy ratio."""
        if not self._checked_prices:
            self._check_prices(st)
        if self._D and now - self._refreshed_at < self.telemetry_period_s:
            return
        last = [d.last_assigned for d in self._D] or [-1] * len(st.instances)
        self._D = [Reckoned.from_state(inst, last[k]) for k, inst in enumerate(st.instances)]
        for a in self._assigned.values():
            self._D[a.instance].assign(a.prompt, a.length, self._D[a.instance].last_assigned)
        self._refreshed_at = now
        self.stats["refreshes"] += 1
        if self.batching == "adaptive":
            ratio = sum(1 for i in st.instances if i.num_waiting > 0) / max(len(st.instances), 1)
            self._batch = next((s, t) for hi, s, t in BATCH_LEVELS if ratio < hi)
        if self.on_batch is not None:
            self.on_batch(st, self._D, len(self._assigned))

    def _check_prices(self, st: ClusterState) -> None:
        """Every model needs a price, except on a single-model cluster (the cost term is then the same for every
        instance, whatever the price; such a model costs 0 here and a budget is an error)."""
        models = {inst.model for inst in st.instances}
        for inst in st.instances:
            if inst.model not in self.prices and len(models) > 1:
                raise ConfigError(f"policy.kwargs.prices: no price for model {inst.model!r} (instance "
                                  f"{inst.name}); add prices.{inst.model}: [in, out] USD per 1M tokens")
        self._checked_prices = True

    def _max_tokens(self, req: Request) -> int:
        """The request's output cap: the client's ``Request.max_tokens``, else ``extra.max_tokens`` (older
        workloads), else the policy's ``max_tokens`` (the benchmark's 1024)."""
        for m in (req.max_tokens, (req.extra or {}).get("max_tokens")):
            if isinstance(m, (int, float)) and not isinstance(m, bool) and m >= 1:
                return int(m)
        return self.max_tokens

    def _budget(self, req: Request) -> float | None:
        b = (req.extra or {}).get("cost_budget")
        if b is None:
            return self.cost_budget
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not b >= 0:
            raise ConfigError(f"request {req.id}: extra.cost_budget must be a number >= 0 (USD), got {b!r}")
        return float(b)

    def _predict_all(self, batch: list[Request], view: RouterView) -> list[list[Candidate]]:
        """Every request's candidates (:meth:`_predict`), the estimator called once for the whole batch window."""
        cands = []
        for req in batch:
            cs = [c for c in view.candidates(req) if self._D[c].up]
            if req.model is not None:
                cs = [c for c in cs if self._D[c].model == req.model] or cs
            cands.append(cs)
        models = [sorted({self._D[c].model for c in cs}) for cs in cands]
        t0 = time.perf_counter()
        est = predict_batch(self.estimator, batch, models)
        self.stats["estimate_s"] += time.perf_counter() - t0
        self.stats["estimate_calls"] += 1
        return [self._candidates(r, cs, ms, *e) for r, cs, ms, e in zip(batch, cands, models, est)]

    def _predict(self, req: Request, view: RouterView) -> list[Candidate]:
        """The request's candidates with quality, length (capped at max_tokens), cost and latency on D."""
        return self._predict_all([req], view)[0]

    def _candidates(self, req: Request, cands: list[int], models: list[str], quals: Sequence[float] | None,
                    lens: Sequence[float]) -> list[Candidate]:
        if quals is None:
            self.stats["no_quality"] += 1
        cap = self._max_tokens(req)
        q = dict(zip(models, quals)) if quals is not None else dict.fromkeys(models, 0.0)
        ln = {m: min(float(cap), max(1.0, float(x))) for m, x in zip(models, lens)}
        out = []
        for c in cands:
            m = self._D[c].model
            out.append(Candidate(c, m, q[m], ln[m], self._cost(req.prompt_tokens, ln[m], m), 0.0))
        return out

    def _cost(self, prompt: int, out_tokens: float, model: str) -> float:
        p_in, p_out = self.prices.get(model, (0.0, 0.0))  # unpriced: only on a single-model cluster
        return (prompt * p_in + out_tokens * p_out) / 1e6

    def _latencies(self, cands: list[Candidate], st_priors: list[float]) -> None:
        static = self.latency == "static"
        for c in cands:
            d = self._D[c.instance]
            tpot = d.step_time if d.step_time > 0 and not static else st_priors[c.instance]
            if self.tpot_head is not None and not static:
                tpot = self.tpot_head.tpot_s(d, st_priors[c.instance])
            c.latency = predicted_latency(d, tpot, c.length, queue_term=not static)

    def _assign(self, req: Request, cands: list[Candidate]) -> None:
        """Budget filter (Eq. 2), Eq. 1 on the current D, tiebreak, the local update (Algorithm 1 lines 5-7)."""
        self._latencies(cands, self._prior_list)
        cap = self._max_tokens(req)
        budget = self._budget(req)
        pool = self._budget_pool(req, cands, cap, budget, count=True)
        self.score_pool(pool)
        best = min(pool, key=self._tie_key)
        d = self._D[best.instance]
        n = self._clamp(req, best.model, cap, budget)
        length = min(best.length, float(n))  # the engine stops at the clamped max_tokens
        lpt_key = max(c.length for c in cands)
        self._counter += 1
        d.assign(req.prompt_tokens, length if self.reckon_tokens == "chosen" else lpt_key, self._counter)
        self._assigned[req.id] = Assignment(best.instance, length, req.prompt_tokens, n, best.score,
                                            clamp=budget is not None)

    def _budget_pool(self, req: Request, cands: list[Candidate], cap: int, budget: float | None,
                     count: bool) -> list[Candidate]:
        """The candidate set C of Eq. 1: those whose predicted cost fits the budget (Eq. 2); none fits -> the smallest
        worst-case cost (prompt + max_tokens), as the paper's code. ``count``: record it in ``stats``."""
        if budget is None:
            return cands
        unpriced = sorted({c.model for c in cands} - set(self.prices))
        if unpriced:
            raise ConfigError(f"policy.kwargs.prices: request {req.id} has a cost budget but model(s) {unpriced} "
                              "have no price; add prices.<model>: [in, out] USD per 1M tokens")
        pool = [c for c in cands if c.cost <= budget] if self.budget_filter else cands
        if count:
            self.stats["budgeted"] += 1
            self.stats["filtered"] += len(pool) < len(cands)
        if not pool:
            if count:
                self.stats["budget_fallbacks"] += 1
            worst = [self._cost(req.prompt_tokens, cap, c.model) for c in cands]
            lo = min(worst)
            pool = [c for c, w in zip(cands, worst) if w <= lo * (1 + 1e-12)]
        return pool

    def _tie_key(self, c: Candidate) -> tuple[float, float, int, int]:
        d = self._D[c.instance]
        second = d.queue if self.tiebreak == "queue" else c.latency
        return (-round(c.score, 12), second, d.last_assigned, c.instance)

    def score_pool(self, pool: list[Candidate]) -> None:
        """Eq. 1 over the candidate set with this router's weights and normalisations."""
        score_candidates(pool, self.weights, self.quality_norm, self.norm)

    def _clamp(self, req: Request, model: str, cap: int, budget: float | None) -> int:
        """The dispatch-time clamp max_tokens := min(max_tokens, floor((b - l_in c_in) / c_out)) (the paper's worst
        case at dispatch); 1 token and budget-exhausted when the budget does not cover the prompt and one output
        token. :meth:`_dispatch` writes it to ``Request.token_cap`` for this run (the engine stops there, as vLLM
        does at max_tokens; the client's ``Request.max_tokens`` stays as sent, so the request objects can be
        simulated again)."""
        if budget is None:
            return cap
        p_in, p_out = self.prices[model]
        left = budget - req.prompt_tokens * p_in / 1e6
        # + 1e-9 token: a budget of exactly k output tokens must not lose one to float rounding
        tokens = math.inf if p_out <= 0 else math.floor(left * 1e6 / p_out + 1e-9)
        exhausted = left <= 0 or tokens < 1  # not even one output token is paid for: 1 token, over budget
        n = 1 if exhausted else int(min(cap, tokens))
        self.stats["clamped"] += n < cap
        self.stats["exhausted"] += exhausted
        self.budget_log[int(req.id)] = (n, exhausted)
        return n

    # ------------------------------------------------------------------ inspection
    def score(self, req: Request, view: RouterView) -> list[Candidate]:
        """The candidates of ``req`` scored against the current telemetry, without assigning it (tests, tracing)."""
        st = view.state()
        saved = self._D
        self._D = [Reckoned.from_state(inst, d.last_assigned) for inst, d in zip(st.instances, saved)] or [
            Reckoned.from_state(inst) for inst in st.instances]
        try:
            self._prior_cache(st)
            cands = self._predict(req, view)
            self._latencies(cands, self._prior_list)
            pool = self._budget_pool(req, cands, self._max_tokens(req), self._budget(req), count=False)
            self.score_pool(pool)  # the same candidate set the decision uses
            return sorted(pool, key=self._tie_key)
        finally:
            self._D = saved

    def _prior_cache(self, st: ClusterState) -> None:
        self._prior_list = [self.priors.prior_s(inst) for inst in st.instances]
        if self.tpot_head is not None:
            self.tpot_head.observe(st)


def _engines_busy(view: RouterView, st: ClusterState) -> bool:
    """Whether some engine holds work. A stale view may still show a finished engine busy, and then no completion
    would come; a live router knows its own in-flight requests exactly, so the live state decides then."""
    if st.taken_at < st.now:
        live = getattr(view, "live_state", None)
        if live is not None:
            st = live(sync=False)
    return any(i.num_running or i.num_waiting or i.num_swapped for i in st.instances)
