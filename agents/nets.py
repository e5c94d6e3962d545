"""The networks every agent builds on: an MLP, the Q-networks (flat, and shared across instances), action masking,
and a numpy actor.

The Intelligent Router's network is Linear(27, 64) -> ReLU -> Linear(64, 64) -> ReLU -> Linear(64, K + 1); the
best-effort router's is 256-256. ``hidden`` takes either. Masked actions get -inf before any max / argmax, so
they are never chosen and never used in a target.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from llmsim.agents.seen_range import SeenRange
from llmsim.envs.observations.instance_set import (
    GLOBAL_FEATURE_NAMES,
    GUIDE_COLUMNS,
    HEAVY_AT,
    INSTANCE_FEATURE_NAMES,
    INSTANCE_FEATURES,
    LOG_SECONDS,
    RECENT_HEAVY,
    layout_globals,
    split_layout,
)

NO_HOLD_PENALTY = 1e6  # subtracted from wait's score where a policy that does not hold has a request to place
# a guide computed from the observation's features rather than read from a one-hot column
SPLIT_GUIDE = "dedicated_split"
# ... and the same split that lets a request spill over to the other group when that one would serve it sooner
SPILL_GUIDE = "dedicated_split_spill"
SPLIT_GUIDES = (SPLIT_GUIDE, SPILL_GUIDE)
GUIDES = (*GUIDE_COLUMNS, *SPLIT_GUIDES)


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
        out = obs
        for layer in self.net:  # each layer's own forward: nn.Module.__call__ costs ~5 us a layer at this size
            out = layer.forward(out)
        if not self.dueling:
            return out
        adv = out[..., 1:]
        return out[..., :1] + adv - adv.mean(dim=-1, keepdim=True)


@dataclass(frozen=True)
class GuideSwitch:
    """A guide that changes with one observation feature: ``action`` where ``obs[feature] >= at``, else the
    network's ``guide_action`` (the Learned Best-Effort router: the larger model below a rate, the smallest above,
    as the best static size changes with the rate; ``feature`` is an index into the flat observation)."""

    feature: int
    at: float
    action: int

    def as_dict(self) -> dict[str, float | int]:
        return {"feature": self.feature, "at": self.at, "action": self.action}


class GuidedQNetwork(QNetwork):
    """A :class:`QNetwork` with a guide action and a decision-time fallback to it: the greedy action is the guide's
    unless the learned choice's Q-advantage over it exceeds ``fallback_margin``. The guide is ``guide_action``, or,
    with a :class:`GuideSwitch`, that action on one side of an observation threshold and another on the other. For
    testbeds whose best simple policy is a constant action per regime (the Learned Best-Effort router: the best
    static model size). ``forward`` adds the margin to the guide's Q-value; ``q_values`` is the plain network (what
    learning uses). The margin is a buffer, so a checkpoint and its ONNX export carry it."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: Sequence[int] = (64, 64), dueling: bool = False,
                 guide_action: int = 0, fallback_margin: float = 0.0, switch: GuideSwitch | None = None) -> None:
        super().__init__(obs_dim, n_actions, hidden, dueling)
        if not 0 <= guide_action < n_actions:
            raise ValueError(f"guide_action {guide_action}: expected an action in [0, {n_actions - 1}]")
        if switch is not None and not (0 <= switch.action < n_actions and -obs_dim <= switch.feature < obs_dim):
            raise ValueError(f"guide switch {switch.as_dict()}: expected an action in [0, {n_actions - 1}] and a "
                             f"feature in [{-obs_dim}, {obs_dim - 1}]")
        self.guide_action = int(guide_action)
        self.switch = switch
        self.register_buffer("fallback_margin", torch.tensor(float(fallback_margin)))
        eye = torch.eye(n_actions)
        self.register_buffer("guide_slot", eye[self.guide_action], persistent=False)
        self.register_buffer("switch_slot", eye[switch.action if switch else self.guide_action], persistent=False)

    def q_values(self, obs: torch.Tensor) -> torch.Tensor:
        return super().forward(obs)

    def guides(self, obs: np.ndarray) -> np.ndarray:
        """The guide's action for each row of a (n, obs_dim) batch."""
        if self.switch is None:
            return np.full(len(obs), self.guide_action, np.int64)
        return np.where(obs[:, self.switch.feature] >= self.switch.at, self.switch.action, self.guide_action)

    def action_bias(self, obs: torch.Tensor) -> torch.Tensor:
        """What ``forward`` adds to the Q-values: the margin at each row's guide action."""
        if self.switch is None:
            return self.fallback_margin * self.guide_slot
        above = obs[:, self.switch.feature:self.switch.feature + 1 or None] >= self.switch.at
        return self.fallback_margin * torch.where(above, self.switch_slot, self.guide_slot)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q_values(obs) + self.action_bias(obs)


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
        self.net = net  # a guided network's fallback (a view of its margin buffer, read at each act)

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
        if isinstance(self.net, GuidedQNetwork):
            q = q + self.net.action_bias(torch.from_numpy(obs)).numpy()
        any_valid = np.logical_or.reduce(masks, axis=1, keepdims=True)  # masks.any without its Python wrapper
        return np.where(masks | ~any_valid, q, -np.inf).argmax(axis=1)


@dataclass(frozen=True)
class Spill:
    """When the split sends a request to the other group: its best instance there, scored by the instance feature
    ``score`` (seconds, on the observation's log scale), beats the own group's by ``ratio``, raised by ``load`` x
    that instance's share of busy seats (``running_share``): (1 + s_other) x ratio x (1 + load x running_share)
    < 1 + s_own. A request's own latency does not count the requests it slows down where it spills; they are more
    the fuller that instance runs."""

    ratio: float
    score: str = "log_latency_s"
    load: float = 0.0
    load_light: float | None = None  # a light request's spill (to the large group); None: ``load``
    queued: bool = True  # False: never to an instance where requests wait (``waiting_share`` > 0)
    # no spill unless each group has at least this many instances: with one instance a group, a spill balances no
    # group but mixes the two classes the split keeps apart
    min_group: int = 1
    # while the recent heavy share (the observation's recent mix) is above this, the least KV demand instead of the
    # split (``dedicated_small_large``'s ``balance_heavy``); None: never
    balance_heavy: float | None = None

    def __post_init__(self) -> None:
        light = self.load if self.load_light is None else self.load_light
        balance = self.balance_heavy
        if not (isinstance(self.ratio, int | float) and self.ratio >= 1.0 and self.score in INSTANCE_FEATURE_NAMES
                and all(isinstance(x, int | float) and 0.0 <= x < math.inf for x in (self.load, light))
                and isinstance(self.queued, bool) and isinstance(self.min_group, int)
                and not isinstance(self.min_group, bool) and self.min_group >= 1
                and (balance is None or (isinstance(balance, int | float) and not isinstance(balance, bool)
                                         and 0.0 < balance < 1.0))):
            raise ValueError(f"a spill needs ratio >= 1, an instance feature as score, loads >= 0, min_group >= 1 "
                             f"and balance_heavy in (0, 1), got {self}")

    def as_dict(self) -> dict:
        """The rule as checkpoint.json records it (without a load, as before it had one)."""
        return {"ratio": self.ratio, "score": self.score, **({"load": self.load} if self.load else {}),
                **({"load_light": self.load_light} if self.load_light is not None else {}),
                **({} if self.queued else {"queued": False}),
                **({"min_group": self.min_group} if self.min_group > 1 else {}),
                **({"balance_heavy": self.balance_heavy} if self.balance_heavy is not None else {})}

    @property
    def light(self) -> float:
        """The load of a light request's spill."""
        return self.load if self.load_light is None else self.load_light

    @property
    def at(self) -> float:
        return float(np.float32(np.log(self.ratio) / LOG_SECONDS))

    @property
    def column(self) -> int:
        return INSTANCE_FEATURE_NAMES.index(self.score)


# the estimated latency (queued work plus the request's own decode, at each instance's speed) 10 % (+0.1 s) better:
# chosen on validation seeds (docs/agents.md, "The split that spills over")
SPILL = Spill(1.1)


class SetQNetwork(nn.Module):
    """One Q-network for any number of instances, on the padded ``instance_set`` observation (envs/observations).

    An encoder shared by every instance reads [instance row, global features]; masked mean and max pooling over the
    real instances summarise the cluster; an instance's Q-value is V + A_k from its embedding and the pool, wait and
    drop are V + A from the pool and the global features (the dueling split, for the same reason as
    :class:`QNetwork`'s). Outputs are slots (``n_max`` instances, wait, drop: llmsim.envs.randomize).

    ``forward`` adds ``fallback_margin`` to the guide heuristic's action (read from the observation's one-hot
    column, :data:`~llmsim.envs.observations.instance_set.GUIDE_COLUMNS`): the greedy action is the guide's unless
    the learned choice's Q-advantage over it exceeds the margin. With ``hold=False`` it never waits while a request
    is pending (:func:`without_hold` does the same to masks in training). ``q_values`` is the network without
    either (what the TD target and the losses use). Both are buffers, so a checkpoint and its ONNX export carry
    them. With ``seen_range`` the guide's action also wins wherever the observation leaves the range of the states
    the network was fitted on (agents/seen_range.py; :meth:`fit_seen_range`)."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: Sequence[int] = (64, 64), guide: str = "min_min",
                 fallback_margin: float = 0.0, hold: bool = True, spill: Spill | None = None,
                 seen_range: bool = False) -> None:
        super().__init__()
        self.n_max = split_layout(obs_dim)
        self.globals = layout_globals(obs_dim)  # with the recent mix, one more
        self.spill = spill or SPILL  # the spill guide's rule (checkpoint.json records it)
        if self.spill.balance_heavy is not None and (guide != SPILL_GUIDE or self.globals <= RECENT_HEAVY):
            raise ValueError("a spill's balance_heavy needs the dedicated_split_spill guide and an instance_set "
                             "observation with recent_mix: true")
        if n_actions != self.n_max + 2:
            raise ValueError(f"a set network over {self.n_max} instance slots has {self.n_max + 2} actions, "
                             f"not {n_actions}")
        if guide not in GUIDES:
            raise ValueError(f"guide {guide!r}: expected one of {sorted(GUIDES)}")
        self.obs_dim, self.n_actions, self.hidden, self.guide = obs_dim, n_actions, [int(h) for h in hidden], guide
        self.dueling = False
        h = self.hidden[-1]
        g, f = self.globals, INSTANCE_FEATURES
        self.encoder = nn.Sequential(mlp(f + g, self.hidden[:-1], h), nn.ReLU())
        self.instance_head = mlp(3 * h, [h], 1)
        self.cluster_head = mlp(2 * h + g, [h], 3)  # V, A_wait, A_drop
        self.register_buffer("fallback_margin", torch.tensor(float(fallback_margin)))
        self.register_buffer("no_hold", torch.tensor(0.0 if hold else 1.0))
        self.register_buffer("wait_slot", torch.eye(n_actions)[self.n_max], persistent=False)
        self.seen = SeenRange(g, f) if seen_range else None

    def split(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(global features (B, G), instance rows (B, n_max, F), mask (B, n_max)) of a batch of observations."""
        g, f, n = self.globals, INSTANCE_FEATURES, self.n_max
        rows = obs[:, g:g + n * f].reshape(-1, n, f)
        return obs[:, :g], rows, obs[:, g + n * f:]

    def q_values(self, obs: torch.Tensor) -> torch.Tensor:
        glob, rows, mask = self.split(obs)
        n = self.n_max
        z = self.encoder(torch.cat([rows, glob.unsqueeze(1).expand(-1, n, -1)], dim=-1))
        m = mask.unsqueeze(-1)
        mean = (z * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)
        top = torch.where(m > 0, z, torch.full_like(z, -1e9)).max(dim=1).values
        pool = torch.cat([mean, top], dim=-1)
        adv = self.instance_head(torch.cat([z, pool.unsqueeze(1).expand(-1, n, -1)], dim=-1)).squeeze(-1)
        head = self.cluster_head(torch.cat([pool, glob], dim=-1))
        return head[:, :1] + torch.cat([adv, head[:, 1:]], dim=-1)

    def guide_onehot(self, obs: torch.Tensor) -> torch.Tensor:
        """1 at the guide's slot (none when nothing is decided), over the n_max + 2 slots."""
        pick = guide_pick(*self.split(obs), self.guide, self.spill)
        return torch.cat([pick, torch.zeros_like(pick[:, :2])], dim=-1)

    def fit_seen_range(self, obs: torch.Tensor, slack: float = 0.1) -> None:
        """The seen range of the observations the network was fitted on (it needs ``seen_range=True``)."""
        if self.seen is None:
            raise ValueError("this set network was built without a seen range (seen_range=True)")
        self.seen.fit(*self.split(obs), slack)

    def unseen(self, obs: torch.Tensor) -> torch.Tensor:
        """1.0 where an observation leaves the seen range (all 0 without one), (B,)."""
        if self.seen is None:
            return torch.zeros_like(obs[:, 0])
        return self.seen.outside(*self.split(obs))

    def own_scores(self, obs: torch.Tensor) -> torch.Tensor:
        """The scores of the network's own choice: its Q-values under its no-hold rule, without the guide's margin
        and the seen range (what it would decide without its guide; counting fallbacks compares with this)."""
        return self.q_values(obs) - NO_HOLD_PENALTY * self.no_hold * obs[:, :1] * self.wait_slot

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        guide = self.guide_onehot(obs)
        q = self.q_values(obs) + self.fallback_margin * guide
        if self.seen is not None:  # outside the seen range with a request to place: the guide's choice alone
            outside = (self.seen.outside(*self.split(obs)) * obs[:, 0]).unsqueeze(1)
            q = q * (1.0 - outside) + outside * guide
        return q - NO_HOLD_PENALTY * self.no_hold * obs[:, :1] * self.wait_slot  # obs[:, 0]: a request is pending


class SlotAdapter(nn.Module):
    """A slot network's scores for the actions of a K-instance env (instances, wait, drop), so a policy trained in
    slots runs on a plain env, in evaluation and in its ONNX export."""

    def __init__(self, net: SetQNetwork, k: int) -> None:
        super().__init__()
        if not 1 <= k <= net.n_max:
            raise ValueError(f"the policy has {net.n_max} instance slots; an env of {k} instances does not fit")
        self.net, self.k = net, k
        self.register_buffer("columns", torch.tensor([*range(k), net.n_max, net.n_max + 1], dtype=torch.int64))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs).index_select(1, self.columns)


PENDING = GLOBAL_FEATURE_NAMES.index("pending")
LOG_PREDICTED = GLOBAL_FEATURE_NAMES.index("log_predicted_output")
LOG_WORK_S = INSTANCE_FEATURE_NAMES.index("log_work_s")
CAN_SERVE = INSTANCE_FEATURE_NAMES.index("can_serve")
RUNNING_SHARE = INSTANCE_FEATURE_NAMES.index("running_share")
WAITING_SHARE = INSTANCE_FEATURE_NAMES.index("waiting_share")
KV_DEMAND = INSTANCE_FEATURE_NAMES.index("kv_demand")


def guide_pick(glob: torch.Tensor, rows: torch.Tensor, mask: torch.Tensor, guide: str,
               spill: Spill = SPILL) -> torch.Tensor:
    """The guide's one-hot pick over the instance slots (B, n_max); all zero with no request pending."""
    if guide not in SPLIT_GUIDES:
        return rows[:, :, GUIDE_COLUMNS[guide]]
    return dedicated_split_pick(glob, rows, mask, spill if guide == SPILL_GUIDE else None)


def dedicated_split_pick(glob: torch.Tensor, rows: torch.Tensor, mask: torch.Tensor,
                         spill: Spill | None = None) -> torch.Tensor:
    """The WorkloadRouter paper's dedicated split as a function of the observation alone: a request predicted
    above 250 output tokens goes to the last half of the instances (at least one), the others to the first half,
    and within its group to the instance with the least queued work in seconds at its own iteration time
    (``log_work_s``); ties and the rule for no instance of the group serving the prompt (the first candidate) as
    ``dedicated_small_large``. With a ``spill`` (:data:`SPILL`), both groups are scored by its feature (the
    request's estimated latency, which also counts a slower GPU) and the request goes to the other group's best
    instance when that one is better by the spill's ratio (in ``1 + seconds``): a fixed split leaves half the
    cluster idle when nearly every request falls in one class (a code trace's short answers) and ignores unequal
    GPUs; a spill with ``queued`` false never goes to an instance where requests wait, one with ``min_group`` only
    where each group has that many instances. Built from tensor operations only, so the ONNX export carries it."""
    n_max = rows.shape[1]
    real = mask > 0.5
    n = mask.sum(dim=1, keepdim=True)
    slot = torch.arange(n_max, dtype=mask.dtype).unsqueeze(0)
    n_large = torch.clamp(torch.div(n, 2.0, rounding_mode="floor"), min=1.0)
    large = slot >= n - n_large
    heavy = glob[:, LOG_PREDICTED:LOG_PREDICTED + 1] > HEAVY_AT
    fits = (rows[:, :, CAN_SERVE] > 0.5) & real
    # none fits: every instance counts; written as logic, since onnxruntime has no Where over booleans
    cands = fits | (real & ~fits.any(dim=1, keepdim=True))
    inside = cands & (large == heavy)
    work = rows[:, :, LOG_WORK_S if spill is None else spill.column]
    far = torch.full_like(mask, float("inf"))
    score = torch.where(inside, work, far)
    choice = torch.where(inside.any(dim=1), score.argmin(dim=1), cands.to(mask.dtype).argmax(dim=1))
    if spill is not None:
        outside = cands & (large != heavy)
        other = torch.where(outside, work, far)
        own_least = score.min(dim=1).values
        other_least, other_slot = other.min(dim=1).values, other.argmin(dim=1)
        bar = torch.full_like(own_least, spill.at)
        if spill.load or spill.light:
            busy = rows[:, :, RUNNING_SHARE].gather(1, other_slot.unsqueeze(1)).squeeze(1)
            load = spill.load if spill.light == spill.load else torch.where(
                heavy.squeeze(1), torch.full_like(busy, spill.load), torch.full_like(busy, spill.light))
            bar = bar + torch.log(1.0 + load * busy) / LOG_SECONDS
        over = (other_least + bar < own_least) & inside.any(dim=1) & outside.any(dim=1)
        if not spill.queued:
            over = over & (rows[:, :, WAITING_SHARE].gather(1, other_slot.unsqueeze(1)).squeeze(1) <= 0.0)
        if spill.min_group > 1:
            over = over & (torch.minimum(n_large, n - n_large) >= spill.min_group).squeeze(1)
        choice = torch.where(over, other_slot, choice)
        if spill.balance_heavy is not None:  # most recent requests heavy: the least KV demand among the candidates
            mostly = glob[:, RECENT_HEAVY] > spill.balance_heavy
            demand = torch.where(cands, rows[:, :, KV_DEMAND], far)
            choice = torch.where(mostly, demand.argmin(dim=1), choice)
    pending = (glob[:, PENDING] > 0.5).to(mask.dtype).unsqueeze(1)
    return nn.functional.one_hot(choice, n_max).to(mask.dtype) * pending


def guide_slots(obs: np.ndarray, guide: str = "min_min", spill: Spill = SPILL) -> np.ndarray:
    """The guide heuristic's slot for each row of a batch of instance_set observations (-1: nothing to decide)."""
    n_max, g, f = split_layout(obs.shape[1]), layout_globals(obs.shape[1]), INSTANCE_FEATURES
    if guide in SPLIT_GUIDES:
        x = torch.from_numpy(np.ascontiguousarray(obs, dtype=np.float32))
        pick = guide_pick(x[:, :g], x[:, g:g + n_max * f].reshape(-1, n_max, f), x[:, g + n_max * f:], guide,
                          spill).numpy()
    else:
        pick = obs[:, g:g + n_max * f].reshape(len(obs), n_max, f)[:, :, GUIDE_COLUMNS[guide]]
    return np.where(pick.max(axis=1) > 0.5, pick.argmax(axis=1), -1)


def without_hold(masks: np.ndarray, obs: np.ndarray) -> np.ndarray:
    """Slot masks with wait removed where a request is pending and some instance is valid (never hold it)."""
    n_max = split_layout(obs.shape[1])
    out = masks.copy()
    out[:, n_max] &= ~((obs[:, 0] > 0.5) & masks[:, :n_max].any(axis=1))
    return out


def q_values(net: nn.Module, obs: torch.Tensor) -> torch.Tensor:
    """The network's Q-values without any decision-time fallback (what learning uses)."""
    if type(net) is QNetwork:
        return net.forward(obs)  # without nn.Module.__call__'s dispatch (a plain QNetwork has no hooks of its own)
    return net.q_values(obs) if isinstance(net, (SetQNetwork, GuidedQNetwork)) else net(obs)
