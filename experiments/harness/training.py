"""What the papers with learned routers share: training runs from the experiment presets, their checkpoints, and
the evaluation of checkpoints next to heuristics on held-out seeds (llmsim.agents.train / evaluate underneath).

Only the reproductions that train import this module (it needs the ``rl`` extra: torch).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from omegaconf import OmegaConf

from experiments.harness.pool import starmap_cells
from llmsim.agents.evaluate import evaluate_described, held_out_seeds
from llmsim.agents.evaluate_report import summarise, write_outputs
from llmsim.agents.train import train
from llmsim.errors import ConfigError
from llmsim.resources import conf_dir


# ---------------------------------------------------------------------- configs and training runs
def compose(overrides: Sequence[str]) -> dict[str, Any]:
    """conf/train.yaml with ``overrides``, as a plain dict (what llmsim.agents.train.train takes)."""
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = hydra_compose(config_name="train", overrides=list(overrides))
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def compose_experiment(experiment: str, overrides: Sequence[str]) -> dict[str, Any]:
    """conf/train.yaml with ``+experiment=<experiment>`` (a conf/experiment preset) and ``overrides``."""
    return compose([f"+experiment={experiment}", *overrides])


def train_one(cfg: dict[str, Any], run_dir: str) -> dict[str, Any]:
    """One training run (module-level: it runs in a worker process when several train at once)."""
    meta = train(cfg, run_dir)
    return {k: meta.get(k) for k in ("label", "steps", "episodes", "wall_s", "best_score")}


def train_all(cfgs: Sequence[dict[str, Any]], dirs: Sequence[Path], workers: int, log: Callable[[str], None]) -> None:
    """Train each config into its directory, in ``workers`` spawned processes (or inline, where the trainer shows
    its own progress), logging each result."""
    metas = starmap_cells(train_one, [(c, str(d)) for c, d in zip(cfgs, dirs)], workers, workers > 1,
                          "training", spawn=True, checkpoint=False)  # a training run is not resumed half-way
    for m in metas:
        log(f"trained {m['label']}: {m['steps']:,} steps, {m['episodes']} episodes, {m['wall_s']:.0f} s")


# ---------------------------------------------------------------------- existing runs
def checkpoint_dir(path: str | Path) -> Path:
    """A checkpoint directory itself, or a training run directory's ``best/``."""
    p = Path(path).expanduser()
    for c in (p, p / "best"):
        if (c / "checkpoint.json").is_file():
            return c
    if not p.exists():
        raise ConfigError(f"--from-runs: {p}: no such directory")
    raise ConfigError(f"--from-runs: {p}: neither a checkpoint (checkpoint.json) nor a run directory with best/")


def read_meta(ckpt: Path) -> dict[str, Any]:
    """A checkpoint's checkpoint.json."""
    return json.loads((ckpt / "checkpoint.json").read_text())


def read_env(ckpt: Path) -> dict[str, Any]:
    """The env config a checkpoint was trained on."""
    env = read_meta(ckpt).get("env")
    if not isinstance(env, Mapping):
        raise ConfigError(f"{ckpt}: checkpoint.json records no env config")
    return dict(env)


def learning_curve(run: Path) -> list[dict[str, Any]]:
    """The in-training greedy evaluations of a run (training.json), or [] when absent."""
    f = Path(run) / "training.json"
    if not f.is_file():
        return []
    meta = json.loads(f.read_text())
    keep = ("step", "episode", "return", "wall_s")
    return [{k: e.get(k) for k in keep} for e in meta.get("evaluations", [])] + \
        [{"wall_s_total": meta.get("wall_s"), "steps": meta.get("steps")}]


# ---------------------------------------------------------------------- evaluation
def evaluate(env_cfg: dict[str, Any], specs: Sequence[Any], seeds: int, jobs: int, progress: bool, out_dir: Path,
             reference: str = "round_robin", **meta: Any) -> list[dict[str, Any]]:
    """Every policy spec (checkpoints and heuristics) on ``env_cfg`` over ``seeds`` held-out seeds; writes
    evaluation.json / .md / .png to ``out_dir`` (``meta`` goes into evaluation.json); the per-policy summary."""
    seed_list = held_out_seeds(seeds)
    t0 = time.perf_counter()
    rows, described = evaluate_described(env_cfg, list(specs), seed_list, jobs, progress=progress)
    body = {"env_id": env_cfg.get("id"), "env": env_cfg, "seeds": seed_list, "episodes_per_seed": 1, "jobs": jobs,
            "policies": described, "reference": reference, "wall_s": time.perf_counter() - t0, **meta}
    write_outputs(rows, body, out_dir)
    return summarise(rows, reference)
