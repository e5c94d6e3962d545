"""Telemetry for RouteBalance's per-tier TPOT head (spec 004 section 2.8(b); docs/routebalance_predictors.md).

:func:`collect_telemetry` runs one simulation and records, whenever the router is called (at most once per
``sample_period`` s of simulated time), every instance's public state features and, as the label, the realised
mean per-token decode time on that instance over the next ``window`` s. Columns, one row per (sample, instance):

* ``run`` (caller's tag), ``time`` (s), ``instance`` (index), ``name``, ``model`` (the tier), ``gpu``;
* the features ``llmsim.routing.routebalance.predictors.TPOT_FEATURES``: ``num_running``, ``num_waiting``
  (waiting + swapped), ``kv_used_frac`` (KV blocks used / total), ``pending_prefill_tokens``,
  ``pending_decode_tokens`` (predicted output tokens still to generate, from the router's predictions),
  ``context_tokens`` (prompt + generated tokens held), ``max_num_seqs``, ``step_time`` (the iteration in
  progress, s; 0 idle), ``throughput`` (output tokens/s over the last scrape interval);
* ``tpot_next``: realised mean per-token decode time (s) over [time, time + window]: sum of decode-time overlaps
  divided by tokens decoded, where each request that decoded on the instance contributes its overlap of
  [first token, finish] with the window and overlap / its own mean TPOT tokens ((finish - first token) /
  (generated - 1)); ``decode_tokens_next``: that token count; ``window`` (s).

Rows whose window decodes nothing on the instance have no label and are left out. The simulator lives above
the policies, so this module sits beside ``llmsim.simulation.run`` (not in ``llmsim.routing``: that would be an import
cycle). CLI: ``python -m llmsim.simulation.telemetry --out FILE.parquet [--rates 6 12 24] ...``.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from llmsim.errors import ConfigError
from llmsim.routing import Router, make_router
from llmsim.routing.routebalance.predictors import LABEL, TPOT_FEATURES, instance_features
from llmsim.simulation.run import simulate

if TYPE_CHECKING:
    from llmsim.cluster.cluster import InstanceConfig
    from llmsim.cluster.view import ClusterView
    from llmsim.request import Request

META = ("run", "time", "instance", "name", "model", "gpu")
COLUMNS = (*META, *TPOT_FEATURES, LABEL, "decode_tokens_next", "window")


class TelemetryRecorder(Router):
    """Wraps a router: samples ``view.state()`` before delegating (at most once per ``period`` s)."""

    name = "telemetry_recorder"

    def __init__(self, inner: Router, period: float = 0.0) -> None:
        super().__init__(inner.seed if hasattr(inner, "seed") else 0)
        self.inner = inner
        self.period = period
        self.samples: list[tuple[float, list[tuple[int, str, str, str, list[float]]]]] = []
        self.last = -math.inf

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self.inner.reset(seed)
        self.samples, self.last = [], -math.inf

    def route(self, req: Request, view: ClusterView) -> int:
        now = float(view.now)
        if now > self.last and now - self.last >= self.period:
            st = view.state()
            self.samples.append((now, [(i.idx, i.name, i.model, i.gpu, instance_features(i)) for i in st.instances]))
            self.last = now
        return self.inner.route(req, view)


def label_rows(samples: Sequence[tuple[float, list[Any]]], requests: Sequence[Request], window: float,
               run: Any = "") -> pd.DataFrame:
    """The telemetry table (module docstring) from recorded samples and the finished requests."""
    per: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    by_inst: dict[int, list[tuple[float, float, float]]] = {}
    for r in requests:
        if r.instance >= 0 and r.first_token >= 0 and r.finish > r.first_token and r.generated > 1:
            by_inst.setdefault(int(r.instance), []).append(
                (r.first_token, r.finish, (r.finish - r.first_token) / (r.generated - 1)))
    for k, v in by_inst.items():
        a = np.array(v)
        per[k] = (a[:, 0], a[:, 1], a[:, 2])
    rows = []
    for t, insts in samples:
        for idx, name, model, gpu, feats in insts:
            if idx not in per:
                continue
            s, f, tp = per[idx]
            ov = np.clip(np.minimum(f, t + window) - np.maximum(s, t), 0.0, None)
            tokens = float((ov / tp).sum())
            if tokens <= 0:
                continue
            rows.append((run, t, idx, name, model, gpu, *feats, float(ov.sum()) / tokens, tokens, window))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def collect_telemetry(instances: list[InstanceConfig], requests: Sequence[Request],
                      policy: str | Router = "routebalance", *, policy_kwargs: dict[str, Any] | None = None,
                      window: float = 1.0,
                      sample_period: float = 0.0, central_queue_tick: float | None = 0.004, seed: int = 0,
                      run: Any = "") -> pd.DataFrame:
    """Simulate ``requests`` on ``instances`` under ``policy`` and return the labelled telemetry table."""
    if not (isinstance(window, (int, float)) and window > 0):
        raise ConfigError(f"window: expected a number > 0, got {window!r}")
    inner = policy if isinstance(policy, Router) else make_router(policy, seed=seed, **(policy_kwargs or {}))
    rec = TelemetryRecorder(inner, float(sample_period))
    reqs = list(requests)
    simulate(instances, reqs, rec, seed=seed, central_queue_tick=central_queue_tick)
    return label_rows(rec.samples, reqs, float(window), run)


def _call(target: str, **kwargs: Any) -> Any:
    mod, _, fn = target.partition(":")
    try:
        return getattr(importlib.import_module(mod), fn)(**kwargs)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"cannot import {target!r} ({e})") from None


def telemetry_sweep(instances: str = "llmsim.envs.routebalance_tasks:routebalance_instances",
                    workload: str = "llmsim.envs.routebalance_tasks:routebalance_workload",
                    rates: Sequence[float] = (6.0, 12.0, 24.0),
                    n: int = 500, seed: int = 0, window: float = 1.0, sample_period: float = 0.0,
                    tick: float = 0.004, policy: str = "routebalance",
                    instances_kwargs: dict[str, Any] | None = None) -> pd.DataFrame:
    """One run per rate: ``instances`` and ``workload`` are ``module:function`` samplers (the workload's gets
    ``rate``, ``n`` and ``seed``); rows are tagged ``run = rate``."""
    frames = []
    for rate in rates:
        reqs = _call(workload, rate=float(rate), n=int(n), seed=int(seed))
        frames.append(collect_telemetry(_call(instances, **(instances_kwargs or {})), reqs, policy, window=window,
                                        sample_period=sample_period, central_queue_tick=tick, seed=seed,
                                        run=float(rate)))
    return pd.concat(frames, ignore_index=True)


def telemetry_rows(**kwargs: Any) -> list[dict[str, Any]]:
    """:func:`telemetry_sweep` as row mappings: a ``tpot_kwargs.train: {sampler: ...}`` target."""
    return telemetry_sweep(**kwargs).to_dict("records")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m llmsim.simulation.telemetry", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output .parquet (or .csv)")
    ap.add_argument("--instances", default="llmsim.envs.routebalance_tasks:routebalance_instances")
    ap.add_argument("--workload", default="llmsim.envs.routebalance_tasks:routebalance_workload")
    ap.add_argument("--rates", type=float, nargs="+", default=[6.0, 12.0, 24.0])
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--window", type=float, default=1.0)
    ap.add_argument("--sample-period", type=float, default=0.0)
    ap.add_argument("--tick", type=float, default=0.004)
    ap.add_argument("--policy", default="routebalance")
    a = ap.parse_args(argv)
    try:
        df = telemetry_sweep(a.instances, a.workload, a.rates, a.n, a.seed, a.window, a.sample_period, a.tick,
                             a.policy)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    (df.to_csv(a.out, index=False) if a.out.endswith(".csv") else df.to_parquet(a.out, index=False))
    print(f"{len(df)} rows -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
