"""Running the router in-process (tests, notebooks): ``with start_router(cfg) as r: httpx.get(r.url + ...)``."""

from __future__ import annotations

from typing import Any

from llmsim.emulator.server_thread import ServerThread
from llmsim.serving.app import create_app
from llmsim.serving.config import RouterConfig, parse_config
from llmsim.serving.gateway import Gateway
from llmsim.serving.policy import Decider


class RouterHandle(ServerThread):
    """A router serving on a loopback port in a daemon thread; ``gateway`` is its live state (for tests)."""

    def __init__(self, cfg: RouterConfig, decider: Decider | None = None) -> None:
        app = create_app(cfg, decider)
        super().__init__(app, cfg.host, cfg.port, name="llmsim-router")
        self.gateway: Gateway = app.state.gateway


def start_router(cfg: RouterConfig | dict[str, Any], decider: Decider | None = None) -> RouterHandle:
    """Start a router (``port: 0`` picks a free port) and return once it accepts connections; ``decider``
    replaces the config's policy (tests)."""
    if not isinstance(cfg, RouterConfig):
        cfg = parse_config(cfg)
    return RouterHandle(cfg, decider).start()
