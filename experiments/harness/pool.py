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
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, TypeVar

from tqdm import tqdm

from experiments.harness import cellfile
from experiments.harness.cellfile import CELLS_FILE
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
              spawn: bool = False, initializer: Callable[[], None] | None = None, checkpoint: bool = True) -> list[R]:
    """``fn`` over ``cells`` in ``jobs`` processes (inline when 1); results in cell order. ``fn`` must be a
    module-level function (it is pickled). ``spawn``: fresh interpreters instead of forks (torch in a forked child
    of a process that ran torch may hang); ``initializer`` runs once in each worker. Within
    :func:`experiments.harness.cellfile.recording` (``llmsim-reproduce``), each finished cell's row is recorded and
    a resumed run keeps the recorded ones; ``checkpoint=False`` opts out (cells whose rows depend on files the run
    writes again)."""
    store = cellfile.active() if checkpoint else None
    keys = _keys(fn, cells, store, label)
    done: dict[int, R] = {}
    if store is not None and keys is not None:
        done = {i: store.rows[k] for i, k in enumerate(keys) if k in store.rows}
        if store.resume:
            say(label, f"resuming: {len(done)} of {len(cells)} cells kept from {store.path}")
    unstored = [0]

    def record(i: int, row: R) -> None:
        done[i] = row
        if store is not None and keys is not None and not store.add(keys[i], row):
            unstored[0] += 1

    todo = [i for i in range(len(cells)) if i not in done]
    bar = tqdm(total=len(cells), initial=len(done), desc=label, unit="run", file=sys.stderr, disable=not progress,
               dynamic_ncols=True)
    try:
        if jobs <= 1 or len(todo) <= 1:
            for i in todo:
                record(i, fn(cells[i]))
                bar.update(1)
        else:
            _in_pool(fn, cells, todo, jobs, record, bar, spawn, initializer)
    finally:
        bar.close()
        if unstored[0]:
            say(label, f"note: {unstored[0]} cell result(s) hold values {CELLS_FILE} cannot store exactly: they are "
                       "not recorded and run again on a resume")
    return [done[i] for i in range(len(cells))]


def _keys(fn: Callable[..., Any], cells: Sequence[Any], store: cellfile.CellFile | None,
          label: str) -> list[str] | None:
    """The cells' keys in the active cells file; None (with a note) when there is none or a cell has no stable form."""
    if store is None:
        return None
    try:
        return [cellfile.cell_key(fn, c) for c in cells]
    except cellfile.Unstorable as e:
        say(label, f"note: a cell holds {e}, which has no stable form: these cells are not recorded in {store.path}")
        return None


def _in_pool(fn: Callable[[C], R], cells: Sequence[C], todo: list[int], jobs: int, record: Callable[[int, R], None],
             bar: Any, spawn: bool, initializer: Callable[[], None] | None) -> None:
    """The ``todo`` cells in a process pool, each recorded as it finishes; every cell runs even when one raises,
    then the error of the first failing cell (in cell order) is raised."""
    context = mp.get_context("spawn") if spawn else None
    errors: dict[int, BaseException] = {}
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=initializer) as ex:
        futures = {ex.submit(fn, cells[i]): i for i in todo}
        try:
            for f in as_completed(futures):
                i = futures[f]
                error = f.exception()
                if error is None:
                    record(i, f.result())
                else:
                    errors[i] = error
                bar.update(1)
        except BaseException:  # stopped (Ctrl-C): the cells not started yet do not run; the recorded ones stay
            for f in futures:
                f.cancel()
            raise
    if errors:
        raise errors[min(errors)]


def starmap_cells(fn: Callable[..., R], args: Sequence[tuple[Any, ...]], jobs: int, progress: bool, label: str,
                  **kw: Any) -> list[R]:
    """:func:`run_cells` for a function of several arguments (each cell is a tuple of them)."""
    return run_cells(_Star(fn), args, jobs, progress, label, **kw)


class _Star:
    """A picklable ``lambda args: fn(*args)`` (module-level functions only, as for run_cells)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.__module__, self.__qualname__ = fn.__module__, fn.__qualname__  # its cells' keys name ``fn``

    def __call__(self, args: tuple[Any, ...]) -> Any:
        return self.fn(*args)
