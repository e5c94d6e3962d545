"""Learned Best-Effort LLM Serving: setup (sizes, trainings, episodes), metrics, claims, page, and the experiment
that runs them (``llmsim-reproduce best_effort``)."""

from experiments.papers.best_effort.experiment import run

__all__ = ["run"]
