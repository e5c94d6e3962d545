"""RouteBalance as an llmsim router (spec 004, issue 16; docs/routebalance.md): fused model routing and load
balancing over heterogeneous instances.

What happens to a request (spec sections 2.1-2.7, Algorithm 1):

1. On arrival it joins the open batch and is held in the cluster's central queue (WAIT). The batch closes when
   it holds ``max_batch_size`` requests or ``batch_timeout`` has passed since its first request; with
   ``batching="adaptive"`` both follow the share of instances with waiting requests at the last telemetry
   read (< 0.3: 4 / 50 ms, < 0.7: 16 / 100 ms, else 32 / 200 ms; initially 8 / 100 ms).
2. When the batch closes, the estimator gives every request a quality and an output length per candidate
   model; requests are taken longest predicted output first (LPT, key max over models) and each takes the
   candidate instance that maximises Eq. 1 on the dead-reckoned state D, among those whose predicted cost
   fits the request's budget (Eq. 2); D is updated after each assignment.
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
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from llmsim.errors import ConfigError
from llmsim.routing.base import WAIT, Router, register_router
from llmsim.routing.base import kwarg_number as _num
from llmsim.routing.routebalance.state import TPOT_HEADS, Reckoned, TpotPriors, predicted_latency

if TYPE_CHECKING:
    from llmsim.request import Request
    from llmsim.state.cluster_state import ClusterState
    from llmsim.state.view import RouterView

# (w_qual, w_cost, w_lat); spec 2.5 (the paper writes uniform as 0.33 each: exact thirds here)
PRESETS: dict[str, tuple[float, float, float]] = {
    "uniform": (1 / 3, 1 / 3, 1 / 3), "quality": (0.8, 0.1, 0.1), "latency": (0.1, 0.1, 0.8),
    "cost": (0.1, 0.8, 0.1)}
# USD per 1M tokens [input, output] (spec 1.1; conf/token_prices/routebalance.yaml)
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "qwen2.5-3b": (0.06, 0.06), "qwen2.5-7b": (0.07, 0.07), "qwen2.5-14b": (0.15, 0.15),
    "qwen2.5-72b": (0.38, 0.40)}
# adaptive batching (spec 2.1): busy-ratio upper bound -> (max_batch_size, timeout s)
BATCH_LEVELS = ((0.3, 4, 0.050), (0.7, 16, 0.100), (math.inf, 32, 0.200))
# Normalising denominators: the repo adds 1e-8 (spec 2.3) to avoid dividing by zero; with costs of ~1e-5 USD that
# would shift the cost term by ~0.1 %, so a zero denominator is guarded explicitly instead (the term is then 0).


# ---------------------------------------------------------------------- estimators
class Estimator(Protocol):
    """Quality and output length of ``request`` on each of ``models`` (in that order).

    ``qualities`` is None when there is no quality signal for the request (the quality term is then the same
    for every candidate); lengths are positive token counts."""

    def predict(self, request: Request, models: Sequence[str]) -> tuple[Sequence[float] | None, Sequence[float]]:
        ...


Prediction = tuple[Sequence[float] | None, Sequence[float]]


def predict_batch(est: Any, requests: Sequence[Request], models: Sequence[Sequence[str]]) -> list[Prediction]:
    """Every request's prediction for its candidate models (``models[k]`` for ``requests[k]``): one call of the
    estimator's own ``predict_batch`` when it has one (the kNN estimator: one neighbour search per batch window,
    spec 2.8), else ``predict`` per request."""
    batch = getattr(est, "predict_batch", None)
    if batch is not None:
        return list(batch(requests, models))
    return [est.predict(r, m) for r, m in zip(requests, models)]


class OracleEstimator:
    """The ablation arm: the request's hidden per-model ground truth (``quality_by_model``, ``outputs_by_model``).

    No ``quality_by_model``: no quality signal (None). Without a per-model length the request's own
    ``output_tokens`` stands in. A quality table that lacks a candidate model is a ConfigError."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def predict(self, request: Request, models: Sequence[str]) -> tuple[list[float] | None, list[float]]:
        q = request.quality_by_model
        quals = None
        if q:
            missing = [m for m in models if m not in q]
            if missing:
                raise ConfigError(f"request {request.id} has no quality for model(s) {missing}: RouteBalance's oracle "
                                  "estimator needs quality_by_model for every candidate model (or none at all)")
            quals = [float(q[m]) for m in models]
        return quals, [float(request.output_for(m)) for m in models]


class NoisyEstimator(OracleEstimator):
    """The oracle plus noise: quality + N(0, ``quality_sd``) clipped to [0, 1], length x LogNormal(0,
    ``length_sigma``), rounded, at least 1. Draws are seeded by (seed, request id, model), so they do not
    depend on batch composition or call order."""

    def __init__(self, seed: int = 0, quality_sd: float = 0.1, length_sigma: float = 0.5) -> None:
        super().__init__(seed)
        self.quality_sd = _num("estimator_kwargs.quality_sd", quality_sd, strict=False)
        self.length_sigma = _num("estimator_kwargs.length_sigma", length_sigma, strict=False)

    def predict(self, request: Request, models: Sequence[str]) -> tuple[list[float] | None, list[float]]:
        quals, lens = super().predict(request, models)
        out_q, out_l = [], []
        for k, m in enumerate(models):
            rng = np.random.default_rng((self.seed, int(request.id), zlib.crc32(m.encode())))
            zq, zl = rng.standard_normal(2)
            if quals is not None:
                out_q.append(min(1.0, max(0.0, quals[k] + self.quality_sd * zq)))
            out_l.append(max(1.0, float(round(lens[k] * math.exp(self.length_sigma * zl)))))
        return (out_q if quals is not None else None), out_l


ESTIMATORS: dict[str, Callable[..., Estimator]] = {"oracle": OracleEstimator, "noisy": NoisyEstimator}


def register_estimator(name: str) -> Callable[[Callable[..., Estimator]], Callable[..., Estimator]]:
    """Decorator: make an estimator factory ``f(seed=..., **estimator_kwargs)`` available as ``estimator: name``
    (e.g. a kNN estimator module registers itself on import)."""
    def deco(factory: Callable[..., Estimator]) -> Callable[..., Estimator]:
        ESTIMATORS[name] = factory
        return factory
    return deco


def make_estimator(name: Any, seed: int, kwargs: Mapping[str, Any] | None) -> Estimator:
    if not isinstance(name, str):
        if hasattr(name, "predict"):
            return name  # an estimator object (Python use)
        raise ConfigError(f"policy.kwargs.estimator: expected a name of {sorted(ESTIMATORS)}, got {name!r}")
    if name not in ESTIMATORS:
        raise ConfigError(f"policy.kwargs.estimator: unknown estimator {name!r}; known: {sorted(ESTIMATORS)}")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise ConfigError(f"policy.kwargs.estimator_kwargs: expected a mapping, got {kwargs!r}")
    try:
        return ESTIMATORS[name](seed=seed, **dict(kwargs or {}))
    except TypeError as e:
        raise ConfigError(f"policy.kwargs.estimator_kwargs: {e}") from None


# ---------------------------------------------------------------------- option checks
def parse_weights(value: Any) -> tuple[float, float, float]:
    """A preset name, [w_qual, w_cost, w_lat] or {qual, cost, lat}: non-negative, summing to 1 (within 0.01,
    then rescaled so the paper's 0.33 / 0.33 / 0.33 is accepted)."""
    if isinstance(value, str):
        if value not in PRESETS:
            raise ConfigError(f"policy.kwargs.weights: unknown preset {value!r}; known: {sorted(PRESETS)} or "
                              "[w_qual, w_cost, w_lat]")
        return PRESETS[value]
    if isinstance(value, Mapping):
        if set(value) != {"qual", "cost", "lat"}:
            raise ConfigError(f"policy.kwargs.weights: a mapping needs exactly the keys qual, cost, lat; got {value!r}")
        value = [value["qual"], value["cost"], value["lat"]]
    if isinstance(value, str) or not isinstance(value, Sequence) or len(value) != 3:
        raise ConfigError(f"policy.kwargs.weights: expected a preset name or [w_qual, w_cost, w_lat], got {value!r}")
    w = [_num("weights", v, strict=False) for v in value]
    if abs(sum(w) - 1.0) > 0.01 + 1e-9:
        raise ConfigError(f"policy.kwargs.weights: must sum to 1 (w_qual + w_cost + w_lat), got {value!r}")
    s = sum(w)
    return (w[0] / s, w[1] / s, w[2] / s)


def parse_prices(value: Any) -> dict[str, tuple[float, float]]:
    """{model: [in, out]} USD per 1M tokens, merged over :data:`DEFAULT_PRICES`."""
    out = dict(DEFAULT_PRICES)
    if value is None:
        return out
    if not isinstance(value, Mapping):
        raise ConfigError(f"policy.kwargs.prices: expected a mapping of model to [in, out] USD per 1M tokens, "
                          f"got {value!r}")
    for k, v in value.items():
        if isinstance(v, str) or not isinstance(v, Sequence) or len(v) != 2:
            raise ConfigError(f"policy.kwargs.prices.{k}: expected [in, out] USD per 1M tokens, got {v!r}")
        out[str(k)] = (_num(f"prices.{k}", v[0], strict=False), _num(f"prices.{k}", v[1], strict=False))
    return out


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(f"policy.kwargs.{name}: expected one of {list(allowed)}, got {value!r}")
    return str(value)


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"policy.kwargs.{name}: expected true or false, got {value!r}")
    return value


# ---------------------------------------------------------------------- the router
@dataclass(slots=True)
class Assignment:
    """A request whose batch has been decided, until the cluster offers it again."""

    instance: int
    length: float  # predicted output tokens on the chosen model (attached as Request.predicted_output)
    prompt: int
    max_tokens: int  # after the budget clamp (spec 2.6)
    score: float
    clamp: bool = False  # a budget applied: the engine gets max_tokens as the request's cap at dispatch


@dataclass(slots=True)
class Candidate:
    """One candidate instance's terms for one request (what :meth:`RouteBalanceRouter.score` returns)."""

    instance: int
    model: str
    quality: float
    length: float
    cost: float  # USD (Eq. 2)
    latency: float  # s (spec 3.1)
    score: float = 0.0


@register_router
class RouteBalanceRouter(Router):
    """RouteBalance (shared/specs/004): batched, LPT-ordered greedy assignment maximising Eq. 1 on dead-reckoned
    instance state. Options (``policy.kwargs``; docs/routebalance.md): ``weights``, ``prices``, ``estimator``,
    ``estimator_kwargs``, ``quality_norm``, ``norm``, ``cost_budget``, ``budget_filter``, ``max_tokens``, ``batching``,
    ``max_batch_size``, ``batch_timeout_ms``, ``lpt``, ``telemetry_period_s``, ``latency``, ``static_tpot_ms``,
    ``tpot_prior``, ``tiebreak``, ``reckon_tokens``."""

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
        self.budget_filter = _flag("budget_filter", budget_filter)  # False: the dispatch clamp only (spec 6.11 arm)
        self.max_tokens = int(_num("max_tokens", max_tokens, integer=True))
        self.batching = _choice("batching", batching, ("adaptive", "fixed", "off"))
        self.init_batch = (int(_num("max_batch_size", max_batch_size, integer=True)),
                           _num("batch_timeout_ms", batch_timeout_ms, strict=False) / 1000.0)
        self.lpt = _flag("lpt", lpt)
        self.telemetry_period_s = _num("telemetry_period_s", telemetry_period_s, strict=False)
        self.latency = _choice("latency", latency, ("telemetry", "static"))
        head = TPOT_HEADS.get(tpot_prior) if isinstance(tpot_prior, str) else None  # learned: routebalance_predictors
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
            req.token_cap = a.max_tokens  # the engine stops there (spec 2.6); never above the client's own cap
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
        pool = cands
        if budget is not None:
            unpriced = sorted({c.model for c in cands} - set(self.prices))
            if unpriced:
                raise ConfigError(f"policy.kwargs.prices: request {req.id} has a cost budget but model(s) {unpriced} "
                                  "have no price; add prices.<model>: [in, out] USD per 1M tokens")
            self.stats["budgeted"] += 1
            pool = [c for c in cands if c.cost <= budget] if self.budget_filter else cands
            self.stats["filtered"] += len(pool) < len(cands)
            if not pool:  # none fits: the smallest worst-case cost (prompt + max_tokens), spec 2.6
                self.stats["budget_fallbacks"] += 1
                worst = [self._cost(req.prompt_tokens, cap, c.model) for c in cands]
                lo = min(worst)
                pool = [c for c, w in zip(cands, worst) if w <= lo * (1 + 1e-12)]
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

    def _tie_key(self, c: Candidate) -> tuple[float, float, int, int]:
        d = self._D[c.instance]
        second = d.queue if self.tiebreak == "queue" else c.latency
        return (-round(c.score, 12), second, d.last_assigned, c.instance)

    def score_pool(self, pool: list[Candidate]) -> None:
        """Eq. 1 over the candidate set: raw (or min-max) quality, max-divided (or min-max) cost and latency."""
        wq, wc, wl = self.weights
        qs = [c.quality for c in pool]
        cs = [c.cost for c in pool]
        ts = [c.latency for c in pool]
        for c in pool:
            q = c.quality if self.quality_norm == "raw" else _minmax(c.quality, qs)
            c.score = wq * q + wc * (1 - self._norm(c.cost, cs)) + wl * (1 - self._norm(c.latency, ts))

    def _norm(self, x: float, xs: list[float]) -> float:
        if self.norm == "minmax":
            return _minmax(x, xs)
        hi = max(xs)
        return x / hi if hi > 0 else 0.0

    def _clamp(self, req: Request, model: str, cap: int, budget: float | None) -> int:
        """The dispatch-time clamp max_tokens := min(max_tokens, floor((b - l_in c_in) / c_out)) (spec 2.6); 1 token
        and budget-exhausted when the budget does not cover the prompt and one output token. :meth:`_dispatch`
        writes it to ``Request.token_cap`` for this run (the engine stops there, as vLLM does at max_tokens; the
        client's ``Request.max_tokens`` stays as sent, so the request objects can be simulated again)."""
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
            budget = self._budget(req) if self.budget_filter else None
            pool = [c for c in cands if budget is None or c.cost <= budget] or cands
            self.score_pool(pool)
            return sorted(pool, key=self._tie_key)
        finally:
            self._D = saved

    def _prior_cache(self, st: ClusterState) -> None:
        self._prior_list = [self.priors.prior_s(inst) for inst in st.instances]
        if self.tpot_head is not None:
            self.tpot_head.observe(st)


def _minmax(x: float, xs: list[float]) -> float:
    lo, hi = min(xs), max(xs)
    return (x - lo) / (hi - lo) if hi > lo else 0.0


def _engines_busy(view: RouterView, st: ClusterState) -> bool:
    """Whether some engine holds work. A stale view may still show a finished engine busy, and then no completion
    would come; a live router knows its own in-flight requests exactly, so the live state decides then."""
    if st.taken_at < st.now:
        live = getattr(view, "live_state", None)
        if live is not None:
            st = live(sync=False)
    return any(i.num_running or i.num_waiting or i.num_swapped for i in st.instances)
