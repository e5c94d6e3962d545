"""What both soft actor-critics share (agents/sac.py, agents/sac_argmax.py): the config, twin critics with Polyak
targets, the learned temperature, gradient clipping per optimiser, and resume.

Encoder sharing: with ``share_encoder`` (default) one encoder is trained by the critic loss and the actor reads its
embedding without a gradient (as SAC-AE and DrQ do: the actor's gradient through a shared encoder destabilises
the critic); the QoS-aware edge router's released code hands one HAN object to both, trained by both losses.
``share_encoder: false`` gives the actor its own encoder, trained by the actor loss.
"""

from __future__ import annotations

import copy
import math
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from pydantic import Field, field_validator
from torch import nn

from llmsim.agents.base import LayerWidths, OffPolicyAgent, OffPolicyConfig, polyak_update
from llmsim.agents.han import GraphLayout
from llmsim.agents.sac_nets import SACActor, embed_dim, make_encoder
from llmsim.schema import Float, Fraction, NonNegFloat, NonNegInt, PosFloat, PosInt


class SACConfig(OffPolicyConfig):
    """``conf/agent/sac*.yaml``; the QoS-aware edge router's released values where it has them (its section 4.8)."""

    name: Literal["sac", "sac_argmax"] = "sac"
    encoder: Literal["han", "mlp"] = "han"  # han (graph observation) | mlp (flat observation)
    hidden: LayerWidths = Field(default_factory=lambda: [64, 64])  # actor and critic MLPs after encoding
    han_hidden: PosInt = 64
    han_heads: PosInt = 4  # the paper's 4 (the released code: 8)
    han_layers: PosInt = 2
    head: Literal["experts", "arrived"] = "experts"  # experts: per-expert scores from [z, e_k, r_k]; arrived: z only
    share_encoder: bool = True
    tau: NonNegFloat | None = None  # None: gamma per decision (the code's TD(0)); s: gamma ** (dt / tau)
    lr: PosFloat = 3e-5  # actor and critics
    alpha_lr: PosFloat = 3e-4
    init_alpha: PosFloat = 1.0
    autotune: bool = True  # learn alpha towards the target entropy; false: alpha fixed at init_alpha
    target_entropy_scale: Float = 0.5
    batch_size: PosInt = 256
    buffer_size: PosInt = 100_000
    learning_starts: NonNegInt = 25_000  # env steps of uniform random valid actions before learning
    train_freq: PosInt = 1  # env steps per round of gradient steps (1: the code's UTD 1)
    polyak: Fraction = 0.005  # target critics: theta' <- (1 - polyak) theta' + polyak theta

    @field_validator("guidance")
    @classmethod
    def env_reward_only(cls, v: str) -> str:
        if v != "none":
            raise ValueError(f"{v!r}: SAC trains on the env's reward only (guidance: none); heuristic shaping is a "
                             "Double DQN feature")
        return v


class SoftActorCritic(OffPolicyAgent):
    """A variant builds ``self.actor`` (an SACActor) and ``self.critic`` (ModuleList [encoder, Q1, Q2]), then calls
    :meth:`setup_optimisers`."""

    config_type: ClassVar[type[OffPolicyConfig]] = SACConfig
    cfg: SACConfig
    actor: SACActor
    critic: nn.ModuleList
    layout: GraphLayout | None

    def __init__(self, obs_space: Any, n_actions: int, cfg: SACConfig, seed: int = 0) -> None:
        self.cfg, self.n_actions, self.obs_space = cfg, n_actions, obs_space
        torch.manual_seed(seed)
        self.encoder, self.layout = self.new_encoder()
        self.embed_dim = embed_dim(self.encoder, obs_space)

    @classmethod
    def for_env(cls, obs_space: Any, n_actions: int, cfg: Any, seed: int) -> SoftActorCritic:
        return cls(obs_space, n_actions, cfg, seed)

    def new_encoder(self) -> tuple[nn.Module, GraphLayout | None]:
        cfg = self.cfg
        return make_encoder(cfg.encoder, self.obs_space, (cfg.han_hidden, cfg.han_heads, cfg.han_layers), cfg.head)

    def actor_encoder(self) -> nn.Module:
        """The critic's encoder (``share_encoder``) or a new one of the same shape."""
        return self.encoder if self.cfg.share_encoder else self.new_encoder()[0]

    @property
    def replay_dim(self) -> int:
        return self.layout.flat_dim if self.layout is not None else int(self.obs_space.shape[0])

    def setup_optimisers(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.critic_target = copy.deepcopy(self.critic)
        for p in self.critic_target.parameters():
            p.requires_grad_(False)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=self.cfg.lr)
        own = self.actor.head.parameters() if self.cfg.share_encoder else self.actor.parameters()
        self.actor_opt = torch.optim.Adam(own, lr=self.cfg.lr)
        self.log_alpha = torch.tensor(math.log(self.cfg.init_alpha), requires_grad=True)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=self.cfg.alpha_lr)
        self.updates = 0

    def arch(self, head: str) -> dict[str, Any]:
        """What checkpoint.json records for :func:`llmsim.agents.sac_nets.build_actor` to rebuild the actor."""
        cfg = self.cfg
        return {"kind": "sac_actor", "head": head, "encoder": cfg.encoder, "hidden": list(cfg.hidden),
                "state_head": cfg.head if cfg.encoder == "han" else "arrived",
                "n_actions": self.n_actions, "embed_dim": self.embed_dim,
                "han": {"hidden": cfg.han_hidden, "heads": cfg.han_heads, "layers": cfg.han_layers},
                "layout": self.layout.to_dict() if self.layout is not None else None}

    @property
    def alpha(self) -> float:
        return float(self.log_alpha.detach().exp())

    def flatten(self, obs: Any) -> np.ndarray:
        if self.layout is not None:
            return self.layout.flatten(obs, batched=True)
        return np.asarray(obs, dtype=np.float32)

    def optimiser_step(self, opt: torch.optim.Optimizer, loss: torch.Tensor) -> None:
        """One optimiser step; gradients are clipped over that optimiser's own parameters only (a shared
        encoder keeps the critic's gradient, which must not count towards the actor's norm)."""
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.cfg.max_grad_norm:
            own = [p for group in opt.param_groups for p in group["params"]]
            torch.nn.utils.clip_grad_norm_(own, self.cfg.max_grad_norm)
        opt.step()

    def finish_update(self, alpha_loss: torch.Tensor) -> None:
        """After the critic and actor steps: the temperature step (with ``autotune``), Polyak, the counter."""
        if self.cfg.autotune:
            self.alpha_opt.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_opt.step()
        polyak_update(self.critic.parameters(), self.critic_target.parameters(), self.cfg.polyak)
        self.updates += 1

    def policy_net(self) -> SACActor:
        return self.actor

    def state_dict(self) -> dict[str, Any]:
        return {"critic": self.critic.state_dict(), "critic_target": self.critic_target.state_dict(),
                "critic_opt": self.critic_opt.state_dict(), "actor_opt": self.actor_opt.state_dict(),
                "log_alpha": self.log_alpha.detach().clone(), "alpha_opt": self.alpha_opt.state_dict(),
                **self.counters()}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.critic.load_state_dict(d["critic"])
        self.critic_target.load_state_dict(d["critic_target"])
        self.critic_opt.load_state_dict(d["critic_opt"])
        self.actor_opt.load_state_dict(d["actor_opt"])
        with torch.no_grad():
            self.log_alpha.copy_(d["log_alpha"])
        self.alpha_opt.load_state_dict(d["alpha_opt"])
        lrs = ((self.critic_opt, self.cfg.lr), (self.actor_opt, self.cfg.lr), (self.alpha_opt, self.cfg.alpha_lr))
        for opt, lr in lrs:
            for group in opt.param_groups:  # the run's learning rates, not the ones saved with the moments
                group["lr"] = lr
        self.load_counters(d)
