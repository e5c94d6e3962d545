"""``llmsim`` command: a Hydra app over conf/ that runs one simulation and prints its summary."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import OmegaConf

from llmsim.resources import conf_dir, repo_root


def presets(group: str) -> str:
    """The options of a config group, "a100x4, hetero, ...": conf/<group>/*.yaml, for ``llmsim --help``
    (wrapped to 100 columns, continuation lines indented under the first option)."""
    import textwrap

    names = ", ".join(sorted(p.stem for p in (conf_dir() / group).glob("*.yaml"))) or "(none)"
    return textwrap.fill(names, width=90, subsequent_indent=" " * 10, break_on_hyphens=False)


# `${llmsim_presets:GROUP}` in conf/config.yaml's hydra.help.template (resolved only when the help is printed)
OmegaConf.register_new_resolver("llmsim_presets", presets, replace=True)


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


def run_from_config(cfg: dict[str, Any], out_dir: str | Path | None = None, progress: bool = False):
    """Build everything from a plain config dict, simulate, save outputs; returns the SimResult."""
    from llmsim.cluster.config import instances_from_config
    from llmsim.metrics.report import save_plots
    from llmsim.schema import RunConfig
    from llmsim.simulation.run import simulate
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
        if out.plots and res.summary.get("completed"):
            save_plots(res, out_dir, slo=run.slo, label=f"{run.policy.name} on {len(instances)} instances")
    return res


def _hydra_main() -> None:
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig

    @hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")
    def _main(cfg: DictConfig) -> dict:
        from hydra.types import RunMode
        from omegaconf.errors import OmegaConfBaseException

        from llmsim.errors import LLMSimError
        from llmsim.metrics.report import empty_result_reason, print_summary

        out_dir = HydraConfig.get().runtime.output_dir
        try:
            plain = OmegaConf.to_container(cfg, resolve=True)
            out = plain.get("output") if isinstance(plain, dict) else None
            progress = bool(out.get("progress", True) if isinstance(out, dict) else True)
            res = run_from_config(plain, out_dir, progress=progress)
        except (LLMSimError, OmegaConfBaseException) as e:
            print(f"llmsim: error: {_one_line(e)}", file=sys.stderr)
            raise SystemExit(2) from None
        empty = empty_result_reason(res.summary)
        if empty is not None:
            print(f"llmsim: error: {empty} (outputs: {out_dir})", file=sys.stderr)
            if HydraConfig.get().mode != RunMode.MULTIRUN:
                raise SystemExit(1)
            return res.summary  # a sweep goes on; the end-of-sweep message counts such jobs
        print_summary(res, title=f"llmsim: {cfg.policy.name} on {len(res.instances)} instances")
        print(f"outputs: {out_dir}  (wall {res.wall_s:.2f} s)")
        return res.summary

    _main()


class SweepReportCallback(Callback):
    """Hydra callback (``hydra.callbacks`` in conf/config.yaml): after ``llmsim -m ...``, print where the sweep is
    and the exact command that turns it into sweep.csv / sweep.png, since Hydra itself only prints job lines."""

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        import json
        import shlex

        if "capacity" in config:  # llmsim-capacity composes this config too; its sweeps are not llmsim runs
            return
        sweep_dir = str(config.hydra.sweep.dir)
        summaries = sorted(Path(sweep_dir).glob("*/summary.json"))
        empty = 0
        for s in summaries:
            try:
                empty += not json.loads(s.read_text()).get("completed")
            except (OSError, ValueError):
                empty += 1
        print(f"sweep: {len(summaries)} runs in {sweep_dir}")
        if empty:
            print(f"sweep: {empty} of them completed no request (their error lines are above); exit status 1")
        print(f"report: python -m llmsim.metrics.report {shlex.quote(sweep_dir)}")
        sys.stdout.flush()
        if empty:
            raise SystemExit(1)  # the whole sweep ran; its exit status still says that part of it is empty


def _one_line(e: BaseException) -> str:
    """OmegaConf errors span several lines (key, type, full key); configs errors are one line already."""
    return " ".join(str(e).split())


def main() -> None:
    _quiet_on_closed_pipe(_hydra_main)


def reproduce() -> None:
    """``llmsim-reproduce``: the paper reproductions live in a source checkout's ``experiments/`` (not in the
    wheel); found beside this package, they run, else one line says what is needed."""
    from llmsim.resources import experiments_dir

    root = experiments_dir()
    if root is None:
        print("llmsim-reproduce: error: the reproductions live in the source checkout's experiments/ folder, which "
              "an installed wheel does not ship; run it from a checkout: git clone <llmsim repository> && "
              "pip install -e '.[rl]' && llmsim-reproduce --help", file=sys.stderr)
        raise SystemExit(2)
    if str(root.parent) not in sys.path:
        sys.path.insert(0, str(root.parent))
    from experiments.reproduce import main as run  # optional: only in a source checkout (above)

    raise SystemExit(run())


def _quiet_on_closed_pipe(fn: Callable[[], None]) -> None:
    try:
        fn()
    except BrokenPipeError:  # `llmsim --help | head`: the reader left; no traceback for that
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None


def run_hydra_app(config_name: str, prog: str, body: Callable[[dict, str], None]) -> None:
    """A console app over conf/<config_name>.yaml (llmsim-train, llmsim-evaluate): ``body(plain config, run
    directory)``. Config and llmsim errors print one line ``prog: error: ...`` and exit 2; a closed pipe exits 1."""
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig
    from omegaconf.errors import OmegaConfBaseException

    from llmsim.errors import LLMSimError

    @hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name=config_name)
    def _main(cfg: DictConfig) -> None:
        out_dir = HydraConfig.get().runtime.output_dir
        try:
            body(OmegaConf.to_container(cfg, resolve=True), out_dir)  # type: ignore[arg-type]
        except (LLMSimError, OmegaConfBaseException) as e:
            print(f"{prog}: error: {_one_line(e)}", file=sys.stderr)
            raise SystemExit(2) from None

    _quiet_on_closed_pipe(_main)


if __name__ == "__main__":
    main()
