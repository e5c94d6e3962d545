"""Instances that share one GPU (``device`` in the cluster config) and slow each other down.

A :class:`GpuShare` per co-located engine (``Instance.gpu_share``) tracks when that engine turns busy or idle
and tells the engines on the same device, whose decode runs then end at the change (their step time changes with
it); when an iteration starts, its slowdown counts the busy mates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.event_loop import ARRIVAL

if TYPE_CHECKING:
    from llmsim.engine.components import ComponentEngine


class GpuShare:
    """One engine's side of a shared GPU: its busy-state changes as the mates see them, and the slowdown."""

    __slots__ = ("engine", "mates", "interference", "instant", "before", "arrival_busy_t")

    def __init__(self, engine: ComponentEngine, interference: float) -> None:
        self.engine = engine
        self.mates: list[GpuShare] = []  # the other engines' shares of this GPU
        self.interference = interference
        self.instant = -1.0  # time of the last busy-state change
        self.before = False  # busy state at the start of that instant
        self.arrival_busy_t = -1.0  # last time an arrival-phase submission made it busy

    def busy_changed(self, was: bool, busy: bool, now: float, phase: int) -> None:
        """The engine turned busy or idle: the mates' iterations that start after this change run at another
        speed, so their decode runs end at it."""
        if self.instant != now:
            self.instant = now
            self.before = was
        arrival = busy and phase == ARRIVAL
        if arrival:
            self.arrival_busy_t = now
        for m in self.mates:
            m.engine.stop_run_at(now, arrival)

    def counts_as_busy(self, t: float) -> bool:
        """Busy for an iteration of a mate starting at ``t``: busy before the instant, or made busy by an arrival at
        it. Engine-phase changes at ``t`` count from the next instant, so the answer does not depend on the order in
        which same-instant boundaries run."""
        if self.instant == t:
            return self.before or self.arrival_busy_t == t
        return self.engine.busy

    def slowdown(self, now: float) -> float:
        """Step-time factor when an iteration starts: (1 + interference * busy GPU mates) * step_time_scale.

        With interference 1 this is fair time slicing (two busy engines each run at half speed).
        """
        scale = self.engine.config.step_time_scale
        if not self.mates:
            return scale
        busy = 0
        for m in self.mates:
            if m.counts_as_busy(now):
                busy += 1
        return (1.0 + self.interference * busy) * scale


def share_gpus(groups: dict[str, list[ComponentEngine]], interference: float) -> None:
    """Give every engine of each device group its share, linked to its mates'."""
    for members in groups.values():
        shares = [GpuShare(m, float(interference)) for m in members]
        for m, s in zip(members, shares):
            s.mates = [o for o in shares if o is not s]
            m.gpu_share = s
