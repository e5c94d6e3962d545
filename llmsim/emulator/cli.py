"""``llmsim-emulate``: serve one emulated vLLM engine (a model on a GPU, timed by llmsim) over HTTP.

Bad input prints one line naming the option and what was expected, and exits with status 2 (no traceback). This
module loads without the serve extra (fastapi, uvicorn), so that ``--help`` works and a missing extra is named.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from typing import NoReturn

from llmsim.emulator import SERVE_EXTRA
from llmsim.emulator.engine import EmulatorOptions, log, read_key
from llmsim.engine.config import EngineConfig
from llmsim.errors import LLMSimError

PROG = "llmsim-emulate"
# what the shutdown's line about cut connections adds: their requests were ended already
CUT_NOTE = "requests in the engine were ended when the shutdown began, counted as finished_reason=\"abort\""


class _Parser(argparse.ArgumentParser):
    """argparse, with its usage dump replaced by one line (the project's rule for bad input)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: error: {message} (see {PROG} --help)\n")


def _positive_float(flag: str, what: str):  # noqa: ANN202 - an argparse type
    def parse(s: str) -> float:
        try:
            v = float(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number > 0 ({what}), got {s!r}") from None
        if not math.isfinite(v) or v <= 0:
            raise argparse.ArgumentTypeError(f"expected a number > 0 ({what}), got {s!r}")
        return v

    parse.__name__ = flag
    return parse


def _int(lo: int, hi: int | None = None):  # noqa: ANN202 - an argparse type
    want = f"an integer >= {lo}" if hi is None else f"an integer {lo}-{hi}"

    def parse(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {want}, got {s!r}") from None
        if v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"expected {want}, got {s!r}")
        return v

    return parse


def _host(s: str) -> str:
    """``--host``: an address to listen on (a name or IP, no spaces or control characters)."""
    if not s or any(c.isspace() or not c.isprintable() for c in s):
        raise argparse.ArgumentTypeError(f"expected an address to listen on, such as 127.0.0.1 or 0.0.0.0, got {s!r}")
    return s


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, epilog=f"Needs the serve extra ({SERVE_EXTRA}).", description="An OpenAI-compatible "
                "server that behaves like one vLLM engine: llmsim's engine for a (model, GPU) profile, run against "
                "the wall clock (docs/emulator.md).")
    p.add_argument("--model", required=True, help="a registered name (llama-3.1-8b), a Hugging Face id whose "
                   "config.json is in the local hub cache (Qwen/Qwen3-32B), or a config.json path")
    p.add_argument("--gpu", required=True, help="llmsim GPU name, e.g. a100-80gb")
    p.add_argument("--port", type=_int(0, 65535), default=8000, help="TCP port (default 8000; 0 = any free port)")
    p.add_argument("--host", type=_host, default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--speedup", type=_positive_float("speedup", "times faster than real time"), default=1.0,
                   help="run K times faster than real time (default 1)")
    p.add_argument("--tp", type=_int(1), default=1, help="tensor-parallel degree (default 1)")
    p.add_argument("--enable-expert-parallel", action="store_true",
                   help="spread a mixture-of-experts model's experts over the --tp GPUs (vLLM's flag)")
    p.add_argument("--max-num-seqs", type=_int(1), default=None,
                   help="max requests in a batch (default as vLLM's: 1024 with --engine chunked on a GPU of >= 70 GiB "
                   "other than an A100, else 256)")
    p.add_argument("--max-model-len", type=_int(2), default=None, help="context length (default: the model's)")
    p.add_argument("--num-gpu-blocks", type=_int(1), default=None,
                   help="KV-cache blocks, overriding what the profile's memory model gives")
    p.add_argument("--gpu-memory-utilization", type=_positive_float("gpu_memory_utilization", "a fraction <= 1"),
                   default=None, help=f"share of each GPU's memory the engine may use, weights and KV cache (default "
                   f"{EngineConfig().gpu_memory_utilization})")
    p.add_argument("--engine", default=None,
                   help=f"llmsim batch policy (default {EngineConfig().policy}; see llmsim.engine.scheduling)")
    p.add_argument("--served-model-name", default=None, help="model id clients send (default: --model)")
    p.add_argument("--output-len", choices=["max_tokens", "sampled"], default="max_tokens",
                   help="output length: exactly max_tokens, or min(max_tokens, a seeded EOS-like draw)")
    p.add_argument("--seed", type=_int(0), default=0, help="seed of the synthetic text and sampled lengths")
    p.add_argument("--chars-per-token", type=_positive_float("chars_per_token", "characters per token"),
                   default=4.0, help="text prompts count ceil(characters / this) tokens (default 4.0)")
    p.add_argument("--api-key", default=None, help="require `Authorization: Bearer <key>` on every route but "
                   "/health; env:NAME reads the key from the environment variable NAME (kept out of the process list)")
    p.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn log level (default warning)")
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        api_key = read_key(args.api_key, "--api-key")
    except LLMSimError as e:
        _fail(str(e))
    opts = EmulatorOptions(model=args.model, gpu=args.gpu, tp=args.tp, speedup=args.speedup,
                           expert_parallel=args.enable_expert_parallel,
                           max_num_seqs=args.max_num_seqs, engine=args.engine, max_model_len=args.max_model_len,
                           num_gpu_blocks=args.num_gpu_blocks, gpu_memory_utilization=args.gpu_memory_utilization,
                           served_model_name=args.served_model_name,
                           output_len=args.output_len, seed=args.seed, chars_per_token=args.chars_per_token,
                           api_key=api_key)
    try:
        from llmsim.emulator.app import create_app  # optional: the serve extra (fastapi, prometheus-client)
        from llmsim.http_server import DrainingServer, listen_socket, server_config  # optional: the serve extra
    except ImportError as e:
        _fail(f"{e.name} is missing; install the serve extra: {SERVE_EXTRA}")
    try:
        app = create_app(opts)
    except LLMSimError as e:
        _fail(_flagged(str(e)))
    try:  # bound here, so a taken port is one line and status 2, not uvicorn's log and status 1
        sock = listen_socket(args.host, args.port)
    except OSError as e:
        _fail(f"--host/--port: cannot listen on {args.host}:{args.port}: {e}")
    port = sock.getsockname()[1]
    eng = app.state.engine
    print(f"{PROG}: {opts.name} ({eng.inst.profile.name}, {eng.inst.kv_total} KV blocks of "
          f"{eng.inst.block_size} tokens, max_model_len {eng.max_model_len}) at {args.speedup:g}x real time on "
          f"http://{args.host}:{port}", file=sys.stderr, flush=True)
    config = server_config(app, log_level=args.log_level, timeout_graceful_shutdown=2)  # the read deadlines too
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: uvicorn re-raises it once shut down (quiet, as uvicorn.run)
        DrainingServer(config, on_shutdown=eng.stop, cut_note=CUT_NOTE, logger=log).run(sockets=[sock])


def _fail(message: str) -> NoReturn:
    """One line on stderr and exit status 2 (the project's rule for bad input)."""
    sys.stderr.write(f"{PROG}: error: {message}\n")
    raise SystemExit(2)


def _flagged(msg: str) -> str:
    """llmsim's messages name config keys (engine.max_num_seqs); say which CLI option that is."""
    one = " ".join(msg.split())
    if "HF config " in one:  # the model's config.json: its message names the file and the key at fault
        return "--model: " + one.replace("cannot load a profile: ", "")
    if " does not fit on " in one:  # the weights and the memory share: the model, GPU, tp and utilisation flags
        return "--model/--gpu/--tp: " + one.replace("gpu_memory_utilization=", "--gpu-memory-utilization ")
    if "expert parallelism" in one:
        return "--enable-expert-parallel: " + one.replace("cannot load a profile: ", "")
    for key, flag in (("engine.policy", "--engine"), ("engine.max_num_seqs", "--max-num-seqs"),
                      ("engine.max_model_len", "--max-model-len"), ("engine.num_gpu_blocks", "--num-gpu-blocks"),
                      ("engine.gpu_memory_utilization", "--gpu-memory-utilization"),
                      ("unknown model ", "--model: unknown model "), ("unknown GPU", "--gpu: unknown GPU")):
        if key in one:
            return one.replace(key, flag, 1) if key.startswith("engine.") else one.replace(
                "cannot load a profile: ", "").replace(key, flag, 1)
    return one


if __name__ == "__main__":
    main()
