"""What the routing tests share: hand-made cluster views and the workloads several test modules run.

* RouteBalance's three-tier fixtures (:class:`StubView`, :func:`labelled`, :func:`idle3`, :func:`workload`,
  :func:`cluster`): used by test_routebalance.py and test_routebalance_clamp.py;
* the bursty two-class SLO workload (:func:`bursty`, :data:`SLO_S`, :data:`SLO_CLASSES`): used by
  test_qlm_router.py and test_slo_baselines.py, so QLM and its baselines are compared on the same requests.
"""

from __future__ import annotations

import numpy as np

from llmsim import InstanceConfig
from llmsim.request import Request
from llmsim.schema import SLO
from llmsim.state.cluster_state import ClusterState, InstanceRequests, InstanceState, RequestState

# ---------------------------------------------------------------------- RouteBalance: hand-made views
M3, M7, M14 = "qwen2.5-3b", "qwen2.5-7b", "qwen2.5-14b"
MODELS = (M3, M7, M14)


def inst(idx: int, model: str, running: int = 0, waiting: int = 0, step: float = 0.0,
         rows: tuple[RequestState, ...] = ()) -> InstanceState:
    return InstanceState(idx, f"{idx}:{model}", model, "a100-80gb", True, running, waiting, 0, 0, 1000, 16, 256,
                         8192, 8000, step, 0.0, InstanceRequests(running=rows))


class StubView:
    """The two things RouteBalance reads: ``state()`` and ``candidates(req)``, plus ``now``."""

    def __init__(self, instances: list[InstanceState], now: float = 0.0) -> None:
        self.instances = tuple(instances)
        self.now = now
        self.num_instances = len(instances)

    def state(self) -> ClusterState:
        return ClusterState(self.now, self.now, 0, False, 0, 0.0, self.instances)

    def candidates(self, req: Request) -> list[int]:
        return list(range(self.num_instances))


def labelled(i: int, prompt: int, outs: tuple[int, int, int], quals: tuple[float, float, float] | None,
             arrival: float = 0.0, extra: dict | None = None) -> Request:
    return Request(i, arrival, prompt, outs[1], outputs_by_model=dict(zip(MODELS, outs)),
                   quality_by_model=None if quals is None else dict(zip(MODELS, quals)), extra=extra)


def idle3() -> StubView:
    return StubView([inst(0, M3), inst(1, M7), inst(2, M14)])


# ---------------------------------------------------------------------- RouteBalance: simulations
def workload(n: int = 240, rate: float = 25.0, seed: int = 0, labels: bool = True) -> list[Request]:
    """Quality rises with size (0.30 / 0.45 / 0.60 + request noise); lengths correlated across models."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, n))
    out = []
    for i in range(n):
        base = rng.lognormal(5.0, 0.6)
        outs = tuple(int(max(1, base * rng.uniform(0.7, 1.3))) for _ in MODELS)
        z = rng.normal()
        quals = tuple(float(np.clip(mu + 0.1 * z + 0.05 * rng.normal(), 0, 1)) for mu in (0.30, 0.45, 0.60))
        out.append(labelled(i, int(rng.integers(20, 400)), outs, quals if labels else None, arrival=float(t[i])))
    if not labels:
        for r in out:
            r.outputs_by_model = None
    return out


def cluster() -> list[InstanceConfig]:
    return [InstanceConfig(model=m, gpu="a100-80gb") for m in MODELS]


# ---------------------------------------------------------------------- QLM and its baselines: the SLO workload
LS_SLO_S = 3.0
SLO_S = {"latency_sensitive": LS_SLO_S, "batch": 600.0}
SLO_CLASSES = SLO.parse({"classes": {"latency_sensitive": {"e2el_ms": LS_SLO_S * 1000},
                                     "batch": {"e2el_ms": 600_000.0}}})


def bursty(seed: int = 0, n_bursts: int = 6, burst: int = 80, period: float = 20.0, ls_rate: float = 1.0) -> list:
    """Bursts of long batch requests every ``period`` s, and a Poisson stream of short latency-sensitive ones."""
    rng = np.random.default_rng(seed)
    rows = [(b * period + k * 0.01, int(rng.integers(400, 800)), int(rng.integers(200, 500)), "batch")
            for b in range(n_bursts) for k in range(burst)]
    t = 0.5
    while t < n_bursts * period:
        rows.append((t, int(rng.integers(50, 300)), int(rng.integers(20, 80)), "latency_sensitive"))
        t += float(rng.exponential(1.0 / ls_rate))
    rows.sort(key=lambda r: r[0])
    return [Request(i, float(a), p, o, slo_class=c) for i, (a, p, o, c) in enumerate(rows)]
