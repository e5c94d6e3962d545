"""Routing by model quality: the baselines of "QoS-Aware LLM Routing for Edge Computing with Multiple Experts"
(QoSEdge) and "Learned Best-Effort LLM Serving" (BestEffort) as llmsim routers.

The view does not say which model an instance serves, so these routers take ``models``: the model name
of each instance, in instance order (the testbeds pass it; docs/testbeds.md; without it the quality
routers see no qualities: quality-first takes the first expert with room, the lookahead only weighs the
QoS it would destroy). Per-expert qualities and
output lengths are read from the request's per-model ground truth (``quality_by_model``,
``outputs_by_model``): the stand-in for QoSEdge's DistilBERT predictors (and exactly what that paper's
released code feeds its Eq. 15 penalty).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from llmsim.errors import ConfigError
from llmsim.routing.base import DROP, Router, register_router

if TYPE_CHECKING:
    from llmsim.request import Request
    from llmsim.state.view import RouterView

# QoSEdge's fitted latency model (its Eqs. 13-14, released code): prefill s/token, decode s/context token
QOS_K1, QOS_K2 = 7.2e-5, 2.5e-5


def _models(models: Any, where: str, required: bool = True) -> list[str] | None:
    if models is None:
        if not required:
            return None
        raise ConfigError(f"policy.kwargs.models: {where} needs the model name of every instance, in order "
                          "(the view does not expose it), e.g. models=[alpaca-native, chatglm-6b, ...]")
    if isinstance(models, str) or not isinstance(models, Sequence) or not all(isinstance(m, str) for m in models):
        raise ConfigError(f"policy.kwargs.models: expected a list of model names, got {models!r}")
    return list(models)


def _per_model(value: Any, models: list[str] | None, name: str) -> list[float] | float:
    """A number for every instance from a number or a model -> number mapping (a plain number without models)."""
    if isinstance(value, Mapping):
        if models is None:
            raise ConfigError(f"policy.kwargs.{name}: a per-model mapping needs policy.kwargs.models")
        try:
            return [float(value[m]) for m in models]
        except KeyError as e:
            raise ConfigError(f"policy.kwargs.{name}: no value for model {e.args[0]!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(f"policy.kwargs.{name}: expected a non-negative number or a model -> number mapping, "
                          f"got {value!r}")
    return [float(value)] * len(models) if models is not None else float(value)


def _pick(values: list[float] | float, i: int) -> float:
    return values[i] if isinstance(values, list) else values


def _quality(req: Request, model: str | None) -> float:
    if model is None:
        return 0.0  # instances' models unknown (no ``models`` option): no quality to go by
    q = req.quality_by_model
    if not q or model not in q:
        raise ConfigError(f"request {req.id} has no quality for model {model!r}: quality-aware routers need a "
                          "workload with per-model qualities (e.g. the qos_edge task mixture)")
    return float(q[model])


def _output(req: Request, model: str | None) -> int:
    o = req.outputs_by_model
    return int(o[model]) if o and model in o else int(req.output_tokens)


def _model(models: list[str] | None, i: int) -> str | None:
    return models[i] if models is not None else None


def _check_size(view: RouterView, models: list[str] | None, name: str) -> None:
    if models is not None and len(models) != view.num_instances:
        raise ConfigError(f"policy.kwargs.models: {name} got {len(models)} model names for "
                          f"{view.num_instances} instances")


@register_router
class QualityFirstRouter(Router):
    """QoSEdge's BERT router (BR), load-oblivious: the expert with the highest quality for the request
    (ties to the lowest index). With ``max_waiting`` it skips experts whose waiting queue already holds that
    many requests (the QoSEdge env masks such experts, so an agent cannot do otherwise); if all are full it
    takes the best one anyway."""

    name = "quality_first"

    def __init__(self, seed: int = 0, models: Any = None, max_waiting: int | None = None, **kw: Any) -> None:
        super().__init__(seed, **kw)
        self.models = _models(models, self.name, required=False)
        if max_waiting is not None and (isinstance(max_waiting, bool) or not isinstance(max_waiting, int)
                                        or max_waiting < 1):
            raise ConfigError(f"policy.kwargs.max_waiting: expected a positive integer, got {max_waiting!r}")
        self.max_waiting = max_waiting

    def route(self, req: Request, view: RouterView) -> int:
        _check_size(view, self.models, self.name)
        cands = view.candidates(req)
        order = sorted(cands, key=lambda i: (-_quality(req, _model(self.models, i)), i))
        if self.max_waiting is not None:
            waiting = view.num_waiting()
            for i in order:
                if waiting[i] < self.max_waiting:
                    return i
        return order[0]


@register_router
class QoSLookaheadRouter(Router):
    """Greedy one-step QoS lookahead (a strong non-learned reference for QoSEdge): route to the expert
    that maximises the newcomer's expected QoS minus the QoS the paper's Eq. 15 says the move destroys.

    For expert n: the newcomer's per-token latency is estimated with the paper's step model (Eqs. 13-14
    plus the intercept ``base``): the prefills queued ahead of it, its own prefill, then d_j decode steps
    over the context the batch holds now plus its own half-grown context; it earns its quality there when
    that is within ``latency_limit``. The loss is the quality of every running request on n that meets the
    limit now (l_i < L) and would not after the Eq. 15 increase l+_i. With ``allow_drop`` a request whose
    best gain is negative is dropped (QoS 0 either way). The router remembers what it routed (arrival,
    length, quality), as the view holds only token counts."""

    name = "qos_lookahead"

    def __init__(self, seed: int = 0, models: Any = None, latency_limit: float = 0.03, k1: Any = QOS_K1,
                 k2: Any = QOS_K2, base: Any = 0.0, allow_drop: bool = False, **kw: Any) -> None:
        super().__init__(seed, **kw)
        self.models = _models(models, self.name, required=False)
        if isinstance(latency_limit, bool) or not isinstance(latency_limit, (int, float)) or not latency_limit > 0:
            raise ConfigError(f"policy.kwargs.latency_limit: expected a positive number (s/token), got "
                              f"{latency_limit!r}")
        self.limit = float(latency_limit)
        self.k1, self.k2 = _per_model(k1, self.models, "k1"), _per_model(k2, self.models, "k2")
        self.base = _per_model(base, self.models, "base")
        self.allow_drop = bool(allow_drop)
        self._seen: dict[int, tuple[float, int, float]] = {}  # id -> (arrival, output tokens, quality)

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._seen = {}

    def gain(self, req: Request, view: RouterView, n: int) -> float:
        """Expected QoS change of routing ``req`` to expert ``n`` (newcomer's QoS minus the Eq. 15 loss)."""
        earned, loss = self.estimate(req, view, n)
        return earned - loss

    def estimate(self, req: Request, view: RouterView, n: int) -> tuple[float, float]:
        """``(earned, loss)`` of routing ``req`` to expert ``n``: the newcomer's quality if its estimated
        per-token latency is within the limit (else 0), and the quality of the running requests it would push
        past the limit (Eq. 15)."""
        m = _model(self.models, n)
        k1, k2, base, lim = _pick(self.k1, n), _pick(self.k2, n), _pick(self.base, n), self.limit
        p, d, s = req.prompt_tokens, _output(req, m), _quality(req, m)
        now = view.now
        ctx, ahead, loss = 0, 0.0, 0.0
        for rid, rp, g, _, state in view.requests(n):
            if state != "running":
                ahead += base + k1 * (rp + g)  # a queued prefill (or re-prefill) before the newcomer's
                ctx += rp + g
                continue
            ctx += rp + g
            seen = self._seen.get(rid)
            if seen is None or g <= 0:
                continue
            arrival, d_i, s_i = seen
            cur = (now - arrival) / g
            mm = min(d_i - g, d)
            extra = (k1 * p + k2 * (mm * p + mm * (mm + 1) / 2)) / d_i if mm > 0 else k1 * p / d_i
            if cur < lim <= cur + extra:
                loss += s_i
        step = base + k2 * (ctx + p + d / 2)
        latency = (ahead + base + k1 * p + d * step) / d
        return (s if latency <= lim else 0.0), loss

    def choose(self, req: Request, view: RouterView) -> tuple[int, bool]:
        """The decision :meth:`route` takes, without remembering it, and whether it costs nothing by this
        router's own estimate: the newcomer within the limit and no running request pushed past it (where
        that holds the greedy choice has nothing to trade; a learned router's load gate can hand it over)."""
        _check_size(view, self.models, self.name)
        best, best_gain, costless = -1, 0.0, False
        for i in view.candidates(req):
            earned, loss = self.estimate(req, view, i)
            g = earned - loss
            if best < 0 or g > best_gain:
                best, best_gain, costless = i, g, earned > 0.0 and loss == 0.0
        if self.allow_drop and best_gain < 0:
            return DROP, False
        return best, costless

    def remember(self, req: Request, decision: int) -> None:
        """Note what ``req`` was routed to (its arrival, output length and quality there), whoever decided: the
        loss estimate weighs the running requests it knows."""
        if decision >= 0:
            m = _model(self.models, decision)
            self._seen[req.id] = (req.arrival, _output(req, m), _quality(req, m))

    def route(self, req: Request, view: RouterView) -> int:
        d, _ = self.choose(req, view)
        self.remember(req, d)
        return d


@register_router
class StaticModelRouter(Router):
    """BestEffort's static serving: every request goes to the replicas of one model size (``model``), the one
    with the smallest batch (running + waiting + swapped; ties to the lowest index), as that paper's router
    load-balances. Without ``model`` every instance is a replica (a cluster of one model, e.g. the static
    baselines that get the whole GPU)."""

    name = "static_model"

    def __init__(self, seed: int = 0, model: str | None = None, models: Any = None, **kw: Any) -> None:
        super().__init__(seed, **kw)
        self.model = model
        self.models = _models(models, self.name) if model is not None else None
        if self.models is not None and model not in self.models:
            raise ConfigError(f"policy.kwargs.model: {model!r} is not among the instances' models {self.models}")

    def route(self, req: Request, view: RouterView) -> int:
        cands = view.candidates(req)
        if self.models is not None:
            _check_size(view, self.models, self.name)
            cands = [i for i in cands if self.models[i] == self.model] or cands
        q = view.queue_lengths()
        return min(cands, key=lambda i: (q[i], i))


@register_router
class CappedModelRouter(Router):
    """BestEffort's load-aware size choice: the first model of ``order`` (most accurate first) whose
    least-loaded replica holds fewer than ``caps[model]`` requests (running + waiting + swapped), else the
    next; the last model of ``order`` takes what is left. A static size cannot follow the arrival rate (the
    larger model is best at low rates, the smallest under overload); a batch cap follows it without
    estimating the rate, as a larger batch is what makes the larger model's requests miss their deadlines.
    ``order`` defaults to the instances' distinct models in instance order; a model not in ``caps`` is
    uncapped. Without ``models`` every instance is a replica of one model (as ``static_model`` without one): the
    least-loaded instance."""

    name = "capped_model"

    def __init__(self, seed: int = 0, models: Any = None, order: Any = None, caps: Any = None, **kw: Any) -> None:
        super().__init__(seed, **kw)
        self.models = _models(models, self.name, required=order is not None or bool(caps))
        self.order = _models(order, self.name + " order", required=False) or list(dict.fromkeys(self.models or []))
        unknown = [m for m in self.order if m not in (self.models or [])]
        if unknown:
            raise ConfigError(f"policy.kwargs.order: {unknown} are not among the instances' models {self.models}")
        if caps is None:
            caps = {}
        if not isinstance(caps, Mapping):
            raise ConfigError(f"policy.kwargs.caps: expected a mapping of model to a batch size, got {caps!r}")
        self.caps: dict[str, int] = {}
        for m, cap in caps.items():
            if m not in self.order:
                raise ConfigError(f"policy.kwargs.caps: {m!r} is not in policy.kwargs.order {self.order}")
            if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
                raise ConfigError(f"policy.kwargs.caps.{m}: expected a batch size >= 0, got {cap!r}")
            self.caps[str(m)] = cap

    def route(self, req: Request, view: RouterView) -> int:
        _check_size(view, self.models, self.name)
        cands = view.candidates(req)
        q = view.queue_lengths()
        if self.models is None:
            return min(cands, key=lambda i: (q[i], i))
        last = len(self.order) - 1
        for k, model in enumerate(self.order):
            replicas = [i for i in cands if self.models[i] == model]
            if not replicas:
                continue
            best = min(replicas, key=lambda i: (q[i], i))
            if k == last or q[best] < self.caps.get(model, 1 << 62):
                return best
        return min(cands, key=lambda i: (q[i], i))
