"""One simulation from a plain config mapping (what Hydra composes from conf/): build, simulate, save."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from llmsim.cluster.config import instances_from_config
from llmsim.engine.iteration import without_decode_skew
from llmsim.errors import ConfigError
from llmsim.metrics.plots import save_plots
from llmsim.metrics.result import SimResult
from llmsim.resources import repo_root
from llmsim.schema import RunConfig
from llmsim.simulation.run import simulate
from llmsim.workload import build_workload


def resolve_workload_path(workload: dict[str, Any]) -> dict[str, Any]:
    """A relative trace path is relative to the current directory; in a source checkout, conf/ presets'
    paths like ../shared/traces are also tried relative to the repository, wherever llmsim runs from."""
    wcfg = dict(workload)
    path = wcfg.get("path")
    root = repo_root()
    if isinstance(path, str) and path and not Path(path).is_absolute() and not Path(path).exists() and root:
        repo_relative = root / path
        if repo_relative.exists():
            wcfg["path"] = str(repo_relative)
    return wcfg


def stream_path(run: RunConfig, out_dir: str | Path | None) -> Path | None:
    """Where ``output.stream: parquet`` writes the requests (``requests.parquet`` in the run's directory)."""
    if run.output.stream is None:
        return None
    if out_dir is None or not run.output.save:
        raise ConfigError("output.stream: parquet writes requests.parquet into the run's directory; it needs "
                          "output.save: true and an output directory")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    return Path(out_dir) / "requests.parquet"


def run_from_config(cfg: dict[str, Any], out_dir: str | Path | None = None, progress: bool = False,
                    decode_skew: bool = True) -> SimResult:
    """Build everything from a plain config dict, simulate, save outputs; returns the SimResult.
    ``decode_skew=False`` leaves the profiles' skewed-decode term out (the summed-context model alone: what-if
    capacity searches, as ``profiles.replay --no-decode-skew``)."""
    run = RunConfig.parse(cfg)
    instances = instances_from_config(run.cluster, run.engine)
    if not decode_skew:
        instances = [dataclasses.replace(i, profile=without_decode_skew(i.build_profile())) for i in instances]
    wcfg = resolve_workload_path(run.workload)
    workload = build_workload(wcfg, run.seed)
    total = wcfg.get("num_requests") or wcfg.get("max_requests")
    res = simulate(
        instances, workload, run.policy.name, seed=run.seed, slo=run.slo,
        progress=progress, total=total, policy_kwargs=dict(run.policy.kwargs), **run.sim.model_dump(),
        stream_to=stream_path(run, out_dir),
    )
    out = run.output
    if out_dir is not None and out.save:
        res.save(out_dir, out.format)
        if out.plots and res.summary.get("completed"):
            save_plots(res, out_dir, slo=run.slo, label=f"{run.policy.name} on {len(instances)} instances")
    return res
