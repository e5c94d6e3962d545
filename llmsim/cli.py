"""``llmsim`` command: a Hydra app over conf/ that runs one simulation and prints its summary."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

_CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")


def resolve_workload_path(workload: dict[str, Any]) -> dict[str, Any]:
    """conf/ paths like ../shared/traces are relative to the repository, wherever llmsim runs from."""
    wcfg = dict(workload)
    path = wcfg.get("path")
    if isinstance(path, str) and path and not Path(path).is_absolute() and not Path(path).exists():
        repo_relative = Path(_CONF_DIR).parent / path
        if repo_relative.exists():
            wcfg["path"] = str(repo_relative)
    return wcfg


def run_from_config(cfg: dict[str, Any], out_dir: str | Path | None = None, progress: bool = False):
    """Build everything from a plain config dict, simulate, save outputs; returns the SimResult."""
    from llmsim.config import instances_from_config
    from llmsim.report import save_plots
    from llmsim.schema import RunConfig
    from llmsim.sim import simulate
    from llmsim.workload import build_workload

    run = RunConfig.parse(cfg)
    instances = instances_from_config(run.cluster, run.engine)
    wcfg = resolve_workload_path(run.workload)
    workload = build_workload(wcfg, run.seed)
    total = wcfg.get("num_requests") or wcfg.get("max_requests")
    res = simulate(
        instances, workload, run.policy.name, seed=run.seed, slo=run.slo,
        progress=progress, total=total, policy_kwargs=dict(run.policy.kwargs), **run.sim.model_dump(),
    )
    stats = getattr(workload, "stats", None)
    if stats is not None:
        skipped = dict(getattr(stats, "skipped", {}) or {})
        res.summary["workload_skipped"] = skipped
        if skipped:
            res.notes.append(f"workload rows skipped (counted, not simulated): {skipped}")
    out = run.output
    if out_dir is not None and out.save:
        res.save(out_dir, out.format)
        if out.plots:
            save_plots(res, out_dir)
    return res


def _hydra_main() -> None:
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig, OmegaConf

    @hydra.main(version_base="1.3", config_path=_CONF_DIR, config_name="config")
    def _main(cfg: DictConfig) -> dict:
        from omegaconf.errors import OmegaConfBaseException

        from llmsim.errors import LLMSimError
        from llmsim.report import print_summary

        out_dir = HydraConfig.get().runtime.output_dir
        try:
            plain = OmegaConf.to_container(cfg, resolve=True)
            out = plain.get("output") if isinstance(plain, dict) else None
            progress = bool(out.get("progress", True) if isinstance(out, dict) else True) and sys.stderr.isatty()
            res = run_from_config(plain, out_dir, progress=progress)
        except (LLMSimError, OmegaConfBaseException) as e:
            print(f"llmsim: error: {_one_line(e)}", file=sys.stderr)
            raise SystemExit(2) from None
        print_summary(res, title=f"llmsim: {res.summary.get('policy', cfg.policy.name)} on "
                                 f"{len(res.instances)} instances")
        print(f"outputs: {out_dir}  (wall {res.wall_s:.2f} s)")
        return res.summary

    _main()


def _one_line(e: BaseException) -> str:
    """OmegaConf errors span several lines (key, type, full key); configs errors are one line already."""
    return " ".join(str(e).split())


def main() -> None:
    _hydra_main()


if __name__ == "__main__":
    main()
