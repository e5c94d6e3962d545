"""Keeping every backend known while the router runs: discovery (``/v1/models``: model and context window), health
checks (``/health``: eject after ``eject_after`` failures, readmit after ``readmit_after`` successes) and scrapes
(``/metrics``, parsed by serving/scrape.py) every ``scrape_interval_s``, each backend in its own background tasks.

Whatever moves a backend's state (a scrape lands, a backend goes up or down) calls ``notify``, so that requests a
policy holds (WAIT) are decided again at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import httpx

from llmsim.serving.config import RouterConfig
from llmsim.serving.metrics import RouterMetrics
from llmsim.serving.scrape import parse_metrics, parse_models
from llmsim.serving.tracker import Backend


class BackendMonitor:
    """The backends' health and last scrapes; ``now`` is the router's clock, ``notify`` wakes held requests."""

    def __init__(self, cfg: RouterConfig, metrics: RouterMetrics, now: Callable[[], float],
                 notify: Callable[[], None]) -> None:
        self.cfg, self.metrics, self.now, self.notify = cfg, metrics, now, notify
        self.backends = [Backend(i, b) for i, b in enumerate(cfg.backends)]
        self.client: httpx.AsyncClient | None = None
        self.tasks: list[asyncio.Task] = []

    async def discover_all(self, client: httpx.AsyncClient) -> None:
        """Ask every backend for its model once (over ``client``, which the monitor uses from then on)."""
        self.client = client
        await asyncio.gather(*(self.discover(b) for b in self.backends))

    def watch(self) -> None:
        """Start each backend's scrape and health-check loops."""
        for b in self.backends:
            self.tasks.append(asyncio.create_task(self.scrape_loop(b)))
            self.tasks.append(asyncio.create_task(self.health_loop(b)))

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.tasks.clear()

    async def discover(self, b: Backend) -> None:
        """The backend's model and context window from /v1/models, then a first scrape; up if it answered."""
        try:
            r = await self.client.get(f"{b.cfg.url}/v1/models", headers=b.headers(),
                                      timeout=self.cfg.timeouts.scrape_s)
            r.raise_for_status()
            model, mml = parse_models(r.json())
        except (httpx.HTTPError, ValueError):
            self.set_up(b, False)
            return
        b.model = b.cfg.model or model or ""
        if mml:
            b.max_model_len = mml
        self.set_up(b, True)
        await self.scrape(b)

    def set_up(self, b: Backend, up: bool) -> None:
        """Admit (``up``) or eject the backend; an ejection is counted."""
        if b.up and not up:
            self.metrics.ejections.labels(b.name).inc()
        b.up = up
        b.fails = b.oks = 0
        self.metrics.up.labels(b.name).set(1 if up else 0)
        self.notify()

    async def scrape(self, b: Backend) -> None:
        try:
            r = await self.client.get(f"{b.cfg.url}/metrics", headers=b.headers(),
                                      timeout=self.cfg.timeouts.scrape_s)
            r.raise_for_status()
            m = parse_metrics(r.text)
        except (httpx.HTTPError, ValueError):
            self.metrics.scrape_failures.labels(b.name).inc()
            return
        b.record_scrape(m, self.now())
        self.notify()

    async def scrape_loop(self, b: Backend) -> None:
        while True:
            await asyncio.sleep(self.cfg.scrape_interval_s)
            if b.up:
                await self.scrape(b)

    async def health_loop(self, b: Backend) -> None:
        h = self.cfg.health
        while True:
            await asyncio.sleep(h.interval_s)
            try:
                r = await self.client.get(f"{b.cfg.url}/health", headers=b.headers(),
                                          timeout=self.cfg.timeouts.scrape_s)
                ok = r.status_code == 200
            except httpx.HTTPError:
                ok = False
            if ok:
                b.fails = 0
                if not b.up:
                    b.oks += 1
                    if b.oks >= h.readmit_after:
                        await self.discover(b)  # readmitted: its model and context window may have changed
            else:
                b.oks = 0
                b.fails += 1
                if b.up and b.fails >= h.eject_after:
                    self.set_up(b, False)
