"""Model-selection features of "Learned Best-Effort LLM Serving" (Sec. 3.1): task, batch size per model, rate.

Layout (float32): [one-hot task (T)] + [batch size per model (M) or per replica (R) / batch_scale]
+ [arrival rate / rate_scale]. The batch size of an instance is running + waiting + swapped requests;
per model it is the sum over the model's replicas. The rate is the true rate in force when the
workload provides it (``req.extra["rate"]``, the paper's stable workload) with ``rate="true"``, else the
running estimate 1 / mean of the last ``window`` inter-arrival gaps (5 in the paper, App. B).
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np

from llmsim.envs.observations.base import ObsBuilder
from llmsim.envs.options import positive
from llmsim.schema import check_choice

if TYPE_CHECKING:
    from llmsim.envs.context import ObservationContext
    from llmsim.request import Request
    from llmsim.state.cluster_state import ClusterState


class ModelSelectObs(ObsBuilder):
    name = "model"

    def __init__(self, tasks: list[str] | None = None, per_replica: bool = False, rate: str = "estimate",
                 window: int = 5, batch_scale: float = 64.0, rate_scale: float = 48.0) -> None:
        self.tasks = list(tasks or [])
        self.per_replica = per_replica
        self.rate_mode = check_choice(rate, ("true", "estimate"), "observation.rate")
        self.window = positive("observation.window", window, integer=True)
        self.batch_scale = positive("observation.batch_scale", batch_scale)
        self.rate_scale = positive("observation.rate_scale", rate_scale)

    def bind(self, env: ObservationContext) -> gym.Space:
        if not self.tasks:
            self.tasks = list(env.task_names)
        self.task_idx = {t: i for i, t in enumerate(self.tasks)}
        self.m = env.num_instances if self.per_replica else len(env.models)
        self.buf = np.zeros(len(self.tasks) + self.m + 1, np.float32)
        self.slot = list(range(self.m)) if self.per_replica else [int(j) for j in env.inst_model_idx]
        # with a power-of-two scale every partial sum of n / batch_scale is exact in float32, so the per-model
        # features can be summed as integers and divided once (the same float32 values, without a numpy
        # scalar operation per instance)
        self.exact_sums = math.frexp(self.batch_scale)[0] == 0.5
        return gym.spaces.Box(0.0, np.inf, self.buf.shape, np.float32)

    def reset(self, env: ObservationContext) -> None:
        self.arrivals: deque[float] = deque(maxlen=self.window + 1)
        self.true_rate = 0.0

    def on_arrival(self, env: ObservationContext, req: Request) -> None:
        self.arrivals.append(req.arrival)
        if req.extra and "rate" in req.extra:
            self.true_rate = float(req.extra["rate"])

    def rate(self) -> float:
        if self.rate_mode == "true" and self.true_rate > 0:
            return self.true_rate
        a = self.arrivals
        if len(a) < 2:
            return 0.0
        span = a[-1] - a[0]
        return (len(a) - 1) / span if span > 0 else 0.0

    def build(self, env: ObservationContext, state: ClusterState, req: Request | None) -> np.ndarray:
        buf = self.buf
        buf.fill(0.0)
        t = len(self.tasks)
        if req is not None and req.task in self.task_idx:
            buf[self.task_idx[req.task]] = 1.0
        if self.exact_sums:
            counts = [0] * self.m
            for inst, j in zip(state.instances, self.slot):
                counts[j] += inst.num_running + inst.num_waiting + inst.num_swapped
            scale = self.batch_scale
            buf[t:t + self.m] = [c / scale for c in counts]
        else:
            for inst, j in zip(state.instances, self.slot):
                buf[t + j] += (inst.num_running + inst.num_waiting + inst.num_swapped) / self.batch_scale
        buf[-1] = self.rate() / self.rate_scale
        return buf.copy()
