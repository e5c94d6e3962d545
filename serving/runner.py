"""Running the router: in the foreground on a port (:func:`serve`, what ``llmsim-router`` does) or in a background
thread of this process (:func:`start_router`, for tests and notebooks:
``with start_router(cfg) as r: httpx.get(r.url + "/health")``). Either way the app is wrapped in
:class:`~llmsim.serving.departure.DepartureWatch` (a client that leaves cancels its upstream request) and served
with the config's read deadlines for clients (``limits.header_read_s``, ``body_read_s``, ``idle_s``)."""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from typing import Any

from llmsim.errors import LLMSimError
from llmsim.http_server import DrainingServer, ReadLimits, ServerThread, listen_socket, server_config
from llmsim.serving.app import create_app
from llmsim.serving.config import RouterConfig, parse_config
from llmsim.serving.decider import Decider
from llmsim.serving.departure import DepartureWatch
from llmsim.serving.gateway import Gateway

GRACE_S = 2.0  # on Ctrl-C / SIGTERM: how long requests in flight may take to end before their connections are cut
# what the shutdown's line about cut connections adds: what became of their requests
CUT_NOTE = "their upstream requests were cancelled, counted as llmsim_router_aborted_total{reason=\"client_gone\"}"
log = logging.getLogger(__name__)


def read_limits(cfg: RouterConfig) -> ReadLimits:
    """How long a client may take to send its request and may keep an idle connection (the config's limits)."""
    lim = cfg.limits
    return ReadLimits(header_s=lim.header_read_s, body_s=lim.body_read_s, idle_s=lim.idle_s)


class RouterHandle(ServerThread):
    """A router serving on a loopback port in a daemon thread; ``gateway`` is its live state (for tests)."""

    def __init__(self, cfg: RouterConfig, decider: Decider | None = None) -> None:
        app = create_app(cfg, decider)
        super().__init__(DepartureWatch(app), cfg.host, cfg.port, name="llmsim-router", limits=read_limits(cfg))
        self.gateway: Gateway = app.state.gateway


def start_router(cfg: RouterConfig | dict[str, Any], decider: Decider | None = None) -> RouterHandle:
    """Start a router (``port: 0`` picks a free port) and return once it accepts connections; ``decider``
    replaces the config's policy (tests). A policy that refuses the backends raises its ConfigError."""
    if not isinstance(cfg, RouterConfig):
        cfg = parse_config(cfg)
    handle = RouterHandle(cfg, decider)
    try:
        return handle.start()
    except RuntimeError:
        if handle.gateway.start_error is not None:  # the reason, not uvicorn's "startup failed"
            raise handle.gateway.start_error from None
        raise


async def preflight(cfg: RouterConfig) -> list[str]:
    """Load the policy and discover the backends once; the names of the backends that did not answer."""
    gw = Gateway(cfg, quiet=True)
    try:
        await gw.start()
        return [b.name for b in gw.backends if not b.up]
    finally:
        await gw.stop()


def serve(cfg: RouterConfig, log_level: str = "warning") -> None:
    """Check the policy fits the backends (ConfigError), bind the port (LLMSimError naming it), announce the
    router on stderr in one line, then serve until interrupted."""
    down = asyncio.run(preflight(cfg))
    server, sock = router_server(cfg, log_level)
    port = sock.getsockname()[1]
    note = f"; not answering yet (ejected until healthy): {down}" if down else ""
    print(f"llmsim-router: {len(cfg.backends)} backends, policy {cfg.policy.heuristic or cfg.policy.onnx}, on "
          f"http://{cfg.host}:{port}{note}", file=sys.stderr, flush=True)
    server.run(sockets=[sock])


def router_server(cfg: RouterConfig, log_level: str = "warning",
                  grace_s: float = GRACE_S) -> tuple[DrainingServer, socket.socket]:
    """The router's server and its bound socket (LLMSimError naming the address if it cannot listen), not yet
    running: ``server.run(sockets=[sock])`` serves until Ctrl-C or SIGTERM (``server.should_exit``). Told to stop,
    it takes no new connection, lets requests in flight end for ``grace_s``, then cuts what is still open (a
    client not reading its answer) in one log line."""
    try:
        sock = listen_socket(cfg.host, cfg.port)
    except OSError as e:
        raise LLMSimError(f"host, port: cannot listen on {cfg.host}:{cfg.port}: {e}") from None
    config = server_config(DepartureWatch(create_app(cfg)), read_limits(cfg), log_level,
                           timeout_graceful_shutdown=grace_s)
    return DrainingServer(config, cut_note=CUT_NOTE, logger=log), sock
