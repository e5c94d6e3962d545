"""Non-learned routers. Ties go to the lowest index, so runs are deterministic.

In a disaggregated cluster (llmsim.cluster.disagg) each applies its rule to both stages: ``view.candidates`` lists the
prefill (and mixed) instances for a new request and the decode (and mixed) ones for a prefilled request."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.routing.base import Router, register_router

if TYPE_CHECKING:
    from llmsim.request import Request
    from llmsim.state.view import RouterView


def _argmin(values: list, candidates: list[int]) -> int:
    best = candidates[0]
    best_v = values[best]
    for i in candidates[1:]:
        v = values[i]
        if v < best_v:
            best, best_v = i, v
    return best


@register_router
class RandomRouter(Router):
    name = "random"

    def route(self, req: Request, view: RouterView) -> int:
        c = view.candidates(req)
        return c[int(self.rng.integers(len(c)))]

    route_decode = route


@register_router
class RoundRobinRouter(Router):
    name = "round_robin"

    def __init__(self, seed: int = 0, **kw) -> None:
        super().__init__(seed, **kw)
        self._next = [0, 0]  # per stage: new requests, prefilled requests (disaggregated clusters)

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._next = [0, 0]

    def route(self, req: Request, view: RouterView, stage: int = 0) -> int:
        c = view.candidates(req)
        n = view.num_instances
        nxt = self._next
        for _ in range(n):
            i = nxt[stage] % n
            nxt[stage] += 1
            if i in c:
                return i
        return c[0]

    def upcoming(self, view: RouterView, k: int) -> int | None:
        return (self._next[0] + k) % view.num_instances  # (every instance a candidate: the common case)

    def route_decode(self, req: Request, view: RouterView) -> int:
        return self.route(req, view, 1)


@register_router
class JoinShortestQueueRouter(Router):
    """Fewest requests on the instance (waiting + running + swapped)."""

    name = "jsq"

    def route(self, req: Request, view: RouterView) -> int:
        return _argmin(view.queue_lengths(), view.candidates(req))

    route_decode = route


@register_router
class LeastKVRouter(Router):
    """Lowest KV-cache use, counting the blocks the waiting prompts will need."""

    name = "least_kv"

    def route(self, req: Request, view: RouterView) -> int:
        return _argmin(view.kv_demand_fractions(), view.candidates(req))

    route_decode = route


@register_router
class LeastWorkLeftRouter(Router):
    """Fewest predicted remaining tokens: prompts still to prefill plus predicted outputs still to decode.

    A request's predicted output is ``request.predicted_output`` when a predictor set it, else the mean
    output length of the requests finished so far (the view's running estimate).
    """

    name = "least_work_left"

    def route(self, req: Request, view: RouterView) -> int:
        return _argmin(view.work_left(), view.candidates(req))

    route_decode = route


@register_router
class PowerOfTwoRouter(Router):
    """Sample two distinct instances at random, take the one with the shorter queue."""

    name = "power_of_two"

    def route(self, req: Request, view: RouterView) -> int:
        c = view.candidates(req)
        if len(c) == 1:
            return c[0]
        a, b = self.rng.choice(len(c), size=2, replace=False)
        q = view.queue_lengths()
        i, j = c[int(a)], c[int(b)]
        return i if q[i] <= q[j] else j

    route_decode = route
