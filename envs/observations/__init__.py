"""Observation builders: ``make_obs("flat" | "graph" | "model" | "expert_flat" | "instance_set", **kwargs)``."""

from __future__ import annotations

from typing import Any

from llmsim.envs.observations.base import ObsBuilder
from llmsim.envs.observations.expert_flat import ExpertFlatObs
from llmsim.envs.observations.flat import FlatObs
from llmsim.envs.observations.graph import GraphObs, from_hetero_data, to_hetero_batch, to_hetero_data
from llmsim.envs.observations.instance_set import InstanceSetObs
from llmsim.envs.observations.model_select import ModelSelectObs
from llmsim.registry import Registry

OBSERVATIONS: Registry[type[ObsBuilder]] = Registry("observation")
for _cls in (FlatObs, GraphObs, ModelSelectObs, ExpertFlatObs, InstanceSetObs):
    OBSERVATIONS.register(_cls)


def make_obs(spec: str | dict[str, Any] | ObsBuilder | None, **kwargs: Any) -> ObsBuilder:
    """An observation builder from a name plus kwargs, a ``{"kind": name, ...}`` dict, or an instance."""
    return OBSERVATIONS.build(spec, ObsBuilder, "flat", "observation", **kwargs)


__all__ = ["OBSERVATIONS", "ExpertFlatObs", "FlatObs", "GraphObs", "InstanceSetObs", "ModelSelectObs", "ObsBuilder",
           "from_hetero_data", "make_obs", "to_hetero_batch", "to_hetero_data"]
