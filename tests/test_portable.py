"""llmsim.portable: the values of numpy's exp, computed by the C library one value at a time."""

from __future__ import annotations

import math

import numpy as np

from llmsim import portable


def test_exp_is_math_exp_of_every_value_in_the_input_shape() -> None:
    x = np.random.default_rng(0).standard_normal((7, 300)) * 5
    y = portable.exp(x)
    assert y.shape == x.shape and y.dtype == np.float64
    assert all(a == math.exp(b) for a, b in zip(y.ravel().tolist(), x.ravel().tolist()))
    np.testing.assert_allclose(y, np.exp(x), rtol=1e-15)


def test_exp_takes_lists_and_empty_inputs() -> None:
    assert portable.exp([0.0, 1.0]).tolist() == [1.0, math.e]
    assert portable.exp(np.zeros((0, 3))).shape == (0, 3)
