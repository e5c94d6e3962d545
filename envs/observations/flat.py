"""Flat state of "Intelligent Router for LLM Workloads" (Sec. 3.2): 3 queue + 6 per-instance features (27 for 4).

With ``prefix_hit=True`` (off by default: the default layout and saved policies are unchanged) N more features
follow, one per instance (31 for 4 instances; docs/prefix_routing.md).

Layout (float32, index: meaning, normalisation):

  0            w_t: central queue length (incl. the head) / 512 (4 x max batch 128), clipped to 1
  1            p_t: prompt tokens of the request being decided / 1000 (prompts <= 1000 tokens), clip 4
  2            d_t: its predicted decode bucket, 0 (< 256), 1 (256-2048), 2 (> 2048), divided by 2
  3 + 6k + 0   requests of instance k in prefill (waiting, or admitted with no token yet) / max_num_seqs
               (not clipped: the four counts' bound in the space is open; waiting requests exceed the batch)
  3 + 6k + 1   requests of instance k decoding with predicted output < 256 / max_num_seqs
  3 + 6k + 2   ... 256 <= predicted < 2048 / max_num_seqs
  3 + 6k + 3   ... predicted >= 2048 / max_num_seqs
  3 + 6k + 4   C: available capacity, 1 - max(batch slots used, KV blocks used) in [0, 1], 2 decimals
  3 + 6k + 5   T: estimated time to the earliest completion on instance k (s) / 10, clipped to 1, 2 decimals;
               T = min_j max(0, d_hat_j - o_j) * t_dec over the decoding requests j (0 when none decodes),
               t_dec = max(0.02, grad_d * resident tokens)
  3 + 6N + k   only with prefix_hit: expected prefix-cache hit of the request on instance k, hit tokens / prompt
               tokens in [0, 1] (``ClusterView.prefix_hit_tokens``: what the engine's cache holds now; 0 when
               prefix caching is off, the request has no hash ids, or nothing is decided)

All request counts are over the instance's running, waiting and swapped queues, as the (possibly stale)
ClusterState lists them; a request without a prediction counts with the state's ``mean_output``. With
nothing to decide (a drain step, the terminal state) the three queue features are 0.
"""

from __future__ import annotations

import math
from math import floor
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np

from llmsim.envs.observations.base import ObsBuilder
from llmsim.envs.options import positive
from llmsim.errors import ConfigError

if TYPE_CHECKING:
    from llmsim.envs.context import ObservationContext
    from llmsim.request import Request
    from llmsim.state.cluster_state import ClusterState


def round2(x: float) -> float:
    """``round(x, 2)`` for x in [0, 1], at half its cost: k / 100 with k the integer nearest x * 100, which is
    ``round``'s answer (the double nearest the decimal k / 100) whenever x * 100 is not within 1e-7 of a tie
    (its float error is below 1e-14 there); near a tie, and outside [0, 1], ``round`` itself decides."""
    if 0.0 <= x <= 1.0:
        y = x * 100.0
        k = floor(y + 0.5)
        if -0.4999999 < y - k < 0.4999999:
            return k / 100
    return round(x, 2)


class FlatObs(ObsBuilder):
    name = "flat"

    def __init__(self, queue_cap: int = 512, prompt_scale: float = 1000.0,
                 buckets: tuple[int, int] = (256, 2048), grad_d: float = 3.3e-5,
                 min_decode_time: float = 0.02, time_scale: float = 10.0, prefix_hit: bool = False) -> None:
        if not isinstance(prefix_hit, bool):
            raise ConfigError(f"observation.prefix_hit: expected true or false, got {prefix_hit!r}")
        self.prefix_hit = prefix_hit
        self.queue_cap = positive("observation.queue_cap", queue_cap, integer=True)
        self.prompt_scale = positive("observation.prompt_scale", prompt_scale)
        if not isinstance(buckets, tuple | list) or len(buckets) != 2:
            raise ConfigError(f"observation.buckets: expected two output-token bounds [low, high], got {buckets!r}")
        self.b0, self.b1 = (positive("observation.buckets", b, integer=True) for b in buckets)
        if self.b0 >= self.b1:
            raise ConfigError(f"observation.buckets: expected increasing bounds [low, high], got {buckets!r}")
        self.grad_d = positive("observation.grad_d", grad_d)
        self.min_dec = positive("observation.min_decode_time", min_decode_time)
        self.time_scale = positive("observation.time_scale", time_scale)

    def bind(self, env: ObservationContext) -> gym.Space:
        n = env.num_instances
        self.buf = np.zeros(3 + 6 * n + (n if self.prefix_hit else 0), dtype=np.float32)
        hi = np.ones_like(self.buf)
        hi[1] = 4.0
        # the request counts per instance are not clipped (waiting prompts pile up past max_num_seqs under load),
        # so their bound is open: a space that claims 1 is left by the observations it describes
        for k in range(n):
            hi[3 + 6 * k:7 + 6 * k] = np.inf
        return gym.spaces.Box(0.0, hi, dtype=np.float32)

    def build(self, env: ObservationContext, state: ClusterState, req: Request | None) -> np.ndarray:
        buf = self.buf
        b0, b1 = self.b0, self.b1
        if req is None:
            vals = [0.0, 0.0, 0.0]
        else:
            lens, _ = env.predictions(req)
            d = float(lens[0]) if len(lens) == 1 else float(lens.mean())  # one model: skip numpy's mean (~10 us)
            vals = [min(1.0, state.central_queue / self.queue_cap), min(4.0, req.prompt_tokens / self.prompt_scale),
                    0.0 if d < b0 else (0.5 if d < b1 else 1.0)]
        # the features go into a list and then into the float32 buffer at once (one conversion per value either
        # way; a store per value into a numpy array costs more than the arithmetic)
        grad_d, min_dec, ts = self.grad_d, self.min_dec, self.time_scale
        edges = (b0, b1)
        mean_out = state.mean_output
        inf = math.inf
        for inst in state.instances:
            pre, (n0, n1, n2), left, resident = inst.detail.phase_summary(edges, mean_out)
            ms = inst.max_num_seqs
            used = max(inst.num_running / ms, inst.kv_blocks_used / inst.kv_blocks_total)
            if left == inf:
                t = 0.0
            else:
                t_dec = max(min_dec, grad_d * resident)
                t = min(1.0, max(0.0, left) * t_dec / ts)
            vals += (pre / ms, n0 / ms, n1 / ms, n2 / ms, round2(max(0.0, 1.0 - used)), round2(t))
        o = len(vals)
        buf[:o] = vals
        if self.prefix_hit:
            self.fill_prefix_hits(env, req, o)
        return buf.copy()

    def fill_prefix_hits(self, env: ObservationContext, req: Request | None, o: int) -> None:
        """Hit tokens / prompt tokens of ``req`` on each instance, as the router's context reports them."""
        buf = self.buf
        n = len(buf) - o
        if req is None or req.prompt_tokens <= 0 or not req.hash_ids:
            buf[o:] = 0.0
            return
        p = req.prompt_tokens
        for k in range(n):
            buf[o + k] = min(1.0, env.prefix_hit_tokens(k, req) / p)
