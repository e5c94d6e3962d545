"""Double DQN with action masks and semi-MDP discounting, top to bottom (CleanRL style).

What is ours and why (stable-baselines3 is used for the vector envs and the logger, agents/train.py):
SB3's DQN is vanilla DQN (the target network both selects and evaluates the next action), has no action
masks, a fixed gamma per step and no per-episode reshaping; the Intelligent Router for LLM Workloads needs all
four. So the update is here:

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

from typing import Any, ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field

from llmsim.agents import guided
from llmsim.agents.adam import adam_step
from llmsim.agents.base import (
    ALGORITHMS,
    LayerWidths,
    LoopState,
    OffPolicyAgent,
    OffPolicyConfig,
    Probability,
    clip_grad_norm,
    polyak_update,
    random_valid,
)
from llmsim.agents.buffer import Batch
from llmsim.agents.nets import (
    SPILL,
    SPILL_GUIDE,
    GuidedQNetwork,
    GuideSwitch,
    NumpyActor,
    QNetwork,
    SetQNetwork,
    Spill,
    guide_slots,
    masked,
    masked_argmax,
    q_values,
    without_hold,
)
from llmsim.envs.observations.instance_set import RECENT_HEAVY, layout_globals
from llmsim.errors import ConfigError
from llmsim.schema import Float, Fraction, NonNegFloat, NonNegInt, PosFloat, PosInt, Schema


class GuideSwitchConfig(Schema):
    """``agent.guide_switch``: the guide takes ``action`` where observation feature ``feature`` >= ``at``."""

    feature: int
    at: float
    action: NonNegInt


class DDQNConfig(OffPolicyConfig):
    """``conf/agent/ddqn*.yaml`` (the values of an agent preset are justified there)."""

    name: Literal["ddqn"] = "ddqn"
    hidden: LayerWidths = Field(default_factory=lambda: [64, 64])
    dueling: bool = False  # separate value and advantage heads (agents/nets.py)
    tau: NonNegFloat | None = 0.02  # s per discount step: dt seconds are discounted gamma**(dt/tau); None: per decision
    batch_size: PosInt = 512
    buffer_size: PosInt = 200_000
    learning_starts: NonNegInt = 5_000  # env steps before the first update
    train_freq: PosInt = 4  # env steps (summed over envs) per round of updates
    target_update: PosInt = 1_000  # env steps between hard target copies (polyak = 1)
    polyak: Fraction = 1.0
    max_grad_norm: PosFloat = 10.0
    eps_start: Probability = 1.0
    eps_end: Probability = 0.05
    eps_fraction: Probability = 0.1  # of total_steps over which epsilon decays linearly ...
    eps_episodes: NonNegInt | None = None  # ... or over this many episodes, then epsilon is 0 (the paper: 20)
    guidance: Literal["none", "aware", "guided"] = "none"  # agents/guided.py
    guidance_decay: NonNegFloat = 0.5  # beta of the guided schedule
    guidance_scale: Float = 1.0  # multiplies h before shaping: with the Intelligent Router's reward h is ~1e-4 of it
    # a network shared across instances, started from a guide heuristic (docs/agents.md, "Policies that transfer")
    network: Literal["mlp", "set"] = "mlp"  # set: agents/nets.py SetQNetwork on the instance_set observation
    # the heuristic imitated and fallen back on: an observation column, or dedicated_split computed from the
    # observation (agents/nets.py)
    guide: Literal["min_min", "least_work_left", "jsq", "dedicated_split", "dedicated_split_spill"] = "min_min"
    spill_ratio: float = Field(SPILL.ratio, ge=1.0)  # dedicated_split_spill's rule (agents/nets.py Spill) ...
    spill_load: NonNegFloat = SPILL.load  # ... and how it grows with the other instance's busy seats
    spill_load_light: NonNegFloat | None = None  # ... for a light request's spill (None: spill_load)
    spill_queued: bool = True  # ... false: never to an instance where requests wait
    spill_min_group: PosInt = 1  # ... only where each group of the split has at least this many instances
    # ... and the least KV demand while the recent heavy share is above this (needs observation.recent_mix: true)
    spill_balance_heavy: float | None = Field(None, gt=0.0, lt=1.0)
    guide_action: NonNegInt | None = None  # a flat network's guide instead: this fixed action (a static model size)
    guide_switch: GuideSwitchConfig | None = None  # ... or another action past a threshold of one feature
    demo_steps: NonNegInt = 0  # env steps acted by the guide (with demo_epsilon random actions) before the policy acts
    demo_epsilon: Probability = 0.1
    margin: NonNegFloat = 0.5  # DQfD's large margin l: Q(guide) must beat every other valid action by l
    demo_margin_weight: NonNegFloat = 0.0  # weight of the margin loss while the guide acts ...
    margin_weight: NonNegFloat = 0.0  # ... and afterwards (the regulariser towards the guide)
    fallback_margin: NonNegFloat = 0.0  # decision time: take the guide's action unless Q-advantage > this
    fallback_margins: list[NonNegFloat] = Field(default_factory=list)  # candidates chosen on validation seeds
    fallback_worst_gap: NonNegFloat | None = None  # ... among those at most this % behind the guide anywhere
    hold: bool = True  # false: a set network never waits while a request is pending (routes at once, as heuristics)
    # a set network's best/ defers to its guide outside the states in the replay, widened by this share of each
    # feature's range (agents/seen_range.py); None: no range
    seen_slack: NonNegFloat | None = None


def spill_rule(cfg: DDQNConfig) -> Spill:
    """The spill guide's rule the config names."""
    return Spill(cfg.spill_ratio, load=cfg.spill_load, load_light=cfg.spill_load_light, queued=cfg.spill_queued,
                 min_group=cfg.spill_min_group, balance_heavy=cfg.spill_balance_heavy)


@ALGORITHMS.register
class DoubleDQN(OffPolicyAgent):
    name = "ddqn"
    config_type: ClassVar[type[OffPolicyConfig]] = DDQNConfig
    cfg: DDQNConfig

    def __init__(self, obs_dim: int, n_actions: int, cfg: DDQNConfig, seed: int = 0) -> None:
        self.cfg = cfg
        torch.manual_seed(seed)
        if cfg.guide_action is not None and (cfg.network == "set" or cfg.guide_action >= n_actions):
            raise ConfigError(f"agent.guide_action={cfg.guide_action}: a flat network's guide is one of its "
                              f"{n_actions} actions (0-{n_actions - 1}); a set network reads agent.guide instead")
        sw = cfg.guide_switch
        if sw is not None and (cfg.guide_action is None or sw.action >= n_actions
                               or not -obs_dim <= sw.feature < obs_dim):
            raise ConfigError(f"agent.guide_switch={sw.model_dump()}: needs agent.guide_action, an action in "
                              f"[0, {n_actions - 1}] and a feature in [{-obs_dim}, {obs_dim - 1}]")
        if cfg.seen_slack is not None and cfg.network != "set":
            raise ConfigError(f"agent.seen_slack={cfg.seen_slack}: a seen range needs agent.network=set")
        if cfg.spill_balance_heavy is not None and (cfg.network != "set" or cfg.guide != SPILL_GUIDE
                                                    or layout_globals(obs_dim) <= RECENT_HEAVY):
            raise ConfigError(f"agent.spill_balance_heavy={cfg.spill_balance_heavy}: needs agent.network=set, "
                              f"agent.guide={SPILL_GUIDE} and env.observation.recent_mix=true")
        self.q: QNetwork | SetQNetwork = self.build_net(obs_dim, n_actions, cfg)
        self.q_target = self.build_net(obs_dim, n_actions, cfg)
        self.q_target.load_state_dict(self.q.state_dict())
        self.params = list(self.q.parameters())
        # foreach: one kernel per step of Adam's arithmetic over all tensors, the same numbers as the per-tensor loop
        self.opt = torch.optim.Adam(self.params, lr=cfg.lr, foreach=True)
        self.rng = np.random.default_rng(seed)
        self.n_actions = n_actions
        self.updates = 0
        self.actor = NumpyActor(self.q) if isinstance(self.q, QNetwork) else None
        self.demo_phase = False  # the guide is acting (explore sets it; update weighs the margin loss by it)

    @staticmethod
    def build_net(obs_dim: int, n_actions: int, cfg: DDQNConfig) -> QNetwork | SetQNetwork:
        if cfg.network == "set":
            return SetQNetwork(obs_dim, n_actions, cfg.hidden, cfg.guide, cfg.fallback_margin, cfg.hold,
                               spill=spill_rule(cfg), seen_range=cfg.seen_slack is not None)
        if cfg.guide_action is not None:
            sw = cfg.guide_switch
            switch = GuideSwitch(sw.feature, sw.at, sw.action) if sw is not None else None
            return GuidedQNetwork(obs_dim, n_actions, cfg.hidden, cfg.dueling, cfg.guide_action, cfg.fallback_margin,
                                  switch)
        return QNetwork(obs_dim, n_actions, cfg.hidden, cfg.dueling)

    @classmethod
    def for_env(cls, obs_space: Any, n_actions: int, cfg: Any, seed: int) -> DoubleDQN:
        return cls(int(obs_space.shape[0]), n_actions, cfg, seed)

    @property
    def replay_dim(self) -> int:
        return self.q.obs_dim

    # ----------------------------------------------------------------- acting
    def act(self, obs: np.ndarray, masks: np.ndarray, eps: float) -> np.ndarray:
        """Masked epsilon-greedy actions for a batch of observations (one per env)."""
        explore = (self.rng.random(len(obs)) < eps).tolist()  # Python bools: cheaper to test one env's
        if all(explore):
            actions = np.zeros(len(explore), np.int64)
        else:
            actions = np.asarray(self.greedy(np.asarray(obs, dtype=np.float32), masks), np.int64)
        for i, e in enumerate(explore):
            if e:
                actions[i] = random_valid(self.rng, masks[i], self.n_actions)
        return actions

    def allowed(self, masks: np.ndarray, obs: np.ndarray) -> np.ndarray:
        """The masks the agent acts and learns under: without wait at a pending request unless ``hold``."""
        return masks if self.cfg.hold or self.cfg.network != "set" else without_hold(masks, np.asarray(obs))

    def greedy(self, obs: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """Masked argmax of the policy network (the set network's with its decision-time fallback)."""
        if self.actor is not None:
            return self.actor.act(obs, masks)
        with torch.no_grad():
            return masked_argmax(self.q(torch.as_tensor(obs)), torch.as_tensor(masks)).numpy()

    def guide_actions(self, obs: np.ndarray) -> np.ndarray:
        """The guide's action for each row (-1: nothing to decide): the flat network's guide action (switched by
        ``guide_switch``), or the guide heuristic's slot read from an instance_set observation."""
        if isinstance(self.q, GuidedQNetwork):
            return self.q.guides(obs)
        return guide_slots(obs, self.cfg.guide, spill_rule(self.cfg))

    def guide_act(self, obs: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """The guide's actions (read from the observation), demo_epsilon of them random valid ones; the usual
        no-op (greedy) where nothing is decided or the guide's slot is not valid."""
        obs = np.asarray(obs, dtype=np.float32)
        actions = self.greedy(obs, masks)
        guide = self.guide_actions(obs)
        for i, g in enumerate(guide):
            if self.rng.random() < self.cfg.demo_epsilon:
                actions[i] = random_valid(self.rng, masks[i], self.n_actions)
            elif g >= 0 and masks[i][g]:
                actions[i] = g
        return actions

    def explore(self, obs: np.ndarray, masks: np.ndarray, state: LoopState,
                total_steps: int) -> tuple[np.ndarray, dict[str, float]]:
        """Behaviour actions for agents/loop.py: the guide's during the first ``demo_steps`` env steps, then
        masked epsilon-greedy on the current schedule (epsilon counted from the end of the demonstrations)."""
        self.demo_phase = state.step < self.cfg.demo_steps
        masks = self.allowed(masks, obs)
        if self.demo_phase:
            return self.guide_act(obs, masks), {"epsilon": self.cfg.demo_epsilon, "demo": 1.0}
        done = self.cfg.demo_steps
        eps = epsilon(self.cfg, state.step - done, state.episode, max(1, total_steps - done))
        return self.act(obs, masks, eps), {"epsilon": eps, "demo": 0.0}

    def stage(self, episode: int) -> tuple[float, float]:
        return guided.stage(self.cfg.guidance, episode, self.cfg.gamma, self.cfg.guidance_decay)

    # ----------------------------------------------------------------- learning
    def td_target(self, batch: Batch) -> torch.Tensor:
        """Double-Q target: online argmax over the valid next actions, evaluated by the target network."""
        next_obs = shared(batch.next_obs)
        next_mask = shared(self.allowed(batch.next_masks, batch.next_obs))
        with torch.no_grad():
            a_star = masked_argmax(q_values(self.q, next_obs), next_mask)
            q_next = q_values(self.q_target, next_obs).gather(1, a_star.unsqueeze(1)).squeeze(1)
            disc = shared(batch.discounts)
            q_next = torch.where(disc > 0, q_next, 0.0)  # no bootstrap after an end
            return shared(batch.returns) + disc * q_next

    def margin_loss(self, obs: torch.Tensor, q_all: torch.Tensor, masks: torch.Tensor) -> tuple[torch.Tensor, float]:
        """DQfD's large-margin loss towards the guide: mean over decisions of max_a [Q(s, a) + l [a != a_g]] -
        Q(s, a_g), valid actions only (0 once the guide's action leads every other by ``margin``); and the share of
        those decisions where the network's own argmax is the guide's."""
        guide = torch.as_tensor(self.guide_actions(obs.numpy()))
        rows = (guide >= 0) & masks.gather(1, guide.clamp(min=0).unsqueeze(1)).squeeze(1)
        if not bool(rows.any()):
            return torch.zeros(()), float("nan")
        q, m, a_g = q_all[rows], masks[rows], guide[rows]
        bonus = torch.full_like(q, self.cfg.margin).scatter(1, a_g.unsqueeze(1), 0.0)
        best = masked(q + bonus, m).max(dim=1).values
        q_g = q.gather(1, a_g.unsqueeze(1)).squeeze(1)
        agree = (masked_argmax(q.detach(), m) == a_g).float().mean().item()
        return (best - q_g).mean(), agree

    def update(self, batch: Batch) -> dict[str, float]:
        y = self.td_target(batch)
        obs = shared(batch.obs)
        q_all = q_values(self.q, obs)
        q = q_all.gather(1, shared(batch.actions).unsqueeze(1)).squeeze(1)
        loss = F.smooth_l1_loss(q, y)
        stats: dict[str, float] = {}
        weight = self.cfg.demo_margin_weight if self.demo_phase else self.cfg.margin_weight
        if weight > 0 and batch.masks is not None:
            margin, agree = self.margin_loss(obs, q_all, torch.as_tensor(self.allowed(batch.masks, batch.obs)))
            loss = loss + weight * margin
            stats = {"margin_loss": margin.item(), "guide_agreement": agree}
        for p in self.params:  # zero_grad(set_to_none=True) without the optimiser's per-call overhead
            p.grad = None
        loss.backward()
        clip_grad_norm(self.params, self.cfg.max_grad_norm)
        adam_step(self.opt)  # opt.step()'s numbers without its per-call machinery
        self.updates += 1
        if self.cfg.polyak < 1.0:
            polyak_update(self.q.parameters(), self.q_target.parameters(), self.cfg.polyak)
        return {"loss": loss.item(), "q_mean": q.detach().mean().item(), **stats}

    def sync_target(self) -> None:
        self.q_target.load_state_dict(self.q.state_dict())

    def policy_loaded(self) -> None:
        self.sync_target()

    def after_updates(self, step: int, prev: int) -> None:
        """A hard copy of the online network every ``target_update`` env steps (with ``polyak = 1``)."""
        if self.cfg.polyak >= 1.0 and step // self.cfg.target_update != prev // self.cfg.target_update:
            self.sync_target()

    def policy_net(self) -> QNetwork:
        return self.q

    # ----------------------------------------------------------------- resume
    def state_dict(self) -> dict[str, Any]:
        return {"q_target": self.q_target.state_dict(), "opt": self.opt.state_dict(), **self.counters()}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.q_target.load_state_dict(d["q_target"])
        self.opt.load_state_dict(d["opt"])
        for group in self.opt.param_groups:  # a checkpoint from before foreach restores the per-tensor loop
            group["foreach"] = True
            group["lr"] = self.cfg.lr  # the run's agent.lr, not the one saved with the optimiser's moments
        self.load_counters(d)


def shared(a: np.ndarray) -> torch.Tensor:
    """A tensor on the array's memory (``torch.as_tensor`` does the same with ~3 us more dispatch a call)."""
    if isinstance(a, np.ndarray) and a.flags.writeable and a.flags.c_contiguous:
        return torch.from_numpy(a)
    return torch.as_tensor(a)


def epsilon(cfg: DDQNConfig, step: int, episode: int, total_steps: int) -> float:
    """Linear decay from eps_start to eps_end over eps_fraction of the run, or over eps_episodes episodes
    followed by none at all (the Intelligent Router: "no random exploration after episode 20")."""
    if cfg.eps_episodes is not None:
        if episode >= cfg.eps_episodes:
            return 0.0
        frac = episode / max(1, cfg.eps_episodes)
    else:
        frac = min(1.0, step / max(1.0, cfg.eps_fraction * total_steps))
    return cfg.eps_start + frac * (cfg.eps_end - cfg.eps_start)
