"""Training that tells the truth: the warnings a training run gives when it has not learned to route.

Every algorithm (Double DQN flat, SAC, SAC argmax, guided, the transfer preset) gets the same checks, each a
``llmsim-train: warning: ...`` line at the evaluation where it happens and an entry in training.json:

* :func:`eval_seeds_warning`: ``trainer.eval_seeds`` that include test seeds choose best/ on them;
* :func:`resume_drift_warning`: a resumed run composed with other env / agent settings than the run it continues;
* :func:`budget_warning`: a budget below ``agent.learning_starts`` (or the batch size) takes no gradient step;
* :func:`untrained_best_warning`: best/ saved before the first gradient step is the untrained network;
* :func:`guide_only_warning`: the fallback margin chosen on validation makes best/ route exactly as its guide
  heuristic on every validation episode, so nothing learned is in use;
* :func:`collapse_warnings`: the greedy policy has collapsed: one action for at least
  :data:`MOST_FREQUENT_LIMIT` of the decisions that had two or more valid choices, or waiting / dropping for at
  least :data:`HOLD_LIMIT` of its decisions. :class:`WatchedGreedy` counts what the policy did during the
  in-training evaluation (only decisions with a request pending count).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmsim.agents.base import OffPolicyConfig
from llmsim.agents.seeds import TEST_SEED0, VALIDATION_SEED0

MOST_FREQUENT_LIMIT = 0.95  # one action at 95 % of the decisions with a choice: collapsed to one action
HOLD_LIMIT = 0.5  # waiting (or dropping) at half of the decisions: the policy holds (or sheds) requests


def eval_seeds_warning(seeds: list[int]) -> str | None:
    """Why the in-training evaluation's seeds spoil a later test, or None: best/ is chosen on them."""
    if max(seeds) < TEST_SEED0:
        return None
    return (f"trainer.eval_seeds {list(seeds)} include test seeds ({TEST_SEED0} and up): best/ is chosen on them, so "
            f"a test on them is no longer held out (use validation seeds {VALIDATION_SEED0}-{TEST_SEED0 - 1})")


def config_changes(saved: Mapping[str, Any], now: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``key (old -> new)`` for every dotted key whose value differs between two composed configs."""
    out = []
    for k in sorted(set(saved) | set(now), key=str):
        a, b, key = saved.get(k), now.get(k), f"{prefix}{k}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += config_changes(a, b, key + ".")
        elif a != b:
            out.append(f"{key} ({a} -> {b})")
    return out


def resume_drift_warning(where: str, saved: Mapping[str, Any], now: Mapping[str, Any]) -> str | None:
    """Why a resumed run is not the run it continues, or None. Hydra composes it from its own command line, not
    from the checkpoint's config.yaml, so an override of the first run that is not repeated silently changes the
    env or the agent mid-run; ``trainer`` (the budget, evaluation, the resume itself) may change freely."""
    changes = config_changes({k: v for k, v in saved.items() if k != "trainer"},
                             {k: v for k, v in now.items() if k != "trainer"})
    if not changes:
        return None
    shown = ", ".join(changes[:6]) + (f" and {len(changes) - 6} more" if len(changes) > 6 else "")
    return (f"{where}: this run's config differs from the resumed run's config.yaml at {shown}; repeat that run's "
            "overrides to continue it as it was")


def budget_warning(total: int, cfg: OffPolicyConfig) -> str | None:
    """Why a budget takes no gradient step, or None: updates start once ``learning_starts`` env steps are taken
    and the replay holds a batch."""
    needed = max(cfg.learning_starts, cfg.batch_size)
    if total >= needed:
        return None
    key = "agent.learning_starts" if cfg.learning_starts >= cfg.batch_size else "agent.batch_size"
    return (f"trainer.total_steps={total} is below {key}={needed}: no gradient step will be taken and every "
            f"checkpoint is the untrained network (raise trainer.total_steps or lower {key})")


def untrained_best_warning(step: int, learning_starts: int) -> str:
    """best/ was just saved from a network that has taken no gradient step."""
    return (f"best/ saved at step {step} before the first gradient step (agent.learning_starts={learning_starts}): "
            "it is the untrained initial network")


@dataclass
class ActionCounts:
    """What a greedy policy did over an evaluation's decisions (a request pending)."""

    chosen: Counter = field(default_factory=Counter)  # actions at decisions with >= 2 valid choices
    decisions: int = 0
    waits: int = 0
    drops: int = 0

    def shares(self) -> dict[str, float]:
        """Share of the most frequent action (among decisions with a choice), of waits and of drops."""
        with_choice = sum(self.chosen.values())
        n = max(1, self.decisions)
        return {"most_frequent_action_share": max(self.chosen.values(), default=0) / max(1, with_choice),
                "decisions_with_choice": float(with_choice), "wait_share": self.waits / n,
                "drop_share": self.drops / n}


class WatchedGreedy:
    """A policy (``act(obs, mask, env)``) that also counts, per decision with a request pending, the action it
    chose; the env's ``wait_action`` / ``drop_action`` (when it has them) are counted apart."""

    def __init__(self, policy: Any) -> None:
        self.policy, self.name, self.counts = policy, getattr(policy, "name", "policy"), ActionCounts()

    def reset(self, env: Any, seed: int) -> None:
        self.policy.reset(env, seed)

    def act(self, obs: Any, mask: np.ndarray, env: Any) -> int:
        a = int(self.policy.act(obs, mask, env))
        if getattr(env, "pending", None) is None:
            return a
        c = self.counts
        c.decisions += 1
        c.waits += a == getattr(env, "wait_action", None)
        c.drops += a == getattr(env, "drop_action", None)
        if int(np.count_nonzero(mask)) >= 2:
            c.chosen[a] += 1
        return a


def collapse_warnings(shares: dict[str, float]) -> list[str]:
    """A line per sign that the greedy policy stopped routing: one action, waiting or dropping."""
    out = []
    if shares.get("decisions_with_choice", 0) and shares["most_frequent_action_share"] >= MOST_FREQUENT_LIMIT:
        out.append(f"the greedy policy takes one action at {shares['most_frequent_action_share']:.0%} of its "
                   "decisions with two or more valid choices (collapsed to one action)")
    if shares["wait_share"] >= HOLD_LIMIT:
        out.append(f"the greedy policy waits at {shares['wait_share']:.0%} of its decisions (collapsed to waiting)")
    if shares["drop_share"] >= HOLD_LIMIT:
        out.append(f"the greedy policy drops the request at {shares['drop_share']:.0%} of its decisions "
                   "(collapsed to dropping)")
    return out


def guide_only_warning(chosen: dict[str, float], table: list[dict[str, float]]) -> str | None:
    """Why best/ is its guide heuristic in a network's clothes, or None: at the chosen fallback margin its validation
    results equal the guide's on every scenario (mean, worst scenario and p99 gains all exactly 0), so no learned
    choice beat the guide there. ``table`` is the margin choice's record (agents/transfer.py choose_margin)."""
    if any(chosen.get(k) != 0.0 for k in ("gain_pct", "worst_gain_pct", "p99_gain_pct")):
        return None
    alone = min(table, key=lambda r: r["margin"])
    return (f"the fallback margin chosen on validation ({chosen['margin']:g}) makes best/ route exactly as its guide "
            f"on every validation episode: no learned choice beat the guide there (the network alone, margin "
            f"{alone['margin']:g}: {alone['gain_pct']:+.1f} % mean E2E against the guide, worst scenario "
            f"{alone['worst_gain_pct']:+.1f} %); the checkpoint is the guide heuristic, not a learned router")
