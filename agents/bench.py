"""Training-speed benchmark: env steps/s of Double DQN training, gradient updates included.

    python -m agents.bench [--env workload_router] [--agent ddqn] [--steps 30000] [--num-envs 1] [--json]

Prints, for the env preset (conf/env/<name>.yaml): the env alone under a random mask-respecting policy
through the same vector env, DDQN training (updates from the first step: ``learning_starts`` = one batch),
and the cost of one gradient step and of one greedy action. Wall-clock figures on this machine; compare
before / after with farm-bench rather than across machines. "per CPU-s" divides by the process's CPU time
(with one env everything runs in-process): on a loaded machine it stays near the quiet figure.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
import torch


def _preset(group: str, name: str) -> dict[str, Any]:
    """A conf/<group>/<name>.yaml preset composed by Hydra (so ``defaults`` lists are honoured)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from llmsim.resources import conf_dir

    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=[f"{group}={name}"])
    return OmegaConf.to_container(cfg[group], resolve=True)


def _env_cfg(name: str) -> dict[str, Any]:
    cfg = _preset("env", name)
    if isinstance(cfg.get("reward"), dict) and "guidance" in cfg["reward"]:
        cfg["reward"]["guidance"] = 0.0
    return cfg


def bench(env: str = "workload_router", steps: int = 30_000, num_envs: int = 1, seed: int = 0,
          agent: str = "ddqn") -> dict[str, Any]:
    from agents.buffer import ReplayBuffer
    from agents.ddqn import DDQNConfig, DoubleDQN, LoopState, learn
    from agents.train import make_vec

    torch.set_num_threads(1)
    env_cfg = _env_cfg(env)
    vec = make_vec(env_cfg, num_envs)
    obs_dim, n = int(vec.observation_space.shape[0]), int(vec.action_space.n)
    rng = np.random.default_rng(seed)
    vec.seed(seed)
    vec.reset()
    masks = np.stack([ri["action_mask"] for ri in vec.reset_infos])
    t0, c0 = time.perf_counter(), time.process_time()
    done_steps = 0
    while done_steps < steps:
        acts = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        _, _, dones, infos = vec.step(acts)
        masks = np.stack([info["action_mask"] for info in infos])
        for i in np.flatnonzero(dones):
            masks[i] = vec.reset_infos[i]["action_mask"]
        done_steps += num_envs
    env_rate = done_steps / (time.perf_counter() - t0)
    env_cpu_rate = done_steps / max(1e-9, time.process_time() - c0)

    cfg = DDQNConfig(**_preset("agent", agent))
    cfg.learning_starts = cfg.batch_size
    ddqn = DoubleDQN(obs_dim, n, cfg, seed)
    rb = ReplayBuffer(cfg.buffer_size, num_envs, obs_dim, n, seed)
    t0, c0 = time.perf_counter(), time.process_time()
    state = learn(ddqn, vec, rb, steps, LoopState(), seed=seed)
    train_wall, train_cpu = time.perf_counter() - t0, time.process_time() - c0
    vec.close()

    batch = rb.sample(cfg.batch_size, cfg.gamma, cfg.tau)
    t0 = time.perf_counter()
    for _ in range(50):
        ddqn.update(batch)
    update_ms = (time.perf_counter() - t0) / 50 * 1e3
    obs = batch.obs[:1]
    mask = batch.next_masks[:1]
    t0 = time.perf_counter()
    for _ in range(2000):
        ddqn.actor.act(obs, mask)
    act_us = (time.perf_counter() - t0) / 2000 * 1e6
    return {"env": env, "num_envs": num_envs, "steps": state.step, "episodes": state.episode,
            "env_only_steps_per_s": round(env_rate, 1), "train_steps_per_s": round(state.step / train_wall, 1),
            "env_only_steps_per_cpu_s": round(env_cpu_rate, 1),
            "train_steps_per_cpu_s": round(state.step / max(1e-9, train_cpu), 1),
            "updates": ddqn.updates, "update_ms": round(update_ms, 3), "act_us": round(act_us, 1),
            "batch_size": cfg.batch_size, "train_freq": cfg.train_freq}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agents.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="workload_router", help="a conf/env preset (flat observation)")
    ap.add_argument("--steps", type=int, default=30_000)
    ap.add_argument("--num-envs", type=int, default=1)
    ap.add_argument("--agent", default="ddqn", help="a conf/agent preset")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    r = bench(args.env, args.steps, args.num_envs, args.seed, args.agent)
    if args.json:
        print(json.dumps(r))
    else:
        print(f"{r['env']} ({r['num_envs']} env(s), {r['steps']} steps, {r['episodes']} episodes)\n"
              f"  env alone, random policy : {r['env_only_steps_per_s']:>9.1f} steps/s "
              f"({r['env_only_steps_per_cpu_s']:.1f} per CPU-s)\n"
              f"  DDQN training            : {r['train_steps_per_s']:>9.1f} steps/s "
              f"({r['train_steps_per_cpu_s']:.1f} per CPU-s) "
              f"({r['updates']} updates, batch {r['batch_size']}, one per {r['train_freq']} steps)\n"
              f"  one gradient step        : {r['update_ms']:>9.3f} ms\n"
              f"  one greedy action        : {r['act_us']:>9.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
