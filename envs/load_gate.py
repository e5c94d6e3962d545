"""A learned router's light-load fallback: below a load, a named heuristic decides instead of the network.

Why: a router trained at one load learns to spread work for the load it saw; at light load the greedy heuristics
that estimate each instance's next few iterations exactly (the QoSEdge lookahead) decide better, and the learned
router's gains are all at or above its training load (docs/results/unseen_suite.md). The gate reads only the public
:class:`~llmsim.state.cluster_state.ClusterState`, so the same rule runs in the env (a checkpoint), in the simulator
and in front of real backends (an export's ``load_gate``). The threshold is chosen on validation seeds
(``python -m experiments.studies.load_gate``), never on the test seeds that report it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pydantic import Field, field_validator

from llmsim.routing.base import ROUTERS
from llmsim.schema import NonNegFloat, PosFloat, Schema
from llmsim.state.cluster_state import ClusterState


class LoadGate(Schema):
    """``load_gate`` of a checkpoint (checkpoint.json), an evaluation's checkpoint spec or an export's manifest:
    ``router`` (a registered heuristic, with ``kwargs``) decides while fewer than ``below`` requests per instance
    are in flight (running, waiting or swapped, plus the central queue), averaged over time with weights
    ``exp(-age / smooth_s)`` (:class:`LoadMeter`; 0: the load at the decision), so that a burst at light load does
    not hand single decisions to the network; the learned router decides from ``below`` on."""

    where = "load_gate"

    router: str
    kwargs: dict[str, Any] = Field(default_factory=dict)
    below: PosFloat
    smooth_s: NonNegFloat = 0.0

    @field_validator("router")
    @classmethod
    def registered_heuristic(cls, v: str) -> str:
        if v == "onnx":
            raise ValueError("a heuristic, not another learned router ('onnx')")
        if v not in ROUTERS:
            raise ValueError(f"a registered router (one of {ROUTERS.names()})")
        return v

    def meter(self) -> LoadMeter:
        """A fresh per-episode reading of this gate (one per router instance; reset with the episode)."""
        return LoadMeter(self.below, self.smooth_s)


@dataclass
class LoadMeter:
    """The gate's load, smoothed over time: one per episode or live router. It is the time average of the load
    since the first decision (each reading held until the next), exponentially weighted and normalised by the
    weight so far, so a cluster that starts empty does not read as lightly loaded for the first ``smooth_s``
    seconds of a heavy load."""

    below: float
    smooth_s: float
    level: float = 0.0
    weight: float = 0.0  # of the loads seen so far, in seconds (smooth_s at most)
    held: float = 0.0  # the load read at the last decision, held until this one
    at: float | None = None

    def light(self, state: ClusterState) -> bool:
        """True where the heuristic decides."""
        x = in_flight_per_instance(state)
        if self.at is None or self.smooth_s == 0.0:
            self.level = x
        else:
            decay = math.exp(-max(0.0, state.now - self.at) / self.smooth_s)
            kept, w = self.weight * decay, self.smooth_s * (1.0 - decay)  # the past's weight, the interval's
            self.level = (self.level * kept + self.held * w) / (kept + w) if kept + w > 0.0 else x
            self.weight = kept + w
        self.held = x
        self.at = state.now
        return self.level < self.below


def in_flight_per_instance(state: ClusterState) -> float:
    """Requests the cluster holds per instance: running, waiting and swapped ones, and the central queue's."""
    return (sum(state.queue_lengths()) + state.central_queue) / max(1, state.num_instances)


def parse_gate(data: Any, where: str) -> LoadGate | None:
    """A LoadGate from a mapping (None stays None); errors name ``where``."""
    return None if data is None else LoadGate.parse(data, where)
