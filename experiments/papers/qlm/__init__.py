"""QLM (queue management for SLO-oriented LLM serving): setup (workloads, clusters, policies, one simulation),
claims, page, and the experiment that runs them (``llmsim-reproduce qlm``)."""

from experiments.papers.qlm.experiment import run

__all__ = ["run"]
