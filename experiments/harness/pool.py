"""The process pool every experiment runs its cells in, with a progress bar from the first cell on.

A *cell* is one simulation (or one training run) of an experiment: a small frozen dataclass or mapping that a
module-level function turns into a result row. :func:`run_cells` runs the function over the cells inline or in
worker processes and returns the results in the order of the cells, whatever order they finish in, so a run's
tables do not depend on ``--jobs``.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

from tqdm import tqdm

from llmsim.planning.runner import cpu_count

C = TypeVar("C")
R = TypeVar("R")


def say(label: str, message: str, progress: bool = True) -> None:
    """One line on stderr, ``[label] message``: what a long step is doing before its bar starts."""
    if progress:
        print(f"[{label}] {message}", file=sys.stderr, flush=True)


def cap_jobs(jobs: int, prog: str, cpus: int | None = None) -> int:
    """``--jobs`` cut to the CPUs this process may use (``cpus``, default counted), with a note on stderr when cut:
    more workers than CPUs only add processes, each with its own memory, never speed."""
    cpus = cpu_count() if cpus is None else cpus
    if jobs <= cpus:
        return jobs
    print(f"{prog}: note: --jobs {jobs} is more than the {cpus} CPU(s) this process may use; running {cpus}",
          file=sys.stderr)
    return cpus


def run_cells(fn: Callable[[C], R], cells: Sequence[C], jobs: int, progress: bool, label: str, *,
              spawn: bool = False, initializer: Callable[[], None] | None = None) -> list[R]:
    """``fn`` over ``cells`` in ``jobs`` processes (inline when 1); results in cell order. ``fn`` must be a
    module-level function (it is pickled). ``spawn``: fresh interpreters instead of forks (torch in a forked child
    of a process that ran torch may hang); ``initializer`` runs once in each worker."""
    bar = tqdm(total=len(cells), desc=label, unit="run", file=sys.stderr, disable=not progress, dynamic_ncols=True)
    try:
        if jobs <= 1 or len(cells) <= 1:
            out = []
            for c in cells:
                out.append(fn(c))
                bar.update(1)
            return out
        context = mp.get_context("spawn") if spawn else None
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=initializer) as ex:
            futures = [ex.submit(fn, c) for c in cells]
            for f in futures:
                f.add_done_callback(lambda _f: bar.update(1))
            return [f.result() for f in futures]
    finally:
        bar.close()


def starmap_cells(fn: Callable[..., R], args: Sequence[tuple[Any, ...]], jobs: int, progress: bool, label: str,
                  **kw: Any) -> list[R]:
    """:func:`run_cells` for a function of several arguments (each cell is a tuple of them)."""
    return run_cells(_Star(fn), args, jobs, progress, label, **kw)


class _Star:
    """A picklable ``lambda args: fn(*args)`` (module-level functions only, as for run_cells)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, args: tuple[Any, ...]) -> Any:
        return self.fn(*args)
