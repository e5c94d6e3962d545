"""Running evaluation episodes: every (policy, seed, episode) on a fresh env with a pinned workload seed.

Every (policy, seed, episode) is one :func:`llmsim.agents.policy.run_episode` on a fresh env built from the same
config with the same workload seed, so every policy is judged on identical requests (same arrivals, lengths
and tasks; the ``workload_digest`` column says so) under the same decision points and reward. Rows are a pure
function of the config: the number of worker processes (``jobs``) changes only ``wall_s``. Every request counts
in a row's latency statistics (llmsim.agents.accounting). Seeds: llmsim.agents.seeds (reports use test seeds).
"""

from __future__ import annotations

import hashlib
import math
import multiprocessing as mp
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from llmsim.agents.accounting import env_latency_stats, env_utility
from llmsim.agents.env_setup import make_env
from llmsim.agents.policy import run_episode
from llmsim.agents.policy_specs import (
    PolicySpec,
    build_policy,
    describe,
    normalise_spec,
    policy_env_cfg,
    rekeyed,
)
from llmsim.agents.seeds import DEFAULT_TEST_SEEDS, TEST_SEED0, resolve_seeds
from llmsim.agents.suite_config import merge
from llmsim.envs.qos_metrics import env_qos
from llmsim.envs.routing_env import RoutingEnv
from llmsim.errors import ConfigError

DEFAULT_SEEDS = DEFAULT_TEST_SEEDS


# ---------------------------------------------------------------------- env config and seeds
def env_config(env: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The env group's config with ``env_overrides`` merged in (mappings merge key by key)."""
    if not isinstance(env, Mapping):
        raise ConfigError(f"env: expected a mapping of env options, got {env!r}")
    if overrides is not None and not isinstance(overrides, Mapping):
        raise ConfigError(f"env_overrides: expected a mapping of env options, got {overrides!r}")
    return merge(dict(env), dict(overrides or {}))


def held_out_seeds(seeds: Any) -> list[int]:
    """A list of seeds, or a count n meaning the n test seeds from TEST_SEED0 (2000)."""
    return resolve_seeds(seeds, TEST_SEED0)


def workload_seed(seed: int, episode: int) -> int:
    """The workload seed of episode ``episode`` of ``seed``: the seed itself first, then seeds derived from both."""
    if episode == 0:
        return int(seed)
    return int(np.random.SeedSequence([seed, episode]).generate_state(1)[0] & 0x7FFFFFFF)


def positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: expected a positive integer, got {value!r}")
    return value


# ---------------------------------------------------------------------- episodes
@dataclass(frozen=True)
class Task:
    """One episode to run: the policy (spec), the env config, the seeds, and the suite scenario if any."""

    index: int
    spec: Any
    env_cfg: dict[str, Any]
    seed: int
    episode: int
    scenario: str | None = None


def workload_digest(env: RoutingEnv) -> str:
    """A fingerprint of the episode's requests (arrival, lengths, task): equal digests, identical workloads."""
    h = hashlib.sha256()
    for r in env.episode_requests:
        h.update(f"{r.id},{r.arrival!r},{r.prompt_tokens},{r.output_tokens},{r.task};".encode())
    return h.hexdigest()[:16]


def _num(x: Any) -> float | None:
    """A float for JSON (NaN and missing -> None)."""
    if x is None:
        return None
    v = float(x)
    return None if math.isnan(v) else v


def preempted_share(summary: dict[str, Any], num_requests: int) -> float | None:
    """Requests preempted at least once over all the episode's requests: a dropped request's preemptions count in
    the summary, so a share of the completed ones alone could pass 1."""
    return summary.get("preempted_requests", 0) / num_requests if num_requests else None


def episode_row(label: str, task: Task, wseed: int, out: dict[str, Any], env: RoutingEnv,
                wall: float) -> dict[str, Any]:
    """One row of evaluation.json from an episode's result (keys: docs/evaluation.md). Latency statistics count
    every request (a drop or cut-off at the time it was given up); the ``completed_*`` ones only the completed."""
    s = out["summary"]
    done = int(s.get("completed", 0))
    row: dict[str, Any] = {"policy": label, "seed": task.seed, "episode": task.episode, "workload_seed": wseed}
    if task.scenario is not None:
        row["scenario"] = task.scenario
    row.update({"num_requests": len(env.episode_requests), "completed": done, "dropped": int(s.get("dropped", 0))})
    row.update(env_latency_stats(env))
    row.update({
        "mean_tpot_ms": _num(s.get("mean_tpot_ms")),
        "slo_attainment": _num(s.get("slo_attainment")),
        "return": float(out["return"]),
        "timeouts": int(env.timeouts),
        "preempted_frac": preempted_share(s, len(env.episode_requests)),
        "steps": int(out["steps"]),
        "truncated": bool(out["truncated"]),
        "workload_digest": workload_digest(env),
        "wall_s": wall,
    })
    if s.get("workload_skipped") is not None:  # a trace workload: the rows it read but left out, by reason
        row["workload_skipped"] = dict(s["workload_skipped"])
    if out.get("unseen_decisions") is not None:  # a network with a seen range: where its guide decided
        row["unseen_decisions"] = int(out["unseen_decisions"])
    for extra in (env_qos(env), env_utility(env)):  # QoSEdge's average QoS; BestEffort's utility
        if extra is not None:
            row.update(extra)
    return row


_IN_WORKER = False


def _worker_init() -> None:
    """Worker processes run one episode at a time: one torch thread each (no oversubscription)."""
    global _IN_WORKER
    _IN_WORKER = True


def run_task(task: Task) -> dict[str, Any]:
    """One episode on a fresh env; the row carries the policy's label and the episode's wall time.

    A learned policy acts with one torch thread, in workers and in this process alike: its floating-point sums
    (and so a near tie between two actions) depend on the thread count, so results would change with the machine's
    cores (the HAN router's QoS moved in the 4th digit between 1 and 2 threads)."""
    t0 = time.perf_counter()
    env = make_env(task.env_cfg)
    policy = build_policy(task.spec, env, task.env_cfg)
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else 0
    if torch is not None:
        torch.set_num_threads(1)
    try:
        wseed = workload_seed(task.seed, task.episode)
        out = run_episode(policy, env, seed=task.seed, workload_seed=wseed)
    finally:
        if torch is not None and not _IN_WORKER:
            torch.set_num_threads(threads)  # the caller's setting back (a notebook's, say)
    return episode_row(policy.name, task, wseed, out, env, time.perf_counter() - t0)


def check_policy(env_cfg: dict[str, Any], spec: Any, seed: int, env: RoutingEnv | None = None) -> dict[str, Any]:
    """Build a normalised spec's policy on ``env_cfg`` (``env``: that env, already built) and reset it, so a missing
    checkpoint, another observation layout or a bad router option fails here; returns its description."""
    own = policy_env_cfg(env_cfg, spec)
    penv = env if env is not None and own is env_cfg else make_env(own)
    try:
        pol = build_policy(spec, penv, own)
        pol.reset(penv, seed)  # CheckpointPolicy checks the layout here, HeuristicPolicy builds its router
    except ConfigError as e:
        if isinstance(spec, dict) and spec.get("where"):  # a config's baselines[i]: told under that key
            raise rekeyed(e, spec["where"]) from None
        raise
    return describe(spec, pol)


def resolve_policies(env_cfg: dict[str, Any], policies: Sequence[PolicySpec],
                     seed: int) -> tuple[list[Any], list[dict[str, Any]]]:
    """Normalised specs and their descriptions, checked up front on one env: a missing checkpoint, another
    observation layout, a bad router option or two policies with one label fail before any episode runs."""
    env = make_env(env_cfg)
    specs = [normalise_spec(p) for p in policies]
    if not specs:
        raise ConfigError("nothing to evaluate: no checkpoints and no baselines")
    described = [check_policy(env_cfg, spec, seed, env) for spec in specs]
    labels = [d["label"] for d in described]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise ConfigError(f"policies: label(s) {dup} used twice; give each policy its own label (checkpoints: "
                          "[{LABEL: DIR}, ...], baselines: [{name: ROUTER, label: LABEL}, ...])")
    return specs, described


def evaluate(env_cfg: Mapping[str, Any], policies: Sequence[PolicySpec], seeds: Sequence[int] | int = DEFAULT_SEEDS,
             jobs: int = 1, *, episodes_per_seed: int = 1, progress: bool = False) -> list[dict[str, Any]]:
    """Every policy on every seed (``episodes_per_seed`` episodes each): one row per episode, in policy, seed,
    episode order, whatever ``jobs`` (worker processes) is. Raises ConfigError before running anything when a
    policy cannot run on this env."""
    return evaluate_described(env_cfg, policies, seeds, jobs, episodes_per_seed=episodes_per_seed,
                              progress=progress)[0]


def evaluate_described(env_cfg: Mapping[str, Any], policies: Sequence[PolicySpec],
                       seeds: Sequence[int] | int = DEFAULT_SEEDS, jobs: int = 1, *, episodes_per_seed: int = 1,
                       progress: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """:func:`evaluate`'s rows and a description of each policy (label, router and options, or checkpoint)."""
    cfg = env_config(env_cfg)
    seed_list = held_out_seeds(list(seeds) if not isinstance(seeds, int) else seeds)
    jobs = positive_int(jobs, "jobs")
    episodes = positive_int(episodes_per_seed, "episodes_per_seed")
    specs, described = resolve_policies(cfg, policies, seed_list[0])
    combos = [(spec, s, e) for spec in specs for s in seed_list for e in range(episodes)]
    tasks = [Task(i, spec, policy_env_cfg(cfg, spec), s, e) for i, (spec, s, e) in enumerate(combos)]
    return run_tasks(tasks, jobs, progress), described


def run_tasks(tasks: list[Task], jobs: int, progress: bool, desc: str = "episodes") -> list[dict[str, Any]]:
    """Run the episodes inline (jobs=1) or in ``jobs`` spawned processes; rows in task order."""
    rows: list[dict[str, Any] | None] = [None] * len(tasks)
    bar = tqdm(total=len(tasks), desc=desc, unit="ep", file=sys.stderr, disable=not progress, leave=False)
    try:
        if jobs == 1 or len(tasks) == 1:
            for t in tasks:
                rows[t.index] = run_task(t)
                bar.update(1)
        else:
            # spawn, not fork: a parent that has run torch (a trainer calling evaluate) may hang forked workers
            with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=mp.get_context("spawn"),
                                     initializer=_worker_init) as ex:
                futures = {ex.submit(run_task, t): t.index for t in tasks}
                for f in as_completed(futures):
                    rows[futures[f]] = f.result()
                    bar.update(1)
    finally:
        bar.close()
    return [r for r in rows if r is not None]
