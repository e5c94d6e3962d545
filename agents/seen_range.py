"""Where a network has been: the range of each observation feature over the states it was fitted on.

A network fitted on short episodes meets, in a long one, queues longer than any it saw; its Q-values there are
extrapolation, and nothing warns. A set network with a seen range (``SetQNetwork(seen_range=True)``) takes its
guide's action wherever a decision's observation leaves the range, so outside what it learned it is its guide,
not worse; the range is a pair of buffers, so a checkpoint and its ONNX export (the live router) carry the gate.
There the network's scores are the guide's one-hot choice (no large constant, so the export's scores stay within
its float32 self-check of the checkpoint's).
"""

from __future__ import annotations

import math

import torch
from torch import nn


class SeenRange(nn.Module):
    """Per global feature and per instance feature (over real instances), the interval a decision must stay in;
    unbounded until :meth:`fit`."""

    def __init__(self, n_globals: int, n_features: int) -> None:
        super().__init__()
        self.n_globals = n_globals
        self.register_buffer("lo", torch.full((n_globals + n_features,), -math.inf))
        self.register_buffer("hi", torch.full((n_globals + n_features,), math.inf))

    @torch.no_grad()
    def fit(self, glob: torch.Tensor, rows: torch.Tensor, mask: torch.Tensor, slack: float) -> None:
        """The range of these observations, widened on each side by ``slack`` times its width (a feature that
        never moved keeps its one value)."""
        if not (math.isfinite(slack) and slack >= 0.0) or len(glob) == 0:
            raise ValueError(f"a seen range needs observations and a slack >= 0, got {len(glob)} and {slack}")
        inst = rows[mask > 0.5]
        lo = torch.cat([glob.min(dim=0).values, inst.min(dim=0).values])
        hi = torch.cat([glob.max(dim=0).values, inst.max(dim=0).values])
        self.lo.copy_(lo - slack * (hi - lo))
        self.hi.copy_(hi + slack * (hi - lo))

    def outside(self, glob: torch.Tensor, rows: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """1.0 for each observation with a feature outside the range, else 0.0 (B,). Written with relu and sums,
        which onnxruntime runs, and finite wherever the observation is (the open bounds give 0)."""
        g = self.n_globals
        far = (torch.relu(self.lo[:g] - glob) + torch.relu(glob - self.hi[:g])).sum(dim=1)
        far_rows = (torch.relu(self.lo[g:] - rows) + torch.relu(rows - self.hi[g:])).sum(dim=2)
        return ((far + (far_rows * mask).sum(dim=1)) > 0.0).to(glob.dtype)
