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

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    field_validator,
    model_serializer,
    model_validator,
)

from llmsim.routing.base import ROUTERS
from llmsim.schema import NonNegFloat, PosFloat, Schema
from llmsim.state.cluster_state import ClusterState

# A decision "comes bunched" when its interval to the one before is at most this fraction of the recent mean
# interval: under Poisson arrivals 1 - exp(-0.1), about 10 % of them do; in batches of n arrivals at one instant
# (a trace that records arrival times in buckets) (n - 1) / n of them do.
BUNCHED = 0.1


class LoadGate(Schema):
    """``load_gate`` of a checkpoint (checkpoint.json), an evaluation's checkpoint spec or an export's manifest:
    ``router`` (a registered heuristic, with ``kwargs``) decides while fewer than ``below`` requests per instance
    are in flight (running, waiting or swapped, plus the central queue), averaged over time with weights
    ``exp(-age / smooth_s)`` (:class:`LoadMeter`; 0: the load at the decision), so that a burst at light load does
    not hand single decisions to the network; the learned router decides from ``below`` on, except where it is
    unsure (``margin`` > 0, :func:`unsure`): there the heuristic's action is taken. Where the margin applies: at any
    load and burstiness by default; with ``margin_below`` and/or ``margin_burst`` set, only while the load is below
    ``margin_below`` or at least a share ``margin_burst`` of the recent decisions came bunched
    (:attr:`LoadMeter.bunched`). With ``costless``, the heuristic also decides from ``below`` on wherever its own
    estimate says its choice costs nothing (:func:`costless_decision`; a router with ``choose`` and ``remember``,
    e.g. ``qos_lookahead``: the newcomer within its latency limit, no running request pushed past it). With
    ``informed`` (implied by ``costless``), the heuristic is told every decision the gate takes, whoever took it
    (a router with ``remember``), so its estimates weigh every running request as placed; without it, it knows only
    the requests it routed itself, as where it was asked for the margin."""

    where = "load_gate"

    router: str
    kwargs: dict[str, Any] = Field(default_factory=dict)
    below: PosFloat
    smooth_s: NonNegFloat = 0.0
    margin: NonNegFloat = 0.0  # above ``below``: the heuristic's action unless the network prefers its own by this
    margin_below: PosFloat | None = None  # the margin only while the smoothed load is below this (None: any load)
    # the margin (also) while at least this share of the recent decisions came bunched (None: not for that)
    margin_burst: PosFloat | None = Field(default=None, le=1.0)
    costless: StrictBool = False  # from ``below`` on, the heuristic's choice wherever it costs nothing by its estimate
    informed: StrictBool = False  # the heuristic told every decision (its memory of what runs where), not only its own

    @field_validator("router")
    @classmethod
    def registered_heuristic(cls, v: str) -> str:
        if v == "onnx":
            raise ValueError("a heuristic, not another learned router ('onnx')")
        if v not in ROUTERS:
            raise ValueError(f"a registered router (one of {ROUTERS.names()})")
        return v

    @model_validator(mode="after")
    def heuristic_can_be_told(self) -> LoadGate:
        router = ROUTERS.get(self.router)
        if self.costless and not all(hasattr(router, k) for k in ("choose", "remember")):
            raise ValueError(f"costless: {self.router!r} gives no estimate of its choice's cost (a router with "
                             "choose and remember, e.g. qos_lookahead)")
        if self.informed and not hasattr(router, "remember"):
            raise ValueError(f"informed: {self.router!r} keeps no memory of placements to tell (a router with "
                             "remember, e.g. qos_lookahead)")
        return self

    @property
    def tells(self) -> bool:
        """Whether the heuristic is told every decision (``informed``, or ``costless`` which needs it)."""
        return self.informed or self.costless

    @model_serializer(mode="wrap")
    def without_unset_burst(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The mapping without ``margin_burst`` when it is unset and ``costless`` / ``informed`` when false, so a gate
        without them is written as before."""
        out = handler(self)
        if self.margin_burst is None:
            out.pop("margin_burst", None)
        for key in ("costless", "informed"):
            if not getattr(self, key):
                out.pop(key, None)
        return out

    def margin_now(self, meter: LoadMeter) -> float:
        """The margin at ``meter``'s last reading, or 0 (the network decides) where neither condition that is set
        holds: the load below ``margin_below``, a share of at least ``margin_burst`` of the decisions bunched."""
        if self.margin_below is None and self.margin_burst is None:
            return self.margin
        low = self.margin_below is not None and meter.level < self.margin_below
        bursty = self.margin_burst is not None and meter.bunched >= self.margin_burst
        return self.margin if low or bursty else 0.0

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
    bunched: float = 0.0  # the share of the recent decisions that came bunched (:meth:`arrived`)
    gap: float = 0.0  # the recent mean interval between decisions, in seconds
    decisions: float = 0.0  # the recent decisions' weight (each exp(-age / smooth_s))

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
        self.arrived(state.now)
        return self.level < self.below

    def arrived(self, now: float) -> None:
        """Count a decision at ``now``: bunched if its interval to the last one is at most :data:`BUNCHED` times the
        recent mean interval (a batch arriving at one instant: interval 0). Decisions are weighted by
        ``exp(-age / smooth_s)`` as the load is (0: the last one alone). Why: a burst of simultaneous arrivals (the
        Mooncake conversation trace's 3 s buckets) is where the learned router loses at loads where it otherwise
        leads, and in-flight counts do not tell the two apart; the interval's scale does not matter, only how
        unevenly the decisions come."""
        if self.at is not None:
            gap = max(0.0, now - self.at)
            near = gap <= BUNCHED * self.gap
            kept = math.exp(-gap / self.smooth_s) if self.smooth_s > 0.0 else 0.0
            self.decisions = self.decisions * kept + 1.0
            self.gap += (gap - self.gap) / self.decisions
            self.bunched += (float(near) - self.bunched) / self.decisions
        self.at = now


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


def costless_decision(router: Any, req: Any, view: Any) -> int | None:
    """``router``'s decision for ``req`` where its own estimate says it costs nothing (``router.choose``), else
    None (the network decides). Nothing is remembered here: the caller tells the router what was decided."""
    decision, free = router.choose(req, view)
    return decision if free else None


def parse_gate(data: Any, where: str) -> LoadGate | None:
    """A LoadGate from a mapping (None stays None); errors name ``where``."""
    return None if data is None else LoadGate.parse(data, where)
