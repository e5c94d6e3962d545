"""What a capacity or deployment search is doing, shown from its first second (searches run for minutes).

The search does not know in advance how many simulations it will need (it stops when its bracket is narrow
enough), so progress is counted in simulations started and done, with the phase and the current step beside
them. On a terminal it is a tqdm bar; anywhere else (a log file, CI, a notebook's captured stderr) a bar would be
a stream of carriage returns, so it prints the phase when it changes and one short line at most every
``line_every_s`` seconds, as the simulator's own progress does (:mod:`llmsim.metrics.progress`)::

    llmsim-capacity: searching a100x4 / round_robin, 9/21 simulations done, 14 s
"""

from __future__ import annotations

import os
import sys
import time
from typing import IO, Any

from tqdm import tqdm


def is_terminal(stream: IO[str]) -> bool:
    """A terminal a bar can be drawn on (a TTY that reports a width; some CI pseudo-terminals report 0 columns)."""
    try:
        return stream.isatty() and os.get_terminal_size(stream.fileno()).columns > 0
    except (AttributeError, ValueError, OSError):  # closed, not a real file, or no size
        return False


class SearchProgress:
    """Progress of one search on ``stream`` (stderr): its phase, simulations queued and done, and a detail line.

    ``enabled=False`` makes every call a no-op (``quiet`` runs and the tests' in-process searches).
    """

    def __init__(self, prog: str, enabled: bool = True, stream: IO[str] | None = None, tty: bool | None = None,
                 line_every_s: float = 5.0) -> None:
        self.prog = prog
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.tty = is_terminal(self.stream) if tty is None else tty
        self.line_every_s = line_every_s
        self.queued = 0
        self.done = 0
        self.phase_text = ""
        self.detail = ""
        self.lines = 0
        self._bar: Any = None
        self._t0 = time.perf_counter()
        self._last_line = -float("inf")

    def phase(self, text: str) -> None:
        """A new phase ("checking the config", "searching 3 rates of 2 clusters", ...): shown at once."""
        if not self.enabled:
            return
        self.phase_text = text
        self.detail = ""
        if self.tty:
            self._draw()
        else:
            self._line(force=True)

    def note(self, detail: str) -> None:
        """What the current round is doing (the rates and brackets), shown with the next update."""
        if self.enabled:
            self.detail = detail
            self._refresh()

    def queue(self, n: int) -> None:
        """``n`` more simulations were submitted."""
        if self.enabled and n:
            self.queued += n
            self._refresh()

    def advance(self, n: int = 1) -> None:
        """``n`` simulations finished."""
        if self.enabled and n:
            self.done += n
            self._refresh()

    def close(self) -> None:
        """Remove the bar (the results table follows)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> SearchProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ output
    def text(self) -> str:
        """The one-line report (no control characters)."""
        parts = [self.phase_text] if self.phase_text else []
        if self.queued:
            parts.append(f"{self.done:,}/{self.queued:,} simulations done")
        if self.detail:
            parts.append(self.detail)
        parts.append(f"{time.perf_counter() - self._t0:,.0f} s")
        return f"{self.prog}: " + ", ".join(parts)

    def _refresh(self) -> None:
        if self.tty:
            self._draw()
        else:
            self._line(force=False)

    def _line(self, force: bool) -> None:
        now = time.perf_counter()
        if force or now - self._last_line >= self.line_every_s:
            self._last_line = now
            self.stream.write(self.text() + "\n")
            self.stream.flush()
            self.lines += 1

    def _draw(self) -> None:
        if self._bar is None:
            self._bar = tqdm(total=0, unit="sim", desc=self.prog, file=self.stream, leave=False, dynamic_ncols=True,
                             bar_format="{desc}: {n_fmt}/{total_fmt} simulations done [{elapsed}] {postfix}")
        bar = self._bar
        bar.total = self.queued
        bar.set_postfix_str(", ".join(p for p in (self.phase_text, self.detail) if p), refresh=False)
        bar.update(self.done - bar.n)
        bar.refresh()
