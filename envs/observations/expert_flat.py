"""Expert-level flat state of the QoS-aware edge router paper's "Baseline RL" (Sec. VI-A, baseline 4).

The paper's Baseline RL sees f_t = (f_m1, ..., f_mN), f_mn = (e_n, |running_n|, |waiting_n|): a flat 3N
vector with no request-level and no arrived-request features (no per-request nodes: the default,
``request_features=False``). ``request_features=True`` prepends the arrived request's 3N features of the graph
state. Layout (float32, the same normalisation as :class:`~llmsim.envs.observations.graph.GraphObs`):

  [0, N)     prompt tokens / prompt_scale (repeated per expert)       } only with request_features
  [N, 2N)    predicted quality of the request on each expert           } (0 when nothing is decided)
  [2N, 3N)   predicted output tokens on each expert / out_scale        }
  o + 3k     KV blocks in use / total on expert k (e_k of Eq. 7)       o = 3N with request_features, else 0
  o + 3k+1   running requests / cap_running
  o + 3k+2   waiting (+ swapped) requests / cap_waiting
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np

from llmsim.envs.observations.base import ObsBuilder
from llmsim.envs.observations.graph import FEAT_HIGH
from llmsim.envs.options import positive

if TYPE_CHECKING:
    from llmsim.envs.context import ObservationContext
    from llmsim.request import Request
    from llmsim.state.cluster_state import ClusterState


class ExpertFlatObs(ObsBuilder):
    name = "expert_flat"
    reads_quality = True

    def __init__(self, cap_running: int = 10, cap_waiting: int = 10, prompt_scale: float = 1000.0,
                 out_scale: float = 300.0, request_features: bool = False) -> None:
        self.request = bool(request_features)
        self.cap_r = positive("observation.cap_running", cap_running, integer=True)
        self.cap_w = positive("observation.cap_waiting", cap_waiting, integer=True)
        self.ps = positive("observation.prompt_scale", prompt_scale)
        self.os = positive("observation.out_scale", out_scale)

    def bind(self, env: ObservationContext) -> gym.Space:
        self.n = env.num_instances
        self.buf = np.zeros((6 if self.request else 3) * self.n, np.float32)
        return gym.spaces.Box(0.0, FEAT_HIGH, self.buf.shape, np.float32)

    def build(self, env: ObservationContext, state: ClusterState, req: Request | None) -> np.ndarray:
        b, n = self.buf, self.n
        b.fill(0.0)
        if self.request and req is not None:
            lens, quals = env.predictions(req)
            mi = env.inst_model_idx
            b[:n] = min(FEAT_HIGH, req.prompt_tokens / self.ps)
            b[n:2 * n] = quals[mi]
            b[2 * n:3 * n] = np.minimum(FEAT_HIGH, lens[mi] / self.os)
        for k, inst in enumerate(state.instances):
            o = (3 * n if self.request else 0) + 3 * k
            b[o] = inst.kv_blocks_used / inst.kv_blocks_total
            b[o + 1] = min(FEAT_HIGH, inst.num_running / self.cap_r)
            b[o + 2] = min(FEAT_HIGH, (inst.num_waiting + inst.num_swapped) / self.cap_w)
        return b.copy()
