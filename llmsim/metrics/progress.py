"""Progress of one simulation, for people waiting on it: requests *done* (finished or dropped), not arrivals.

Arrivals are generated far ahead of completions (the whole workload "arrives" long before an overloaded
cluster drains it), so a bar of arrivals reaches 100 % and then sits still. This one counts requests that
left the system and, after the last arrival, says so: ``draining, N in flight``.

On a terminal it is a tqdm bar refreshed at most every ``refresh_s`` (0.1 s) of wall time; anywhere else
(a log file, CI, a notebook's captured stderr) a bar would be a stream of carriage returns, so it prints one
short line every ``line_every_s`` (5 s) instead: ``llmsim: 4,000/10,000 requests done (40 %), 37 in flight,
simulated 1,234 s, 5,900 req/s``.

Cost: it observes the recorder (``Recorder.subscribe``: one call per finished or dropped request, never per
event), and the wall clock is read once every ``check_every`` completions; the simulation itself never knows.
"""

from __future__ import annotations

import os
import sys
import time
from typing import IO, TYPE_CHECKING, Any

from tqdm import tqdm

if TYPE_CHECKING:
    from llmsim.metrics.sources import RunningCluster


def _is_tty(stream: IO[str]) -> bool:
    """A terminal a bar can be drawn on: a TTY that reports a width (some CI pseudo-terminals report 0
    columns, where tqdm draws nothing after its first frame; they get the plain lines instead)."""
    try:
        if not stream.isatty():
            return False
        return os.get_terminal_size(stream.fileno()).columns > 0
    except (AttributeError, ValueError, OSError):  # closed, not a real file, or no size
        return False


class SimProgress:
    """Reports completed requests of one :class:`~llmsim.cluster.cluster.Cluster` run on ``stream`` (stderr)."""

    def __init__(self, total: int | None = None, stream: IO[str] | None = None, tty: bool | None = None,
                 refresh_s: float = 0.1, line_every_s: float = 5.0, check_every: int = 16) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.tty = _is_tty(self.stream) if tty is None else tty
        self.refresh_s = refresh_s
        self.line_every_s = line_every_s
        self.check_every = max(1, int(check_every))
        self.finished = 0
        self.dropped = 0
        self.lines = 0
        self._cluster: RunningCluster | None = None
        self._bar: Any = None
        self._next_check = self.check_every
        self._t0 = self._last = 0.0

    # ------------------------------------------------------------------ wiring
    def attach(self, cluster: RunningCluster, total: int | None = None) -> None:
        """Start reporting on ``cluster`` (call before ``cluster.run``)."""
        if total is not None and self.total is None:
            self.total = int(total)
        self._cluster = cluster
        cluster.recorder.subscribe(self.on_finish, self.on_drop)
        self._t0 = self._last = time.perf_counter()
        if self.tty:
            self._bar = tqdm(total=self.total, unit="req", desc="requests done", file=self.stream, leave=False,
                             mininterval=0, miniters=1, dynamic_ncols=True)

    def close(self) -> None:
        """Show the final count, remove the bar and unhook the recorder."""
        if self._bar is not None:
            self._update_bar()
            self._bar.close()
            self._bar = None
        if self._cluster is not None:
            self._cluster.recorder.unsubscribe(self.on_finish, self.on_drop)
            self._cluster = None

    def on_finish(self, r: Any) -> None:
        self.finished += 1
        if self.finished >= self._next_check:
            self._next_check = self.finished + self.check_every
            self._tick()

    def on_drop(self, r: Any, reason: str, now: float) -> None:
        self.dropped += 1

    # ------------------------------------------------------------------ state
    @property
    def done(self) -> int:
        return self.finished + self.dropped

    def state(self) -> dict[str, Any]:
        """What the bar and the lines show: done / total, in flight, draining, simulated time, wall rate."""
        c = self._cluster
        arrived = c.num_arrived if c is not None else self.done
        draining = c.arrivals_done if c is not None else False
        wall = time.perf_counter() - self._t0
        return {
            "done": self.done, "total": self.total, "dropped": self.dropped,
            "in_flight": max(0, arrived - self.done), "draining": draining,
            "sim_time": float(c.env.now) if c is not None else 0.0,
            "rate": self.done / wall if wall > 0 else 0.0,
        }

    # ------------------------------------------------------------------ output
    def _tick(self) -> None:
        now = time.perf_counter()
        if self.tty:
            if now - self._last >= self.refresh_s:
                self._last = now
                self._update_bar()
        elif now - self._last >= self.line_every_s:
            self._last = now
            self.stream.write(self.line() + "\n")
            self.stream.flush()
            self.lines += 1

    def postfix(self, st: dict[str, Any]) -> str:
        parts = [f"draining, {st['in_flight']:,} in flight" if st["draining"] else f"{st['in_flight']:,} in flight",
                 f"sim {st['sim_time']:,.0f} s"]
        if st["dropped"]:
            parts.append(f"{st['dropped']:,} dropped")
        return ", ".join(parts)

    def line(self) -> str:
        """The non-terminal report: one line, no control characters."""
        st = self.state()
        total = st["total"]
        head = f"{st['done']:,}/{total:,} requests done ({100 * st['done'] / total:.0f} %)" if total else \
            f"{st['done']:,} requests done"
        return f"llmsim: {head}, {self.postfix(st)}, {st['rate']:,.0f} req/s"

    def _update_bar(self) -> None:
        bar = self._bar
        st = self.state()
        bar.set_postfix_str(self.postfix(st), refresh=False)
        bar.update(st["done"] - bar.n)
