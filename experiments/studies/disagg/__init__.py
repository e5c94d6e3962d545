"""The P/D disaggregation study (DistServe, Splitwise): setup, claims, page, and the experiment that runs them
(``llmsim-reproduce disagg``)."""

from experiments.studies.disagg.experiment import run

__all__ = ["run"]
