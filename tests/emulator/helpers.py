"""What the emulator's tests share: HTTP helpers, the /metrics parser, and a virtual clock for the driver."""

from __future__ import annotations

import heapq
import itertools
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

if TYPE_CHECKING:
    from llmsim.emulator import EmulatorHandle

MODEL = "llama-3.1-8b"


def post(h: EmulatorHandle, path: str, body: Any, **kw: Any) -> httpx.Response:
    content = body if isinstance(body, bytes | str) else json.dumps(body)
    return httpx.post(h.url + path, content=content, headers={"content-type": "application/json", **kw}, timeout=30)


def sse(lines: list[str]) -> list[Any]:
    """The data payloads of an SSE body ('[DONE]' kept as a string)."""
    out = []
    for line in lines:
        if line.startswith("data: "):
            d = line[6:]
            out.append(d if d == "[DONE]" else json.loads(d))
    return out


def metrics(h: EmulatorHandle) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics, parsed by prometheus_client's parser."""
    return scrape(h.url)


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``url``'s /metrics (an emulator in this process or another)."""
    text = httpx.get(url + "/metrics", timeout=10).text
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def sample(m: dict, name: str, **labels: str) -> float:
    key = (name, tuple(sorted({"model_name": MODEL, **labels}.items())))
    return m[key]


class VirtualTimer:
    """What ``loop.call_at`` returns: a callback at ``when`` that can be cancelled."""

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class VirtualLoop:
    """The two loop calls the emulator's driver makes (``time``, ``call_at``) on a clock that only moves when told:
    :meth:`run_next` jumps to the earliest timer and runs it. Token release times are then exact, whatever the
    machine's load (RealTimeEngine.start(loop) binds the driver to it)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, int, VirtualTimer]] = []
        self.order = itertools.count()

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], None]) -> VirtualTimer:
        timer = VirtualTimer(when, callback)
        heapq.heappush(self.timers, (when, next(self.order), timer))
        return timer

    def next_time(self) -> float | None:
        """When the earliest pending timer fires; None when none is pending."""
        while self.timers and self.timers[0][2].cancelled:
            heapq.heappop(self.timers)
        return self.timers[0][0] if self.timers else None

    def run_next(self) -> None:
        """Move the clock to the earliest pending timer (never backwards) and run it."""
        when = self.next_time()
        assert when is not None, "no timer pending: the driver went idle"
        _, _, timer = heapq.heappop(self.timers)
        self.now = max(self.now, when)
        timer.callback()

    def run_until(self, t: float) -> None:
        """Run every timer due by ``t``, then move the clock to ``t``."""
        while (when := self.next_time()) is not None and when <= t:
            self.run_next()
        self.now = max(self.now, t)


def wait_until_idle(h: EmulatorHandle) -> dict:
    """Poll /metrics until the engine runs and queues nothing and no request is open (an aborted one has left);
    returns the last scrape. A hang is bounded by the test's pytest-timeout, not by a wall-clock assertion."""
    while True:
        m = metrics(h)
        idle = sample(m, "vllm:num_requests_running") == 0 and sample(m, "vllm:num_requests_waiting") == 0
        if idle and not h.engine.tickets:
            return m
        time.sleep(0.02)
