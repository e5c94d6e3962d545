"""Model choice, then load balancing: the model-routing baselines the RouteBalance paper compares against
(its §5 and §6.1; docs/route_baselines.md), BEST-Route and Avengers-Pro, in "pipeline mode".

Pipeline mode (the paper's architecture control): a model picker chooses a model for the request, then a
dispatcher chooses one of that model's instances: ``round_robin`` (a counter per model), ``shortest_queue``
(argmin num_running + num_waiting, from ``view.state()``) or ``random``. Passthrough (no model choice) is the plain
``round_robin``, ``jsq`` and ``random`` routers over all instances and is not repeated here.

* ``best_route``: a BEST-Route-like 4-way classifier, simulated as a *noisy oracle*: the predicted class is
  the request's true best model (argmax of ``quality_by_model`` over the pool) with probability ``accuracy``
  (0.392, the paper's held-out DeBERTa accuracy), else a uniformly random other model; its max softmax
  probability is 1/K + (1 - 1/K) * Beta(a, b), with (a, b) = ``confidence_correct`` or ``confidence_wrong``.
  Route to the prediction, or to ``fallback`` (default: the cheapest model of the pool) when the confidence
  is below ``threshold``. Draws are seeded by (seed, request id): identical whatever the other options.
* ``avengers_pro``: an Avengers-Pro-like cluster ranking; the request's ``task`` is its cluster. Per cluster
  and model: mean quality and mean cost (USD, ``prices``) over a training sample, each min-max normalised
  over the pool; score = p_w * performance + (1 - p_w) * (1 - cost); route to the top model. The table comes
  from ``table`` (precomputed, :func:`fit_cluster_table`) or ``train`` (a list of requests, or
  ``{sampler: NAME, ...kwargs}`` naming a registered training sampler, :mod:`llmsim.routing.samplers`).

Hot path (the paper's decision-cost comparison: the "as published" serial and "enhanced" variants): with
``scoring_ms`` > 0 every request passes a scorer of ``scoring_threads`` servers (``scoring: serial`` is one
server) in arrival order; its decision time is max(arrival, a server frees) + scoring_ms. Until then the router
answers WAIT (the request stays in the central queue) and it dispatches at the first call at or after that time,
so the run needs ``sim.central_queue_tick`` (e.g. 0.01 s: the delay is rounded up to a tick). A request whose
decision time passed more than ``LATE_LIMIT_S`` before the router was asked again means the tick is missing (or
it fell asleep after ``wait_patience`` idle passes: keep the tick above scoring_ms / 100): a ConfigError.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsim.errors import ConfigError
from llmsim.request import Request
from llmsim.routing.base import WAIT, Router, kwarg_number, register_router
from llmsim.routing.routebalance.objective import parse_prices
from llmsim.routing.samplers import training_sample

if TYPE_CHECKING:
    from llmsim.state.view import RouterView

DISPATCHERS = ("round_robin", "shortest_queue", "random")
LATE_LIMIT_S = 1.0  # a decided request not offered again within this is a missing central-queue tick
_TAG = 0x42525420  # separates the classifier's random stream from other users of (seed, id)
ALL_TASKS = "*"  # the table's row for tasks it has no cluster for


def _choice(name: str, value: Any, options: Sequence[str]) -> str:
    if value not in options:
        raise ConfigError(f"policy.kwargs.{name}: expected one of {list(options)}, got {value!r}")
    return str(value)


def _beta(name: str, value: Any) -> tuple[float, float]:
    ok = isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2
    ok = ok and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0
                    for x in value)
    if not ok:
        raise ConfigError(f"policy.kwargs.{name}: expected [a, b], two Beta parameters > 0, got {value!r}")
    return float(value[0]), float(value[1])


def _unit(name: str, value: Any) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0
    if not ok:
        raise ConfigError(f"policy.kwargs.{name}: expected a number in [0, 1], got {value!r}")
    return float(value)


def request_cost(req: Request, model: str, prices: Mapping[str, tuple[float, float]]) -> float:
    """USD of serving ``req`` on ``model``: prompt and (true, per-model) output tokens at per-token prices."""
    p_in, p_out = prices[model]
    return (req.prompt_tokens * p_in + req.output_for(model) * p_out) / 1e6


def _qualities(req: Request, pool: Sequence[str]) -> list[float]:
    q = req.quality_by_model
    if not q or any(m not in q for m in pool):
        raise ConfigError(f"request {req.id} has no quality for every model of {list(pool)}: these baselines need "
                          "a workload with per-model qualities (e.g. the RouteBalance task mix)")
    return [float(q[m]) for m in pool]


class _Scorer:
    """A FIFO scoring queue with ``threads`` servers of ``seconds`` each: the decision time of each request."""

    def __init__(self, seconds: float, threads: int) -> None:
        self.seconds = seconds
        self.free = [0.0] * threads  # heap of the times the servers free up

    def admit(self, now: float) -> float:
        start = max(now, heapq.heappop(self.free))
        done = start + self.seconds
        heapq.heappush(self.free, done)
        return done


class PipelineRouter(Router):
    """Model picker + dispatcher ("pipeline mode") with an optional hot-path scorer (module docstring). Subclasses
    implement :meth:`pick` (the model for a request; called once per request, when it first arrives)."""

    name = "pipeline"

    def __init__(self, seed: int = 0, dispatcher: str = "round_robin", prices: Any = None, scoring_ms: Any = 0.0,
                 scoring: str = "concurrent", scoring_threads: Any = 32, **kw: Any) -> None:
        super().__init__(seed, **kw)
        self.seed = seed
        self.dispatcher = _choice("dispatcher", dispatcher, DISPATCHERS)
        self.prices = parse_prices(prices)
        self.scoring_s = kwarg_number("scoring_ms", scoring_ms, strict=False) / 1e3
        self.scoring = _choice("scoring", scoring, ("serial", "concurrent"))
        self.threads = int(kwarg_number("scoring_threads", scoring_threads, lo=1, strict=False, integer=True))
        self._fresh()

    def _fresh(self) -> None:
        self._models: list[str] = []
        self._pool: list[str] = []  # the cluster's models, cheapest first (then by name)
        self._rr: dict[str, int] = {}
        self._held: dict[int, tuple[float, float, str]] = {}  # id -> (arrival seen, decision time, model)
        self._due: list[tuple[float, int]] = []  # heap of (decision time, id) of held requests
        self._scorer = _Scorer(self.scoring_s, 1 if self.scoring == "serial" else self.threads)
        self._last_now = -math.inf
        self.stats: dict[str, Any] = {"decided": 0, "fallbacks": 0, "no_instance": 0, "picks": {},
                                      "decision_delay_s_sum": 0.0, "decision_delay_s_max": 0.0,
                                      "decision_delay_s_mean": 0.0, "dispatch_delay_s_sum": 0.0,
                                      "dispatch_delay_s_mean": 0.0}

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        if seed is not None:
            self.seed = seed
        self._fresh()

    # ------------------------------------------------------------------ the cluster's models
    def _setup(self, view: RouterView) -> None:
        """Learn each instance's model (fixed: these baselines do not swap models) and the pool."""
        self._models = [inst.model for inst in view.state().instances]
        self._pool = sorted(set(self._models), key=lambda m: (sum(self.prices.get(m, (math.inf, 0.0))), m))
        self.check_pool(self._pool)

    def check_pool(self, pool: list[str]) -> None:
        """Subclasses check that their options cover the cluster's models (ConfigError if not)."""

    def pick(self, req: Request) -> str:
        raise NotImplementedError

    # ------------------------------------------------------------------ routing
    def route(self, req: Request, view: RouterView) -> int:
        now = view.now
        held = self._held.get(req.id)
        if held is not None and now < held[1] - 1e-9 and now >= self._last_now:
            return WAIT  # still being scored (the hot loop of a long serial backlog: keep it short)
        if now < self._last_now:
            self._fresh()  # time went back: a new simulation with the same router; start from nothing
        if len(self._models) != view.num_instances:
            self._setup(view)
        self._last_now = now
        held = self._held.get(req.id)  # (a new simulation forgot it)
        if held is None:
            model = self.pick(req)
            if self.scoring_s <= 0.0:
                return self._dispatch(req, view, model, now, now, now)
            done = self._scorer.admit(now)
            self._held[req.id] = held = (now, done, model)
            heapq.heappush(self._due, (done, req.id))
        self._check_late(now)
        arrived, done, model = held
        if now < done - 1e-9:
            return WAIT
        del self._held[req.id]
        return self._dispatch(req, view, model, arrived, done, now)

    def _check_late(self, now: float) -> None:
        due = self._due
        while due and due[0][1] not in self._held:
            heapq.heappop(due)
        if due and now - due[0][0] > LATE_LIMIT_S:
            t, rid = due[0]
            raise ConfigError(f"policy.kwargs.scoring_ms: request {rid} was scored at {t:.3f} s but not offered to "
                              f"the router again by {now:.3f} s: run with sim.central_queue_tick (e.g. 0.01, above "
                              f"scoring_ms / 100 = {self.scoring_s * 10:.4f} s so the tick does not fall asleep)")

    def _dispatch(self, req: Request, view: RouterView, model: str, arrived: float, done: float,
                  now: float) -> int:
        cands = view.candidates(req)
        mine = [i for i in cands if self._models[i] == model]
        if not mine:
            self.stats["no_instance"] += 1  # no instance of that model can take the prompt: any that can
            mine = cands
        if self.dispatcher == "round_robin":
            k = self._rr.get(model, 0)
            self._rr[model] = k + 1
            i = mine[k % len(mine)]
        elif self.dispatcher == "random":
            i = mine[int(self.rng.integers(len(mine)))]
        else:
            insts = view.state().instances
            i = min(mine, key=lambda j: (insts[j].num_running + insts[j].num_waiting, j))
        self._record(model, done - arrived, now - arrived)
        return int(i)

    def _record(self, model: str, decision_delay: float, dispatch_delay: float) -> None:
        s = self.stats
        s["decided"] += 1
        s["picks"][model] = s["picks"].get(model, 0) + 1
        s["decision_delay_s_sum"] += decision_delay
        s["decision_delay_s_max"] = max(s["decision_delay_s_max"], decision_delay)
        s["dispatch_delay_s_sum"] += dispatch_delay
        s["decision_delay_s_mean"] = s["decision_delay_s_sum"] / s["decided"]
        s["dispatch_delay_s_mean"] = s["dispatch_delay_s_sum"] / s["decided"]


@register_router
class BestRouteRouter(PipelineRouter):
    """BEST-Route-like: a noisy-oracle 4-way classifier, argmax or the fallback below ``threshold``
    (module docstring)."""

    name = "best_route"

    def __init__(self, seed: int = 0, threshold: Any = 0.5, accuracy: Any = 0.392, fallback: str | None = None,
                 confidence_correct: Any = (3.0, 4.0), confidence_wrong: Any = (2.0, 4.0), **kw: Any) -> None:
        super().__init__(seed, **kw)
        self.threshold = _unit("threshold", threshold)
        self.accuracy = _unit("accuracy", accuracy)
        if fallback is not None and not isinstance(fallback, str):
            raise ConfigError(f"policy.kwargs.fallback: expected a model name, got {fallback!r}")
        self.fallback = fallback
        self.beta_right = _beta("confidence_correct", confidence_correct)
        self.beta_wrong = _beta("confidence_wrong", confidence_wrong)

    def check_pool(self, pool: list[str]) -> None:
        if self.fallback is not None and self.fallback not in pool:
            raise ConfigError(f"policy.kwargs.fallback: {self.fallback!r} is not among the cluster's models {pool}")
        missing = [m for m in pool if m not in self.prices]
        if self.fallback is None and missing and len(pool) > 1:
            raise ConfigError(f"policy.kwargs.fallback: the default (cheapest model) needs prices for {missing}; set "
                              "policy.kwargs.fallback or policy.kwargs.prices")

    def classify(self, req: Request, pool: Sequence[str] | None = None) -> tuple[str, float, str]:
        """(predicted model, confidence = max softmax probability, true best model) of ``req``. ``pool``: the
        classes, cheapest first (default: the cluster's); quality ties go to the cheaper model."""
        pool = list(self._pool if pool is None else pool)
        k = len(pool)
        if k == 0:
            raise ConfigError("best_route.classify: the router has not seen the cluster yet; pass pool=[models]")
        if k == 1:
            return pool[0], 1.0, pool[0]  # one class: nothing to predict (and no quality needed)
        best = int(np.argmax(_qualities(req, pool)))
        rng = np.random.default_rng([self.seed, _TAG, req.id])
        right = rng.random() < self.accuracy
        other = int(rng.integers(k - 1))
        pred = best if right else (other if other < best else other + 1)
        a, b = self.beta_right if right else self.beta_wrong
        conf = 1.0 / k + (1.0 - 1.0 / k) * float(rng.beta(a, b))
        return pool[pred], conf, pool[best]

    def pick(self, req: Request) -> str:
        pred, conf, _ = self.classify(req)
        if conf < self.threshold:
            self.stats["fallbacks"] += 1
            return self.fallback if self.fallback is not None else self._pool[0]
        return pred


def fit_cluster_table(requests: Sequence[Request], prices: Mapping[str, tuple[float, float]] | None = None,
                      models: Sequence[str] | None = None) -> dict[str, dict[str, list[float]]]:
    """Avengers-Pro's per-cluster statistics from training requests: ``{task: {model: [mean quality, mean cost
    USD]}}``, plus the row ``"*"`` over all of them (for tasks without a cluster). ``models``: default, those
    of the first request's ``quality_by_model``."""
    prices = parse_prices(prices)
    if not requests:
        raise ConfigError("policy.kwargs.train: no training requests")
    if models is None:
        models = sorted(requests[0].quality_by_model or {})
    missing = [m for m in models if m not in prices]
    if missing:
        raise ConfigError(f"policy.kwargs.prices: no price for {missing}")
    groups: dict[str, list[Request]] = {ALL_TASKS: list(requests)}
    for r in requests:
        groups.setdefault(str(r.task), []).append(r)
    table: dict[str, dict[str, list[float]]] = {}
    for task, reqs in groups.items():
        q = np.array([_qualities(r, models) for r in reqs])
        c = np.array([[request_cost(r, m, prices) for m in models] for r in reqs])
        table[task] = {m: [float(q[:, j].mean()), float(c[:, j].mean())] for j, m in enumerate(models)}
    return table


def training_requests(train: Any) -> list[Request]:
    """avengers_pro's ``train`` as requests (with per-model qualities), else a ConfigError naming the first item
    that is not one: rows of a config file are not requests (a sampler draws them)."""
    sample = training_sample(train, "policy.kwargs.train")
    for i, r in enumerate(sample):
        if not isinstance(r, Request):
            raise ConfigError(f"policy.kwargs.train[{i}]: expected a Request (a config file names a training "
                              f"sampler instead: {{sampler: NAME, ...}}), got {type(r).__name__} {r!r:.60}")
    return sample


def _check_table(table: Any) -> dict[str, dict[str, tuple[float, float]]]:
    if not isinstance(table, Mapping) or not table:
        raise ConfigError(f"policy.kwargs.table: expected {{cluster: {{model: [quality, cost]}}}}, got {table!r}")
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for task, row in table.items():
        if not isinstance(row, Mapping) or not row:
            raise ConfigError(f"policy.kwargs.table.{task}: expected {{model: [quality, cost]}}, got {row!r}")
        out[str(task)] = {}
        for m, v in row.items():
            ok = isinstance(v, Sequence) and not isinstance(v, str) and len(v) == 2
            ok = ok and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v)
            if not ok:
                raise ConfigError(f"policy.kwargs.table.{task}.{m}: expected [mean quality, mean cost], got {v!r}")
            out[str(task)][str(m)] = (float(v[0]), float(v[1]))
    return out


def _minmax(x: np.ndarray) -> np.ndarray:
    span = float(x.max() - x.min())
    return (x - x.min()) / span if span > 0 else np.zeros_like(x)


@register_router
class AvengersProRouter(PipelineRouter):
    """Avengers-Pro-like: the task is the cluster; per cluster, the model maximising p_w *
    normalised performance + (1 - p_w) * normalised efficiency (module docstring)."""

    name = "avengers_pro"

    def __init__(self, seed: int = 0, p_w: Any = 0.53, table: Any = None, train: Any = None, **kw: Any) -> None:
        super().__init__(seed, **kw)
        self.p_w = _unit("p_w", p_w)
        if (table is None) == (train is None):
            raise ConfigError("policy.kwargs.table: avengers_pro needs exactly one of policy.kwargs.table (precomputed "
                              "per-cluster [quality, cost]) and policy.kwargs.train (training requests or a sampler)")
        if train is not None:
            table = fit_cluster_table(training_requests(train), self.prices)
        self.table = _check_table(table)
        self._choice: dict[str, str] = {}
        self._single: str | None = None

    def check_pool(self, pool: list[str]) -> None:
        if len(pool) == 1:  # one model: nothing to rank, whatever the table covers
            self._choice = {task: pool[0] for task in self.table}
            self._single = pool[0]
            return
        self._single = None
        for task, row in self.table.items():
            missing = [m for m in pool if m not in row]
            if missing:
                raise ConfigError(f"policy.kwargs.table.{task}: no entry for the cluster's model(s) {missing}")
        self._choice = {task: self.rank(task, pool)[0] for task in self.table}

    def scores(self, task: str, pool: Sequence[str]) -> dict[str, float]:
        """The ranking score of each pool model in ``task``'s cluster (the ``"*"`` row for unknown tasks)."""
        row = self.table.get(task, self.table.get(ALL_TASKS))
        if row is None:
            raise ConfigError(f"policy.kwargs.table: no cluster {task!r} and no '{ALL_TASKS}' row to fall back on")
        perf = _minmax(np.array([row[m][0] for m in pool]))
        eff = 1.0 - _minmax(np.array([row[m][1] for m in pool]))
        return {m: float(self.p_w * p + (1.0 - self.p_w) * e) for m, p, e in zip(pool, perf, eff)}

    def rank(self, task: str, pool: Sequence[str]) -> list[str]:
        """Pool models best first (ties: the cheaper one, i.e. the earlier in the pool)."""
        s = self.scores(task, pool)
        return sorted(pool, key=lambda m: (-s[m], list(pool).index(m)))

    def pick(self, req: Request) -> str:
        if self._single is not None:
            return self._single
        task = str(req.task)
        m = self._choice.get(task)
        if m is None:
            m = self._choice[task] = self.rank(task, self._pool)[0]
        return m
