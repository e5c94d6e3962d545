"""Gymnasium environments over the llmsim cluster (routing decisions, observations, rewards, testbeds).

Registered ids: ``llmsim/QoSEdge-v0`` (spec 000), ``llmsim/WorkloadRouter-v0`` (spec 001),
``llmsim/BestEffort-v0`` (spec 002) and ``llmsim/Routing-v0`` (anything from kwargs). See docs/envs.md.
"""

from __future__ import annotations

import gymnasium as gym

ENV_IDS = ("llmsim/QoSEdge-v0", "llmsim/WorkloadRouter-v0", "llmsim/BestEffort-v0", "llmsim/Routing-v0")
_ENTRY = {
    "llmsim/QoSEdge-v0": "llmsim.envs.testbeds:qos_edge",
    "llmsim/WorkloadRouter-v0": "llmsim.envs.testbeds:workload_router",
    "llmsim/BestEffort-v0": "llmsim.envs.testbeds:best_effort",
    "llmsim/Routing-v0": "llmsim.envs.testbeds:routing",
}
for _id, _ep in _ENTRY.items():
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=_ep, disable_env_checker=True, order_enforce=False)

__all__ = ["ENV_IDS"]
