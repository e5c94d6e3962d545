"""The networks every agent builds on: an MLP, the Q-network, action masking, and a numpy actor.

The Intelligent Router's network is Linear(27, 64) -> ReLU -> Linear(64, 64) -> ReLU -> Linear(64, K + 1); the
best-effort router's is 256-256. ``hidden`` takes either. Masked actions get -inf before any max / argmax, so
they are never chosen and never used in a target.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn


def mlp(d_in: int, hidden: Sequence[int], d_out: int) -> nn.Sequential:
    """Linear -> ReLU per hidden width, then a linear output layer."""
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(d_in, int(h)), nn.ReLU()]
        d_in = int(h)
    layers.append(nn.Linear(d_in, d_out))
    return nn.Sequential(*layers)


class QNetwork(nn.Module):
    """``dueling``: Q = V + A - mean(A) (Wang et al. 2016) from the same trunk. Where most of the return is the
    backlog nobody can change any more (the Intelligent Router's reward), the state value dwarfs the differences
    between actions, and a separate advantage head learns those differences far faster."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: Sequence[int] = (64, 64), dueling: bool = False) -> None:
        super().__init__()
        self.net = mlp(obs_dim, hidden, n_actions + 1 if dueling else n_actions)
        self.obs_dim, self.n_actions, self.hidden = obs_dim, n_actions, [int(h) for h in hidden]
        self.dueling = dueling

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        out = self.net(obs)
        if not self.dueling:
            return out
        adv = out[..., 1:]
        return out[..., :1] + adv - adv.mean(dim=-1, keepdim=True)


def masked(q: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``q`` with invalid actions at -inf (a row with no valid action keeps its values: nothing to restrict)."""
    any_valid = mask.any(dim=-1, keepdim=True)
    return torch.where(mask | ~any_valid, q, torch.full_like(q, -torch.inf))


def masked_argmax(q: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return masked(q, mask).argmax(dim=-1)


def masked_logits(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Logits with invalid actions at -1e9 (finite, so a softmax gives them probability 0 without NaN)."""
    any_valid = mask.any(dim=-1, keepdim=True)
    return torch.where(mask | ~any_valid, logits, torch.full_like(logits, -1e9))


class NumpyActor:
    """Greedy masked actions of a QNetwork in numpy, for acting one observation at a time: a torch call costs
    tens of microseconds of dispatch for a 27-64-64-6 MLP, numpy a few. The arrays are views of the torch
    parameters (``detach().numpy()`` shares memory, and optimiser steps and ``load_state_dict`` write in
    place), so the actor always uses the current weights."""

    def __init__(self, net: QNetwork) -> None:
        linears = [m for m in net.net if isinstance(m, nn.Linear)]
        self.dueling = net.dueling
        self.layers = [(m.weight.detach().numpy().T, m.bias.detach().numpy()) for m in linears]

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """Q-values of a (n, obs_dim) float32 batch."""
        x = obs
        last = len(self.layers) - 1
        for i, (w, b) in enumerate(self.layers):
            x = x @ w + b
            if i < last:
                np.maximum(x, 0.0, out=x)
        if self.dueling:
            adv = x[:, 1:]
            return x[:, :1] + adv - adv.mean(axis=1, keepdims=True)
        return x

    def act(self, obs: np.ndarray, masks: np.ndarray) -> np.ndarray:
        q = self.q_values(obs)
        q = np.where(masks | ~masks.any(axis=1, keepdims=True), q, -np.inf)
        return q.argmax(axis=1)
