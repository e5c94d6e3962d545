"""Keeping every backend known while the router runs: discovery (``/v1/models``: model and context window), health
checks (``/health``: eject after ``eject_after`` failures, readmit after ``readmit_after`` successes) and scrapes
(``/metrics``, parsed by serving/scrape.py) every ``scrape_interval_s``, each backend in its own background tasks.

Whatever moves a backend's state (a scrape lands, a backend goes up or down) calls ``notify``, so that requests a
policy holds (WAIT) are decided again at once.

A backend that answers 401 or 403 refuses the router's credentials: it is misconfigured, not down. It is ejected
like a down one, but said so: one log line naming it (by its redacted URL) and the status, ``/health``'s detail
(``misconfigured: 401 from backend b0``), the ``llmsim_router_backend_misconfigured`` metric, and clients' 503s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import httpx

from llmsim.serving.config import RouterConfig, redact
from llmsim.serving.metrics import RouterMetrics
from llmsim.serving.scrape import parse_metrics, parse_models
from llmsim.serving.tracker import Backend

log = logging.getLogger(__name__)
AUTH_REFUSED = (401, 403)  # what a server answers to wrong or missing credentials


class BackendMonitor:
    """The backends' health and last scrapes; ``now`` is the router's clock, ``notify`` wakes held requests."""

    def __init__(self, cfg: RouterConfig, metrics: RouterMetrics, now: Callable[[], float],
                 notify: Callable[[], None], quiet: bool = False) -> None:
        self.cfg, self.metrics, self.now, self.notify = cfg, metrics, now, notify
        self.quiet = quiet  # a preflight's monitor: the serving one says what it finds
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
            if r.status_code in AUTH_REFUSED:
                self.refused(b, r.status_code, "/v1/models")
                return
            r.raise_for_status()
            model, mml = parse_models(r.json())
        except (httpx.HTTPError, ValueError):
            self.set_up(b, False)
            return
        self.accepted(b)
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

    def refused(self, b: Backend, status: int, path: str) -> None:
        """The backend answered ``status`` (401 / 403) to the router's credentials: ejected as misconfigured, said
        once in the log (its URL redacted) and kept in /health until it accepts them."""
        if b.refused_status != status and not self.quiet:
            log.warning("backend %s (%s) answered %d to %s: misconfigured (check its api_key or the URL's "
                        "credentials); ejected until it accepts them", b.name, redact(b.cfg.url, [b.cfg.api_key or ""]),
                        status, path)
        b.refused_status = status
        self.metrics.misconfigured.labels(b.name).set(1)
        self.set_up(b, False)

    def accepted(self, b: Backend) -> None:
        """The backend took the router's credentials: no longer misconfigured (logged if it was)."""
        if b.refused_status is not None:
            log.warning("backend %s accepts the router's credentials again", b.name)
            b.refused_status = None
            self.metrics.misconfigured.labels(b.name).set(0)

    async def scrape(self, b: Backend) -> None:
        try:
            r = await self.client.get(f"{b.cfg.url}/metrics", headers=b.headers(),
                                      timeout=self.cfg.timeouts.scrape_s)
            if r.status_code in AUTH_REFUSED:
                self.refused(b, r.status_code, "/metrics")
                return
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
            else:
                if r.status_code in AUTH_REFUSED:
                    self.refused(b, r.status_code, "/health")
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
