"""Behaviour cloning of an llmsim heuristic into a policy network: a checkpoint that acts sensibly without RL
training. For smoke tests of the export and serving path, the decision-latency benchmark and demos; not a
result (docs/export.md). Untrained networks mostly pick one action, which would make parity and routing tests
vacuous.

    from llmsim.agents.imitate import demo_checkpoint
    ckpt = demo_checkpoint("ddqn_flat", "runs/demo")      # a 4-instance WorkloadRouter DDQN that mimics JSQ
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from llmsim.agents.checkpoint import policy_input, save_checkpoint
from llmsim.agents.checkpoint_meta import action_layout, observation_layout
from llmsim.agents.env_setup import make_env, ship_predictor
from llmsim.agents.nets import QNetwork, masked_logits
from llmsim.agents.sac import DiscreteSAC
from llmsim.agents.sac_argmax import ArgmaxSAC
from llmsim.agents.sac_base import SACConfig
from llmsim.errors import ConfigError
from llmsim.routing import make_router

EXPERTS = ["alpaca-native", "chatglm-6b", "mpt-7b-instruct"]
# small testbeds of the three policy types (plus argmax-SAC); 4 x llama-2-7b is also the llmsim CLI's default cluster
DEMO_ENVS: dict[str, dict[str, Any]] = {
    "ddqn_flat": {"id": "workload_router", "num_requests": 120, "num_instances": 4, "rate": 8.0},
    "ddqn_best_effort": {"id": "best_effort", "num_requests": 120, "num_gpus": 2, "schedule": "stable", "rate": 6.0},
    "sac_han": {"id": "qos_edge", "num_requests": 120, "experts": EXPERTS, "rate": 2.5, "predictor": "oracle"},
    "sac_argmax_han": {"id": "qos_edge", "num_requests": 120, "experts": EXPERTS, "rate": 2.5, "predictor": "oracle"},
}


def clone_heuristic(net: torch.nn.Module, env: Any, router: str = "jsq", n: int = 400, steps: int = 120,
                    seed: int = 3) -> None:
    """A few full-batch steps of cross-entropy towards ``router``'s actions on ``n`` decisions of ``env`` (20 % of
    the actions taken at random among the valid ones, to vary the states)."""
    rng = np.random.default_rng(0)
    teacher = make_router(router)
    obs, info = env.reset(seed=seed)
    xs, ms, ys = [], [], []
    while len(xs) < n:
        m = info["action_mask"]
        a = env.heuristic_action(teacher)
        if env.pending is not None:
            xs.append(obs)
            ms.append(m.copy())
            ys.append(a)
        act = a if rng.random() > 0.2 or not m.any() else int(rng.choice(np.flatnonzero(m)))
        obs, _, term, trunc, info = env.step(act)
        if term or trunc:
            obs, info = env.reset(seed=seed + len(xs))
    x = torch.stack([policy_input(net, o) for o in xs])
    m, y = torch.as_tensor(np.array(ms)), torch.as_tensor(np.array(ys))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(masked_logits(net(x), m), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.eval()


def demo_checkpoint(kind: str, root: str | Path, full_size: bool = False, env_cfg: dict[str, Any] | None = None,
                    router: str = "jsq") -> Path:
    """A checkpoint of policy type ``kind`` (a DEMO_ENVS key) cloned from ``router``, saved under ``root/kind``.

    ``full_size``: the networks of conf/agent (64-64 DDQN, 256-256 best-effort DDQN, HAN 64 hidden / 4 heads);
    otherwise 32-wide ones that clone in seconds."""
    if kind not in DEMO_ENVS:
        raise ConfigError(f"kind: expected one of {sorted(DEMO_ENVS)}, got {kind!r}")
    env_cfg = dict(env_cfg or DEMO_ENVS[kind])
    env = make_env(env_cfg)
    torch.manual_seed(0)
    n = int(env.action_space.n)
    if kind.startswith("ddqn"):
        width = (256 if kind == "ddqn_best_effort" else 64) if full_size else 32
        net: torch.nn.Module = QNetwork(int(env.observation_space.shape[0]), n, [width, width],
                                        dueling=kind == "ddqn_best_effort")
        agent = "ddqn"
    else:
        cfg = SACConfig(encoder="han") if full_size else SACConfig(encoder="han", han_hidden=32, hidden=[32])
        net = (ArgmaxSAC if kind == "sac_argmax_han" else DiscreteSAC)(env.observation_space, n, cfg, 0).policy_net()
        agent = "sac_argmax" if kind == "sac_argmax_han" else "sac"
    clone_heuristic(net, env, router)
    meta = {"agent": agent, "label": f"{kind}_{router}_clone", "observation": observation_layout(env),
            "actions": action_layout(env), "env": ship_predictor(env_cfg, Path(root) / kind), "steps": 0,
            "episodes": 0, "best_score": None, "eval_metric": "return", "evaluations": [], "seed": 0,
            "cloned_from": router}
    return save_checkpoint(Path(root) / kind, net, meta,
                           config_yaml=json.dumps({"env": env_cfg, "agent": agent}) + "\n")
