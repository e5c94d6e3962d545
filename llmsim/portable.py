"""Elementwise math whose last bits do not depend on the CPU.

numpy picks the kernel of ``np.exp`` by the CPU's vector width (AVX2, AVX-512), and those kernels may round a value
differently in its last bit; a seeded run that draws lengths or noise through them could then differ between two
machines. Python's ``math`` functions call the C library's scalar kernels, which do not change with the vector width,
so the values that decide a simulation's requests and observations go through them.
"""

from __future__ import annotations

import math

import numpy as np


def exp(x: np.ndarray | list[float]) -> np.ndarray:
    """``np.exp(x)`` (float64, same shape) computed one value at a time by the C library."""
    a = np.asarray(x, dtype=float)
    return np.fromiter(map(math.exp, a.ravel().tolist()), float, a.size).reshape(a.shape)
