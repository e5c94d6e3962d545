"""``llmsim-train`` (also ``python -m llmsim.agents.train``): train a router with one Hydra command.

    llmsim-train agent=ddqn env=workload_router trainer.total_steps=200000
    llmsim-train +experiment=spec001_guided
    llmsim-train agent=sac_han env=qos_edge
    llmsim-train trainer.resume=outputs/train/<date>/<time>/last trainer.total_steps=400000

The run directory (``hydra.run.dir``) gets ``tensorboard/`` and ``progress.csv`` (stable-baselines3's logger),
``best/`` (the checkpoint with the best in-training evaluation score) and ``last/``. stable-baselines3 supplies
the vector envs (``trainer.num_envs`` > 1: one process per env) and the logger; the algorithm is
agents/ddqn.py, agents/sac.py or agents/sac_argmax.py (``agent.name``: ddqn | sac | sac_argmax), with the
experience loop of agents/loop.py.
Training workloads are drawn from the env's own seed stream (``seed``); the in-training evaluation uses
``trainer.eval_seeds`` and llmsim-evaluate holds out seeds >= 1000.
"""

from __future__ import annotations

import functools
import json
import math
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from llmsim.agents import guided
from llmsim.agents.buffer import ReplayBuffer
from llmsim.agents.checkpoint import (
    QPolicy,
    action_layout,
    check_compatible,
    load_policy_net,
    net_arch,
    observation_layout,
    read_meta,
    save_checkpoint,
)
from llmsim.agents.ddqn import DDQNConfig, DoubleDQN
from llmsim.agents.loop import LoopState, learn
from llmsim.agents.policy import run_episode
from llmsim.agents.sac import DiscreteSAC, SACConfig
from llmsim.agents.sac_argmax import ArgmaxSAC
from llmsim.envs.qos_metrics import env_qos
from llmsim.envs.routing_env import RoutingEnv
from llmsim.envs.testbeds import make_from_config
from llmsim.errors import ConfigError

LOST_REQUEST_MS = 1e9  # a dropped request outweighs any latency difference in the evaluation score


def make_env(env_cfg: dict[str, Any]) -> RoutingEnv:
    """One env from a conf/env mapping (picklable through functools.partial, for worker processes); a
    ``predictor: {kind: learned, path: ...}`` entry is loaded here (envs/predictors/length_buckets.py)."""
    cfg = dict(env_cfg)
    pred = cfg.get("predictor")
    if _is_learned(pred):
        from llmsim.envs.predictors.length_buckets import make_agent_predictor

        cfg["predictor"] = make_agent_predictor(pred)
    return make_from_config(cfg)


LEARNED = ("learned", "learned_qos")  # envs/predictors/length_buckets.py (spec 001's buckets), envs/predictors/qos.py (spec 000)


def _is_learned(spec: Any) -> bool:
    return spec in LEARNED or (isinstance(spec, dict) and spec.get("kind") in LEARNED)


def env_config(cfg: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """The env mapping with the run's ``predictor`` applied. A learned predictor to be trained is fitted once,
    here, and saved in the run directory, so every worker process and the checkpoint refer to the same file."""
    env_cfg = dict(cfg["env"])
    spec = cfg.get("predictor")
    if spec is None:
        return env_cfg
    if _is_learned(spec) and not (isinstance(spec, dict) and spec.get("path")):
        from llmsim.envs.predictors.length_buckets import make_agent_predictor

        kind = spec if isinstance(spec, str) else spec["kind"]
        run_dir.mkdir(parents=True, exist_ok=True)
        pred = make_agent_predictor(spec)
        path = run_dir / ("qos_predictor.json" if kind == "learned_qos" else "predictor.json")
        (pred.model if kind == "learned_qos" else pred.bp).save(path)
        spec = {"kind": kind, "path": str(path)}
    env_cfg["predictor"] = spec
    return env_cfg


AgentConfig = DDQNConfig | SACConfig
Agent = DoubleDQN | DiscreteSAC | ArgmaxSAC
ALGORITHMS: dict[str, type] = {"ddqn": DDQNConfig, "sac": SACConfig, "sac_argmax": SACConfig}


def check_setup(agent_cfg: AgentConfig, env: RoutingEnv) -> None:
    """Refuse what would train something other than what was asked for, before any step."""
    if isinstance(agent_cfg, SACConfig):
        graph = hasattr(env.observation_space, "spaces")
        if (agent_cfg.encoder == "han") != graph:
            raise ConfigError(f"agent.encoder={agent_cfg.encoder} needs a {'graph' if not graph else 'flat'} "
                              f"observation; env observation {env.obs_builder.name!r} is "
                              f"{type(env.observation_space).__name__} (agent.encoder: "
                              f"{'han' if graph else 'mlp'})")
        return
    if not hasattr(env.observation_space, "shape") or len(env.observation_space.shape or ()) != 1:
        raise ConfigError(f"agent {agent_cfg.name!r} needs a flat (vector) observation; env observation "
                          f"{env.obs_builder.name!r} is {type(env.observation_space).__name__}")
    if agent_cfg.guidance != "none":
        if "heuristic" not in env.reward_fn.components:
            raise ConfigError(f"agent.guidance={agent_cfg.guidance}: reward {env.reward_fn.name!r} has no heuristic "
                              f"term (use env.reward.kind=workload_aware or agent.guidance=none)")
        if env.reward_fn.weights.get("heuristic", 0.0) != 0.0:
            raise ConfigError(f"agent.guidance={agent_cfg.guidance} shapes with h itself; set env.reward.guidance=0 "
                              f"(now {env.reward_fn.weights['heuristic']}) so h is not counted twice")
    guided.stage(agent_cfg.guidance, 0, agent_cfg.gamma)  # validates the name


def agent_config(agent: dict[str, Any]) -> AgentConfig:
    name = agent.get("name", "ddqn")
    if name not in ALGORITHMS:
        raise ConfigError(f"agent.name: {name!r} is not one of {', '.join(ALGORITHMS)}")
    cls = ALGORITHMS[name]
    known = set(cls.__dataclass_fields__)
    unknown = sorted(set(agent) - known)
    if unknown:
        raise ConfigError(f"agent: unknown key(s) {unknown}; expected some of {sorted(known)}")
    try:
        return cls(**agent)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def build_agent(agent_cfg: AgentConfig, env: RoutingEnv, seed: int) -> tuple[Agent, int]:
    """(agent, length of the vectors the replay stores)."""
    n_actions = int(env.action_space.n)
    if isinstance(agent_cfg, SACConfig):
        cls = ArgmaxSAC if agent_cfg.name == "sac_argmax" else DiscreteSAC
        sac = cls(env.observation_space, n_actions, agent_cfg, seed)
        dim = sac.layout.flat_dim if sac.layout is not None else int(env.observation_space.shape[0])
        return sac, dim
    obs_dim = int(env.observation_space.shape[0])
    return DoubleDQN(obs_dim, n_actions, agent_cfg, seed), obs_dim


def make_vec(env_cfg: dict[str, Any], n: int) -> Any:
    from stable_baselines3.common.vec_env import SubprocVecEnv

    from llmsim.agents.vec import FreshInfoVecEnv

    fns = [functools.partial(make_env, env_cfg) for _ in range(n)]
    return SubprocVecEnv(fns) if n > 1 else FreshInfoVecEnv(fns)


def evaluate_greedy(policy: QPolicy, env: RoutingEnv, seeds: list[int], metric: str) -> dict[str, float]:
    """Mean return and summary metrics of the greedy policy over the evaluation workloads; ``score`` is
    ``metric`` oriented so that higher is better."""
    rows = []
    for s in seeds:
        r = run_episode(policy, env, seed=s, workload_seed=s)
        qos = env_qos(env)  # spec 000: average QoS, latency per token, share within L
        if qos is not None:
            r["summary"] = {**r["summary"], **qos}
        rows.append(r)
    out = {"return": float(np.mean([r["return"] for r in rows]))}
    for k in ("mean_e2el_ms", "p99_e2el_ms", "mean_ttft_ms", "completed", "dropped", "duration", "avg_qos",
              "latency_per_token_ms", "within_l"):
        vals = [r["summary"].get(k) for r in rows]
        if all(v is not None for v in vals):
            out[k] = float(np.mean(vals))
    if metric == "return":
        out["score"] = out["return"]
    else:
        vals = [r["summary"].get(metric) for r in rows]
        if any(v is None for v in vals):
            raise ConfigError(f"trainer.eval_metric={metric!r} is not in the run summary (try return or mean_e2el_ms)")
        out[metric] = float(np.mean(vals))
        out["score"] = eval_score(metric, out[metric], out.get("dropped", 0.0))
    return out


def eval_score(metric: str, value: float, dropped: float) -> float:
    """Higher is better. Latency metrics cover completed requests only, so a policy that lets requests be cut
    off would look fast: every lost request ranks a policy below any that loses fewer (lexicographic order)."""
    if metric.endswith("_ms") or metric == "duration":
        return -value - LOST_REQUEST_MS * dropped
    return value


def _meta(cfg: dict[str, Any], env: RoutingEnv, env_cfg: dict[str, Any], state: LoopState,
          history: list[dict[str, Any]]) -> dict[str, Any]:
    agent = cfg["agent"]
    label = cfg.get("label") or (agent["name"] if agent.get("guidance", "none") == "none"
                                 else f"{agent['name']}_{agent['guidance']}")
    return {"agent": agent["name"], "label": label, "observation": observation_layout(env),
            "actions": action_layout(env), "env": env_cfg, "steps": state.step, "episodes": state.episode,
            "best_score": state.best_score, "eval_metric": cfg["trainer"]["eval_metric"], "evaluations": history,
            "seed": cfg["seed"], "versions": {"python": platform.python_version(), "torch": torch.__version__,
                                              "numpy": np.__version__}}


def log_episode(logger: Any, st: LoopState, info: dict[str, Any]) -> None:
    """An episode's return and its run summary's headline latencies, under ``rollout/`` at the current step."""
    logger.record("rollout/ep_return", st.returns[-1])
    summary = info.get("summary") or {}
    for k in ("mean_e2el_ms", "p99_e2el_ms", "mean_ttft_ms", "dropped", "duration"):
        if summary.get(k) is not None:
            logger.record(f"rollout/{k}", summary[k])
    logger.record("rollout/episodes", st.episode)
    logger.dump(st.step)


def make_logger(run_dir: Path) -> Any:
    """stable-baselines3's logger writing progress.csv and TensorBoard events under ``run_dir``."""
    from stable_baselines3.common.logger import Logger, make_output_format

    run_dir.mkdir(parents=True, exist_ok=True)
    return Logger(str(run_dir), [make_output_format("csv", str(run_dir)),
                                 make_output_format("tensorboard", str(run_dir / "tensorboard"))])


def train(cfg: dict[str, Any], run_dir: str | Path) -> dict[str, Any]:
    """Train per ``cfg`` (the composed conf/train.yaml as a plain dict); returns the final meta."""
    from omegaconf import OmegaConf
    from tqdm import tqdm

    run_dir = Path(run_dir)
    tr = cfg["trainer"]
    torch.set_num_threads(int(tr.get("torch_threads", 1)))
    agent_cfg = agent_config(cfg["agent"])
    env_cfg = env_config(cfg, run_dir)
    eval_env = make_env(env_cfg)
    check_setup(agent_cfg, eval_env)
    n_actions = int(eval_env.action_space.n)
    seed, n_envs = int(cfg["seed"]), int(tr["num_envs"])
    agent, obs_dim = build_agent(agent_cfg, eval_env, seed)
    rb = ReplayBuffer(agent_cfg.buffer_size, n_envs, obs_dim, n_actions, seed,
                      action_dim=n_actions if isinstance(agent, ArgmaxSAC) else 0)
    state, history = LoopState(), []
    _restore(tr, agent, rb, state, history, eval_env)
    config_yaml = OmegaConf.to_yaml(OmegaConf.create(cfg))
    logger = make_logger(run_dir)
    total = int(tr["total_steps"])
    bar = tqdm(total=total, initial=min(state.step, total), unit="step", disable=not tr.get("progress", True),
               dynamic_ncols=True, file=sys.stderr)
    policy = QPolicy(agent.policy_net(), "greedy")
    t0 = time.perf_counter()

    def checkpoint(name: str) -> None:
        trainer_state = {"agent": agent.state_dict(), "loop": vars(state), "history": history}
        save_checkpoint(run_dir / name, agent.policy_net(), _meta(cfg, eval_env, env_cfg, state, history), config_yaml,
                        trainer_state)
        if name == "last" and tr.get("save_replay"):
            np.savez(run_dir / name / "replay.npz", **rb.state_dict())

    def do_eval() -> None:
        res = evaluate_greedy(policy, eval_env, list(tr["eval_seeds"]), tr["eval_metric"])
        res.update(step=state.step, episode=state.episode, wall_s=round(time.perf_counter() - t0, 2))
        history.append(res)
        for k, v in res.items():
            logger.record(f"eval/{k}", v)
        logger.dump(state.step)
        if res["score"] > state.best_score:
            state.best_score = res["score"]
            checkpoint("best")
        checkpoint("last")
        bar.set_postfix(ep=state.episode, eval=f"{res['score']:.4g}", best=f"{state.best_score:.4g}")

    next_eval = [(state.step // tr["eval_every"] + 1) * tr["eval_every"] if tr["eval_every"] else math.inf]

    def on_episode(st: LoopState, info: dict[str, Any]) -> None:
        log_episode(logger, st, info)
        bar.set_postfix(ep=st.episode, ret=f"{st.returns[-1]:.4g}", best=f"{st.best_score:.4g}")

    def on_step(st: LoopState, stats: dict[str, float]) -> None:
        bar.update(min(st.step, total) - bar.n)
        if st.step >= next_eval[0]:
            for k, v in stats.items():
                logger.record(f"train/{k}", v)
            logger.record("time/steps_per_s", st.step / max(1e-9, time.perf_counter() - t0))
            do_eval()
            next_eval[0] += tr["eval_every"]

    vec = make_vec(env_cfg, n_envs)
    try:
        learn(agent, vec, rb, total, state, on_episode, on_step, seed=seed + 7919 * state.episode,
              flatten=getattr(agent, "flatten", None))
    finally:
        vec.close()
    if not history or history[-1]["step"] != state.step:
        do_eval()
    bar.close()
    meta = _meta(cfg, eval_env, env_cfg, state, history)
    meta["wall_s"] = round(time.perf_counter() - t0, 2)
    (run_dir / "training.json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
    return meta


def _restore(tr: dict[str, Any], agent: Agent, rb: ReplayBuffer, state: LoopState,
             history: list[dict[str, Any]], env: RoutingEnv) -> None:
    """``trainer.resume``: weights, optimiser, counters and (if saved) replay; ``trainer.init_from``: weights only."""
    src = tr.get("resume") or tr.get("init_from")
    if not src:
        return
    key = "trainer.resume" if tr.get("resume") else "trainer.init_from"
    meta = read_meta(src)
    check_compatible(meta, env, f"{key}={src}")
    net = agent.policy_net()
    have = net_arch(net)
    saved = {k: meta.get(k) for k in have}
    if saved.get("dueling") is None and "dueling" in have:
        saved["dueling"] = False
    if saved != have:
        raise ConfigError(f"{key}={src}: network {saved}, but the agent has {have}")
    net.load_state_dict(load_policy_net(src, meta).state_dict())
    if isinstance(agent, DoubleDQN):
        agent.sync_target()
    if key == "trainer.init_from":
        return
    ts_path = Path(src) / "trainer.pt"
    if not ts_path.is_file():
        raise ConfigError(f"trainer.resume={src}: no trainer.pt (a checkpoint to fine-tune from: trainer.init_from)")
    ts = torch.load(ts_path, map_location="cpu", weights_only=False)
    agent.load_state_dict(ts["agent"])
    for k, v in ts["loop"].items():
        setattr(state, k, v)
    history.extend(ts.get("history", []))
    replay = Path(src) / "replay.npz"
    if replay.is_file():
        with np.load(replay) as z:
            rb.load_state_dict({k: z[k] for k in z.files})


def main() -> None:
    from llmsim.hydra_app import run_hydra_app

    def body(cfg: dict, run_dir: str) -> None:
        meta = train(cfg, run_dir)
        best = max(meta["evaluations"], key=lambda r: r["score"]) if meta["evaluations"] else {}
        print(f"trained {meta['label']}: {meta['steps']} steps, {meta['episodes']} episodes, {meta['wall_s']} s; "
              f"best eval {meta['eval_metric']} score {meta['best_score']:.4g} at step {best.get('step')}")
        print(f"checkpoints: {Path(run_dir) / 'best'}  {Path(run_dir) / 'last'}   "
              f"tensorboard --logdir {Path(run_dir) / 'tensorboard'}")

    run_hydra_app("train", "llmsim-train", body)


if __name__ == "__main__":
    main()
