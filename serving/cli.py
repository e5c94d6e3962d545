"""``llmsim-router --config router.yaml [--port 8000]``: the live router (docs/serving.md).

Before serving, the config is validated, the policy loaded and every backend asked for its model (an exported
policy checks they are the ones it was trained for). Bad input (an option, the config file, a key in it) is one
line on stderr naming the option, file or key and what was expected, and exit code 2. This module loads without
the ``serve`` extra, so that ``--help`` works and a missing extra is named.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from llmsim.errors import LLMSimError
from llmsim.serving.config import load_config

PROG = "llmsim-router"
SERVE_EXTRA = "pip install 'llmsim[serve]'"
ROUTER_CONFIG = "router config"  # what parse_config calls a config without a file


class OneLineParser(argparse.ArgumentParser):
    """argparse, with its usage dump replaced by one line (the project's rule for bad input)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: error: {message} (see {PROG} --help)\n")


def port_number(s: str) -> int:
    """``--port``: a TCP port, 0-65535 (0: any free one)."""
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a TCP port 0-65535 (0: any free one), got {s!r}") from None
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port 0-65535 (0: any free one), got {s!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    ap = OneLineParser(prog=PROG, epilog=f"Needs the serve extra ({SERVE_EXTRA}).", description=(
        "The live router: an OpenAI-compatible gateway in front of vLLM (or llmsim-emulate) backends that routes "
        "each request with an llmsim heuristic or an exported policy (docs/serving.md)."))
    ap.add_argument("--config", required=True, help="router YAML: backends, policy, limits (docs/serving.md)")
    ap.add_argument("--port", type=port_number, default=None, help="override the config's port (0: any free one)")
    ap.add_argument("--host", default=None, help="override the config's host")
    ap.add_argument("--log-level", default="warning", help="uvicorn's log level (default warning)",
                    choices=["critical", "error", "warning", "info", "debug", "trace"])
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cfg = load_config(args.config, args.port, args.host)
    except LLMSimError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    try:
        from llmsim.serving.runner import serve  # optional: the serve extra (fastapi, uvicorn, httpx, ...)

        serve(cfg, args.log_level)
    except LLMSimError as e:  # the policy, the backends or the address: named by the file's key
        where = str(e).removeprefix(f"{ROUTER_CONFIG}: ")
        print(f"{PROG}: {args.config}: {where}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"{PROG}: {e.name} is missing; install the serving extra: {SERVE_EXTRA}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
