"""RouteBalance (fused model routing and load balancing): setup (sizes, policies, testbed, workloads), cells,
claims (main grid and the two studies), page, and the experiment that runs them (``llmsim-reproduce routebalance``)."""

from experiments.papers.routebalance.experiment import run

__all__ = ["run"]
