"""``llmsim-capacity`` and ``llmsim-deploy``: the Hydra apps over conf/capacity.yaml and conf/deploy.yaml that run
:mod:`llmsim.planning`'s searches (``python -m llmsim.cli.planning capacity|deploy ...`` is the same)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig

from llmsim.cli.hydra_app import discard_run_dir, run_hydra_app
from llmsim.planning.capacity import base_config, group_label, run_capacity
from llmsim.planning.deploy import run_deploy


def planning_app(config_name: str, prog: str, body: Callable[[dict[str, Any], Path], None]) -> None:
    """A Hydra app over conf/<config_name>.yaml (:func:`llmsim.cli.hydra_app.run_hydra_app`: one-line errors, exit
    status 2) whose failed runs leave no output folder behind; a finished one prints where its outputs are."""

    def run(cfg: dict[str, Any], out_dir: str) -> None:
        out = Path(out_dir)
        try:
            body(cfg, out)
        except KeyboardInterrupt:  # Ctrl-C: a search is long, stopping it is normal use, not a crash
            discard_run_dir(out)
            print(f"{prog}: interrupted, nothing written", file=sys.stderr)
            raise SystemExit(130) from None
        print(f"outputs: {out}")

    run_hydra_app(config_name, prog, run)


def _capacity(cfg: dict[str, Any], out_dir: Path) -> None:
    choice = HydraConfig.get().runtime.choices.get("cluster")  # the preset's name labels its rows
    run_capacity(cfg, out_dir, cluster_label=group_label(choice, base_config(cfg)["cluster"]))


def _deploy(cfg: dict[str, Any], out_dir: Path) -> None:
    run_deploy(cfg, out_dir)


def capacity() -> None:
    planning_app("capacity", "llmsim-capacity", _capacity)


def deploy() -> None:
    planning_app("deploy", "llmsim-deploy", _deploy)


if __name__ == "__main__":
    # `python -m llmsim.cli.planning capacity|deploy OVERRIDES...`: the first word picks the app, Hydra reads the rest
    apps = {"capacity": capacity, "deploy": deploy}
    if len(sys.argv) < 2 or sys.argv[1] not in apps:
        print("usage: python -m llmsim.cli.planning capacity|deploy [OVERRIDES...]", file=sys.stderr)
        raise SystemExit(2)
    app = apps[sys.argv.pop(1)]
    app()
