"""Reward functions: ``make_reward(name, **kw)``; names qos, workload_aware, workload_aware_tail, best_effort, utility,
latency."""

from __future__ import annotations

from typing import Any

from llmsim.envs.rewards.base import Reward
from llmsim.envs.rewards.best_effort import BestEffortReward, deadline_weight
from llmsim.envs.rewards.latency import LatencyReward
from llmsim.envs.rewards.qos import QoSReward, action_impact, latency_increase
from llmsim.envs.rewards.utility import UtilityReward
from llmsim.envs.rewards.workload_aware import TailAwareReward, WorkloadAwareReward, mixing_penalty
from llmsim.registry import Registry

REWARDS: Registry[type[Reward]] = Registry("reward")
for _cls in (QoSReward, WorkloadAwareReward, BestEffortReward, UtilityReward, LatencyReward, TailAwareReward):
    REWARDS.register(_cls)


def make_reward(spec: str | dict[str, Any] | Reward | None, **kwargs: Any) -> Reward:
    """A reward from a name plus kwargs, a ``{"kind": name, ...}`` dict, or an instance."""
    return REWARDS.build(spec, Reward, "latency", "reward", **kwargs)


__all__ = ["REWARDS", "BestEffortReward", "LatencyReward", "QoSReward", "Reward", "TailAwareReward", "UtilityReward",
           "WorkloadAwareReward", "action_impact", "deadline_weight", "latency_increase", "make_reward",
           "mixing_penalty"]
