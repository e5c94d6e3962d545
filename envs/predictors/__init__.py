"""Predictors of per-model output length and quality, as observations see them, and their trainers."""

from llmsim.envs.predictors.base import *  # noqa: F403
