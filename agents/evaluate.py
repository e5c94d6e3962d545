"""``python -m llmsim.agents.evaluate`` (``llmsim-evaluate``): learned routers and llmsim heuristics on test seeds.

Two modes. Plain: every policy on one env (the ``env`` group with ``env_overrides``) over ``seeds`` (default the
test seeds 2000-2004); writes evaluation.json / .md / .png. Suite (``suite=unseen``): every scenario of the env's
testbed in conf/suite/<testbed>.yaml, every applicable heuristic, the best heuristic chosen per scenario, paired
gains with bootstrap intervals; writes suite.json / .md / .png (llmsim.agents.suite).

Every request counts (llmsim.agents.accounting); seeds: training < 1000, validation 1000-1999 (checkpoint and preset
choice), test >= 2000 (reports; llmsim.agents.seeds). Python API, kept here for its callers: :func:`evaluate`,
:func:`evaluate_described` (llmsim.agents.episodes), the policy specs (llmsim.agents.policy_specs), :func:`run_app`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from llmsim.agents.episodes import (
    DEFAULT_SEEDS,
    env_config,
    evaluate,
    evaluate_described,
    held_out_seeds,
    positive_int,
    workload_digest,
    workload_seed,
)
from llmsim.agents.evaluate_report import write_outputs
from llmsim.agents.policy_specs import (
    AUTO_BASELINES,
    baseline_specs,
    checkpoint_specs,
    normalise_spec,
    policy_env_cfg,
    spec_label,
)
from llmsim.agents.router_options import router_kwargs
from llmsim.agents.seeds import seed_splits
from llmsim.agents.suite import run_suite
from llmsim.agents.suite_config import SuiteChoice
from llmsim.cli.hydra_app import run_hydra_app
from llmsim.errors import ConfigError
from llmsim.schema import Schema

__all__ = ["AUTO_BASELINES", "DEFAULT_SEEDS", "EvaluateConfig", "baseline_specs", "checkpoint_specs", "env_config",
           "evaluate", "evaluate_described", "held_out_seeds", "main", "normalise_spec", "policy_env_cfg",
           "router_kwargs", "run_app", "workload_digest", "workload_seed"]

PROG = "llmsim-evaluate"
REFERENCE = "round_robin"


class EvaluateConfig(Schema):
    """conf/evaluate.yaml: what ``llmsim-evaluate`` reads (the values are checked by the functions below, which
    the Python API shares, so a bad seed list or job count reads the same from both)."""

    where: ClassVar[str] = ""
    env: dict[str, Any] = Field(default_factory=dict)
    checkpoints: Any = None  # directories, or a mapping label -> directory
    baselines: Any = "auto"  # auto, all, none, or routers
    seeds: Any = Field(default_factory=lambda: list(DEFAULT_SEEDS))
    episodes_per_seed: Any = 1
    env_overrides: dict[str, Any] | None = None
    jobs: Any = 1
    reference: str = REFERENCE
    progress: bool = True
    plots: bool = True
    suite: dict[str, Any] | None = None  # conf/suite/unseen.yaml when suite=unseen


def run_app(cfg: Mapping[str, Any], out_dir: str | Path, quiet: bool = False) -> list[dict[str, Any]]:
    """The whole app on a plain (resolved) config: evaluate (or run the suite), write the outputs, print the table."""
    c = EvaluateConfig.parse(cfg)
    if c.suite is not None:
        return run_suite_app(c, cfg, Path(out_dir), quiet)
    env_cfg = env_config(c.env, c.env_overrides)
    env_id = str(env_cfg.get("id", "routing"))
    seeds = held_out_seeds(c.seeds)
    specs = checkpoint_specs(c.checkpoints) + baseline_specs(c.baselines, env_id)
    jobs = positive_int(c.jobs, "jobs")
    episodes = positive_int(c.episodes_per_seed, "episodes_per_seed")
    check_reference(c.reference, specs)
    t0 = time.perf_counter()
    rows, described = evaluate_described(env_cfg, specs, seeds, jobs, episodes_per_seed=episodes,
                                          progress=c.progress)
    meta = {"env_id": env_id, "env": env_cfg, "seeds": seeds, "seed_splits": seed_splits(seeds),
            "episodes_per_seed": episodes, "jobs": jobs, "policies": described, "reference": c.reference,
            "wall_s": time.perf_counter() - t0, "config": dict(cfg)}
    md = write_outputs(rows, meta, Path(out_dir), plots=c.plots)
    if not quiet:
        print(md, end="")
    return rows


def check_reference(reference: str, specs: list[Any]) -> None:
    """A reference named on purpose must be one of the policies evaluated: a misspelt one would otherwise cost a
    whole evaluation with no gains. The default (round_robin) left out only notes that there are no gains."""
    labels = [spec_label(s) for s in specs]
    if reference == REFERENCE or reference in labels or None in labels:  # None: a missing checkpoint, refused later
        return
    raise ConfigError(f"reference: {reference!r} is not a policy of this evaluation; expected one of "
                      f"{list(dict.fromkeys(labels))}")


def run_suite_app(c: EvaluateConfig, cfg: Mapping[str, Any], out_dir: Path, quiet: bool) -> list[dict[str, Any]]:
    """``suite=unseen``: the suite's own seeds, requests and scenarios; plain-mode keys that would be ignored fail."""
    if c.env_overrides:
        raise ConfigError("env_overrides: not used with suite=...: each scenario sets its own env (conf/suite/"
                          "<testbed>.yaml); use env.KEY=VALUE to change every scenario's base")
    if c.episodes_per_seed != 1 or c.seeds != list(DEFAULT_SEEDS):
        raise ConfigError("seeds, episodes_per_seed: the suite runs one episode per seed of its own (conf/suite/"
                          "<testbed>.yaml sizes); set suite.seeds instead")
    if c.reference != REFERENCE:
        raise ConfigError("reference: the suite's reference is the best heuristic of each scenario; drop reference=")
    choice = SuiteChoice.parse(c.suite)
    specs = checkpoint_specs(c.checkpoints)
    baselines = "all" if c.baselines == "auto" else c.baselines
    env_id = str(c.env.get("id", "routing"))
    return run_suite(dict(c.env), choice, specs, baseline_specs(baselines, env_id), positive_int(c.jobs, "jobs"),
                     out_dir, progress=c.progress, plots=c.plots, quiet=quiet, config=dict(cfg))


def main() -> None:
    def body(cfg: dict, out_dir: str) -> None:
        run_app(cfg, out_dir)
        print(f"outputs: {out_dir}")

    run_hydra_app("evaluate", PROG, body)


if __name__ == "__main__":
    main()
