"""Shortcuts of the env's per-step code that must give the slow path's values bit for bit: the flat observation's
rounding to two decimals, the noisy predictor's bucket midpoints and its noise drawn in blocks."""

from __future__ import annotations

import math
import random

import numpy as np

from llmsim.envs.observations.flat import round2
from llmsim.envs.predictors.base import NOISE_BLOCK, NoisyOraclePredictor, bucket_midpoints
from llmsim.request import Request


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


class DrawPerCall:
    """The noisy oracle as first written: one draw of 2 n normals per call, numpy arithmetic on the truth's arrays."""

    def __init__(self, p: NoisyOraclePredictor, seed: int) -> None:
        self.p, self.rng = p, np.random.default_rng(seed)

    def predict(self, req: Request, models: list[str]) -> tuple[np.ndarray, np.ndarray]:
        p, n = self.p, len(models)
        lens = np.array([req.output_for(m) for m in models], dtype=np.float64)
        q = req.quality_by_model
        qual = np.array([q.get(m, 0.0) if q else 0.0 for m in models], dtype=np.float64)
        z = self.rng.standard_normal(2 * n)
        lens = np.maximum(1.0, lens * np.exp(p.len_sigma * z[:n]))
        qual = np.clip(qual + p.q_sd * z[n:], 0.0, 1.0)
        if p.len_buckets:
            w = p.len_max / p.len_buckets
            lens = (np.minimum(np.floor(lens / w), p.len_buckets - 1) + 0.5) * w
        if p.q_buckets:
            w = p.q_max / p.q_buckets
            qual = (np.minimum(np.floor(qual / w), p.q_buckets - 1) + 0.5) * w
        return lens, qual


def test_noise_drawn_in_blocks_is_a_draw_per_call() -> None:
    """Across block edges, seedless resets (the stream goes on) and seeded ones (it restarts), with numpy-typed truths:
    the same bytes as a draw per call."""
    rnd = np.random.default_rng(1)
    models = ["a", "b", "c"]
    reqs = []
    for i in range(300):
        r = Request(id=i, arrival=float(i), prompt_tokens=10, output_tokens=int(rnd.integers(1, 600)))
        r.outputs_by_model = {"a": np.int64(rnd.integers(1, 600)), "c": int(rnd.integers(1, 600))}
        r.quality_by_model = {"a": np.float32(rnd.random()), "b": float(rnd.random())} if i % 3 else None
        reqs.append(r)
    for kwargs in ({}, {"len_buckets": 10, "q_buckets": 10}, {"len_sigma": 0.0, "q_sd": 0.0}):
        fast = NoisyOraclePredictor(seed=5, **kwargs)
        slow = DrawPerCall(fast, 5)
        calls = 0
        for episode, seed in enumerate([None, None, 7, None, 7]):
            if seed is not None:
                slow.rng = np.random.default_rng(seed)
            fast.reset(seed)
            n_calls = NOISE_BLOCK // 6 + 37 if episode < 2 else 150
            for j in range(n_calls):
                req, ms = reqs[(calls + j) % len(reqs)], models if j % 5 else models[:2]
                got, want = fast.predict(req, ms), slow.predict(req, ms)
                assert [g.tobytes() for g in got] == [w.tobytes() for w in want], (kwargs, episode, j)
            calls += n_calls
