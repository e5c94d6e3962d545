"""Observation builders: ``make_obs("flat" | "graph" | "model", **kwargs)``."""

from __future__ import annotations

from typing import Any

from envs.observations.base import ObsBuilder
from envs.observations.flat import FlatObs
from envs.observations.graph import GraphObs, from_hetero_data, to_hetero_batch, to_hetero_data
from envs.observations.model_select import ModelSelectObs
from envs.registry import build_part

OBSERVATIONS: dict[str, type[ObsBuilder]] = {c.name: c for c in (FlatObs, GraphObs, ModelSelectObs)}


def make_obs(spec: str | dict[str, Any] | ObsBuilder | None, **kwargs: Any) -> ObsBuilder:
    """An observation builder from a name plus kwargs, a ``{"kind": name, ...}`` dict, or an instance."""
    return build_part(spec, OBSERVATIONS, ObsBuilder, "flat", "observation", **kwargs)


__all__ = ["OBSERVATIONS", "FlatObs", "GraphObs", "ModelSelectObs", "ObsBuilder", "from_hetero_data",
           "make_obs",
           "to_hetero_batch", "to_hetero_data"]
