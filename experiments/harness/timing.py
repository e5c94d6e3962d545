"""What the benchmarks share: timing a call the same way everywhere, and one JSON object per line on stdout."""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def timed(fn: Callable[[], Any], iters: int, warmup: int = 5) -> tuple[float, float, float]:
    """Median wall, median thread-CPU and minimum wall milliseconds of ``fn()`` over ``iters`` calls after
    ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    wall, cpu = [], []
    for _ in range(iters):
        t0, c0 = time.perf_counter(), time.thread_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    return float(np.median(wall)) * 1e3, float(np.median(cpu)) * 1e3, float(np.min(wall)) * 1e3


def print_json(row: Any) -> None:
    """One JSON value on its own line of stdout, flushed (a benchmark's machine-readable output)."""
    print(json.dumps(row), flush=True)


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of another process so far (Linux's /proc), None where that cannot be read: a
    server's CPU per request is steadier than its latency on a shared machine."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def positive_float(text: str) -> float:
    """An argparse type for rates and durations: a finite number above zero."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An argparse type for counts (requests, steps): zero or a negative count would time nothing, or crash later."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """An argparse type for an optional count where 0 means off (slices, parts): a negative one means nothing."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0 (0: off), got {text!r}")
    return value
