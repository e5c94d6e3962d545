"""Telemetry for RouteBalance's per-tier TPOT head (the RouteBalance paper's latency heads, §4.2;
docs/routebalance_predictors.md): what an instance looked like when the router was called, labelled with how fast
it then decoded.

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
the policies, so this module sits beside ``llmsim.simulation.run`` (not in ``llmsim.routing``: that would be an
import cycle). :func:`telemetry_rows` is the training sampler ``routebalance_telemetry`` (llmsim.routing.samplers:
``tpot_kwargs.train: {sampler: routebalance_telemetry, rates: [...], n: ...}``). CLI:
``python -m llmsim.simulation.telemetry --out FILE.parquet [--cluster routebalance13] [--rates 6 12 24] ...``.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from llmsim.cluster.config import instances_from_config
from llmsim.errors import ConfigError, load_yaml_file
from llmsim.resources import conf_dir
from llmsim.routing import Router, make_router
from llmsim.routing.routebalance.predictors import LABEL, TPOT_FEATURES, instance_features
from llmsim.routing.samplers import find_sampler
from llmsim.simulation.run import simulate

if TYPE_CHECKING:
    from llmsim.cluster import InstanceConfig
    from llmsim.request import Request
    from llmsim.state.view import SimulatorView

META = ("run", "time", "instance", "name", "model", "gpu")
COLUMNS = (*META, *TPOT_FEATURES, LABEL, "decode_tokens_next", "window")


class TelemetryRecorder(Router):
    """Wraps a router: samples ``view.state()`` before delegating (at most once per ``period`` s of simulated time),
    so the routing is the inner router's, unchanged."""

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

    def route(self, req: Request, view: SimulatorView) -> int:
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


def cluster_preset(name: str) -> list[InstanceConfig]:
    """The instances of a shipped cluster preset (``conf/cluster/<name>.yaml``, e.g. ``routebalance13``)."""
    path = conf_dir() / "cluster" / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise ConfigError(f"cluster: unknown cluster preset {name!r}; expected one of {known}")
    return instances_from_config(load_yaml_file(path))


def telemetry_sweep(instances: Sequence[InstanceConfig], workload: Callable[..., Sequence[Request]],
                    rates: Sequence[float] = (6.0, 12.0, 24.0), n: int = 500, seed: int = 0, window: float = 1.0,
                    sample_period: float = 0.0, tick: float = 0.004, policy: str = "routebalance") -> pd.DataFrame:
    """One run per rate on ``instances``: ``workload(rate=, n=, seed=)`` draws its requests; rows are tagged
    ``run = rate``."""
    frames = []
    for rate in rates:
        reqs = workload(rate=float(rate), n=int(n), seed=int(seed))
        frames.append(collect_telemetry(list(instances), reqs, policy, window=window, sample_period=sample_period,
                                        central_queue_tick=tick, seed=seed, run=float(rate)))
    return pd.concat(frames, ignore_index=True)


def telemetry_rows(cluster: str | Sequence[InstanceConfig] = "routebalance13", workload: str = "routebalance_workload",
                   **kwargs: Any) -> list[dict[str, Any]]:
    """The training sampler ``routebalance_telemetry``: :func:`telemetry_sweep` as row mappings. ``cluster``: a
    cluster preset or the instances; ``workload``: a training sampler that draws requests (``rate``, ``n``,
    ``seed``); ``kwargs``: the sweep's other options."""
    instances = cluster_preset(cluster) if isinstance(cluster, str) else list(cluster)
    draw = find_sampler(workload, "workload")
    return telemetry_sweep(instances, draw, **kwargs).to_dict("records")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m llmsim.simulation.telemetry --out FILE``: collect telemetry over a rate sweep and write it."""
    ap = argparse.ArgumentParser(prog="python -m llmsim.simulation.telemetry",
                                 description="Telemetry for RouteBalance's per-tier TPOT head (a rate sweep)")
    ap.add_argument("--out", required=True, help="output .parquet (or .csv)")
    ap.add_argument("--cluster", default="routebalance13", help="a cluster preset (conf/cluster/NAME.yaml)")
    ap.add_argument("--workload", default="routebalance_workload",
                    help="a training sampler that draws requests (llmsim.routing.samplers)")
    ap.add_argument("--rates", type=float, nargs="+", default=[6.0, 12.0, 24.0])
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--window", type=float, default=1.0)
    ap.add_argument("--sample-period", type=float, default=0.0)
    ap.add_argument("--tick", type=float, default=0.004)
    ap.add_argument("--policy", default="routebalance")
    a = ap.parse_args(argv)
    try:
        df = telemetry_sweep(cluster_preset(a.cluster), find_sampler(a.workload, "--workload"), a.rates, a.n,
                             a.seed, a.window, a.sample_period, a.tick, a.policy)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)  # the documented outputs/telemetry/ may not exist yet
    (df.to_csv(a.out, index=False) if a.out.endswith(".csv") else df.to_parquet(a.out, index=False))
    print(f"{len(df)} rows -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
