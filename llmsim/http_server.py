"""Serving an ASGI app with uvicorn as the project does, for the emulated backend (``llmsim-emulate``) and the live
router (``llmsim-router``) alike: with read deadlines for slow clients (:func:`server_config`), a shutdown that
drains, then cuts what is still open (:class:`DrainingServer`), and in a daemon thread on a loopback socket
(:class:`ServerThread`: how tests and notebooks run emulated backends and the live router in one process).
Needs the serve extra (uvicorn); nothing imports it on ``import llmsim``. ``stop()`` is abrupt (open connections
are cut, as when a server dies), so fault tests can kill a backend mid-stream.

Read deadlines (what Envoy calls ``request_headers_timeout`` and ``request_timeout``; uvicorn has neither): a
request's headers must arrive within ``header_s`` of its first byte (or of the connection's opening), and its body
within ``body_s`` of its headers; an idle keep-alive connection is closed after ``idle_s``. A client past a
deadline loses its connection, so slow or silent clients cannot hold descriptors for long. Header size is h11's
limit (``MAX_HEADER_BYTES``; larger: 400 and close).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
CUT_BACKSTOP_S = 1.0  # DrainingServer: uvicorn's own grace timeout is this much longer than the cut
MAX_HEADER_BYTES = 16 * 1024  # h11's default limit on a request's head, set explicitly

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReadLimits:
    """How long a client may take: to send a request's headers, its body, and to stay idle between requests.

    ``idle_s`` should exceed the idle expiry of the clients' connection pools (httpx and the OpenAI SDK: 5 s,
    aiohttp: 15 s): a server that closes an idle connection first races a client reusing it, and the client's
    request then meets a reset (``httpx.ReadError``) or a closed connection (docs/serving.md)."""

    header_s: float = 10.0
    body_s: float = 30.0
    idle_s: float = 75.0


class CoalescingTransport:
    """A transport whose writes within one event-loop turn go out as one ``send``: uvicorn writes a response's
    head and body separately, and on a small machine each ``send`` on loopback may hand the CPU to the reader
    (two wake-ups of the client instead of one). Everything else is the wrapped transport's."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport, self.loop = transport, loop
        self.pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self.pending:
            self.loop.call_soon(self.flush)
        self.pending.append(data)

    def flush(self) -> None:
        if self.pending:
            data = b"".join(self.pending)
            self.pending.clear()
            if not self.transport.is_closing():
                self.transport.write(data)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the read deadlines of :class:`ReadLimits` (``limits``, set by subclassing),
    writing through a :class:`CoalescingTransport`."""

    limits = ReadLimits()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.read_deadline: asyncio.TimerHandle | None = None
        self.reading = ""  # "", "headers" or "body": what the deadline is for
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]
        self.arm("headers", self.limits.header_s)  # a connection that never speaks is closed too

    def data_received(self, data: bytes) -> None:
        if self.reading == "" and self.conn.their_state is h11.IDLE:
            self.arm("headers", self.limits.header_s)  # the first bytes of a new request
        super().data_received(data)
        self.follow_request()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self.follow_request()

    def connection_lost(self, exc: Exception | None) -> None:
        self.arm("", 0.0)
        super().connection_lost(exc)

    def follow_request(self) -> None:
        """Move the deadline along with the request: from headers to body, off once it is read."""
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            if self.reading != "body":
                self.arm("body", self.limits.body_s)
        elif state is h11.IDLE:  # no request under way: a deadline only on a fresh connection or for a partial head
            if self.reading and self.cycle is not None and not self.conn.trailing_data[0]:
                self.arm("", 0.0)
        elif self.reading:  # read in full, or closing
            self.arm("", 0.0)

    def arm(self, reading: str, seconds: float) -> None:
        if self.read_deadline is not None:
            self.read_deadline.cancel()
        self.reading = reading
        self.read_deadline = self.loop.call_later(seconds, self.read_timed_out) if reading else None

    def read_timed_out(self) -> None:
        """Too slow: close the connection (an app waiting for the body sees the client disconnect)."""
        self.read_deadline = None
        if not self.transport.is_closing():
            self.transport.close()


def deadline_protocol(limits: ReadLimits) -> type[DeadlineH11Protocol]:
    """The h11 protocol class with these limits (uvicorn builds one protocol object per connection)."""
    return type("DeadlineH11Protocol", (DeadlineH11Protocol,), {"limits": limits})


def server_config(app: Any, limits: ReadLimits | None = None, log_level: str = "warning",
                  **kw: Any) -> uvicorn.Config:
    """uvicorn's config for ``app``, with the project's read deadlines and header limit."""
    limits = limits or ReadLimits()
    return uvicorn.Config(app, log_level=log_level, access_log=False, http=deadline_protocol(limits),
                          timeout_keep_alive=limits.idle_s, h11_max_incomplete_event_size=MAX_HEADER_BYTES, **kw)


class DrainingServer(uvicorn.Server):
    """uvicorn's server that, told to stop (Ctrl-C, SIGTERM), first calls ``on_shutdown`` (the emulator ends its
    open requests there: a stream gets an error event and ``[DONE]``, a waiting request a 503; the router lets its
    requests in flight run), then cuts what is still open once the grace period is over, in one log line, instead
    of uvicorn cancelling the response tasks with an error and a traceback per request.

    The grace period is the config's ``timeout_graceful_shutdown``: a connection still open when it is over (a
    client that stopped reading its answer, or one still sending its body) is cut, and one log line counts them,
    ending with ``cut_note`` (what became of their requests). uvicorn's own timeout is moved past it, as a backstop
    only."""

    def __init__(self, config: uvicorn.Config, on_shutdown: Callable[[], None] | None = None,
                 cut_note: str = "", logger: logging.Logger = log) -> None:
        super().__init__(config)
        self.on_shutdown = on_shutdown
        self.cut_note, self.log = cut_note, logger
        self.grace_s: float | None = config.timeout_graceful_shutdown
        if self.grace_s is not None:
            config.timeout_graceful_shutdown = self.grace_s + CUT_BACKSTOP_S

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.on_shutdown is not None:
            self.on_shutdown()
        cutter = None
        if self.grace_s is not None:
            cutter = asyncio.get_running_loop().call_later(self.grace_s, self.cut_open_connections)
        try:
            await super().shutdown(sockets=sockets)
        finally:
            if cutter is not None:
                cutter.cancel()

    def cut_open_connections(self) -> None:
        """The grace period is over: cut what is still open (its response ends quietly, as after a disconnect)."""
        conns = list(self.server_state.connections)
        if not conns:
            return
        for conn in conns:
            transport = getattr(conn, "transport", None)
            if transport is not None:
                transport.abort()
        n = len(conns)
        note = f"; {self.cut_note}" if self.cut_note else ""
        self.log.warning("shutdown: cut %d connection%s still open after the %g s grace (clients not reading their "
                         "answers or still sending)%s", n, "" if n == 1 else "s", self.grace_s, note)


class ServerThread:
    """``app`` on ``host:port`` (0: a free port) once :meth:`start` returns; a context manager."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, name: str = "server",
                 limits: ReadLimits | None = None) -> None:
        self.app = app
        self._sock = listen_socket(host, port)
        self.host = host
        self.port: int = self._sock.getsockname()[1]
        config = server_config(app, limits, lifespan="on", timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"{name}:{self.port}", daemon=True)

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:40123``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def thread_alive(self) -> bool:
        """The server's thread has not ended (False once :meth:`stop` has returned, unless the server hangs)."""
        return self._thread.is_alive()

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and self._server.started and not self._server.should_exit

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._server.serve(sockets=[self._sock]))
        except BaseException as e:  # reported by start(); a thread must not die silently
            self._error = e
        finally:
            with contextlib.suppress(Exception):
                _cancel_all(loop)
            loop.close()

    def start(self) -> ServerThread:
        """Start serving; returns once the server accepts connections (raises if it could not start)."""
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self._thread.name} on {self.url} did not start: {self._error!r}")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        """Stop now: refuse new connections at once, cut every open one, close the server; joins the thread."""
        loop = self._loop
        if loop is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._kill)
            self._thread.join(STOP_TIMEOUT_S)
        with contextlib.suppress(OSError):
            self._sock.close()

    def freeze(self, seconds: float) -> None:
        """Block the server's event loop for ``seconds``, as SIGSTOP stops a server process: connections stay open
        and nothing answers (tests of stalled and frozen backends). Returns once the loop is blocked."""
        loop = self._loop
        if loop is None:
            return
        frozen = threading.Event()

        def block() -> None:
            frozen.set()
            time.sleep(seconds)

        loop.call_soon_threadsafe(block)
        frozen.wait(STOP_TIMEOUT_S)

    def on_kill(self) -> None:
        """Called on the server's loop just before connections are cut (subclasses stop their engines)."""

    def _kill(self) -> None:
        server = self._server
        server.should_exit = True  # not force_exit: uvicorn still runs the app's lifespan shutdown (no orphan tasks)
        # Stop accepting now: uvicorn notices should_exit only at its next tick (0.1 s, longer on a loaded
        # machine), and a health check let in meanwhile was answered by the dying server and readmitted it.
        for listener in getattr(server, "servers", ()):  # (uvicorn sets it at startup: none if that failed)
            listener.close()
        self.on_kill()
        for conn in list(server.server_state.connections):
            transport = getattr(conn, "transport", None)
            if transport is not None:
                transport.abort()

    def __enter__(self) -> ServerThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket for uvicorn (connections made before uvicorn starts wait in the backlog).

    Made with proto=IPPROTO_TCP and TCP_NODELAY: asyncio sets TCP_NODELAY on accepted connections only when the
    listener says IPPROTO_TCP, and without it Nagle's algorithm holds each small SSE chunk until the client's
    delayed ACK (~40 ms): token times would be late by that much."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(fam, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks left on a stopped loop (response tasks of cut connections) and let them unwind."""
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in tasks:
        t.cancel()
    if tasks:
        loop.run_until_complete(asyncio.wait(tasks, timeout=STOP_TIMEOUT_S))
