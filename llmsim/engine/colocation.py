"""Instances that share one GPU (``device`` in the cluster config) and slow each other down.

A mixin of :class:`llmsim.engine.instance.Instance`: it tracks when the engine turns busy or idle and tells the
engines on the same device, whose decode runs then end at the change (their step time changes with it).
"""

from __future__ import annotations

from typing import Any

from llmsim.event_loop import ARRIVAL


class SharesGpu:
    """Busy-state changes seen by the other engines on the same GPU (``mates``), and the slowdown they cause."""

    mates: list[Any]
    interference: float
    config: Any
    _busy: bool
    _busy_instant: float
    _busy_before: bool
    _arrival_busy_t: float

    def _set_busy(self, busy: bool, now: float, phase: int) -> None:
        if self._busy_instant != now:
            self._busy_instant = now
            self._busy_before = self._busy
        self._busy = busy
        arrival = busy and phase == ARRIVAL
        if arrival:
            self._arrival_busy_t = now
        for m in self.mates:
            if m._run is not None:
                # the mate's iterations that start after this change run at another speed
                m._request_stop(m._run, now, arrival)

    def _counts_as_busy(self, t: float) -> bool:
        """Busy for an iteration of a mate starting at ``t``: busy before the instant, or made busy by an
        arrival at it. Engine-phase changes at ``t`` count from the next instant, so the answer does
        not depend on the order in which same-instant boundaries run."""
        if self._busy_instant == t:
            return self._busy_before or self._arrival_busy_t == t
        return self._busy

    def slowdown(self, now: float) -> float:
        """Step-time factor when an iteration starts: (1 + interference * busy GPU mates) * step_time_scale.

        With interference 1 this is fair time slicing (two busy engines each run at half speed).
        """
        scale = self.config.step_time_scale
        if not self.mates:
            return scale
        busy = 0
        for m in self.mates:
            if m._counts_as_busy(now):
                busy += 1
        return (1.0 + self.interference * busy) * scale
