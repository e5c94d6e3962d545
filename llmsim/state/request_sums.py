"""Sums over an instance's requests: what :class:`~llmsim.state.cluster_state.InstanceRequests` derives (pending
prefill and decode tokens, context, progress, the flat observation's phase summary) and what the cluster's lazy
live state computes the same way (:mod:`llmsim.cluster.live_requests`). The rows are plain ``RequestState``s or
the engine's own requests: the same attribute names.

These loops run at every decision of an env (an observation, a reward), so the compiled build (llmsim/compiled.py)
has typed variants of the two hottest (``native_*``); they give the same bits as the plain ones.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from typing import Any, Final, cast


# Sums over the rows of the three queues (plain RequestStates or the engine's requests: same attribute names).
# ``shift``: decode iterations the rows of the first queue (the simulator's running requests, mid decode run) are
# behind the state described: each of them has generated, and computed, ``shift`` more tokens than it says.
def sum_pending_prefill(*queues: Any, shift: int = 0) -> int:
    n = 0
    s = shift
    for q in queues:
        for r in q:
            g = r.generated
            left = r.prompt_tokens + g - r.computed  # (a shift moves generated and computed alike)
            if left > 1 or not g + s:
                n += left  # prompt (or recompute) tokens; a decoder's one pending token is decode work
        s = 0
    return n


def sum_pending_decode(*queues: Any, shift: int = 0) -> float:
    x = 0.0
    s = shift
    for q in queues:
        for r in q:
            d = r.predicted_output
            g = r.generated + s
            if d is not None and d > g:
                x += d - g
        s = 0
    return x


def sum_context(*queues: Any, shift: int = 0) -> int:
    n = 0
    for q in queues:
        for r in q:
            n += r.prompt_tokens + r.generated
    return n + shift * len(queues[0]) if queues else n


# this module compiled (llmsim/compiled.py; its functions are then not Python's): the typed native_* variants run
NATIVE: Final = type(sum_context).__name__ != "function"


def sum_progress(*queues: Any, shift: int = 0) -> float:
    if NATIVE:
        return native_sum_progress(queues, shift)
    x = 0.0
    s = shift
    for q in queues:
        for r in q:
            g = r.generated + s
            if g:
                d = r.predicted_output
                if d:
                    x += g / d if g < d else 1.0
        s = 0
    return x


def native_sum_progress(queues: tuple[Any, ...], shift: int) -> float:
    """:func:`sum_progress` compiled: a row with int counts and a float prediction (the engine's) takes a typed branch,
    machine numbers (compiled loops over objects run slower than CPython's); other rows the generic one. Same bits."""
    x = 0.0
    s = shift
    for q in queues:
        for r in q:
            g0: Any = r.generated
            d0: Any = r.predicted_output
            if type(g0) is int and type(d0) is float:
                g = cast(int, g0) + s
                d = cast(float, d0)
                if g and d:
                    x += g / d if g < d else 1.0
                continue
            ga = g0 + s
            if ga and d0:
                x += ga / d0 if ga < d0 else 1.0
        s = 0
    return x


def progress_terms(*queues: Any) -> list[float]:
    """What :func:`sum_progress` adds for these rows, in order: continuing a sum with them is the same sum."""
    return [(g / d if g < d else 1.0) for q in queues for r in q if (g := r.generated) and (d := r.predicted_output)]


def decode_terms(*queues: Any) -> list[float]:
    """What :func:`sum_pending_decode` adds for these rows, in order."""
    return [d - g for q in queues for r in q if (d := r.predicted_output) is not None and d > (g := r.generated)]


def phase_summary_of(running: Any, waiting: Any, swapped: Any, edges: tuple[float, ...],
                     default: float, shift: int = 0) -> tuple[int, list[int], float, int]:
    if len(edges) == 2:  # the flat observation's two edges: bins by two comparisons, counts in locals
        return two_edge_summary(running, len(waiting), swapped, edges[0], edges[1], default, shift)
    pre = len(waiting)
    counts = [0] * (len(edges) + 1)
    left = math.inf
    resident = 0
    s = shift
    for q in (running, swapped):
        for r in q:
            g = r.generated + s
            resident += r.prompt_tokens + g
            if g == 0:
                pre += 1
                continue
            d = r.predicted_output or default
            counts[bisect_right(edges, d)] += 1
            if d - g < left:
                left = d - g
        s = 0
    return pre, counts, left, resident


def two_edge_summary(running: Any, pre: int, swapped: Any, e0: float, e1: float, default: float,
                     shift: int) -> tuple[int, list[int], float, int]:
    """:func:`phase_summary_of` with ``edges = (e0, e1)`` (``bisect_right``'s bins: a NaN prediction goes last)."""
    if NATIVE:
        return native_two_edge_summary(running, pre, swapped, e0, e1, default, shift)
    n0 = n1 = n2 = resident = 0
    left = math.inf
    s = shift
    for q in (running, swapped):
        for r in q:
            g = r.generated + s
            resident += r.prompt_tokens + g
            if not g:
                pre += 1
                continue
            d = r.predicted_output or default
            if d < e0:
                n0 += 1
            elif d < e1:
                n1 += 1
            else:
                n2 += 1
            if d - g < left:
                left = d - g
        s = 0
        if not swapped:
            break
    return pre, [n0, n1, n2], left, resident


def native_two_edge_summary(running: Any, pre: int, swapped: Any, e0: float, e1: float, default: float,
                            shift: int) -> tuple[int, list[int], float, int]:
    """:func:`two_edge_summary` for the compiled build, typed for the engine's rows as :func:`native_sum_progress`."""
    n0 = n1 = n2 = resident = 0
    left = math.inf
    s = shift
    for q in (running, swapped):
        for r in q:
            g0: Any = r.generated
            p0: Any = r.prompt_tokens
            d0: Any = r.predicted_output
            if type(g0) is int and type(p0) is int and type(d0) is float:
                g = cast(int, g0) + s
                resident += cast(int, p0) + g
                if not g:
                    pre += 1
                    continue
                d = cast(float, d0) or default
                if d < e0:
                    n0 += 1
                elif d < e1:
                    n1 += 1
                else:
                    n2 += 1
                if d - g < left:
                    left = d - g
                continue
            ga = g0 + s
            resident += p0 + ga
            if not ga:
                pre += 1
                continue
            da = d0 or default
            if da < e0:
                n0 += 1
            elif da < e1:
                n1 += 1
            else:
                n2 += 1
            if da - ga < left:
                left = da - ga
        s = 0
        if not swapped:
            break
    return pre, [n0, n1, n2], left, resident


def request_rows(running: Any, waiting: Any, swapped: Any) -> list[tuple[int, int, int, float | None, str]]:
    """(id, prompt_tokens, generated, predicted_output, queue name) of every row: the routers' ``view.requests``."""
    out = [(r.id, r.prompt_tokens, r.generated, r.predicted_output, "running") for r in running]
    out += [(r.id, r.prompt_tokens, r.generated, r.predicted_output, "waiting") for r in waiting]
    out += [(r.id, r.prompt_tokens, r.generated, r.predicted_output, "swapped") for r in swapped]
    return out
