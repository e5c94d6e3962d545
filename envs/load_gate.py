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
from collections.abc import Sequence
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
    not hand single decisions to the network; the learned router decides from ``below`` on, except where it is
    unsure (``margin`` > 0, :func:`unsure`; while the load is below ``margin_below``, if set): there the heuristic's
    action is taken."""

    where = "load_gate"

    router: str
    kwargs: dict[str, Any] = Field(default_factory=dict)
    below: PosFloat
    smooth_s: NonNegFloat = 0.0
    margin: NonNegFloat = 0.0  # above ``below``: the heuristic's action unless the network prefers its own by this
    margin_below: PosFloat | None = None  # the margin only while the smoothed load is below this (None: any load)

    @field_validator("router")
    @classmethod
    def registered_heuristic(cls, v: str) -> str:
        if v == "onnx":
            raise ValueError("a heuristic, not another learned router ('onnx')")
        if v not in ROUTERS:
            raise ValueError(f"a registered router (one of {ROUTERS.names()})")
        return v

    def margin_now(self, meter: LoadMeter) -> float:
        """The margin at ``meter``'s last reading: 0 (the network decides) from ``margin_below`` on."""
        return self.margin if self.margin_below is None or meter.level < self.margin_below else 0.0

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


def unsure(scores: Sequence[float], mine: int, theirs: int, margin: float) -> bool:
    """True where the heuristic's action ``theirs`` scores within ``margin`` of the network's greedy ``mine``
    (masked scores: an invalid action is -inf and never within). For a categorical SAC policy the scores are
    logits, so the gap is log(pi(mine) / pi(theirs)): the network keeps its choice only where its own policy
    prefers it by more than ``exp(margin)`` to one; with Q-values (Double DQN) it is the Q-advantage, as the
    WorkloadRouter's ``fallback_margin``. ``margin`` 0: never (the network decides)."""
    return margin > 0.0 and theirs != mine and float(scores[mine]) - float(scores[theirs]) < margin


def parse_gate(data: Any, where: str) -> LoadGate | None:
    """A LoadGate from a mapping (None stays None); errors name ``where``."""
    return None if data is None else LoadGate.parse(data, where)
