"""Shortcuts of the env's per-step code that must give the slow path's values bit for bit: the flat observation's
rounding to two decimals and the noisy predictor's bucket midpoints."""

from __future__ import annotations

import math
import random

import numpy as np

from llmsim.envs.observations.flat import round2
from llmsim.envs.predictors.base import bucket_midpoints


def test_round2_is_round_to_two_decimals() -> None:
    rnd = random.Random(0)
    xs = [rnd.random() for _ in range(200_000)] + [k / 200 for k in range(201)] + [k / 1000 for k in range(1001)]
    xs += [math.nextafter(k / 200, 0.0) for k in range(201)] + [math.nextafter(k / 200, 2.0) for k in range(201)]
    xs += [0.0, 1.0, 5e-324, 0.005, 0.015, 0.125, 0.995, 1.5, -0.25, math.nan, math.inf]
    for x in xs:
        assert repr(round2(x)) == repr(round(x, 2)), x


def test_bucket_midpoints_are_numpys() -> None:
    rng = np.random.default_rng(0)
    for _ in range(2000):
        x = np.maximum(1.0, rng.integers(1, 2000, 6) * np.exp(0.3 * rng.standard_normal(6)))
        q = np.minimum(np.maximum(rng.random(6) + 0.05 * rng.standard_normal(6), 0.0), 1.0)
        for v, w, b in ((x, 30.0, 10), (x, 300 / 7, 7), (q, 0.1, 10)):
            want = (np.minimum(np.floor(v / w), b - 1) + 0.5) * w
            assert bucket_midpoints(v, w, b).tobytes() == want.tobytes()
    inf = np.array([1.0, np.inf])
    assert bucket_midpoints(inf, 30.0, 10).tobytes() == ((np.minimum(np.floor(inf / 30.0), 9) + 0.5) * 30.0).tobytes()
