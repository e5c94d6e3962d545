"""Learned Best-Effort LLM Serving reproduction: sizes, the two trainings and the episodes (cells).

The hard-deadline router trains on conf/experiment/best_effort_hard.yaml and is fine-tuned with soft deadlines
(best_effort_soft.yaml). Static baselines run without an env, as experiments.testbeds.calibrate runs them: one model
size on every GPU with the whole GPU's memory (``llmsim.envs.testbeds.static_instances``), smallest-batch replica.
The learned routers run in ``llmsim/BestEffort-v0`` (co-located sizes) on the same workload seed, hence the same
requests.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from experiments.harness.pool import run_cells
from experiments.harness.training import checkpoint_dir, compose, train_one
from experiments.papers.best_effort import metrics as M
from llmsim.agents.checkpoint import CheckpointPolicy
from llmsim.agents.policy import run_episode
from llmsim.envs.tasks import best_effort_mixture
from llmsim.envs.testbeds import make_from_config, static_instances
from llmsim.envs.workloads import MixtureWorkload
from llmsim.simulation.run import simulate

PRESET = "best_effort"  # conf/experiment/<PRESET>_hard.yaml and _soft.yaml

MODELS = ("opt-125m", "opt-1.3b", "opt-6.7b")
STATICS: tuple[tuple[str, int], ...] = (("opt-125m", 4), ("opt-1.3b", 4), ("opt-6.7b", 4), ("opt-6.7b", 8))
RATES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 48.0)
BURSTY = ("bursty", "bursty2")
DEADLINE = 0.04
PAPER_WINDOW_RATIOS = {"bursty": {"0.98": 2.32, "0.96": 4.11, "0.94": 2.75},
                       "bursty2": {"0.98": 2.26, "0.96": 3.0, "0.94": 1.68}}


@dataclass(frozen=True)
class Size:
    """How much to train and measure; ``train_overrides`` are extra Hydra overrides of both trainings."""

    hard_steps: int | None  # None: the experiment preset's total_steps
    soft_steps: int | None
    rates: tuple[float, ...]
    min_requests: int       # requests per rate: max(min_requests, rate_seconds * rate)
    rate_seconds: float     # the paper serves 40 s per rate
    bursty_requests: int    # the paper's unpredictable workloads have 10,000 requests
    seeds: tuple[int, ...]  # held-out workload seeds of the stable sweep (the bursty runs use the first)
    train_overrides: tuple[str, ...] = field(default_factory=tuple)
SIZES = {
    "full": Size(None, None, RATES, 500, 40.0, 10_000, (1000, 1001, 1002)),
    "quick": Size(20_000, 8_000, (0.5, 2.0, 8.0, 32.0, 48.0), 300, 0.0, 3_000, (1000,),
                  ("env.num_requests=1000", "trainer.eval_every=10000", "trainer.eval_seeds=[1000]")),
    "tiny": Size(300, 150, (1.0, 48.0), 30, 0.0, 60, (1000,),
                 ("env.num_requests=60", "trainer.eval_every=0", "trainer.eval_seeds=[1000]",
                  "agent.learning_starts=100", "agent.batch_size=32", "agent.buffer_size=2000")),
}


def rate_requests(sz: Size, rate: float) -> int:
    return max(sz.min_requests, int(round(sz.rate_seconds * rate)))


def train_both(sz: Size, out_dir: Path, progress: bool) -> dict[str, Path]:
    """Hard-deadline training, then soft-deadline fine-tuning from the hard run's best checkpoint."""
    runs = {"hard": out_dir / "train_hard", "soft": out_dir / "train_soft"}
    common = [f"trainer.progress={str(progress).lower()}", *sz.train_overrides]
    hard = [f"+experiment={PRESET}_hard", *common]
    if sz.hard_steps is not None:
        hard.append(f"trainer.total_steps={sz.hard_steps}")
    train_one(compose(hard), str(runs["hard"]))
    soft = [f"+experiment={PRESET}_soft", f"trainer.init_from='{checkpoint_dir(runs['hard'])}'", *common]
    if sz.soft_steps is not None:
        soft.append(f"trainer.total_steps={sz.soft_steps}")
    train_one(compose(soft), str(runs["soft"]))
    return runs


@dataclass(frozen=True)
class Cell:
    """One episode: a learned router (``checkpoint``) or a static size on ``gpus`` GPUs, on one workload."""

    label: str
    workload: float | str  # a stable rate or a bursty schedule
    num_requests: int
    seed: int
    checkpoint: str | None = None
    soft: bool = False
    model: str | None = None
    gpus: int = 4


def _arrival(workload: float | str) -> dict[str, Any]:
    return {"kind": workload} if isinstance(workload, str) else {"kind": "stable", "rate": float(workload)}


def run_cell(cell: Cell) -> dict[str, Any]:
    """Simulate one cell; returns its per-request outcomes (arrival order) as lists."""
    t0 = time.perf_counter()
    if cell.checkpoint is not None:
        sched = cell.workload if isinstance(cell.workload, str) else "stable"
        rate = None if isinstance(cell.workload, str) else float(cell.workload)
        env = make_from_config({"id": "best_effort", "num_requests": cell.num_requests, "schedule": sched,
                                "rate": rate, "soft": cell.soft})
        run_episode(CheckpointPolicy(cell.checkpoint, cell.label), env, seed=cell.seed, workload_seed=cell.seed)
        reqs, models = env.episode_requests, list(env.instance_models)
    else:
        reqs = MixtureWorkload(best_effort_mixture(), _arrival(cell.workload)).requests(cell.seed, cell.num_requests)
        simulate(static_instances(str(cell.model), cell.gpus), reqs, "static_model", seed=cell.seed,
                 on_unservable="drop")
        models = [str(cell.model)] * cell.gpus
    out = M.request_outcomes(reqs, models, DEADLINE)
    return {"label": cell.label, "workload": cell.workload, "seed": cell.seed,
            "arrival0": float(reqs[0].arrival) if reqs else None,
            **{k: v.tolist() for k, v in out.items()}, "wall_s": time.perf_counter() - t0}


def one_torch_thread() -> None:
    """A worker's initializer: one torch thread per process (the workers share the cores)."""
    torch.set_num_threads(1)


def simulate_cells(cells: list[Cell], jobs: int, progress: bool) -> list[dict[str, Any]]:
    """Every cell, inline or in ``jobs`` spawned processes (torch); results in cell order. Not recorded for a
    resume: the learned routers' episodes evaluate checkpoints that a resumed run trains again."""
    return run_cells(run_cell, cells, jobs, progress, "best_effort episodes", spawn=True,
                     initializer=one_torch_thread, checkpoint=False)


def policy_labels() -> list[str]:
    return ["learned_hard", "learned_soft"] + [static_label(m, g) for m, g in STATICS]


def static_label(model: str, gpus: int) -> str:
    return f"{model}_x{gpus}"


def make_cells(sz: Size, ckpts: dict[str, Path]) -> list[Cell]:
    """The stable sweep (every rate x seed) and the two unpredictable workloads (first seed), all policies."""
    work: list[tuple[float | str, int, int]] = [(r, rate_requests(sz, r), s) for r in sz.rates for s in sz.seeds]
    work += [(b, sz.bursty_requests, sz.seeds[0]) for b in BURSTY]
    cells = []
    for w, n, s in work:
        cells.append(Cell("learned_hard", w, n, s, checkpoint=str(ckpts["hard"])))
        cells.append(Cell("learned_soft", w, n, s, checkpoint=str(ckpts["soft"]), soft=True))
        cells += [Cell(static_label(m, g), w, n, s, model=m, gpus=g) for m, g in STATICS]
    return cells
