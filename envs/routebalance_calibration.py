"""How the RouteBalance testbed's quality constants were derived (:mod:`llmsim.envs.routebalance_tasks`).

Kept apart from the testbed so that drawing its workload does not import scipy's optimiser and distributions.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq
from scipy.stats import norm

from llmsim.envs.routebalance_tasks import ORACLE_QUALITY, QUALITY_SD, TIER_QUALITY


def calibrate_quality(sd: float = QUALITY_SD, oracle: float = ORACLE_QUALITY, draws: int = 400_000,
                      seed: int = 0) -> tuple[float, dict[str, float]]:
    """Re-derive (QUALITY_RHO, QUALITY_PRECLIP) for a given ``sd``: rho such that E[max_m q_m] = ``oracle`` and
    pre-clip means such that E[clip(q_m)] = TIER_QUALITY[m]."""

    def clipped_mean(mu: float) -> float:
        a, b = -mu / sd, (1 - mu) / sd
        return float(mu * (norm.cdf(b) - norm.cdf(a)) + sd * (norm.pdf(a) - norm.pdf(b)) + 1 - norm.cdf(b))

    models = list(TIER_QUALITY)
    mu = np.array([brentq(lambda x, t=TIER_QUALITY[m]: clipped_mean(x) - t, -2, 2) for m in models])
    rng = np.random.default_rng(seed)
    z, zm = rng.standard_normal(draws), rng.standard_normal((draws, len(models)))

    def gap(rho: float) -> float:
        q = np.clip(mu + sd * (rho * z[:, None] + math.sqrt(1 - rho * rho) * zm), 0, 1)
        return float(q.max(1).mean()) - oracle

    rho = brentq(gap, 0.0, 0.99)
    return round(rho, 3), {m: round(float(v), 4) for m, v in zip(models, mu)}
