"""Gymnasium environments over the llmsim cluster (routing decisions, observations, rewards, testbeds).

Registered ids, one documented class each (its docstring: description, spaces, rewards, episode end, arguments):
``llmsim/QoSEdge-v0`` (:class:`llmsim.envs.testbeds.QoSEdgeEnv`, "QoS-Aware LLM Routing for Edge Computing with
Multiple Experts"), ``llmsim/WorkloadRouter-v0`` (:class:`llmsim.envs.testbeds.WorkloadRouterEnv`, "Intelligent
Router for LLM Workloads"), ``llmsim/BestEffort-v0`` (:class:`llmsim.envs.testbeds.BestEffortEnv`, "Learned
Best-Effort LLM Serving") and ``llmsim/Routing-v0`` (:class:`llmsim.envs.routing_env.RoutingEnv`: any cluster,
workload and reward). See docs/envs.md.
"""

from __future__ import annotations

import gymnasium as gym

ENV_IDS = ("llmsim/QoSEdge-v0", "llmsim/WorkloadRouter-v0", "llmsim/BestEffort-v0", "llmsim/Routing-v0")
ENTRY_POINTS = {
    "llmsim/QoSEdge-v0": "llmsim.envs.testbeds:QoSEdgeEnv",
    "llmsim/WorkloadRouter-v0": "llmsim.envs.testbeds:WorkloadRouterEnv",
    "llmsim/BestEffort-v0": "llmsim.envs.testbeds:BestEffortEnv",
    "llmsim/Routing-v0": "llmsim.envs.routing_env:RoutingEnv",
}
for env_id, entry_point in ENTRY_POINTS.items():
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=entry_point, disable_env_checker=True, order_enforce=False)

__all__ = ["ENTRY_POINTS", "ENV_IDS"]
