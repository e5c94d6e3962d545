"""Double DQN with action masks and semi-MDP discounting, in one file (CleanRL style).

What is ours and why (stable-baselines3 is used for the vector envs and the logger, agents/train.py):
SB3's DQN is vanilla DQN (the target network both selects and evaluates the next action), has no action
masks, a fixed gamma per step and no per-episode reshaping; spec 001 needs all four. So the update is here:

    a*  = argmax_{a valid in s'} Q_online(s', a)                  (the online network selects ...)
    y   = R + D * Q_target(s', a*)                                 (... the target network evaluates)
    loss = Huber(Q_online(s, a) - y)

with R the (n-step, shaped) return and D the product of per-transition discounts gamma~ ** (dt / tau) from
the env's ``info["dt"]`` (agents/buffer.py), 0 after a terminal transition. The experience loop (vector env,
replay, update schedule) is agents/loop.py, shared with SAC. Exploration is masked
epsilon-greedy: a random action is drawn among the valid ones only. The target network is copied every
``target_update`` steps (``polyak = 1``) or blended each gradient step (``polyak < 1``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from llmsim.agents import guided
from llmsim.agents.buffer import Batch
from llmsim.agents.loop import LoopState, learn
from llmsim.agents.nets import NumpyActor, QNetwork, masked_argmax


@dataclass
class DDQNConfig:
    """``conf/agent/*.yaml`` (the values of an agent preset are justified there)."""
    name: str = "ddqn"
    hidden: list[int] = field(default_factory=lambda: [64, 64])
    dueling: bool = False         # separate value and advantage heads (agents/nets.py)
    reward_scale: float = 1.0     # rewards (and h) are multiplied by this in the TD target: keeps Q near O(10)
    gamma: float = 0.99
    tau: float | None = 0.02      # s per discount step: dt seconds are discounted gamma**(dt/tau); None: per decision
    lr: float = 1e-4
    batch_size: int = 512
    buffer_size: int = 200_000
    learning_starts: int = 5_000  # env steps before the first update
    train_freq: int = 4           # env steps (summed over envs) per round of updates
    gradient_steps: int = 1
    target_update: int = 1_000    # env steps between hard target copies (polyak = 1)
    polyak: float = 1.0
    n_step: int = 1
    max_grad_norm: float = 10.0
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_fraction: float = 0.1     # of total_steps over which epsilon decays linearly ...
    eps_episodes: int | None = None  # ... or over this many episodes, after which epsilon is 0 (spec 001: 20)
    guidance: str = "none"        # none | aware | guided (agents/guided.py)
    guidance_decay: float = 0.5   # beta of the guided schedule
    guidance_scale: float = 1.0   # multiplies h before shaping: with spec 001's reward h is ~1e-4 of its noise


class DoubleDQN:
    def __init__(self, obs_dim: int, n_actions: int, cfg: DDQNConfig, seed: int = 0) -> None:
        self.cfg = cfg
        torch.manual_seed(seed)
        self.q = QNetwork(obs_dim, n_actions, cfg.hidden, cfg.dueling)
        self.q_target = QNetwork(obs_dim, n_actions, cfg.hidden, cfg.dueling)
        self.q_target.load_state_dict(self.q.state_dict())
        self.opt = torch.optim.Adam(self.q.parameters(), lr=cfg.lr)
        self.rng = np.random.default_rng(seed)
        self.n_actions = n_actions
        self.updates = 0
        self.actor = NumpyActor(self.q)

    # ----------------------------------------------------------------- acting
    def act(self, obs: np.ndarray, masks: np.ndarray, eps: float) -> np.ndarray:
        """Masked epsilon-greedy actions for a batch of observations (one per env)."""
        n = len(obs)
        explore = self.rng.random(n) < eps
        actions = np.empty(n, np.int64)
        if not explore.all():
            actions[:] = self.actor.act(np.asarray(obs, dtype=np.float32), masks)
        for i in np.flatnonzero(explore):
            valid = np.flatnonzero(masks[i])
            actions[i] = valid[self.rng.integers(len(valid))] if len(valid) else self.rng.integers(self.n_actions)
        return actions

    def explore(self, obs: np.ndarray, masks: np.ndarray, state: LoopState,
                total_steps: int) -> tuple[np.ndarray, dict[str, float]]:
        """Behaviour actions for agents/loop.py: masked epsilon-greedy on the current schedule."""
        eps = epsilon(self.cfg, state.step, state.episode, total_steps)
        return self.act(obs, masks, eps), {"epsilon": eps}

    def stage(self, episode: int) -> tuple[float, float]:
        return guided.stage(self.cfg.guidance, episode, self.cfg.gamma, self.cfg.guidance_decay)

    # ----------------------------------------------------------------- learning
    def td_target(self, batch: Batch) -> torch.Tensor:
        """Double-Q target: online argmax over the valid next actions, evaluated by the target network."""
        next_obs = torch.as_tensor(batch.next_obs)
        next_mask = torch.as_tensor(batch.next_masks)
        with torch.no_grad():
            a_star = masked_argmax(self.q(next_obs), next_mask)
            q_next = self.q_target(next_obs).gather(1, a_star.unsqueeze(1)).squeeze(1)
            disc = torch.as_tensor(batch.discounts)
            q_next = torch.where(disc > 0, q_next, torch.zeros_like(q_next))  # no bootstrap after an end
            return torch.as_tensor(batch.returns) + disc * q_next

    def update(self, batch: Batch) -> dict[str, float]:
        y = self.td_target(batch)
        q = self.q(torch.as_tensor(batch.obs)).gather(1, torch.as_tensor(batch.actions).unsqueeze(1)).squeeze(1)
        loss = F.smooth_l1_loss(q, y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.q.parameters(), self.cfg.max_grad_norm)
        self.opt.step()
        self.updates += 1
        if self.cfg.polyak < 1.0:
            self.soft_update(self.cfg.polyak)
        return {"loss": loss.item(), "q_mean": q.mean().item()}

    @torch.no_grad()
    def soft_update(self, polyak: float) -> None:
        for p, tp in zip(self.q.parameters(), self.q_target.parameters()):
            tp.mul_(1.0 - polyak).add_(p, alpha=polyak)

    def sync_target(self) -> None:
        self.q_target.load_state_dict(self.q.state_dict())

    def policy_net(self) -> QNetwork:
        """The network a checkpoint stores and a router acts with."""
        return self.q

    def after_updates(self, step: int, prev: int) -> None:
        if self.cfg.polyak >= 1.0 and step // self.cfg.target_update != prev // self.cfg.target_update:
            self.sync_target()

    # ----------------------------------------------------------------- resume
    def state_dict(self) -> dict[str, Any]:
        return {"q_target": self.q_target.state_dict(), "opt": self.opt.state_dict(), "updates": self.updates,
                "rng": self.rng.bit_generator.state, "torch_rng": torch.get_rng_state()}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.q_target.load_state_dict(d["q_target"])
        self.opt.load_state_dict(d["opt"])
        self.updates = int(d["updates"])
        self.rng.bit_generator.state = d["rng"]
        torch.set_rng_state(d["torch_rng"])


def epsilon(cfg: DDQNConfig, step: int, episode: int, total_steps: int) -> float:
    """Linear decay from eps_start to eps_end over eps_fraction of the run, or over eps_episodes episodes
    followed by none at all (spec 001: "no random exploration after episode 20")."""
    if cfg.eps_episodes is not None:
        if episode >= cfg.eps_episodes:
            return 0.0
        frac = episode / max(1, cfg.eps_episodes)
    else:
        frac = min(1.0, step / max(1.0, cfg.eps_fraction * total_steps))
    return cfg.eps_start + frac * (cfg.eps_end - cfg.eps_start)


__all__ = ["DDQNConfig", "DoubleDQN", "LoopState", "epsilon", "learn"]
