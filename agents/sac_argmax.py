"""The released code's SAC for the QoS-aware edge router: continuous SAC over an (N+1)-dim action, decoded by argmax.

The authors train TorchRL's continuous SAC: the actor outputs a squashed Gaussian a in [-1, 1]^(N+1) and the env
routes to argmax_i a_i (index N drops). We keep that, with one change: the argmax runs over the *valid* actions
(our env masks experts whose waiting queue is full; their code has no mask). Everything else is textbook SAC
(Haarnoja et al. 2018; stable-baselines3 / CleanRL ``sac_continuous_action.py``):

    a = tanh(mu + sigma * eps),  log pi(a|s) = log N(u; mu, sigma) - sum log(1 - tanh(u)^2)
    y = R + D * (min_i Q'_i(s', a') - alpha log pi(a'|s')),  a' ~ pi(.|s')
    L_Q = sum_i MSE(Q_i(s, a), y);   L_pi = E[alpha log pi(a|s) - min_i Q_i(s, a)];   target entropy -(N+1)

Q_i(s, a) is an MLP on [embedding, a]. The replay stores the continuous vector a (not the decoded index) because
the critic is a function of it. Greedy routing takes argmax over the valid entries of mu (tanh is monotone).
The config, encoders, temperature and targets are agents/sac_base.py's and agents/sac_nets.py's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from llmsim.agents.base import ALGORITHMS, LoopState
from llmsim.agents.buffer import Batch
from llmsim.agents.nets import mlp
from llmsim.agents.sac_base import SACConfig, SoftActorCritic
from llmsim.agents.sac_nets import GaussianHead, SACActor


def squashed_sample(mu: torch.Tensor, log_std: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(a = tanh(u), log pi(a)) with u ~ N(mu, sigma) by reparameterisation."""
    std = log_std.exp()
    u = mu + std * torch.randn_like(mu)
    a = torch.tanh(u)
    logp = (-0.5 * ((u - mu) / std) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    logp = logp - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)  # log(1 - tanh(u)^2), stably
    return a, logp


def decode(vectors: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Env actions: argmax over the valid entries of each action vector."""
    any_valid = masks.any(axis=1, keepdims=True)
    return np.where(masks | ~any_valid, vectors, -np.inf).argmax(axis=1)


@ALGORITHMS.register
class ArgmaxSAC(SoftActorCritic):
    name = "sac_argmax"
    stores_action_vectors = True  # the critics are functions of the continuous vector, not the decoded index

    def __init__(self, obs_space: Any, n_actions: int, cfg: SACConfig, seed: int = 0) -> None:
        super().__init__(obs_space, n_actions, cfg, seed)
        d = self.embed_dim  # with head: experts, a plain MLP over the packed embedding
        self.q1, self.q2 = mlp(d + n_actions, cfg.hidden, 1), mlp(d + n_actions, cfg.hidden, 1)
        self.actor = SACActor(self.actor_encoder(), GaussianHead(d, cfg.hidden, n_actions), self.layout,
                              self.arch("gaussian"))
        self.critic = nn.ModuleList([self.encoder, self.q1, self.q2])
        self.setup_optimisers(seed)
        self.target_entropy = -float(n_actions)

    # ----------------------------------------------------------------- acting
    def explore(self, obs: np.ndarray, masks: np.ndarray, state: LoopState,
                total_steps: int) -> tuple[np.ndarray, dict[str, float]]:
        """Uniform vectors in [-1, 1] for the first ``learning_starts`` steps, then the policy's samples; the
        vectors stay in ``action_vectors`` for the replay."""
        if state.step < self.cfg.learning_starts:
            vec = self.rng.uniform(-1.0, 1.0, (len(obs), self.n_actions)).astype(np.float32)
        else:
            with torch.no_grad():
                mu, log_std = self.actor.head.dist(self.actor.encoder(torch.as_tensor(obs, dtype=torch.float32)))
                noise = torch.from_numpy(self.rng.standard_normal(mu.shape).astype(np.float32))
                vec = torch.tanh(mu + log_std.exp() * noise).numpy()
        self.action_vectors = vec
        return decode(vec, masks), {"alpha": self.alpha}

    # ----------------------------------------------------------------- learning
    def q_values(self, critic: nn.ModuleList, emb: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([emb, a], dim=-1)
        return critic[1](x).squeeze(-1), critic[2](x).squeeze(-1)

    @torch.no_grad()
    def target(self, batch: Batch) -> torch.Tensor:
        nxt = torch.as_tensor(batch.next_obs)
        a2, logp2 = squashed_sample(*self.actor.head.dist(self.actor.encoder(nxt)))
        q1, q2 = self.q_values(self.critic_target, self.critic_target[0](nxt), a2)
        v = torch.min(q1, q2) - self.alpha * logp2
        disc = torch.as_tensor(batch.discounts)
        return torch.as_tensor(batch.returns) + disc * torch.where(disc > 0, v, torch.zeros_like(v))

    def update(self, batch: Batch) -> dict[str, float]:
        y = self.target(batch)
        obs, a = torch.as_tensor(batch.obs), torch.as_tensor(batch.action_vecs)
        emb = self.encoder(obs)
        q1, q2 = self.q_values(self.critic, emb, a)
        critic_loss = F.mse_loss(q1, y) + F.mse_loss(q2, y)
        self.optimiser_step(self.critic_opt, critic_loss)
        actor_in = emb.detach() if self.cfg.share_encoder else self.actor.encoder(obs)
        a_pi, logp = squashed_sample(*self.actor.head.dist(actor_in))
        for p in self.critic.parameters():
            p.requires_grad_(False)
        q_pi = torch.min(*self.q_values(self.critic, actor_in.detach(), a_pi))
        for p in self.critic.parameters():
            p.requires_grad_(True)
        actor_loss = (self.alpha * logp - q_pi).mean()
        self.optimiser_step(self.actor_opt, actor_loss)
        self.finish_update(-(self.log_alpha * (logp.detach() + self.target_entropy)).mean())
        return {"critic_loss": critic_loss.item(), "actor_loss": actor_loss.item(), "alpha": self.alpha,
                "entropy": -logp.mean().item(), "target_entropy": self.target_entropy, "q_mean": q1.mean().item()}
