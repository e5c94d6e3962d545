"""Discrete Soft Actor-Critic with action masks and semi-MDP discounting, top to bottom.

The QoS-aware edge router (QoS-Aware LLM Routing for Edge Computing with Multiple Experts) is SAC (Haarnoja et al.
2018) over a HAN embedding of the arrived request (agents/han.py). Its action is discrete (route to one of N
experts or drop), so this is the discrete form (Christodoulou 2019; CleanRL's ``sac_atari.py``), with what routing
needs added:

    pi(.|s)   = softmax over the valid actions of s (masked logits; invalid actions get probability 0)
    V'(s')    = sum_a' pi(a'|s') [min_i Q'_i(s', a') - alpha log pi(a'|s')]     (exact expectation)
    y         = R + D * V'(s')          R, D: (n-step) return and product of gamma ** (dt / tau) (agents/buffer.py)
    L_Q       = sum_i MSE(Q_i(s, a), y)                                            (twin critics, L2 as the code)
    L_pi      = E_s sum_a pi(a|s) [alpha log pi(a|s) - min_i Q_i(s, a)]
    L_alpha   = E_s log(alpha) * (H(pi(.|s)) - H_target(s)),  H_target(s) = scale * log(#valid actions in s)

The entropy target is per state because the number of valid actions varies (full waiting queues are masked);
``target_entropy_scale`` is the share of the uniform policy's entropy to aim for. Target critics track the
online ones by Polyak averaging after each gradient step. Encoders (``han`` over the graph observation, ``mlp``
over a flat one, e.g. the paper's Baseline RL on expert-level features) are agents/sac_nets.py's; the config,
temperature, targets and resume are agents/sac_base.py's.

Why not stable-baselines3's SAC: it rejects Discrete action spaces and has no action masks nor per-transition
discounts. SB3 still supplies the vector envs and the logger (agents/loop.py, agents/train.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from llmsim.agents.base import ALGORITHMS, LoopState, random_valid
from llmsim.agents.buffer import Batch
from llmsim.agents.nets import masked_logits
from llmsim.agents.sac_base import SACConfig, SoftActorCritic
from llmsim.agents.sac_nets import SACActor, make_head


def policy_terms(logits: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(probabilities, log-probabilities) with invalid actions at probability 0 and log-probability 0."""
    logp = F.log_softmax(masked_logits(logits, mask), dim=-1)
    probs = logp.exp()
    valid = mask | ~mask.any(dim=-1, keepdim=True)
    return probs, torch.where(valid, logp, torch.zeros_like(logp))


@ALGORITHMS.register
class DiscreteSAC(SoftActorCritic):
    name = "sac"

    def __init__(self, obs_space: Any, n_actions: int, cfg: SACConfig, seed: int = 0) -> None:
        super().__init__(obs_space, n_actions, cfg, seed)
        d = self.embed_dim
        self.q1, self.q2 = (make_head(self.encoder, d, cfg.hidden, n_actions) for _ in range(2))
        self.actor = SACActor(self.actor_encoder(), make_head(self.encoder, d, cfg.hidden, n_actions), self.layout,
                              self.arch("categorical"))
        self.critic = nn.ModuleList([self.encoder, self.q1, self.q2])
        self.setup_optimisers(seed)

    # ----------------------------------------------------------------- acting
    @torch.no_grad()
    def sample(self, obs: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """Actions drawn from the masked policy (numpy RNG: reproducible whatever torch's state)."""
        logits = self.actor(torch.as_tensor(obs, dtype=torch.float32))
        probs, _ = policy_terms(logits, torch.as_tensor(masks))
        cdf = probs.double().cumsum(dim=-1).numpy()
        u = self.rng.random(len(obs))[:, None] * cdf[:, -1:]
        return np.minimum((cdf < u).sum(axis=1), self.n_actions - 1)

    def explore(self, obs: np.ndarray, masks: np.ndarray, state: LoopState,
                total_steps: int) -> tuple[np.ndarray, dict[str, float]]:
        """Uniform random valid actions for the first ``learning_starts`` steps, then the policy's samples."""
        if state.step < self.cfg.learning_starts:
            actions = np.empty(len(masks), np.int64)
            for i, m in enumerate(masks):
                actions[i] = random_valid(self.rng, m, self.n_actions)
            return actions, {"alpha": self.alpha}
        return self.sample(obs, masks), {"alpha": self.alpha}

    # ----------------------------------------------------------------- learning
    def q_values(self, critic: nn.ModuleList, emb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return critic[1](emb), critic[2](emb)

    @torch.no_grad()
    def target(self, batch: Batch) -> torch.Tensor:
        next_obs, next_mask = torch.as_tensor(batch.next_obs), torch.as_tensor(batch.next_masks)
        probs, logp = policy_terms(self.actor(next_obs), next_mask)
        q1, q2 = self.q_values(self.critic_target, self.critic_target[0](next_obs))
        v_next = (probs * (torch.min(q1, q2) - self.alpha * logp)).sum(dim=-1)
        disc = torch.as_tensor(batch.discounts)
        v_next = torch.where(disc > 0, v_next, torch.zeros_like(v_next))
        return torch.as_tensor(batch.returns) + disc * v_next

    def update(self, batch: Batch) -> dict[str, float]:
        cfg = self.cfg
        y = self.target(batch)
        obs, a = torch.as_tensor(batch.obs), torch.as_tensor(batch.actions).unsqueeze(1)
        emb = self.encoder(obs)
        q1, q2 = self.q_values(self.critic, emb)
        critic_loss = F.mse_loss(q1.gather(1, a).squeeze(1), y) + F.mse_loss(q2.gather(1, a).squeeze(1), y)
        self.optimiser_step(self.critic_opt, critic_loss)
        mask = torch.as_tensor(batch.masks)
        actor_in = emb.detach() if cfg.share_encoder else self.actor.encoder(obs)
        probs, logp = policy_terms(self.actor.head(actor_in), mask)
        q_min = torch.min(q1, q2).detach()
        actor_loss = (probs * (self.alpha * logp - q_min)).sum(dim=-1).mean()
        self.optimiser_step(self.actor_opt, actor_loss)
        entropy = -(probs * logp).sum(dim=-1).detach()
        n_valid = mask.sum(dim=-1).clamp(min=1).float()
        h_target = cfg.target_entropy_scale * torch.log(n_valid)
        self.finish_update((self.log_alpha * (entropy - h_target)).mean())
        return {"critic_loss": critic_loss.item(), "actor_loss": actor_loss.item(), "alpha": self.alpha,
                "entropy": entropy.mean().item(), "target_entropy": h_target.mean().item(),
                "q_mean": q_min.gather(1, a).mean().item()}
