"""The KV-reuse study (prefix caching and prefix-aware routing): setup, claims, page, and the experiment that runs
them (``llmsim-reproduce prefix``)."""

from experiments.studies.prefix.experiment import run

__all__ = ["run"]
