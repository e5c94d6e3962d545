"""The flat observation's phase summary: the two-edge path (comparisons) gives what the bisect over the edges gives,
for every kind of row (prefill, no prediction, NaN prediction, a shift, swapped rows)."""

from __future__ import annotations

import math
from bisect import bisect_right
from types import SimpleNamespace

import numpy as np

from llmsim.state.request_sums import phase_summary_of


def _reference(running, waiting, swapped, edges, default, shift):
    pre, counts, left, resident = len(waiting), [0] * (len(edges) + 1), math.inf, 0
    for q, s in ((running, shift), (swapped, 0)):
        for r in q:
            g = r.generated + s
            resident += r.prompt_tokens + g
            if g == 0:
                pre += 1
                continue
            d = r.predicted_output or default
            counts[bisect_right(edges, d)] += 1
            left = min(left, d - g)
    return pre, counts, left, resident


def test_two_edges_match_the_bisect() -> None:
    rng = np.random.default_rng(0)
    preds = [None, 0.0, math.nan, 255.0, 256.0, 2047.5, 2048.0, 5000.0]
    for _ in range(300):
        def rows(n):
            return [SimpleNamespace(prompt_tokens=int(rng.integers(1, 900)), generated=int(rng.integers(0, 3)) *
                                    int(rng.integers(0, 700)), predicted_output=preds[rng.integers(len(preds))]
                                    if rng.random() < 0.5 else float(rng.uniform(1, 4000))) for _ in range(n)]
        running, waiting, swapped = rows(int(rng.integers(0, 12))), rows(int(rng.integers(0, 4))), \
            rows(int(rng.integers(0, 3)))
        shift = int(rng.integers(0, 4))
        default = float(rng.uniform(50, 3000))
        got = phase_summary_of(running, waiting, swapped, (256, 2048), default, shift)
        want = _reference(running, waiting, swapped, (256, 2048), default, shift)
        assert repr(got) == repr(want)
    assert phase_summary_of([], [], [], (256, 2048), 10.0) == (0, [0, 0, 0], math.inf, 0)


def _progress_reference(queues, shift):
    x, s = 0.0, shift
    for q in queues:
        for r in q:
            g = r.generated + s
            if g and r.predicted_output:
                x += g / r.predicted_output if g < r.predicted_output else 1.0
        s = 0
    return x


def test_rows_of_any_number_types_sum_alike() -> None:
    """The compiled build's typed variants (native_*): the engine's rows (int counts, float predictions) take a typed
    branch, any other row the generic one; mixed in one queue, they give the reference's numbers bit for bit (int or
    numpy predictions, numpy counts, None), as the plain functions do."""
    from llmsim.state.request_sums import native_sum_progress, native_two_edge_summary, sum_progress

    rng = np.random.default_rng(1)
    kinds = [lambda v: float(v), lambda v: int(v), lambda v: np.float64(v), lambda v: np.int64(v), lambda v: None,
             lambda v: 0.0, lambda v: math.nan]
    for _ in range(300):
        def rows(n):
            out = []
            for _ in range(n):
                g = int(rng.integers(0, 3)) * int(rng.integers(0, 700))
                v = float(rng.integers(1, 4000)) + rng.random() * (rng.random() < 0.5)
                d = kinds[int(rng.integers(len(kinds)))](v)
                numpy_counts = rng.random() < 0.15
                out.append(SimpleNamespace(prompt_tokens=np.int64(rng.integers(1, 900)) if numpy_counts else
                                           int(rng.integers(1, 900)), generated=g, predicted_output=d))
            return out
        running, swapped = rows(int(rng.integers(0, 12))), rows(int(rng.integers(0, 3)))
        shift = int(rng.integers(0, 4))
        want_x = _progress_reference((running, swapped), shift).hex()
        assert sum_progress(running, swapped, shift=shift).hex() == want_x
        assert native_sum_progress((running, swapped), shift).hex() == want_x
        if all(type(r.prompt_tokens) is int for r in running + swapped):  # (the compiled build's int total needs ints)
            want = _reference(running, [], swapped, (256, 2048), 100.0, shift)
            for pre, counts, left, resident in (phase_summary_of(running, [], swapped, (256, 2048), 100.0, shift),
                                                native_two_edge_summary(running, 0, swapped, 256, 2048, 100.0, shift)):
                assert (pre, counts, resident) == (want[0], want[1], want[3])
                assert float(left).hex() == float(want[2]).hex()  # (an int left is a float in the compiled build)
