"""``llmsim`` command: a Hydra app over conf/ that runs one simulation and prints its summary."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

_CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")


def run_from_config(cfg: dict[str, Any], out_dir: str | Path | None = None, progress: bool = False):
    """Build everything from a plain config dict, simulate, save outputs; returns the SimResult."""
    from llmsim.config import instances_from_config, sim_options, slo_from_config
    from llmsim.errors import ConfigError
    from llmsim.report import save_plots
    from llmsim.sim import simulate
    from llmsim.workload import build_workload

    allowed = {"cluster", "engine", "workload", "policy", "seed", "slo", "sim", "output"}
    unknown = sorted(set(cfg) - allowed)
    if unknown:
        raise ConfigError(f"config: unknown top-level key(s) {unknown}; allowed: {sorted(allowed)}")
    seed = int(cfg.get("seed", 0))
    instances = instances_from_config(cfg["cluster"], cfg.get("engine"))
    wcfg = dict(cfg["workload"])
    path = wcfg.get("path")
    if path and not Path(path).is_absolute() and not Path(path).exists():
        # conf/ paths like ../shared/traces are relative to the repository, wherever llmsim runs from
        repo_relative = Path(_CONF_DIR).parent / path
        if repo_relative.exists():
            wcfg["path"] = str(repo_relative)
    workload = build_workload(wcfg, seed)
    pol = dict(cfg.get("policy") or {"name": "round_robin"})
    name = pol.pop("name", "round_robin")
    kwargs = dict(pol.pop("kwargs", None) or {})
    if pol:
        raise ConfigError(f"policy: unknown key(s) {sorted(pol)}; allowed: ['kwargs', 'name']")
    total = cfg["workload"].get("num_requests") or cfg["workload"].get("max_requests")
    res = simulate(
        instances, workload, name, seed=seed, slo=slo_from_config(cfg.get("slo")), progress=progress,
        total=total, policy_kwargs=kwargs, **sim_options(cfg.get("sim")),
    )
    stats = getattr(workload, "stats", None)
    if stats is not None:
        skipped = dict(getattr(stats, "skipped", {}) or {})
        res.summary["workload_skipped"] = skipped
        if skipped:
            res.notes.append(f"workload rows skipped (counted, not simulated): {skipped}")
    out = cfg.get("output") or {}
    if out_dir is not None and out.get("save", True):
        res.save(out_dir, out.get("format", "csv"))
        if out.get("plots", True):
            save_plots(res, out_dir)
    return res


def _hydra_main() -> None:
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig, OmegaConf

    @hydra.main(version_base="1.3", config_path=_CONF_DIR, config_name="config")
    def _main(cfg: DictConfig) -> dict:
        from llmsim.errors import LLMSimError
        from llmsim.report import print_summary

        plain = OmegaConf.to_container(cfg, resolve=True)
        out_dir = HydraConfig.get().runtime.output_dir
        progress = bool(plain.get("output", {}).get("progress", True)) and sys.stderr.isatty()
        try:
            res = run_from_config(plain, out_dir, progress=progress)
        except LLMSimError as e:
            print(f"llmsim: error: {e}", file=sys.stderr)
            raise SystemExit(2) from None
        print_summary(res, title=f"llmsim: {cfg.policy.name} on {len(res.instances)} instances")
        print(f"outputs: {out_dir}  (wall {res.wall_s:.2f} s)")
        return res.summary

    _main()


def main() -> None:
    _hydra_main()


if __name__ == "__main__":
    main()
