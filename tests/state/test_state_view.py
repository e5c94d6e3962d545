"""StateView (a view over a ClusterState alone, what the live router hands a policy) answers like ClusterView.

Every heuristic router, run once on the simulator's view and once on a StateView of that view's state at
the same decision, must decide the same; the list helpers must be equal. A broken StateView (a wrong formula,
a missed queue, ignoring the prompt limits) fails here.
"""

from __future__ import annotations

import numpy as np
import pytest

from llmsim import InstanceConfig, simulate
from llmsim.routing import ROUTERS, Router, make_router
from llmsim.state.cluster_state import ClusterState
from llmsim.state.state_view import StateView
from llmsim.testing import LinearProfile, requests

pytestmark = pytest.mark.timeout(120)

SKIP = {"onnx"}  # needs an export (tests/test_export.py)


class Twin(Router):
    """Routes with ``a`` on the real view and checks ``b`` decides the same on a StateView of its state."""

    name = "twin"

    def __init__(self, router: str, **kwargs) -> None:
        super().__init__()
        self.a, self.b = make_router(router, seed=3, **kwargs), make_router(router, seed=3, **kwargs)
        self.decisions = 0

    def route(self, req, view) -> int:
        sv = StateView(view.state())
        for helper in ("queue_lengths", "num_waiting", "num_running", "kv_used_fractions", "kv_demand_fractions",
                       "work_left", "throughput"):
            assert getattr(sv, helper)() == pytest.approx(getattr(view, helper)()), helper
        assert sv.candidates(req) == view.candidates(req)
        for k in range(view.num_instances):
            assert sorted(sv.requests(k)) == sorted(view.requests(k))
        want, got = self.a.route(req, view), self.b.route(req, sv)
        assert got == want, (self.a.name, req.id)
        self.decisions += 1
        return want


def workload(n: int = 120, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(0.02, n))
    reqs = requests([(float(a), int(p), int(o)) for a, p, o in
                     zip(t, rng.integers(10, 600, n), rng.integers(5, 300, n))])
    for r in reqs:
        r.predicted_output = float(r.output_tokens) * 1.1
    return reqs


# the library's routers: other test modules register their own ``test_*`` ones (a router that holds every request
# forever, one that trips on its options), which this cluster cannot judge
@pytest.mark.parametrize("name", [n for n in ROUTERS.names() if n not in SKIP and not n.startswith("test_")])
def test_every_heuristic_decides_the_same_on_a_state_view(name: str) -> None:
    insts = [InstanceConfig(profile=LinearProfile(kv_tokens=k)) for k in (4000, 8000, 2000)]
    try:
        twin = Twin(name)
        res = simulate(insts, workload(), twin, central_queue_tick=0.05, on_unservable="drop")
    except Exception as e:  # a router that needs options or other clusters (paper baselines): skip honestly
        if "Twin" in repr(e) or isinstance(e, AssertionError):
            raise
        pytest.skip(f"{name}: needs a setting this small cluster lacks ({e})")
    assert twin.decisions >= 100 and len(res.requests) == 120


def test_down_and_disallowed_instances_are_not_candidates() -> None:
    insts = [InstanceConfig(profile=LinearProfile()) for _ in range(3)]
    seen: list[ClusterState] = []

    class Grab(Router):
        name = "grab"

        def route(self, req, view) -> int:
            seen.append(view.state())
            return 0

    simulate(insts, requests([(0.0, 10, 5)]), Grab())
    st = seen[0]
    req = requests([(0.0, 10, 5)])[0]
    assert StateView(st).candidates(req) == [0, 1, 2]
    down = st._replace(instances=(st.instances[0]._replace(up=False),) + st.instances[1:])
    assert StateView(down).candidates(req) == [1, 2]
    assert StateView(down, allowed=[0, 2]).candidates(req) == [2]
    assert make_router("jsq").route(req, StateView(down)) == 1
    small = st._replace(instances=tuple(i._replace(max_prompt_tokens=5) if i.idx != 2 else i for i in st.instances))
    assert StateView(small).candidates(req) == [2]  # only instance 2 can hold a 10-token prompt
