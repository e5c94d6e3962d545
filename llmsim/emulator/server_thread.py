"""An ASGI app served by uvicorn on a loopback socket in a daemon thread: how tests and notebooks run emulated
backends and the live router in one process. ``stop()`` is abrupt (open connections are cut, as when a server
dies), so fault tests can kill a backend mid-stream."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from typing import Any

import uvicorn

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0


class ServerThread:
    """``app`` on ``host:port`` (0: a free port) once :meth:`start` returns; a context manager."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, name: str = "server") -> None:
        self.app = app
        self._sock = listen_socket(host, port)
        self.host = host
        self.port: int = self._sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                timeout_graceful_shutdown=1)
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
