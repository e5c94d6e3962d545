"""One-call simulation API: ``simulate(instances, requests, policy)`` -> :class:`SimResult`."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from llmsim.cluster import Cluster, InstanceConfig
from llmsim.metrics import SLO, summarise
from llmsim.policies import Router, make_router
from llmsim.request import Request


@dataclass
class SimResult:
    requests: pd.DataFrame
    dropped: pd.DataFrame
    timeline: pd.DataFrame
    instances: pd.DataFrame
    summary: dict[str, Any]
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def save(self, out_dir: str | Path, fmt: str = "csv") -> Path:
        """Write per-request table, drops, timeline, per-instance stats and summary.json."""
        import json

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        if fmt == "parquet":
            self.requests.to_parquet(out / "requests.parquet", index=False)
        elif fmt == "csv":
            self.requests.to_csv(out / "requests.csv", index=False)
        else:
            from llmsim.errors import ConfigError

            raise ConfigError(f"output.format must be 'csv' or 'parquet', got {fmt!r}")
        self.dropped.to_csv(out / "dropped.csv", index=False)
        self.timeline.to_csv(out / "timeline.csv", index=False)
        self.instances.to_csv(out / "instances.csv", index=False)
        (out / "summary.json").write_text(json.dumps(_jsonable(self.summary), indent=2) + "\n")
        return out


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if hasattr(v, "item"):
            v = v.item()
        if isinstance(v, float) and v != v:
            v = None
        out[k] = v
    return out


def simulate(
    instances: list[InstanceConfig],
    requests: Iterable[Request],
    policy: str | Router = "round_robin",
    *,
    seed: int = 0,
    slo: SLO | None = None,
    view_staleness: float = 0.0,
    metrics_interval: float = 1.0,
    central_queue_tick: float | None = None,
    on_unservable: str = "error",
    colocation_interference: float = 1.0,
    progress: bool = False,
    total: int | None = None,
    policy_kwargs: dict[str, Any] | None = None,
) -> SimResult:
    """Run ``requests`` through a cluster of ``instances`` routed by ``policy``."""
    router = policy if isinstance(policy, Router) else make_router(policy, seed=seed, **(policy_kwargs or {}))
    cluster = Cluster(
        instances,
        router,
        view_staleness=view_staleness,
        metrics_interval=metrics_interval,
        central_queue_tick=central_queue_tick,
        on_unservable=on_unservable,
        colocation_interference=colocation_interference,
    )
    t0 = time.perf_counter()
    cluster.run(requests, progress=progress, total=total)
    wall = time.perf_counter() - t0
    return collect(cluster, slo or SLO(), wall)


def collect(cluster: Cluster, slo: SLO, wall_s: float = 0.0) -> SimResult:
    """Tables and summary of a finished (or stopped) cluster; the env reads the same numbers."""
    rec = cluster.recorder
    df = rec.requests_frame()
    dropped = rec.dropped_frame()
    num = len(df) + len(dropped)
    duration = float(df["finish"].max() - df["arrival"].min()) if len(df) else 0.0
    rows = []
    estimated = []
    for inst in cluster.instances:
        prof = inst.profile
        if getattr(prof, "estimated", False):
            estimated.append(prof.name)
        rows.append({
            "instance": inst.idx, "name": inst.name, "device": cluster.instance_configs[inst.idx].device,
            "model": prof.model.name, "gpu": prof.gpu.name,
            "tp": prof.tp, "profile": prof.name, "profile_estimated": bool(getattr(prof, "estimated", False)),
            "policy": inst.config.policy, "kv_total_blocks": inst.kv_total, "finished": inst.finished,
            "iterations": inst.iterations, "busy_time_s": inst.busy_time,
            "utilisation": inst.busy_time / duration if duration > 0 else 0.0,
            "preemptions": inst.preemptions, "swap_outs": inst.swap_outs, "output_tokens": inst.tokens_out,
            "prefill_tokens": inst.prefill_tokens,
        })
    inst_df = pd.DataFrame(rows)
    extra: dict[str, Any] = {
        "iterations": int(inst_df["iterations"].sum()),
        "dropped_by_reason": dropped["reason"].value_counts().to_dict() if len(dropped) else {},
        "mean_utilisation": float(inst_df["utilisation"].mean()),
    }
    summary = summarise(df, rec, num, slo, extra)
    notes = []
    if estimated:
        notes.append("estimated (not measured) step-time profile used for: " + ", ".join(sorted(set(estimated))))
    return SimResult(df, dropped, rec.timeline_frame(), inst_df, summary, wall_s, notes)
