"""The ideal prefix hit rate: how much of a request stream an infinite prefix cache would reuse (an upper bound on
what any engine's cache reaches), and its command for a Mooncake trace::

    python -m llmsim.workload.prefix_hits ../shared/traces/mooncake/conversation_trace.jsonl   # 36.64 % of blocks

A module of its own (not imported by :mod:`llmsim.workload`), so ``python -m`` runs it exactly once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from llmsim.engine.prefix_cache import block_keys
from llmsim.errors import ConfigError, TraceError
from llmsim.request import Request
from llmsim.workload.base import check_int
from llmsim.workload.mooncake import MooncakeTrace
from llmsim.workload.transforms import Limited


def ideal_prefix_hits(requests: Iterable[Request], block_size: int | None = None) -> tuple[int, int]:
    """(hit blocks, prompt blocks) of an infinite prefix cache over ``requests`` in order: see
    :func:`ideal_prefix_hit_rate`."""
    if block_size is not None:
        block_size = check_int("block_size", block_size, ge=1)
    seen: set[int] = set()
    hits = blocks = 0
    for r in requests:
        ids = r.hash_ids
        if block_size is None:
            h = r.hash_block
            n = -(-r.prompt_tokens // h)
            keys: Any = ids[:n] if ids else ()
            every: Any = ids or ()
        else:
            n = r.prompt_tokens // block_size
            every = block_keys(r, block_size)
            keys = every[:n]
        blocks += n
        for key in keys:
            if key not in seen:
                break
            hits += 1
        seen.update(every)
    return hits, blocks


def ideal_prefix_hit_rate(requests: Iterable[Request], block_size: int | None = None) -> float:
    """Share of prompt blocks an infinite cache would hold when each request arrives (0.0 without blocks).

    A request's prompt blocks are its first ``ceil(prompt / hash_block)`` ids (``block_size=None``: the ids'
    own blocks, a partial last one included) or its full engine blocks of ``block_size`` tokens
    (:func:`llmsim.engine.prefix_cache.block_keys`, partial blocks excluded, as vLLM caches full blocks only). A block
    hits when its id was named by an earlier request, prompt or output as far as that request's ids cover
    it, and every block before it hit too (the longest cached prefix; with chained ids the same count).
    Requests without ids count their blocks as misses. Reuse within one prompt is not counted, and neither is
    the one token vLLM always recomputes. With ``block_size=None`` this reproduces the 36.6 % "blocks seen
    before" of the Mooncake conversation trace (its ids cover prompts only).
    """
    hits, blocks = ideal_prefix_hits(requests, block_size)
    return hits / blocks if blocks else 0.0


def main(argv: list[str] | None = None) -> int:
    """``python -m llmsim.workload.prefix_hits TRACE.jsonl [--block-size N]``: a Mooncake trace's ideal hit rate."""
    ap = argparse.ArgumentParser(prog="python -m llmsim.workload.prefix_hits", description=main.__doc__)
    ap.add_argument("source", type=Path, help="a Mooncake JSONL trace (plain or compressed)")
    ap.add_argument("--block-size", type=int, default=None, help="engine block size (default: the ids' blocks)")
    ap.add_argument("--max-requests", type=int, default=None)
    args = ap.parse_args(argv)
    try:
        wl = MooncakeTrace(args.source)
        reqs: Iterable[Request] = wl
        if args.max_requests is not None:
            reqs = Limited(wl, args.max_requests)
        hits, blocks = ideal_prefix_hits(reqs, args.block_size)
    except (ConfigError, TraceError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    unit = "hash blocks" if args.block_size is None else f"{args.block_size}-token blocks"
    rate = hits / blocks if blocks else 0.0
    skipped = dict(sorted(wl.stats.skipped.items()))  # rows that are no request: said, never silently left out
    print(f"{args.source}: {wl.stats.yielded} requests, {blocks} prompt {unit}, {hits} hits: "
          f"ideal prefix hit rate {100 * rate:.2f} %" + (f"; rows skipped (not counted): {skipped}" if skipped else ""))
    return 0


__all__ = ["ideal_prefix_hit_rate", "ideal_prefix_hits", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
