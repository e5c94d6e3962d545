"""The outside driver's clock (``llmsim.cluster.driver``): its calls run at their absolute times in phase order, and
``advance_to`` (SimPy's ``run(until=...)`` on the same queue as llmsim's own events) leaves the clock exactly there."""

from __future__ import annotations

from llmsim import InstanceConfig
from llmsim.cluster import Cluster
from llmsim.cluster.driver import ClusterDriver
from llmsim.routing import DEFER, Router
from llmsim.testing import LinearProfile


class Defer(Router):
    name = "defer"

    def route(self, req, view) -> int:
        return DEFER


def _driver() -> ClusterDriver:
    drv = ClusterDriver(Cluster([InstanceConfig(profile=LinearProfile())], Defer()))
    drv.start([])
    return drv


def test_advance_to_moves_the_clock_to_the_time_given():
    drv = _driver()
    seen: list[float] = []
    drv.call_at(0.25, lambda: seen.append(drv.now))
    drv.advance_to(1.5)
    assert seen == [0.25]
    assert drv.now == 1.5  # (the clock the driver and the engines read, not only SimPy's own)
    drv.advance_to(2.0)
    assert drv.now == 2.0


def test_calls_run_in_time_then_fifo_order_with_their_phase_published():
    drv = _driver()
    order: list[tuple[str, float, int]] = []
    drv.call_at(0.5, lambda: order.append(("b", drv.now, drv.phase)))
    drv.call_at(0.2, lambda: order.append(("a", drv.now, drv.phase)))
    drv.call_at(0.5, lambda: order.append(("c", drv.now, drv.phase)))
    while drv.pending_events:
        drv.step()
    assert [o[0] for o in order] == ["a", "b", "c"]
    assert [o[1] for o in order] == [0.2, 0.5, 0.5]
    assert {o[2] for o in order} == {2}  # ROUTE


def test_replace_upcoming_cancels_the_scheduled_arrival_and_feeds_the_new_workload():
    from llmsim.request import Request

    drv = ClusterDriver(Cluster([InstanceConfig(profile=LinearProfile())], Defer()))
    drv.start([Request(0, 1.0, 8, 4), Request(1, 2.0, 8, 4)])  # request 0's arrival is scheduled already
    drv.advance_to(0.5)
    drv.replace_upcoming([Request(7, 0.75, 8, 4)])
    while drv.pending_events and not drv.deferred:
        drv.step()
    assert [r.id for r in drv.deferred] == [7] and drv.now == 0.75
    assert drv.cluster.num_arrived == 1 and drv.cluster.arrivals_done
