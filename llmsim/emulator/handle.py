"""An emulator running in a background thread of this process: how tests, notebooks and docs examples start
emulated backends (several can run in one process). Needs the serve extra (fastapi, uvicorn)."""

from __future__ import annotations

from typing import Any

from llmsim.emulator.app import create_app
from llmsim.emulator.engine import EmulatorOptions, RealTimeEngine
from llmsim.http_server import ServerThread


class EmulatorHandle(ServerThread):
    """A running emulator (uvicorn on a loopback port, in a daemon thread). A context manager; ``stop()`` is
    abrupt: the engine's streams end and open connections are cut (clients see the connection drop), as when
    a backend dies."""

    def __init__(self, opts: EmulatorOptions, host: str, port: int) -> None:
        self.opts = opts
        app = create_app(opts)
        self.engine: RealTimeEngine = app.state.engine
        super().__init__(app, host, port, name="llmsim-emulator")

    def on_kill(self) -> None:
        self.engine.stop()

    def start(self) -> EmulatorHandle:
        super().start()
        return self


def start_emulator(model: str = "llama-3.1-8b", gpu: str = "a100-80gb", speedup: float = 20.0, port: int = 0,
                   host: str = "127.0.0.1", **opts: Any) -> EmulatorHandle:
    """Start an emulator in a background thread on ``host:port`` (0 = a free port) and return its handle.

    ``opts`` are :class:`EmulatorOptions` fields (``max_num_seqs``, ``tp``, ``engine``, ``served_model_name``,
    ``output_len``, ``seed``, ``chars_per_token``, ``api_key``, ``max_model_len``, ``num_gpu_blocks``,
    ``gpu_memory_utilization``, ``min_tick``...). Bad options raise :class:`llmsim.errors.ConfigError` before
    anything starts.
    """
    return EmulatorHandle(EmulatorOptions(model=model, gpu=gpu, speedup=speedup, **opts), host, port).start()
