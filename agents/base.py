"""The small typed base every algorithm stands on: its config, its counters and the interface the loop calls.

Like stable-baselines3's ``OffPolicyAlgorithm``, cut to what routing needs. An algorithm file (agents/ddqn.py,
agents/sac.py, agents/sac_argmax.py) subclasses :class:`OffPolicyAgent`, registers itself in :data:`ALGORITHMS`
under its ``agent.name`` and reads top to bottom: its config, its networks, how it explores, its target and its
update. What they all share lives here or beside it:

* agents/buffer.py: the replay (action masks, semi-MDP ``dt``, the heuristic term kept apart, n-step returns);
* agents/loop.py: the experience loop that calls :meth:`OffPolicyAgent.explore`, ``update``, ``stage``;
* agents/checkpoint.py: the checkpoint a router is loaded from (:meth:`OffPolicyAgent.policy_net`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import torch
from pydantic import AfterValidator, Field

from llmsim.agents.buffer import Batch
from llmsim.envs.load_gate import LoadGate
from llmsim.errors import ConfigError
from llmsim.registry import Registry
from llmsim.schema import Float, Fraction, NonNegFloat, NonNegInt, PosFloat, PosInt, Schema, show

Probability = Annotated[Float, Field(ge=0, le=1)]  # a number in [0, 1]


def non_empty(widths: list[int]) -> list[int]:
    if not widths:
        raise ValueError("a non-empty list of layer widths, e.g. [64, 64]")
    return widths


LayerWidths = Annotated[list[PosInt], AfterValidator(non_empty)]  # hidden layers of an MLP: at least one


class OffPolicyConfig(Schema):
    """What the experience loop reads of every agent's config (``conf/agent/*.yaml``; one line per wrong key)."""

    where: ClassVar[str] = "agent"
    name: str
    hidden: LayerWidths = Field(default_factory=lambda: [64, 64])
    gamma: Fraction = 0.99  # 0 < gamma <= 1
    tau: NonNegFloat | None = None  # s per discount step: gamma ** (dt / tau); None (or 0): gamma per decision
    lr: PosFloat = 1e-4
    batch_size: PosInt = 256
    buffer_size: PosInt = 100_000
    learning_starts: NonNegInt = 5_000  # env steps before the first gradient step
    train_freq: PosInt = 1  # env steps (summed over envs) per round of gradient steps
    gradient_steps: NonNegInt = 1
    polyak: Fraction = 1.0  # target networks: theta' <- (1 - polyak) theta' + polyak theta
    n_step: PosInt = 1
    reward_scale: Float = 1.0  # rewards (and h) are multiplied by this in the TD target
    max_grad_norm: NonNegFloat | None = 10.0
    guidance: str = "none"  # heuristic shaping (agents/guided.py); only Double DQN uses it
    guidance_scale: Float = 1.0  # multiplies h before shaping
    # step: a transition's reward is what happened during its step (outcomes of any request); request: a request's
    # own outcome (its utility, its drop) is credited to the transition that placed it (agents/loop.py)
    reward_credit: Literal["step", "request"] = "step"
    # decision time, not training: below this load a heuristic decides (envs/load_gate.py); written to
    # checkpoint.json and followed by every user of the checkpoint and its export; validation runs without it
    load_gate: LoadGate | None = None


@dataclass
class LoopState:
    """Counters that survive a resume."""

    step: int = 0  # env steps, summed over the parallel envs
    episode: int = 0  # finished training episodes (k of the guided schedule)
    best_score: float = -math.inf
    returns: list[float] = field(default_factory=list)

    def restore(self, saved: dict[str, Any], where: str) -> None:
        """The counters of a saved ``vars(state)`` (trainer.pt's ``loop``), each checked: one line naming the file."""
        def count(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool) and v >= 0

        def number(v: Any) -> bool:
            return isinstance(v, int | float) and not isinstance(v, bool) and not math.isnan(v)

        ok = (set(saved) == set(vars(self)) and count(saved["step"]) and count(saved["episode"])
              and number(saved["best_score"]) and isinstance(saved["returns"], list)
              and all(number(r) for r in saved["returns"]))
        if not ok:
            raise ConfigError(f"{where}: loop: expected {sorted(vars(self))} (step and episode counts, best_score "
                              f"and returns numbers), got {show(saved)}")
        self.step, self.episode = saved["step"], saved["episode"]
        self.best_score, self.returns = float(saved["best_score"]), [float(r) for r in saved["returns"]]


class OffPolicyAgent(ABC):
    """An off-policy learner: what agents/loop.py, agents/train.py and agents/checkpoint.py call.

    A subclass sets ``name`` and ``config_type`` (its ``agent.name`` and config model) and builds its networks
    in ``__init__``; ``rng`` (numpy) draws every exploration choice, so a run is a pure function of its seed."""

    name: ClassVar[str]
    config_type: ClassVar[type[OffPolicyConfig]]
    cfg: Any
    n_actions: int
    rng: np.random.Generator
    stores_action_vectors: ClassVar[bool] = False  # the replay keeps ``action_vectors`` (agents/sac_argmax.py)
    updates: int = 0  # gradient steps taken: 0 means the networks are still their initialisation
    action_vectors: np.ndarray | None = None  # the continuous actions behind explore()'s decoded ones

    @classmethod
    @abstractmethod
    def for_env(cls, obs_space: Any, n_actions: int, cfg: Any, seed: int) -> OffPolicyAgent:
        """The agent for an env's observation space and number of actions."""

    @property
    @abstractmethod
    def replay_dim(self) -> int:
        """Length of the observation vectors the replay stores (after :meth:`flatten`)."""

    @abstractmethod
    def explore(self, obs: np.ndarray, masks: np.ndarray, state: LoopState,
                total_steps: int) -> tuple[np.ndarray, dict[str, float]]:
        """Behaviour actions for one observation per env, and statistics to log."""

    @abstractmethod
    def update(self, batch: Batch) -> dict[str, float]:
        """One gradient step on a replay batch; statistics to log."""

    @abstractmethod
    def policy_net(self) -> torch.nn.Module:
        """The network a checkpoint stores and a router acts with."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """What resuming needs beyond the policy network: targets, optimisers, counters, RNG states."""

    @abstractmethod
    def load_state_dict(self, d: dict[str, Any]) -> None: ...

    def stage(self, episode: int) -> tuple[float, float]:
        """(heuristic shaping weight, discount) after ``episode`` finished training episodes (agents/guided.py)."""
        return 0.0, self.cfg.gamma

    def after_updates(self, step: int, prev: int) -> None:
        """After a round of gradient steps that moved the env step counter from ``prev`` to ``step`` (e.g. Double
        DQN's hard target copy); nothing by default."""
        return None

    def policy_loaded(self) -> None:
        """After weights were loaded into :meth:`policy_net` (``trainer.init_from`` / ``resume``); nothing by
        default (Double DQN copies them to its target network)."""
        return None

    def flatten(self, obs: Any) -> np.ndarray:
        """Batched observations as the vectors the replay stores (graph observations are flattened)."""
        return obs

    def counters(self) -> dict[str, Any]:
        """The update counter and both RNG states, for :meth:`state_dict`."""
        return {"updates": self.updates, "rng": self.rng.bit_generator.state, "torch_rng": torch.get_rng_state()}

    def load_counters(self, d: dict[str, Any]) -> None:
        self.updates = int(d["updates"])
        self.rng.bit_generator.state = d["rng"]
        torch.set_rng_state(d["torch_rng"])


# agent.name -> the algorithm class (agents/ddqn.py, agents/sac.py and agents/sac_argmax.py register themselves)
ALGORITHMS: Registry[type[OffPolicyAgent]] = Registry("agent", key="name")


def random_valid(rng: np.random.Generator, mask: np.ndarray, n_actions: int) -> int:
    """A uniformly random valid action (any action when none is valid)."""
    valid = np.flatnonzero(mask)
    return valid[rng.integers(len(valid))] if len(valid) else rng.integers(n_actions)


@torch.no_grad()
def polyak_update(params: Iterable[torch.Tensor], target_params: Iterable[torch.Tensor], polyak: float) -> None:
    """theta' <- (1 - polyak) theta' + polyak theta, in place."""
    for p, tp in zip(params, target_params):
        tp.mul_(1.0 - polyak).add_(p, alpha=polyak)


@torch.no_grad()
def clip_grad_norm(params: list[torch.Tensor], max_norm: float) -> None:
    """``torch.nn.utils.clip_grad_norm_`` for a few small CPU tensors, the same arithmetic (the norm of the
    per-tensor norms; gradients times min(max_norm / (norm + 1e-6), 1)) and the same numbers, without its
    grouping by device and dtype, which costs more than the arithmetic at this size."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g, 2.0) for g in grads]), 2.0)
    coef = torch.clamp(float(max_norm) / (total + 1e-6), max=1.0)
    if float(coef) == 1.0:
        return  # within the bound: a product with 1.0 changes no gradient (it is exact), so skip six kernels
    for g in grads:
        g.mul_(coef)

