"""What evaluation runs: anything that picks an action from the observation and action mask of a RoutingEnv.

Learned routers (:class:`llmsim.agents.checkpoint.CheckpointPolicy`) and llmsim's heuristics
(:class:`HeuristicPolicy`) share this interface, so both are judged on the same env, workload and reward.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from llmsim.envs.policy_router import ExportedRouter
from llmsim.envs.routing_env import RoutingEnv
from llmsim.routing import make_router


class Policy(Protocol):
    name: str

    def reset(self, env: RoutingEnv, seed: int) -> None: ...

    def act(self, obs: Any, mask: np.ndarray, env: RoutingEnv) -> int: ...


class HeuristicPolicy:
    """An llmsim router (``policy.name`` / ``policy.kwargs`` as in conf/policy) acting through the env."""

    def __init__(self, router: str, label: str | None = None, **kwargs: Any) -> None:
        self.router_name, self.kwargs = router, kwargs
        self.name = label or router
        self.router = make_router(router, **kwargs)

    def reset(self, env: RoutingEnv, seed: int) -> None:
        self.router = make_router(self.router_name, seed=seed, **self.kwargs)
        if isinstance(self.router, ExportedRouter):  # an export's predictor draws the env's prediction noise
            self.router.reseed_predictor(env.predictor_seed)

    def act(self, obs: Any, mask: np.ndarray, env: RoutingEnv) -> int:
        return env.heuristic_action(self.router)


def run_episode(policy: Policy, env: RoutingEnv, seed: int, workload_seed: int | None = None) -> dict[str, Any]:
    """One episode of ``policy``; returns the episode's return, steps and llmsim summary."""
    opts = {"workload_seed": workload_seed} if workload_seed is not None else None
    obs, info = env.reset(seed=seed, options=opts)
    policy.reset(env, seed)
    ret, steps = 0.0, 0
    done = env.terminated or env.truncated
    while not done:
        a = policy.act(obs, info["action_mask"], env)
        obs, r, term, trunc, info = env.step(a)
        ret += r
        steps += 1
        done = term or trunc
    return {"return": ret, "steps": steps, "summary": info.get("summary") or env.summary(),
            "components": info.get("episode_components", {}), "truncated": bool(env.truncated),
            "unseen_decisions": getattr(policy, "unseen_decisions", None)}
