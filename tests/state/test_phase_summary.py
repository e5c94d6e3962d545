"""The flat observation's phase summary: the two-edge path (comparisons) gives what the bisect over the edges gives,
for every kind of row (prefill, no prediction, NaN prediction, a shift, swapped rows)."""

from __future__ import annotations

import math
from bisect import bisect_right
from types import SimpleNamespace

import numpy as np

from llmsim.state.cluster_state import phase_summary_of


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
