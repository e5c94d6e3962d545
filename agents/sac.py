"""Discrete Soft Actor-Critic with action masks, semi-MDP discounting and a graph encoder, in one file.

Spec 000's router is SAC (Haarnoja et al. 2018) over a HAN embedding of the arrived request (agents/han.py).
The paper's action is discrete (route to one of N experts or drop), so this is the discrete form
(Christodoulou 2019; CleanRL's ``sac_atari.py``), with what routing needs added:

    pi(.|s)   = softmax over the valid actions of s (masked logits; invalid actions get probability 0)
    V'(s')    = sum_a' pi(a'|s') [min_i Q'_i(s', a') - alpha log pi(a'|s')]     (exact expectation)
    y         = R + D * V'(s')          R, D: (n-step) return and product of gamma ** (dt / tau) (agents/buffer.py)
    L_Q       = sum_i MSE(Q_i(s, a), y)                                            (twin critics, L2 as the code)
    L_pi      = E_s sum_a pi(a|s) [alpha log pi(a|s) - min_i Q_i(s, a)]
    L_alpha   = E_s log(alpha) * (H(pi(.|s)) - H_target(s)),  H_target(s) = scale * log(#valid actions in s)

The entropy target is per state because the number of valid actions varies (full waiting queues are masked);
``target_entropy_scale`` is the share of the uniform policy's entropy to aim for. Target critics track the
online ones by Polyak averaging after each gradient step.

Encoder: ``han`` embeds Dict graph observations (flattened by :class:`llmsim.agents.han.GraphLayout` so the replay
stores vectors) with :class:`llmsim.agents.han.DenseHAN`; ``mlp`` feeds a flat observation straight to the heads
(spec 000's Baseline RL, expert-level features). With ``share_encoder`` (default) one encoder is trained by the
critic loss and the actor reads its embedding without a gradient (as SAC-AE and DrQ do: the actor's gradient
through a shared encoder destabilises the critic); the released code hands one HAN object to both, trained by
both losses. ``share_encoder: false`` gives the actor its own encoder, trained by the actor loss.

Why not stable-baselines3's SAC: it rejects Discrete action spaces and has no action masks nor per-transition
discounts. SB3 still supplies the vector envs and the logger (agents/loop.py, agents/train.py).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from llmsim.agents.buffer import Batch
from llmsim.agents.loop import LoopState


@dataclass
class SACConfig:
    """``conf/agent/sac*.yaml``; spec 000's released values where it has them (section 4.8)."""
    name: str = "sac"
    encoder: str = "han"            # han (graph observation) | mlp (flat observation)
    hidden: list[int] = field(default_factory=lambda: [64, 64])   # actor and critic MLPs after the encoder
    han_hidden: int = 64
    han_heads: int = 4              # the paper's 4 (the released code: 8)
    han_layers: int = 2
    head: str = "experts"           # experts: per-expert scores from [z, e_k, r_k]; arrived: z only (the code's)
    share_encoder: bool = True
    gamma: float = 0.99
    tau: float | None = None        # None: gamma per decision (the code's TD(0)); s: gamma ** (dt / tau)
    lr: float = 3e-5                # actor and critics
    alpha_lr: float = 3e-4
    init_alpha: float = 1.0
    autotune: bool = True           # learn alpha towards the target entropy; false: alpha fixed at init_alpha
    target_entropy_scale: float = 0.5
    batch_size: int = 256
    buffer_size: int = 100_000
    learning_starts: int = 25_000   # env steps of uniform random valid actions before learning
    train_freq: int = 1             # env steps per round of gradient steps (1: the code's UTD 1)
    gradient_steps: int = 1
    polyak: float = 0.005           # target critics: theta' <- (1 - polyak) theta' + polyak theta
    n_step: int = 1
    reward_scale: float = 1.0
    max_grad_norm: float | None = 10.0
    guidance: str = "none"          # SAC trains on the env's reward; spec 001's shaping is a DDQN feature
    guidance_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.encoder not in ("han", "mlp"):
            raise ValueError(f"agent.encoder: {self.encoder!r} is not one of han, mlp")
        if self.head not in ("experts", "arrived"):
            raise ValueError(f"agent.head: {self.head!r} is not one of experts, arrived")
        if self.guidance != "none":
            raise ValueError(f"agent.guidance={self.guidance!r}: SAC trains on the env's reward only (guidance: none)")


def mlp(d_in: int, hidden: list[int], d_out: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(d_in, int(h)), nn.ReLU()]
        d_in = int(h)
    layers.append(nn.Linear(d_in, d_out))
    return nn.Sequential(*layers)


def make_encoder(cfg: SACConfig, obs_space: Any) -> tuple[nn.Module, Any]:
    """(encoder, graph layout or None): DenseHAN over a Dict graph space (wrapped to also name the experts with
    ``head: experts``), identity over a flat Box."""
    if cfg.encoder == "han":
        from llmsim.agents.han import DenseHAN, GraphLayout, PackedHAN

        if not hasattr(obs_space, "spaces"):
            raise ValueError("agent.encoder=han needs the graph observation (env.observation.kind=graph)")
        layout = GraphLayout.from_space(obs_space)
        han = DenseHAN(layout, hidden=cfg.han_hidden, heads=cfg.han_heads, layers=cfg.han_layers)
        return (PackedHAN(han) if cfg.head == "experts" else han), layout
    if getattr(obs_space, "shape", None) is None or len(obs_space.shape) != 1:
        raise ValueError(f"agent.encoder=mlp needs a flat observation, got {type(obs_space).__name__}")
    return nn.Identity(), None


def embed_dim(cfg: SACConfig, obs_space: Any, encoder: nn.Module | None = None) -> int:
    if encoder is not None and hasattr(encoder, "out_dim"):
        return int(encoder.out_dim)
    return cfg.han_hidden if cfg.encoder == "han" else int(obs_space.shape[0])


class ExpertHead(nn.Module):
    """One score per action from a PackedHAN embedding: expert k's from an MLP shared over experts on
    [z, e_k, r_k] (so the policy can tell which expert is loaded and which suits the request), the other actions
    (wait, drop: they follow the N expert actions in the env's layout) from an MLP on z."""

    def __init__(self, z_dim: int, e_dim: int, n: int, hidden: list[int], n_actions: int) -> None:
        super().__init__()
        self.z_dim, self.e_dim, self.n = z_dim, e_dim, n
        self.choice = mlp(z_dim + e_dim + 3, hidden, 1)
        self.other = mlp(z_dim, hidden, n_actions - n)

    def forward(self, emb: torch.Tensor) -> torch.Tensor:
        b, n, dz, de = emb.shape[0], self.n, self.z_dim, self.e_dim
        z = emb[:, :dz]
        e = emb[:, dz:dz + n * de].reshape(b, n, de)
        r = emb[:, dz + n * de:].reshape(b, n, 3)
        per = torch.cat([z.unsqueeze(1).expand(b, n, dz), e, r], dim=-1)
        return torch.cat([self.choice(per).squeeze(-1), self.other(z)], dim=-1)


def make_head(encoder: nn.Module, d: int, hidden: list[int], n_out: int) -> nn.Module:
    """Per-expert scores on a PackedHAN, a plain MLP otherwise."""
    if hasattr(encoder, "e_dim"):
        return ExpertHead(encoder.z_dim, encoder.e_dim, encoder.n, hidden, n_out)
    return mlp(d, hidden, n_out)


def masked_logits(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    any_valid = mask.any(dim=-1, keepdim=True)
    return torch.where(mask | ~any_valid, logits, torch.full_like(logits, -1e9))


def policy_terms(logits: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(probabilities, log-probabilities) with invalid actions at probability 0 and log-probability 0."""
    logp = F.log_softmax(masked_logits(logits, mask), dim=-1)
    probs = logp.exp()
    valid = mask | ~mask.any(dim=-1, keepdim=True)
    return probs, torch.where(valid, logp, torch.zeros_like(logp))


class SACActor(nn.Module):
    """Encoder + policy head; what a checkpoint stores and a router runs (greedy: argmax of the logits)."""

    def __init__(self, encoder: nn.Module, head: nn.Module, layout: Any, arch: dict[str, Any]) -> None:
        super().__init__()
        self.encoder, self.head, self.layout, self.arch = encoder, head, layout, arch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))

    def prepare(self, obs: Any) -> torch.Tensor:
        """One observation (a vector, or the graph Dict) as a float tensor row."""
        if self.layout is not None and isinstance(obs, dict):
            return torch.from_numpy(self.layout.flatten(obs, batched=False)).reshape(-1)
        return torch.as_tensor(np.asarray(obs, dtype=np.float32))


def build_actor(arch: dict[str, Any]) -> SACActor:
    """An untrained actor of the shape ``arch`` describes (checkpoint loading; weights come after)."""
    layout = None
    if arch["encoder"] == "han":
        from llmsim.agents.han import DenseHAN, GraphLayout, PackedHAN

        layout = GraphLayout.from_dict(arch["layout"])
        han = arch["han"]
        encoder: nn.Module = DenseHAN(layout, hidden=int(han["hidden"]), heads=int(han["heads"]),
                                      layers=int(han["layers"]))
        if arch.get("state_head", "arrived") == "experts":
            encoder = PackedHAN(encoder)
    elif arch["encoder"] == "mlp":
        encoder = nn.Identity()
    else:
        raise ValueError(f"encoder {arch['encoder']!r}")
    d, hidden, n = int(arch["embed_dim"]), list(arch["hidden"]), int(arch["n_actions"])
    if arch.get("head", "categorical") == "gaussian":
        from llmsim.agents.sac_argmax import GaussianHead

        head: nn.Module = GaussianHead(d, hidden, n)
    else:
        head = make_head(encoder, d, hidden, n)
    return SACActor(encoder, head, layout, dict(arch))


class SACBase:
    """What both SAC variants share: targets, optimisers, temperature, Polyak averaging, checkpoints and resume.
    A variant builds ``self.actor`` (an SACActor) and ``self.critic`` (ModuleList [encoder, Q1, Q2]), then calls
    :meth:`_setup`."""

    cfg: SACConfig
    actor: SACActor
    critic: nn.ModuleList

    def _setup(self, seed: int) -> None:
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

    def _arch(self, head: str, n_actions: int, d: int) -> dict[str, Any]:
        cfg = self.cfg
        return {"kind": "sac_actor", "head": head, "encoder": cfg.encoder, "hidden": list(cfg.hidden),
                "state_head": cfg.head if cfg.encoder == "han" else "arrived",
                "n_actions": n_actions, "embed_dim": d,
                "han": {"hidden": cfg.han_hidden, "heads": cfg.han_heads, "layers": cfg.han_layers},
                "layout": self.layout.to_dict() if self.layout is not None else None}

    @property
    def alpha(self) -> float:
        return float(self.log_alpha.detach().exp())

    def flatten(self, obs: Any) -> np.ndarray:
        """Batched observations as the vectors the replay stores."""
        if self.layout is not None:
            return self.layout.flatten(obs, batched=True)
        return np.asarray(obs, dtype=np.float32)

    def stage(self, episode: int) -> tuple[float, float]:
        return 0.0, self.cfg.gamma

    def _step(self, opt: torch.optim.Optimizer, loss: torch.Tensor) -> None:
        """One optimiser step; gradients are clipped over that optimiser's own parameters only (a shared
        encoder keeps the critic's gradient, which must not count towards the actor's norm)."""
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.cfg.max_grad_norm:
            own = [p for group in opt.param_groups for p in group["params"]]
            torch.nn.utils.clip_grad_norm_(own, self.cfg.max_grad_norm)
        opt.step()

    def _finish_update(self, alpha_loss: torch.Tensor) -> None:
        """After the critic and actor steps: the temperature step (with ``autotune``), Polyak, the counter."""
        if self.cfg.autotune:
            self.alpha_opt.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_opt.step()
        self.soft_update()
        self.updates += 1

    @torch.no_grad()
    def soft_update(self) -> None:
        p = self.cfg.polyak
        for w, tw in zip(self.critic.parameters(), self.critic_target.parameters()):
            tw.mul_(1.0 - p).add_(w, alpha=p)

    def after_updates(self, step: int, prev: int) -> None:
        pass

    def policy_net(self) -> SACActor:
        return self.actor

    def state_dict(self) -> dict[str, Any]:
        return {"critic": self.critic.state_dict(), "critic_target": self.critic_target.state_dict(),
                "critic_opt": self.critic_opt.state_dict(), "actor_opt": self.actor_opt.state_dict(),
                "log_alpha": self.log_alpha.detach().clone(), "alpha_opt": self.alpha_opt.state_dict(),
                "updates": self.updates, "rng": self.rng.bit_generator.state, "torch_rng": torch.get_rng_state()}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.critic.load_state_dict(d["critic"])
        self.critic_target.load_state_dict(d["critic_target"])
        self.critic_opt.load_state_dict(d["critic_opt"])
        self.actor_opt.load_state_dict(d["actor_opt"])
        with torch.no_grad():
            self.log_alpha.copy_(d["log_alpha"])
        self.alpha_opt.load_state_dict(d["alpha_opt"])
        self.updates = int(d["updates"])
        self.rng.bit_generator.state = d["rng"]
        torch.set_rng_state(d["torch_rng"])


class DiscreteSAC(SACBase):
    def __init__(self, obs_space: Any, n_actions: int, cfg: SACConfig, seed: int = 0) -> None:
        self.cfg, self.n_actions = cfg, n_actions
        torch.manual_seed(seed)
        self.encoder, self.layout = make_encoder(cfg, obs_space)
        d = embed_dim(cfg, obs_space, self.encoder)
        self.q1, self.q2 = (make_head(self.encoder, d, cfg.hidden, n_actions) for _ in range(2))
        actor_enc = self.encoder if cfg.share_encoder else make_encoder(cfg, obs_space)[0]
        self.actor = SACActor(actor_enc, make_head(self.encoder, d, cfg.hidden, n_actions), self.layout,
                              self._arch("categorical", n_actions, d))
        self.critic = nn.ModuleList([self.encoder, self.q1, self.q2])
        self._setup(seed)

    @torch.no_grad()
    def sample(self, obs: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """Actions drawn from the masked policy (numpy RNG: reproducible whatever torch's state)."""
        logits = self.actor(torch.as_tensor(obs, dtype=torch.float32))
        probs, _ = policy_terms(logits, torch.as_tensor(masks))
        cdf = probs.double().cumsum(dim=-1).numpy()
        u = self.rng.random(len(obs))[:, None] * cdf[:, -1:]
        return np.minimum((cdf < u).sum(axis=1), self.n_actions - 1)

    def random_valid(self, masks: np.ndarray) -> np.ndarray:
        out = np.empty(len(masks), np.int64)
        for i, m in enumerate(masks):
            valid = np.flatnonzero(m)
            out[i] = valid[self.rng.integers(len(valid))] if len(valid) else self.rng.integers(self.n_actions)
        return out

    def explore(self, obs: np.ndarray, masks: np.ndarray, state: LoopState,
                total_steps: int) -> tuple[np.ndarray, dict[str, float]]:
        if state.step < self.cfg.learning_starts:
            return self.random_valid(masks), {"alpha": self.alpha}
        return self.sample(obs, masks), {"alpha": self.alpha}

    def _q(self, critic: nn.ModuleList, emb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return critic[1](emb), critic[2](emb)

    @torch.no_grad()
    def target(self, batch: Batch) -> torch.Tensor:
        next_obs, next_mask = torch.as_tensor(batch.next_obs), torch.as_tensor(batch.next_masks)
        probs, logp = policy_terms(self.actor(next_obs), next_mask)
        q1, q2 = self._q(self.critic_target, self.critic_target[0](next_obs))
        v_next = (probs * (torch.min(q1, q2) - self.alpha * logp)).sum(dim=-1)
        disc = torch.as_tensor(batch.discounts)
        v_next = torch.where(disc > 0, v_next, torch.zeros_like(v_next))
        return torch.as_tensor(batch.returns) + disc * v_next

    def update(self, batch: Batch) -> dict[str, float]:
        cfg = self.cfg
        y = self.target(batch)
        obs, a = torch.as_tensor(batch.obs), torch.as_tensor(batch.actions).unsqueeze(1)
        emb = self.encoder(obs)
        q1, q2 = self._q(self.critic, emb)
        critic_loss = F.mse_loss(q1.gather(1, a).squeeze(1), y) + F.mse_loss(q2.gather(1, a).squeeze(1), y)
        self._step(self.critic_opt, critic_loss)
        mask = torch.as_tensor(batch.masks)
        actor_in = emb.detach() if cfg.share_encoder else self.actor.encoder(obs)
        probs, logp = policy_terms(self.actor.head(actor_in), mask)
        q_min = torch.min(q1, q2).detach()
        actor_loss = (probs * (self.alpha * logp - q_min)).sum(dim=-1).mean()
        self._step(self.actor_opt, actor_loss)
        entropy = -(probs * logp).sum(dim=-1).detach()
        n_valid = mask.sum(dim=-1).clamp(min=1).float()
        h_target = cfg.target_entropy_scale * torch.log(n_valid)
        self._finish_update((self.log_alpha * (entropy - h_target)).mean())
        return {"critic_loss": critic_loss.item(), "actor_loss": actor_loss.item(), "alpha": self.alpha,
                "entropy": entropy.mean().item(), "target_entropy": h_target.mean().item(),
                "q_mean": q_min.gather(1, a).mean().item()}
