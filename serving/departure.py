"""Knowing when a client leaves before its answer, so that its upstream request is cancelled at once (and the
backend frees its KV cache) instead of generating to the end for nobody.

A streamed answer notices on its own (Starlette's StreamingResponse listens for ``http.disconnect`` while it
relays). Before that, the gateway is awaiting a backend: :class:`DepartureWatch` (ASGI middleware around the
router's app) hands each request's ``receive`` channel to the gateway through a context variable, and
:func:`departed` returns when that channel says ``http.disconnect``. uvicorn delivers it as soon as the
connection drops, so a departure is noticed within one event-loop turn, whatever the answer kind.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

CLIENT_RECEIVE: ContextVar[Receive | None] = ContextVar("llmsim_router_client_receive", default=None)


class DepartureWatch:
    """ASGI middleware: every HTTP request's ``receive`` is made available to :func:`departed`. ``state`` is the
    wrapped app's (``app.state.gateway`` stays reachable)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.state: Any = getattr(app, "state", None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = CLIENT_RECEIVE.set(receive)
        try:
            await self.app(scope, receive, send)
        finally:
            CLIENT_RECEIVE.reset(token)


async def departed() -> None:
    """Return when the current request's client has gone; never outside a watched request. Call it only once the
    request body has been read (it consumes the channel)."""
    receive = CLIENT_RECEIVE.get()
    if receive is None:
        await asyncio.get_running_loop().create_future()  # nobody to watch: wait for ever (until cancelled)
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
