"""``llmsim-router --config router.yaml [--port 8000]``: the live router (docs/serving.md).

Before serving, the config is validated, the policy loaded and every backend asked for its model (an exported
policy checks they are the ones it was trained for). Bad input is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from llmsim.errors import LLMSimError


async def preflight(cfg) -> list[str]:  # noqa: ANN001 (RouterConfig: imported lazily with the serving extra)
    """Load the policy and discover the backends once; the names of the backends that did not answer."""
    from llmsim.serving.gateway import Gateway

    gw = Gateway(cfg)
    try:
        await gw.start()
        return [b.name for b in gw.backends if not b.up]
    finally:
        await gw.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="llmsim-router", description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="router YAML: backends, policy, limits (docs/serving.md)")
    ap.add_argument("--port", type=int, default=None, help="override the config's port")
    ap.add_argument("--host", default=None, help="override the config's host")
    ap.add_argument("--log-level", default="warning")
    args = ap.parse_args(argv)
    try:
        import uvicorn

        from llmsim.emulator.server_thread import listen_socket
        from llmsim.serving.app import create_app
        from llmsim.serving.config import load_config

        cfg = load_config(args.config, args.port)
        if args.host is not None:
            cfg = cfg.model_copy(update={"host": args.host})
        down = asyncio.run(preflight(cfg))
        try:
            sock = listen_socket(cfg.host, cfg.port)
        except OSError as e:
            raise LLMSimError(f"port: cannot listen on {cfg.host}:{cfg.port}: {e}") from None
        port = sock.getsockname()[1]
        note = f"; not answering yet (ejected until healthy): {down}" if down else ""
        print(f"llmsim-router: {len(cfg.backends)} backends, policy {cfg.policy.heuristic or cfg.policy.onnx}, on "
              f"http://{cfg.host}:{port}{note}", file=sys.stderr, flush=True)
        config = uvicorn.Config(create_app(cfg), log_level=args.log_level, access_log=False,
                                timeout_graceful_shutdown=2)
        uvicorn.Server(config).run(sockets=[sock])
    except LLMSimError as e:
        print(f"llmsim-router: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"llmsim-router: {e.name} is missing; install the serving extra: pip install 'llmsim[serve]'",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
