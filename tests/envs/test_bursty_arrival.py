"""BurstGPT-like arrivals for env workloads (the QoS-aware edge router's bursty test): exact mean rate, bursty,
deterministic."""

from __future__ import annotations

import numpy as np
import pytest

from llmsim.envs.tasks import qos_edge_mixture
from llmsim.envs.workloads import MixtureWorkload
from llmsim.errors import ConfigError


def _times(seed: int, k: int = 3000, rate: float = 5.0) -> np.ndarray:
    wl = MixtureWorkload(qos_edge_mixture(["alpaca-native", "chatglm-6b"]), {"kind": "burstgpt_like", "rate": rate})
    return np.array([r.arrival for r in wl.requests(seed, k)])


def test_burstgpt_like_arrivals_average_the_rate_and_are_burstier_than_poisson():
    t = _times(1000)
    assert (len(t) - 1) / t[-1] == pytest.approx(5.0, rel=1e-9)
    gaps = np.diff(t)
    assert (gaps >= 0).all() and gaps.std() / gaps.mean() > 1.2  # Poisson: 1.0
    windows = np.histogram(t, bins=np.arange(0.0, t[-1] + 10.0, 10.0))[0] / 10.0
    assert windows.max() > 1.6 * 5.0  # bursts well above the mean
    np.testing.assert_array_equal(t, _times(1000))
    assert not np.array_equal(t, _times(1001))


def test_burstgpt_like_arrival_needs_a_rate():
    with pytest.raises(ConfigError, match="rate"):
        MixtureWorkload(qos_edge_mixture(["alpaca-native"]), {"kind": "burstgpt_like"})
