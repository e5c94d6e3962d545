"""What became of an episode's requests, as the reward hears of it: completions, drops of any cause, waits, timeouts.

Every outcome reaches the reward in the step in which it happens (``Reward.on_finish`` / ``on_drop`` /
``on_timeout`` / ``on_wait``) and is counted for ``info``: completions through the cluster recorder's observers
(:meth:`Outcomes.on_finish`), drops from the driver's drop record whatever their cause (the agent's DROP, an
unservable route, the engine, the wait fallback, the time limit), waits as request-seconds in the central queue.
A request with an outcome is forgotten by the router's book (its prediction and routed quality).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim.envs.rewards.base import CUT_OFF_REASON

if TYPE_CHECKING:
    import numpy as np

    from llmsim.cluster.driver import ClusterDriver
    from llmsim.envs.rewards.base import Reward
    from llmsim.request import Request


class Outcomes:
    """One episode's outcome accounting; ``requests`` in arrival order, ``preds`` / ``routed_quality`` the router's
    book of them (entries are dropped when a request is done)."""

    def __init__(self, reward: Reward, driver: ClusterDriver, requests: list[Request],
                 preds: dict[int, tuple[np.ndarray, np.ndarray]], routed_quality: dict[int, float]) -> None:
        self.reward = reward
        self.driver = driver
        self.requests = requests
        self.by_id = {r.id: r for r in requests}
        self.preds = preds
        self.routed_quality = routed_quality
        self.completed = 0
        self.agent_dropped = 0  # the agent's own DROP actions
        self.timeouts = 0  # requests that waited max_wait_s and went to the wait fallback
        self.in_step = 0  # outcomes since the current step's simulation began (a drain step ends at one)
        self.n_drops = 0  # entries of the driver's drop record handed to the reward so far
        self.released_wait = 0.0  # request-seconds waited by requests that left the queue mid-step

    def replace_upcoming(self, arrived: int, requests: list[Request]) -> None:
        """The requests after the first ``arrived`` become ``requests`` (as many; they take over the ids)."""
        old = self.requests[arrived:]
        if len(requests) != len(old):
            raise ValueError(f"replace_upcoming: expected {len(old)} requests still to arrive, got {len(requests)}")
        for new, was in zip(requests, old, strict=True):
            new.id = was.id
            self.by_id[new.id] = new
        self.requests = [*self.requests[:arrived], *requests]

    def on_finish(self, req: Request) -> None:
        """A completion (subscribed to the cluster's recorder, after the cluster's own observer)."""
        self.completed += 1
        self.in_step += 1
        self.reward.on_finish(req, req.instance)
        self.preds.pop(req.id, None)
        self.routed_quality.pop(req.id, None)

    def collect_drops(self) -> None:
        """Hand every new drop of the cluster's recorder (whatever its cause) to the reward."""
        dropped = self.driver.drops
        by_id = self.by_id
        for entry in dropped[self.n_drops:]:
            req = by_id[entry[0]]  # entries start with the request id; the reason is on the request
            self.reward.on_drop(req, req.dropped)
            self.preds.pop(req.id, None)
            self.routed_quality.pop(req.id, None)
            self.in_step += 1
        self.n_drops = len(dropped)

    def held_seconds(self, t0: float, t1: float) -> float:
        """Request-seconds spent in the central queue over (t0, t1], including requests released meanwhile."""
        drv = self.driver
        s = self.released_wait
        self.released_wait = 0.0
        for q in (drv.held, drv.deferred):
            for r in q:
                a = r.arrival
                s += t1 - (a if a > t0 else t0)
        return s

    def timed_out(self, req: Request, now: float, step_began: float) -> None:
        """``req`` waited ``max_wait_s`` and leaves the queue now: count it and the wait it had in this step."""
        self.released_wait += now - max(req.arrival, step_began)
        self.timeouts += 1

    def close(self, truncated: bool) -> None:
        """Account for everything still open at the episode's end: cut off by the time limit, or never routed."""
        if truncated:
            self.driver.cut_off(self.requests, CUT_OFF_REASON)
        self.driver.finish()
        self.collect_drops()
