"""An emulated vLLM backend: one llmsim engine served over an OpenAI-compatible HTTP API in (scaled) real time.

* :mod:`llmsim.emulator.engine`: the engine driven against the wall clock (:class:`RealTimeEngine`) and its
  options (:class:`EmulatorOptions`); plain llmsim, no web framework;
* :mod:`llmsim.emulator.app`: the HTTP API (FastAPI), :mod:`llmsim.emulator.body`: reading and checking a
  request's body, :mod:`llmsim.emulator.metrics`: ``/metrics`` under vLLM's names;
* :mod:`llmsim.emulator.handle`: :func:`start_emulator`, an emulator in a background thread (tests, notebooks);
* :mod:`llmsim.emulator.cli`: ``llmsim-emulate``, the command.

The HTTP side needs the serve extra (``pip install 'llmsim[serve]'``: fastapi, uvicorn, prometheus-client). It is
imported when first used (``from llmsim.emulator import start_emulator``), so ``llmsim-emulate --help`` runs
without the extra and a missing extra is named; ``import llmsim`` does not import this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmsim.emulator.engine import EmulatorOptions, RealTimeEngine

if TYPE_CHECKING:
    from llmsim.emulator.app import create_app
    from llmsim.emulator.handle import EmulatorHandle, start_emulator
    from llmsim.http_server import ServerThread, listen_socket

SERVE_EXTRA = "pip install 'llmsim[serve]'"
_HTTP_SIDE = {"EmulatorHandle": "handle", "start_emulator": "handle", "create_app": "app",
              "ServerThread": "http_server", "listen_socket": "http_server"}

__all__ = ["SERVE_EXTRA", "EmulatorHandle", "EmulatorOptions", "RealTimeEngine", "ServerThread", "create_app",
           "listen_socket", "start_emulator"]


def __getattr__(name: str) -> Any:
    """The HTTP side's names, imported on first use (they need the serve extra)."""
    module = _HTTP_SIDE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from llmsim import http_server  # optional: the serve extra (uvicorn)
        from llmsim.emulator import app, handle  # optional: the serve extra (fastapi, uvicorn)
    except ImportError as e:
        raise ImportError(f"llmsim.emulator.{name} needs the serve extra, {e.name} is missing: {SERVE_EXTRA}",
                          name=e.name) from e
    return getattr({"app": app, "handle": handle, "http_server": http_server}[module], name)
