"""``llmsim-router --config router.yaml [--port 8000]``: the live router (docs/serving.md).

Before serving, the config is validated, the policy loaded and every backend asked for its model (an exported
policy checks they are the ones it was trained for). Bad input is one line on stderr and exit code 2. This
module loads without the ``serve`` extra, so that ``--help`` works and a missing extra is named.
"""

from __future__ import annotations

import argparse
import sys

from llmsim.errors import LLMSimError
from llmsim.serving.config import load_config

PROG = "llmsim-router"
SERVE_EXTRA = "pip install 'llmsim[serve]'"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, epilog=f"Needs the serve extra ({SERVE_EXTRA}).", description=(
        "The live router: an OpenAI-compatible gateway in front of vLLM (or llmsim-emulate) backends that routes "
        "each request with an llmsim heuristic or an exported policy (docs/serving.md)."))
    ap.add_argument("--config", required=True, help="router YAML: backends, policy, limits (docs/serving.md)")
    ap.add_argument("--port", type=int, default=None, help="override the config's port")
    ap.add_argument("--host", default=None, help="override the config's host")
    ap.add_argument("--log-level", default="warning", help="uvicorn's log level (default warning)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cfg = load_config(args.config, args.port)
        if args.host is not None:
            cfg = cfg.model_copy(update={"host": args.host})
        from llmsim.serving.runner import serve  # optional: the serve extra (fastapi, uvicorn, httpx, ...)

        serve(cfg, args.log_level)
    except LLMSimError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"{PROG}: {e.name} is missing; install the serving extra: {SERVE_EXTRA}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
