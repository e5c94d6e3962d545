"""``llmsim`` command (also ``python -m llmsim``): a Hydra app over conf/ that runs one simulation and prints its
summary; after a multirun, the command that reads the sweep back."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from llmsim.cli.hydra_app import discard_run_dir, one_line, quiet_on_closed_pipe
from llmsim.compiled import engine_name
from llmsim.errors import LLMSimError
from llmsim.metrics.report import empty_result_reason, print_summary
from llmsim.resources import conf_dir
from llmsim.simulation.from_config import run_from_config


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")
def _simulate(cfg: DictConfig) -> dict:
    out_dir = HydraConfig.get().runtime.output_dir
    try:
        plain = OmegaConf.to_container(cfg, resolve=True)
        out = plain.get("output") if isinstance(plain, dict) else None
        progress = bool(out.get("progress", True) if isinstance(out, dict) else True)
        res = run_from_config(plain, out_dir, progress=progress)  # type: ignore[arg-type]
    except (LLMSimError, OmegaConfBaseException) as e:
        discard_run_dir(Path(out_dir))  # a failed run leaves no folder of its own behind
        print(f"llmsim: error: {one_line(e)}", file=sys.stderr)
        raise SystemExit(2) from None
    empty = empty_result_reason(res.summary)
    if empty is not None:
        print(f"llmsim: error: {empty} (outputs: {out_dir})", file=sys.stderr)
        if HydraConfig.get().mode != RunMode.MULTIRUN:
            raise SystemExit(1)
        return res.summary  # a sweep goes on; the end-of-sweep message counts such jobs
    print_summary(res, title=f"llmsim: {cfg.policy.name} on {len(res.instances)} instances")
    print(f"outputs: {out_dir}  (wall {res.wall_s:.2f} s, {engine_name()} engine)")  # (python -m llmsim.compile status)
    return res.summary


class SweepReportCallback(Callback):
    """Hydra callback (``hydra.callbacks`` in conf/config.yaml): after ``llmsim -m ...``, print where the sweep is
    and the exact command that turns it into sweep.csv / sweep.png, since Hydra itself only prints job lines."""

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
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
        print(f"report: python -m llmsim.cli.report {shlex.quote(sweep_dir)}")
        sys.stdout.flush()
        if empty:
            raise SystemExit(1)  # the whole sweep ran; its exit status still says that part of it is empty


def main() -> None:
    quiet_on_closed_pipe(_simulate)


if __name__ == "__main__":
    main()
