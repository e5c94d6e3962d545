"""The QoS-aware edge router paper's metrics over per-request outcomes (pure functions, checkable on crafted requests).

* QoS of a request (Eq. 1): phi = s (its quality on the expert that served it) if its latency per output token
  l = (finish - arrival) / output tokens is within L, else 0; a dropped or unfinished request has phi = 0.
* ``avg_qos``: the mean phi over *all* requests of the episode (the paper's "average QoS"), so dropping or
  losing a request costs its share.
* ``latency_per_token_ms``: mean l over completed requests (the paper's "latency per token").
* ``within_l``: share of all requests completed within L; ``mean_e2el_ms`` is the llmsim summary's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


def request_qos(reqs: Iterable[Any], instance_models: Sequence[str], limit: float) -> dict[str, np.ndarray]:
    """Per request: phi, latency per token (NaN if not completed) and whether it completed within L."""
    phi, lat, ok = [], [], []
    for r in reqs:
        done = (r.finish is not None and r.finish >= 0 and not r.dropped and r.instance is not None
                and r.instance >= 0 and r.generated > 0)
        if not done:
            phi.append(0.0)
            lat.append(float("nan"))
            ok.append(False)
            continue
        ltok = (r.finish - r.arrival) / r.generated
        good = ltok <= limit
        q = r.quality_by_model or {}
        phi.append(float(q.get(instance_models[r.instance], 0.0)) if good else 0.0)
        lat.append(ltok)
        ok.append(good)
    return {"phi": np.asarray(phi, float), "latency_per_token": np.asarray(lat, float), "ok": np.asarray(ok, bool)}


def episode_qos(reqs: Sequence[Any], instance_models: Sequence[str], limit: float) -> dict[str, float | None]:
    """The episode's figures as that paper reports them (None where nothing completed)."""
    out = request_qos(reqs, instance_models, limit)
    n = len(out["phi"])
    lat = out["latency_per_token"]
    done = ~np.isnan(lat)
    return {"avg_qos": float(out["phi"].mean()) if n else None,
            "latency_per_token_ms": float(lat[done].mean() * 1e3) if done.any() else None,
            "within_l": float(out["ok"].mean()) if n else None}


def env_qos(env: Any) -> dict[str, float | None] | None:
    """:func:`episode_qos` of a finished env episode when its reward has a latency limit L (QoSEdge), else None."""
    limit = getattr(env.reward_fn, "limit", None)
    if limit is None:
        return None
    return episode_qos(env.episode_requests, env.instance_models, float(limit))
