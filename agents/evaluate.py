"""``python -m llmsim.agents.evaluate`` (``llmsim-evaluate``): learned routers and llmsim heuristics on held-out seeds.

Every (policy, seed, episode) is one :func:`llmsim.agents.policy.run_episode` on a fresh env built from the same
config with the same workload seed, so every policy is judged on identical requests (same arrivals, lengths
and tasks; the ``workload_digest`` column says so) under the same decision points and reward. Rows are a pure
function of the config: the number of worker processes (``jobs``) changes only ``wall_s``.

Held-out seeds: evaluation pins the workload seed of every episode (``seeds``, default 1000-1004; episode
``e > 0`` of seed ``s`` uses a seed derived from ``(s, e)``); training runs on seeds below 1000. A held-out
*workload* (another task mix, rate, ...) goes in ``env_overrides`` (docs/evaluation.md).

Python API: :func:`evaluate` (used by the app and by ``llmsim-reproduce``). Policies are given as
:class:`~llmsim.agents.policy.Policy` objects or as specs: a router name (``"jsq"``), ``{name, kwargs, label}`` for
a router, ``{checkpoint: DIR, label}`` for a trained router. Router options an env determines (KV capacity of
the capacity routers, the instances' models of the model routers, the QoSEdge lookahead's step model) are
filled in from the env when left null, as ``experiments.testbeds.calibrate`` passes them.
"""

from __future__ import annotations

import copy
import hashlib
import math
import multiprocessing as mp
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import Field
from tqdm import tqdm

from llmsim.agents.checkpoint_meta import read_meta
from llmsim.agents.evaluate_report import write_outputs
from llmsim.agents.policy import HeuristicPolicy, Policy, run_episode
from llmsim.envs.paper_timing import QOS_EDGE_K
from llmsim.envs.qos_metrics import env_qos
from llmsim.envs.routing_env import RoutingEnv
from llmsim.envs.testbeds import make_from_config
from llmsim.errors import ConfigError
from llmsim.hydra_app import run_hydra_app
from llmsim.schema import Schema

PROG = "llmsim-evaluate"
HELD_OUT_SEED0 = 1000  # training uses seeds below this
DEFAULT_SEEDS = tuple(range(HELD_OUT_SEED0, HELD_OUT_SEED0 + 5))
REFERENCE = "round_robin"

# ``baselines: auto``: the Intelligent Router's heuristics, the Learned Best-Effort paper's static model choices,
# the QoS-aware edge router's routers
AUTO_BASELINES: dict[str, list[Any]] = {
    "workload_router": ["round_robin", "jsq", "least_work_left", "least_kv", "earliest_available",
                        "max_capacity", "min_min"],
    "best_effort": [{"name": "static_model", "kwargs": {"model": m}, "label": f"static_{m}"}
                    for m in ("opt-125m", "opt-1.3b", "opt-6.7b")] + ["round_robin"],
    "qos_edge": ["round_robin", "jsq", "quality_first", "qos_lookahead"],
    "routing": ["round_robin", "jsq", "least_work_left", "least_kv"],
}
CAPACITY_ROUTERS = ("earliest_available", "max_capacity")
MODEL_ROUTERS = ("static_model", "quality_first", "qos_lookahead")
QOS_LIMIT = 0.03  # the QoSEdge factory's default latency limit (s per output token)

PolicySpec = str | Mapping[str, Any] | Policy


class EvaluateConfig(Schema):
    """conf/evaluate.yaml: what ``llmsim-evaluate`` reads (the values are checked by the functions below, which
    the Python API shares, so a bad seed list or job count reads the same from both)."""

    where: ClassVar[str] = ""
    env: dict[str, Any] = Field(default_factory=dict)
    checkpoints: Any = None  # directories, or a mapping label -> directory
    baselines: Any = "auto"  # auto, none, or routers
    seeds: Any = Field(default_factory=lambda: list(DEFAULT_SEEDS))
    episodes_per_seed: Any = 1
    env_overrides: dict[str, Any] | None = None
    jobs: Any = 1
    reference: str = REFERENCE
    progress: bool = True
    plots: bool = True


# ---------------------------------------------------------------------- policy specs
def normalise_spec(spec: PolicySpec) -> dict[str, Any] | Policy:
    """A router name, a ``{name, kwargs, label}`` / ``{checkpoint, label}`` mapping, or a Policy as is."""
    if isinstance(spec, str):
        return {"kind": "router", "name": spec, "kwargs": {}, "label": spec}
    if isinstance(spec, Mapping):
        d = dict(spec)
        if d.get("kind") in ("router", "checkpoint"):  # normalised already
            return d
        if "checkpoint" in d:
            _only(d, ("checkpoint", "label", "mode"), "checkpoints")
            if not isinstance(d["checkpoint"], str | Path) or not str(d["checkpoint"]):
                raise ConfigError(f"checkpoints: expected a checkpoint directory, got {d['checkpoint']!r}")
            mode = d.get("mode", "greedy")
            if mode not in ("greedy", "sample"):
                raise ConfigError(f"checkpoints: mode {mode!r}: expected greedy (argmax) or sample (SAC's policy)")
            return {"kind": "checkpoint", "path": str(d["checkpoint"]), "label": d.get("label"), "mode": mode}
        _only(d, ("name", "kwargs", "label"), "baselines")
        name, kwargs = d.get("name"), d.get("kwargs") or {}
        if not isinstance(name, str) or not isinstance(kwargs, Mapping):
            raise ConfigError(f"baselines: expected a router name or {{name: ROUTER, kwargs: {{...}}}}, got {spec!r}")
        return {"kind": "router", "name": name, "kwargs": dict(kwargs), "label": d.get("label") or name}
    if all(hasattr(spec, a) for a in ("name", "reset", "act")):
        return spec
    raise ConfigError(f"policies: expected a router name, a mapping or a Policy, got {spec!r}")


def _only(d: dict[str, Any], allowed: Sequence[str], where: str) -> None:
    unknown = sorted(set(d) - set(allowed))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown} in {d!r}; allowed keys: {list(allowed)}")


def baseline_specs(baselines: Any, env_id: str) -> list[dict[str, Any]]:
    """``auto`` (the env's AUTO_BASELINES), ``none`` or a list of router names / ``{name, kwargs, label}``."""
    if baselines is None or baselines == "none":
        return []
    if baselines == "auto":
        if env_id not in AUTO_BASELINES:
            raise ConfigError(f"baselines: no automatic baselines for env id {env_id!r}; list them")
        baselines = AUTO_BASELINES[env_id]
    if isinstance(baselines, str | Mapping) or not isinstance(baselines, Sequence):
        raise ConfigError(f"baselines: expected 'auto', 'none' or a list of routers, got {baselines!r}")
    return [normalise_spec(b) for b in baselines]  # type: ignore[misc]


def checkpoint_specs(checkpoints: Any) -> list[dict[str, Any]]:
    """A mapping label -> directory, or a list of directories, ``{label: directory}`` (one entry; the
    command-line form, as ``checkpoints: []`` cannot be overridden by a mapping) or ``{checkpoint, label}``."""
    if checkpoints is None:
        return []
    if isinstance(checkpoints, Mapping):
        return [{"kind": "checkpoint", "path": str(p), "label": str(k)} for k, p in checkpoints.items()]
    if isinstance(checkpoints, str) or not isinstance(checkpoints, Sequence):
        raise ConfigError(f"checkpoints: expected a list of directories or a mapping label -> directory, got "
                          f"{checkpoints!r}")
    out = []
    for c in checkpoints:
        if isinstance(c, Mapping) and len(c) == 1 and not {"checkpoint", "kind"} & set(c):
            (label, path), = c.items()
            c = {"checkpoint": path, "label": str(label)}
        out.append(normalise_spec(c if isinstance(c, Mapping) else {"checkpoint": c}))
    return out  # type: ignore[return-value]


def router_kwargs(name: str, kwargs: Mapping[str, Any], env: RoutingEnv, env_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the options this env determines filled in where they are absent or null."""
    kw = dict(kwargs)

    def fill(key: str, value: Any) -> None:
        if kw.get(key) is None:
            kw[key] = value

    if name in CAPACITY_ROUTERS:
        fill("kv_tokens", [kv_tokens(c) for c in env.instance_configs])
        fill("max_num_seqs", int(env.instance_configs[0].engine.max_num_seqs))
    if name == "max_capacity" and env.decision == "tick":
        # The env routes at most one request per tick, so the paper's 1 s rounds would leave most requests to the
        # env's max-wait fallback (-115 % vs RR); a round per tick keeps the rule without starving it.
        fill("interval", float(env.tick))
    if name in MODEL_ROUTERS:
        fill("models", list(env.instance_models))
    if name == "quality_first":
        fill("max_waiting", env.max_waiting)
    if name == "qos_lookahead":
        models = kw["models"]
        if all(m in QOS_EDGE_K for m in models):
            fill("k1", {m: QOS_EDGE_K[m][0] for m in models})
            fill("k2", {m: QOS_EDGE_K[m][1] for m in models})
        fill("base", {m: float(getattr(c.profile, "base", 0.0)) for m, c in zip(models, env.instance_configs)})
        fill("latency_limit", float(env_cfg.get("latency_limit") or QOS_LIMIT))
    return kw


def kv_tokens(inst: Any) -> int:
    """KV-cache capacity of an instance in tokens (whole blocks), as experiments.testbeds.calibrate gives the
    capacity routers."""
    prof = inst.build_profile()
    bs = inst.engine.block_size
    return prof.kv_capacity_tokens(inst.engine.gpu_memory_utilization) // bs * bs


def build_policy(spec: dict[str, Any] | Policy, env: RoutingEnv, env_cfg: Mapping[str, Any]) -> Policy:
    """The Policy of a normalised spec on ``env`` (a Policy object is copied: episodes share no state)."""
    if not isinstance(spec, dict):
        return copy.deepcopy(spec)
    if spec["kind"] == "checkpoint":
        path = Path(spec["path"])
        if not path.is_dir():
            raise ConfigError(f"checkpoints: {path}: no such checkpoint directory")
        try:
            from llmsim.agents.checkpoint import CheckpointPolicy  # optional: torch (the rl extra), for checkpoints
        except ImportError as e:
            raise ConfigError(f"checkpoints: a learned router needs {e.name} (pip install 'llmsim[rl]'); "
                              "baselines alone run without it") from None
        return CheckpointPolicy(path, spec.get("label"), spec.get("mode", "greedy"))
    kw = router_kwargs(spec["name"], spec["kwargs"], env, env_cfg)
    return HeuristicPolicy(spec["name"], label=spec["label"], **kw)


def describe(spec: dict[str, Any] | Policy, policy: Policy) -> dict[str, Any]:
    """What a policy is, for evaluation.json."""
    if not isinstance(spec, dict):
        return {"label": policy.name, "kind": "object", "type": type(policy).__name__}
    if spec["kind"] == "checkpoint":
        return {"label": policy.name, "kind": "checkpoint", "path": spec["path"],
                "agent": getattr(policy, "meta", {}).get("agent"), "mode": spec.get("mode", "greedy")}
    return {"label": policy.name, "kind": "router", "name": spec["name"], "kwargs": _plain(policy.kwargs)}


def _plain(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    return x.item() if isinstance(x, np.generic) else x


# ---------------------------------------------------------------------- env config and seeds
def env_config(env: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The env group's config with ``env_overrides`` merged in (mappings merge key by key)."""
    if not isinstance(env, Mapping):
        raise ConfigError(f"env: expected a mapping of env options, got {env!r}")
    if overrides is not None and not isinstance(overrides, Mapping):
        raise ConfigError(f"env_overrides: expected a mapping of env options, got {overrides!r}")
    return _merge(dict(env), dict(overrides or {}))


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(out.get(k), Mapping) and isinstance(v, Mapping) else copy.deepcopy(v)
    return out


def held_out_seeds(seeds: Any) -> list[int]:
    """A list of seeds, or a count n meaning the n seeds from HELD_OUT_SEED0."""
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        seeds = list(range(HELD_OUT_SEED0, HELD_OUT_SEED0 + seeds)) if seeds > 0 else None
    if not isinstance(seeds, Sequence) or isinstance(seeds, str) or not seeds or \
            not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise ConfigError(f"seeds: expected a non-empty list of non-negative integers (or a count), got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds: expected distinct seeds, got {list(seeds)}")
    return [int(s) for s in seeds]


def workload_seed(seed: int, episode: int) -> int:
    """The workload seed of episode ``episode`` of ``seed``: the seed itself first, then seeds derived from both."""
    if episode == 0:
        return int(seed)
    return int(np.random.SeedSequence([seed, episode]).generate_state(1)[0] & 0x7FFFFFFF)


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: expected a positive integer, got {value!r}")
    return value


# ---------------------------------------------------------------------- episodes
@dataclass(frozen=True)
class Task:
    """One episode to run: the policy (spec), the env config and the seeds."""

    index: int
    spec: Any
    env_cfg: dict[str, Any]
    seed: int
    episode: int


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


SUMMARY_KEYS = ("mean_e2el_ms", "median_e2el_ms", "p90_e2el_ms", "p99_e2el_ms", "mean_ttft_ms", "p99_ttft_ms",
                "mean_tpot_ms")


def episode_row(label: str, task: Task, wseed: int, out: dict[str, Any], env: RoutingEnv,
                wall: float) -> dict[str, Any]:
    """One row of evaluation.json from an episode's result (keys: docs/evaluation.md)."""
    s = out["summary"]
    reqs = env.episode_requests
    waits = [r.routed_time - r.arrival for r in reqs if r.routed_time >= 0]
    done = int(s.get("completed", 0))
    row: dict[str, Any] = {"policy": label, "seed": task.seed, "episode": task.episode, "workload_seed": wseed,
                           "num_requests": len(reqs), "completed": done, "dropped": int(s.get("dropped", 0))}
    row.update({k: _num(s.get(k)) for k in SUMMARY_KEYS})
    row.update({
        "slo_attainment": _num(s.get("slo_attainment")),
        "return": float(out["return"]),
        "makespan_s": _num(s.get("duration")) if done else None,
        "router_wait_s": float(np.mean(waits)) if waits else None,
        "timeouts": int(env.timeouts),
        "preempted_frac": s.get("preempted_requests", 0) / done if done else None,
        "steps": int(out["steps"]),
        "truncated": bool(out["truncated"]),
        "workload_digest": workload_digest(env),
        "wall_s": wall,
    })
    qos = env_qos(env)  # the QoS-aware edge router's average QoS etc., on envs whose reward has a latency limit
    if qos is not None:
        row.update(qos)
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
    env = make_from_config(task.env_cfg)
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


VIEW_KEYS = ("observation", "predictor")


def policy_env_cfg(env_cfg: dict[str, Any], spec: Any) -> dict[str, Any]:
    """The env a policy runs on: a checkpoint trained with its own ``observation`` or ``predictor`` (the QoS-aware
    edge router's Baseline RL sees expert-level features, the no-predictor ablation zeroed predictions) keeps them;
    the cluster, the workload and the reward, which judge it, stay the evaluation's."""
    if not isinstance(spec, dict) or spec.get("kind") != "checkpoint" or not Path(spec["path"]).is_dir():
        return env_cfg
    trained = read_meta(spec["path"]).get("env") or {}
    view = {k: trained[k] for k in VIEW_KEYS if k in trained and trained[k] != env_cfg.get(k)}
    return {**env_cfg, **copy.deepcopy(view)} if view else env_cfg


def resolve_policies(env_cfg: dict[str, Any], policies: Sequence[PolicySpec],
                     seed: int) -> tuple[list[Any], list[dict[str, Any]]]:
    """Normalised specs and their descriptions, checked up front on one env: a missing checkpoint, another
    observation layout, a bad router option or two policies with one label fail before any episode runs."""
    env = make_from_config(env_cfg)
    specs = [normalise_spec(p) for p in policies]
    if not specs:
        raise ConfigError("nothing to evaluate: no checkpoints and no baselines")
    described, labels = [], []
    for spec in specs:
        own = policy_env_cfg(env_cfg, spec)
        penv = env if own is env_cfg else make_from_config(own)
        pol = build_policy(spec, penv, own)
        pol.reset(penv, seed)  # CheckpointPolicy checks the layout here, HeuristicPolicy builds its router
        labels.append(pol.name)
        described.append(describe(spec, pol))
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
    jobs = _positive_int(jobs, "jobs")
    episodes = _positive_int(episodes_per_seed, "episodes_per_seed")
    specs, described = resolve_policies(cfg, policies, seed_list[0])
    combos = [(spec, s, e) for spec in specs for s in seed_list for e in range(episodes)]
    tasks = [Task(i, spec, policy_env_cfg(cfg, spec), s, e) for i, (spec, s, e) in enumerate(combos)]
    return run_tasks(tasks, jobs, progress), described


def run_tasks(tasks: list[Task], jobs: int, progress: bool) -> list[dict[str, Any]]:
    """Run the episodes inline (jobs=1) or in ``jobs`` spawned processes; rows in task order."""
    rows: list[dict[str, Any] | None] = [None] * len(tasks)
    bar = tqdm(total=len(tasks), desc="episodes", unit="ep", file=sys.stderr, disable=not progress, leave=False)
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


# ---------------------------------------------------------------------- the app
def run_app(cfg: Mapping[str, Any], out_dir: str | Path, quiet: bool = False) -> list[dict[str, Any]]:
    """The whole app on a plain (resolved) config: evaluate, write evaluation.json / .md / .png, print the table."""
    c = EvaluateConfig.parse(cfg)
    env_cfg = env_config(c.env, c.env_overrides)
    env_id = str(env_cfg.get("id", "routing"))
    seeds = held_out_seeds(c.seeds)
    specs = checkpoint_specs(c.checkpoints) + baseline_specs(c.baselines, env_id)
    jobs = _positive_int(c.jobs, "jobs")
    episodes = _positive_int(c.episodes_per_seed, "episodes_per_seed")
    t0 = time.perf_counter()
    rows, described = evaluate_described(env_cfg, specs, seeds, jobs, episodes_per_seed=episodes,
                                          progress=c.progress)
    meta = {"env_id": env_id, "env": env_cfg, "seeds": seeds, "episodes_per_seed": episodes, "jobs": jobs,
            "policies": described, "reference": c.reference, "wall_s": time.perf_counter() - t0,
            "config": dict(cfg)}
    md = write_outputs(rows, meta, Path(out_dir), plots=c.plots)
    if not quiet:
        print(md, end="")
    return rows


def main() -> None:
    def body(cfg: dict, out_dir: str) -> None:
        run_app(cfg, out_dir)
        print(f"outputs: {out_dir}")

    run_hydra_app("evaluate", PROG, body)


if __name__ == "__main__":
    main()
