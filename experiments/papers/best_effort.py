"""``llmsim-reproduce spec002``: spec 002 (Learned Best-Effort LLM Serving) end to end on the simulator.

Trains the hard-deadline router (conf/experiment/spec002_hard.yaml), fine-tunes it with soft deadlines
(spec002_soft.yaml), then measures the paper's claims against static single-size serving on identical
requests: availability vs arrival rate (Fig. 2), sliding 20-request windows near peak on the two
unpredictable workloads (Tables 3-4), hardware utility vs OPT-6.7B on 8 GPUs (Sec. 4.6) and the soft
policy's extra OPT-6.7B use (Table 2). The metrics themselves are pure functions in experiments/papers/best_effort_metrics.py.

Static baselines run without an env, as experiments.testbeds.calibrate runs them: one model size on every GPU with the whole
GPU's memory (``llmsim.envs.testbeds.static_instances``), smallest-batch replica. The learned routers run in
``llmsim/BestEffort-v0`` (co-located sizes) on the same workload seed, hence the same requests.

Sizes: ``full`` (the experiment presets' steps, the paper's grid), ``quick`` and ``test`` (a seconds-long
smoke run); ``run(size=...)`` or the environment variable ``LLMSIM_SPEC002_SIZE`` overrides ``quick``.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from experiments.papers import best_effort_metrics as M
from llmsim.errors import ConfigError

PAPER = "spec002"
MODELS = ("opt-125m", "opt-1.3b", "opt-6.7b")
STATICS: tuple[tuple[str, int], ...] = (("opt-125m", 4), ("opt-1.3b", 4), ("opt-6.7b", 4), ("opt-6.7b", 8))
RATES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 48.0)
BURSTY = ("bursty", "bursty2")
DEADLINE = 0.04
# Tables 3-4: the policy's window counts over OPT-6.7B's (stated ratios)
PAPER_WINDOW_RATIOS = {"bursty": {"0.98": 2.32, "0.96": 4.11, "0.94": 2.75},
                       "bursty2": {"0.98": 2.26, "0.96": 3.0, "0.94": 1.68}}
SIZE_ENV = "LLMSIM_SPEC002_SIZE"


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
                  ("env.num_requests=1000", "trainer.eval_every=10000", "trainer.eval_seeds=[500]")),
    "test": Size(300, 150, (1.0, 48.0), 30, 0.0, 60, (1000,),
                 ("env.num_requests=60", "trainer.eval_every=0", "trainer.eval_seeds=[500]",
                  "agent.learning_starts=100", "agent.batch_size=32", "agent.buffer_size=2000")),
}


def rate_requests(sz: Size, rate: float) -> int:
    return max(sz.min_requests, int(round(sz.rate_seconds * rate)))


# ---------------------------------------------------------------------- training
def compose(overrides: list[str]) -> dict[str, Any]:
    """conf/train.yaml with ``overrides``, as a plain dict (what llmsim.agents.train.train takes)."""
    from hydra import compose as hcompose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    from llmsim.resources import conf_dir

    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        cfg = hcompose("train", overrides=overrides)
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def checkpoint_dir(run: str | Path) -> Path:
    """A run directory's best/ checkpoint (or the directory itself when it is a checkpoint)."""
    p = Path(run)
    return p if (p / "checkpoint.json").is_file() else p / "best"


def train_both(sz: Size, out_dir: Path, progress: bool) -> dict[str, Path]:
    """Hard-deadline training, then soft-deadline fine-tuning from the hard run's best checkpoint."""
    from llmsim.agents.train import train

    runs = {"hard": out_dir / "train_hard", "soft": out_dir / "train_soft"}
    common = [f"trainer.progress={str(progress).lower()}", *sz.train_overrides]
    hard = ["+experiment=spec002_hard", *common]
    if sz.hard_steps is not None:
        hard.append(f"trainer.total_steps={sz.hard_steps}")
    train(compose(hard), runs["hard"])
    soft = ["+experiment=spec002_soft", f"trainer.init_from='{checkpoint_dir(runs['hard'])}'", *common]
    if sz.soft_steps is not None:
        soft.append(f"trainer.total_steps={sz.soft_steps}")
    train(compose(soft), runs["soft"])
    return runs


def learning_curve(run: Path) -> list[dict[str, Any]]:
    """The in-training greedy evaluations of a run (training.json), or [] when absent."""
    f = Path(run) / "training.json"
    if not f.is_file():
        return []
    meta = json.loads(f.read_text())
    keep = ("step", "episode", "return", "wall_s")
    return [{k: e.get(k) for k in keep} for e in meta.get("evaluations", [])] + \
        [{"wall_s_total": meta.get("wall_s"), "steps": meta.get("steps")}]


# ---------------------------------------------------------------------- episodes
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
        from llmsim.agents.checkpoint import CheckpointPolicy
        from llmsim.agents.policy import run_episode
        from llmsim.envs.testbeds import make_from_config

        sched = cell.workload if isinstance(cell.workload, str) else "stable"
        rate = None if isinstance(cell.workload, str) else float(cell.workload)
        env = make_from_config({"id": "best_effort", "num_requests": cell.num_requests, "schedule": sched,
                                "rate": rate, "soft": cell.soft})
        run_episode(CheckpointPolicy(cell.checkpoint, cell.label), env, seed=cell.seed, workload_seed=cell.seed)
        reqs, models = env.episode_requests, list(env.instance_models)
    else:
        from llmsim.envs.tasks import best_effort_mixture
        from llmsim.envs.testbeds import static_instances
        from llmsim.envs.workloads import MixtureWorkload
        from llmsim.simulation.run import simulate

        reqs = MixtureWorkload(best_effort_mixture(), _arrival(cell.workload)).requests(cell.seed, cell.num_requests)
        simulate(static_instances(str(cell.model), cell.gpus), reqs, "static_model", seed=cell.seed,
                 on_unservable="drop")
        models = [str(cell.model)] * cell.gpus
    out = M.request_outcomes(reqs, models, DEADLINE)
    return {"label": cell.label, "workload": cell.workload, "seed": cell.seed,
            "arrival0": float(reqs[0].arrival) if reqs else None,
            **{k: v.tolist() for k, v in out.items()}, "wall_s": time.perf_counter() - t0}


def _worker_init() -> None:
    import torch

    torch.set_num_threads(1)


def run_cells(cells: list[Cell], jobs: int, progress: bool) -> list[dict[str, Any]]:
    """Every cell, inline or in ``jobs`` spawned processes; results in cell order."""
    from tqdm import tqdm

    bar = tqdm(total=len(cells), desc="spec002 episodes", unit="ep", file=sys.stderr, disable=not progress)
    try:
        if jobs <= 1:
            res = []
            for c in cells:
                res.append(run_cell(c))
                bar.update(1)
            return res
        import multiprocessing as mp

        with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"),
                                 initializer=_worker_init) as ex:
            futures = [ex.submit(run_cell, c) for c in cells]
            for f in futures:
                f.add_done_callback(lambda _f: bar.update(1))
            return [f.result() for f in futures]
    finally:
        bar.close()


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


# ---------------------------------------------------------------------- analysis
def sweep_table(results: list[dict[str, Any]], rates: tuple[float, ...]) -> dict[str, dict[str, Any]]:
    """Per policy and rate (means over seeds): deadline-met share, hard / soft utility, model shares, and per
    task the OPT-6.7B share (Table 2)."""
    table: dict[str, dict[str, Any]] = {}
    for lab in policy_labels():
        rows = {}
        for r in rates:
            cs = [c for c in results if c["label"] == lab and c["workload"] == r]
            met = [float(np.mean(c["met"])) for c in cs]
            uh = [float(np.mean(c["utility_hard"])) for c in cs]
            us = [float(np.mean(c["utility_soft"])) for c in cs]
            models = sum((c["model"] for c in cs), [])
            tasks = sum((c["task"] for c in cs), [])
            per_task = {t: M.model_shares([m for m, tt in zip(models, tasks) if tt == t], ["opt-6.7b"])["opt-6.7b"]
                        for t in sorted(set(tasks))}
            rows[str(r)] = {"met": float(np.mean(met)), "met_std": float(np.std(met)),
                            "utility_hard": float(np.mean(uh)), "utility_hard_std": float(np.std(uh)),
                            "utility_soft": float(np.mean(us)),
                            "shares": M.model_shares(models, MODELS), "task_6.7b_share": per_task}
        table[lab] = rows
    return table


def window_table(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Tables 3-4 for each unpredictable workload and policy (hard utility; soft for the soft policy too)."""
    out: dict[str, dict[str, Any]] = {}
    for b in BURSTY:
        out[b] = {}
        for c in (c for c in results if c["workload"] == b):
            out[b][c["label"]] = M.window_counts(c["utility_hard"])
            if c["label"] == "learned_soft":
                out[b]["learned_soft (soft utility)"] = M.window_counts(c["utility_soft"])
                out[b]["opt-6.7b_x4 (soft utility)"] = M.window_counts(
                    next(x for x in results if x["workload"] == b and x["label"] == "opt-6.7b_x4")["utility_soft"])
    return out


def hw_table(results: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Sec. 4.6: the hard policy on 4 GPUs vs OPT-6.7B on 8 GPUs, on each unpredictable workload; static
    OPT-1.3B on 4 GPUs against the same baseline is the control (what needs no learning)."""
    out = {}
    for b in BURSTY:
        cell = {c["label"]: c for c in results if c["workload"] == b}
        base = cell["opt-6.7b_x8"]["utility_hard"]
        out[b] = M.hardware_utility(cell["learned_hard"]["utility_hard"], 4, base, 8)
        out[f"{b} (control: opt-1.3b_x4)"] = M.hardware_utility(cell["opt-1.3b_x4"]["utility_hard"], 4, base, 8)
    return out


def _claim(claim: str, paper_value: Any, measured: Any, verdict: str, note: str = "") -> dict[str, Any]:
    d = {"paper": PAPER, "claim": claim, "paper_value": paper_value, "measured": measured, "verdict": verdict}
    if note:
        d["note"] = note
    return d


def availability_claims(sweep: dict[str, dict[str, Any]], rates: tuple[float, ...]) -> list[dict[str, Any]]:
    """Availability (deadline-met share >= 95 % at every rate up to it) and utility vs the best static size."""
    av = {lab: M.availability(rates, [sweep[lab][str(r)]["met"] for r in rates]) for lab in sweep}
    ratio = M.ratio(av["learned_hard"], av["opt-6.7b_x4"])
    v = M.verdict_more_often(ratio, 10.0, tolerance=1.0)
    best_static = [max(sweep[static_label(m, 4)][str(r)]["utility_hard"] for m in MODELS) for r in rates]
    rel = [sweep["learned_hard"][str(r)]["utility_hard"] / b if b > 0 else math.nan
           for r, b in zip(rates, best_static)]
    worst = float(np.nanmin(rel))
    v2 = "reproduced" if worst >= 0.95 else ("partly" if worst >= 0.8 else "not")
    return [
        _claim("availability vs static OPT-6.7B (x higher rate)", "> 10", round(ratio, 2), v,
               f"available = >= {M.AVAILABLE_MET:.0%} deadlines met at every grid rate up to it; learned "
               f"{av['learned_hard']} req/s, OPT-6.7B {av['opt-6.7b_x4']} req/s, OPT-1.3B {av['opt-1.3b_x4']}, "
               f"OPT-125M {av['opt-125m_x4']} (grid {list(rates)})"),
        _claim("hard policy tracks the best static size at every rate (min utility ratio)", "~1.0 (Fig. 2)",
               round(worst, 3), v2, "ratio of mean utility to the best static 4-GPU size, worst grid rate; "
               + ", ".join(f"{r}: {x:.2f}" for r, x in zip(rates, rel))),
    ]


def window_claims(windows: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for b, paper in PAPER_WINDOW_RATIOS.items():
        for thr, pv in paper.items():
            pol, base = windows[b]["learned_hard"], windows[b]["opt-6.7b_x4"]
            r = M.ratio(pol["counts"][thr], base["counts"][thr])
            out.append(_claim(f"{b}: 20-request windows >= {float(thr):.0%} of peak, learned vs OPT-6.7B (x)", pv,
                              round(r, 2) if math.isfinite(r) else str(r), M.verdict_more_often(r, pv),
                              f"{pol['counts'][thr]} vs {base['counts'][thr]} of {pol['windows']} sliding windows"))
    return out


def hw_claims(hw: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    h = hw["bursty"]
    return [
        _claim("bursty: hardware utility, learned (4 GPUs) vs OPT-6.7B (8 GPUs) (x)", 3.94, round(h["ratio"], 2),
               M.verdict_more_often(h["ratio"], 3.94), f"mean windowed utility per GPU {h['policy_per_gpu']:.3f} vs "
               f"{h['base_per_gpu']:.3f}; bursty2: {hw['bursty2']['ratio']:.2f}x; static OPT-1.3B on 4 GPUs: "
               f"{hw['bursty (control: opt-1.3b_x4)']['ratio']:.2f}x"),
        _claim("bursty: share of windows with higher hardware utility than 8-GPU OPT-6.7B", 0.9703,
               round(h["higher_frac"], 4), "reproduced" if h["higher_frac"] >= 0.9 else
               ("partly" if h["higher_frac"] > 0.5 else "not")),
    ]


def soft_claim(sweep: dict[str, dict[str, Any]], rates: tuple[float, ...]) -> dict[str, Any]:
    """Table 2: the soft policy sends HellaSwag to OPT-6.7B more (Riemann sum over the rate grid)."""
    def usage(lab: str) -> float:
        return M.riemann_usage(rates, [sweep[lab][str(r)]["task_6.7b_share"].get("hellaswag", 0.0) for r in rates])

    h, s = usage("learned_hard"), usage("learned_soft")
    change = M.ratio(s - h, h) * 100 if h > 0 else (math.inf if s > 0 else math.nan)
    v = "reproduced" if change >= 35 else ("partly" if change > 0 else "not")
    return _claim("soft deadlines raise HellaSwag's OPT-6.7B usage (%)", "+52", round(change, 1)
                  if math.isfinite(change) else str(change), v,
                  f"Riemann sum over the grid: hard {h:.3f}, soft {s:.3f} (paper 2.53 -> 3.86 on its grid)")


# ---------------------------------------------------------------------- reports
def write_report(out_dir: Path, report: dict[str, Any]) -> None:
    """results.json, results.md and availability.png in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out_dir / "results.md").write_text(markdown(report))
    plot_sweep(report["sweep"], tuple(report["size"]["rates"]), out_dir / "availability.png")


def markdown(report: dict[str, Any]) -> str:
    rates = report["size"]["rates"]
    labs = policy_labels()
    lines = [f"# spec 002 reproduction ({report['size_name']})", "",
             "## Claims", "", "| claim | paper | measured | verdict | note |", "|---|---|---|---|---|"]
    lines += [f"| {c['claim']} | {c['paper_value']} | {c['measured']} | {c['verdict']} | {c.get('note', '')} |"
              for c in report["claims"]]
    for key, title in (("met", "deadline-met share"), ("utility_hard", "mean utility, hard deadlines"),
                       ("utility_soft", "mean utility, soft deadlines")):
        lines += ["", f"## Stable sweep: {title} (mean over seeds {report['size']['seeds']})", "",
                  "| rate | " + " | ".join(labs) + " |", "|---" * (len(labs) + 1) + "|"]
        lines += [f"| {r} | " + " | ".join(f"{report['sweep'][lab][str(r)][key]:.3f}" for lab in labs) + " |"
                  for r in rates]
    lines += ["", "## Model shares of the learned routers (125M / 1.3B / 6.7B)", "",
              "| rate | learned_hard | learned_soft |", "|---|---|---|"]
    for r in rates:
        cells = ["/".join(f"{report['sweep'][lab][str(r)]['shares'][m]:.2f}" for m in MODELS)
                 for lab in ("learned_hard", "learned_soft")]
        lines.append(f"| {r} | {cells[0]} | {cells[1]} |")
    for b, tab in report["windows"].items():
        thr = list(next(iter(tab.values()))["counts"])
        lines += ["", f"## {b}: sliding 20-request windows at >= x of peak (count / share)", "",
                  "| policy | " + " | ".join(thr) + " |", "|---" * (len(thr) + 1) + "|"]
        lines += [f"| {lab} | " + " | ".join(f"{w['counts'][t]} / {w['fractions'][t]:.3f}" for t in thr) + " |"
                  for lab, w in tab.items()]
    lines += ["", "## Hardware utility: learned (4 GPUs) vs OPT-6.7B (8 GPUs)", "",
              "| workload | learned / GPU | OPT-6.7B x8 / GPU | ratio | windows higher | overall ratio |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {b} | {h['policy_per_gpu']:.4f} | {h['base_per_gpu']:.4f} | {h['ratio']:.2f} | "
              f"{h['higher_frac']:.3f} | {h['overall_ratio']:.2f} |" for b, h in report["hardware_utility"].items()]
    lines += ["", f"Wall time: training {report['wall_s']['train']:.0f} s, evaluation "
              f"{report['wall_s']['evaluate']:.0f} s.", ""]
    return "\n".join(lines)


def plot_sweep(sweep: dict[str, dict[str, Any]], rates: tuple[float, ...], path: Path) -> None:
    """Fig. 2 left: mean utility and deadline-met share vs arrival rate, every policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for lab in policy_labels():
        key = "utility_soft" if lab == "learned_soft" else "utility_hard"
        axes[0].plot(rates, [sweep[lab][str(r)][key] for r in rates], marker="o", label=lab)
        axes[1].plot(rates, [sweep[lab][str(r)]["met"] for r in rates], marker="o", label=lab)
    for ax, yl in zip(axes, ("mean utility (soft policy: soft)", "deadline-met share")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("arrival rate (req/s)")
        ax.set_ylabel(yl)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[1].axhline(M.AVAILABLE_MET, color="grey", ls="--", lw=0.8)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------- entry point
def run(quick: bool, out_dir: Path, jobs: int, progress: bool, from_runs: dict | None = None,
        size: str | None = None) -> list[dict]:
    """Train (unless ``from_runs`` = {"hard": run dir, "soft": run dir}), measure, write out_dir; the claims."""
    name = size or os.environ.get(SIZE_ENV) or ("quick" if quick else "full")
    if name not in SIZES:
        raise ConfigError(f"LLMSIM_SPEC002_SIZE={name!r}: expected one of {sorted(SIZES)}")
    sz = SIZES[name]
    out_dir = Path(out_dir)
    t0 = time.perf_counter()
    runs = {k: Path(v) for k, v in from_runs.items()} if from_runs else train_both(sz, out_dir, progress)
    t1 = time.perf_counter()
    ckpts = {k: checkpoint_dir(runs[k]) for k in ("hard", "soft")}
    results = run_cells(make_cells(sz, ckpts), max(1, int(jobs)), progress)
    sweep, windows, hw = sweep_table(results, sz.rates), window_table(results), hw_table(results)
    claims = availability_claims(sweep, sz.rates) + window_claims(windows) + hw_claims(hw) + \
        [soft_claim(sweep, sz.rates)]
    note = (f"existing runs ({', '.join(f'{k}={v}' for k, v in runs.items())}), " if from_runs else "") + \
        f"the {name} evaluation grid: rates {list(sz.rates)} req/s"
    for c in claims:  # what every spec's rows state (the reproduction report reads them)
        c.update(setting="runs" if from_runs else name, setting_note=note, seeds=list(sz.seeds))
    report = {"size_name": name, "size": asdict(sz), "runs": {k: str(v) for k, v in runs.items()},
              "checkpoints": {k: str(v) for k, v in ckpts.items()}, "claims": claims, "sweep": sweep,
              "windows": windows, "hardware_utility": hw,
              "learning_curves": {k: learning_curve(v) for k, v in runs.items()},
              "same_requests": _same_requests(results),
              "wall_s": {"train": t1 - t0, "evaluate": time.perf_counter() - t1}}
    write_report(out_dir, report)
    return claims


def _same_requests(results: list[dict[str, Any]]) -> bool:
    """Whether every policy saw the same arrivals on each (workload, seed): a check on the comparison."""
    first: dict[tuple[Any, int], Any] = {}
    for c in results:
        key = (c["workload"], c["seed"])
        if first.setdefault(key, (c["arrival0"], c["task"])) != (c["arrival0"], c["task"]):
            return False
    return True


def main(argv: list[str] | None = None) -> None:
    """``python -m experiments.papers.best_effort --out DIR [--quick] [--jobs N] [--hard RUN --soft RUN]``."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m experiments.papers.best_effort", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="output directory (training runs, results.*)")
    ap.add_argument("--quick", action="store_true", help="the quick size (minutes instead of ~40 min)")
    ap.add_argument("--size", choices=sorted(SIZES), default=None, help="overrides --quick")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes of the evaluation")
    ap.add_argument("--hard", help="an existing hard-deadline run directory (skips training)")
    ap.add_argument("--soft", help="an existing soft-deadline run directory (with --hard)")
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    if bool(a.hard) != bool(a.soft):
        ap.error("--hard and --soft go together")
    runs = {"hard": a.hard, "soft": a.soft} if a.hard else None
    claims = run(a.quick, a.out, a.jobs, not a.no_progress, runs, size=a.size)
    for c in claims:
        print(f"[{c['verdict']}] {c['claim']}: paper {c['paper_value']}, measured {c['measured']}")
    print(f"results: {a.out / 'results.md'}")


if __name__ == "__main__":
    main()
