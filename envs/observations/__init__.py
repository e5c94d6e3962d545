"""Observation builders: ``make_obs("flat" | "graph" | "model", **kwargs)``."""

from __future__ import annotations

from typing import Any

from envs.observations.base import ObsBuilder
from envs.observations.flat import FlatObs
from envs.observations.graph import GraphObs, from_hetero_data, to_hetero_batch, to_hetero_data
from envs.observations.model_select import ModelSelectObs

OBSERVATIONS: dict[str, type[ObsBuilder]] = {c.name: c for c in (FlatObs, GraphObs, ModelSelectObs)}


def make_obs(spec: str | dict[str, Any] | ObsBuilder | None, **kwargs: Any) -> ObsBuilder:
    if isinstance(spec, ObsBuilder):
        return spec
    if spec is None:
        spec = "flat"
    if isinstance(spec, dict):
        kw = dict(spec)
        spec = kw.pop("kind")
        kw.update(kwargs)
        kwargs = kw
    if spec not in OBSERVATIONS:
        raise ValueError(f"unknown observation {spec!r}; expected one of {sorted(OBSERVATIONS)}")
    return OBSERVATIONS[spec](**kwargs)


__all__ = ["OBSERVATIONS", "FlatObs", "GraphObs", "ModelSelectObs", "ObsBuilder", "from_hetero_data",
           "make_obs",
           "to_hetero_batch", "to_hetero_data"]
