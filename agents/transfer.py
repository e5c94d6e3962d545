"""Training that tells the truth for policies that transfer: each evaluation judges the policy against its guide
heuristic on the validation scenarios, says when the policy has collapsed, and the decision-time fallback margin
is chosen on validation seeds.

* :func:`watch_episodes` runs the greedy policy and counts, over the decisions with a request pending, the share
  of the most frequent action, the share of waits, the share where the fallback margin turned the network's own
  choice into the guide's, and the share of requests the env's wait-timeout fallback placed.
* :func:`gain_vs_reference` scores a policy against a reference (the guide) per scenario: the relative gain of the
  mean end-to-end latency with every request counted (a request lost to a drop or the episode limit enters at the
  episode's duration), averaged over scenarios.
* :func:`collapse_warnings` turns the counts into warning lines; :func:`choose_margin` evaluates each candidate
  margin on the validation seeds and keeps the best (:func:`choose_flat_margin`: the same for a network guided by
  one fixed action, by the run's own metric).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from llmsim.agents.nets import (
    SPILL,
    SPLIT_GUIDES,
    GuidedQNetwork,
    SetQNetwork,
    Spill,
    guide_slots,
    masked_argmax,
    q_values,
)
from llmsim.agents.policy import HeuristicPolicy, run_episode
from llmsim.agents.scoring import evaluate_greedy
from llmsim.agents.training_warnings import collapse_warnings as training_collapse_warnings

TIMEOUT_LIMIT = 0.05  # 5 % of the requests placed by the env's wait-timeout fallback


@dataclass
class DecisionCounts:
    """What a policy did over an evaluation's decisions (a request pending)."""

    actions: Counter = field(default_factory=Counter)
    waits: int = 0
    guide_fallbacks: int = 0  # the margin (or the seen range) made the guide's action win over the network's own
    unseen: int = 0  # the state was outside the network's seen range, so its guide decided (agents/seen_range.py)
    timeouts: int = 0
    requests: int = 0

    @property
    def decisions(self) -> int:
        return sum(self.actions.values())

    def shares(self) -> dict[str, float]:
        n = max(1, self.decisions)
        return {"most_frequent_action_share": max(self.actions.values(), default=0) / n, "wait_share": self.waits / n,
                "guide_fallback_share": self.guide_fallbacks / n, "unseen_share": self.unseen / n,
                "timeout_share": self.timeouts / max(1, self.requests)}


class WatchedPolicy:
    """The greedy policy of a (slot) Q-network on a SlotEnv, counting what it does into ``counts``."""

    def __init__(self, net: torch.nn.Module, name: str = "policy") -> None:
        self.net, self.name, self.counts = net, name, DecisionCounts()

    def reset(self, env: Any, seed: int) -> None:
        return None

    @torch.no_grad()
    def act(self, obs: Any, mask: np.ndarray, env: Any) -> int:
        x = torch.as_tensor(np.asarray(obs, dtype=np.float32)).unsqueeze(0)
        m = torch.as_tensor(mask).unsqueeze(0)
        a = int(masked_argmax(self.net(x), m).item())
        if env.pending is not None:
            c = self.counts
            c.actions[a] += 1
            c.waits += a == env.wait_action
            gated = isinstance(self.net, SetQNetwork) and self.net.seen is not None
            if gated:
                c.unseen += int(self.net.unseen(x).item())
            if isinstance(self.net, SetQNetwork | GuidedQNetwork) and (float(self.net.fallback_margin) > 0 or gated):
                own_q = self.net.own_scores(x) if isinstance(self.net, SetQNetwork) else q_values(self.net, x)
                own = int(masked_argmax(own_q, m).item())  # (a no-hold network's own choice never waits)
                guide = int(self.net.guides(x.numpy())[0]) if isinstance(self.net, GuidedQNetwork) \
                    else int(guide_slots(x.numpy(), self.net.guide, self.net.spill)[0])
                c.guide_fallbacks += own != a and a == guide
        return a


def lost_requests(summary: dict[str, Any]) -> int:
    return int(summary.get("num_requests", 0)) - int(summary.get("completed", 0))


def e2e_all_ms(summary: dict[str, Any]) -> float:
    """Mean end-to-end latency with every request counted: a lost one at the episode's duration."""
    done, lost = int(summary.get("completed", 0)), lost_requests(summary)
    total = float(summary.get("mean_e2el_ms") or 0.0) * done + lost * 1000.0 * float(summary.get("duration", 0.0))
    return total / max(1, done + lost)


def watch_episodes(policy: Any, env: Any, seeds: list[int]) -> tuple[list[dict[str, Any]], DecisionCounts]:
    """One episode per seed (workload seed = seed); the rows' summaries and, for a WatchedPolicy, its counts."""
    rows = []
    counts = getattr(policy, "counts", DecisionCounts())
    for s in seeds:
        out = run_episode(policy, env, seed=s, workload_seed=s)
        counts.timeouts += env.timeouts
        counts.requests += int(out["summary"].get("num_requests", 0))
        rows.append({"seed": s, "scenario": dict(getattr(env, "scenario", {})), **out["summary"]})
    return rows, counts


def gain_vs_reference(rows: list[dict[str, Any]], ref: list[dict[str, Any]]) -> dict[str, float]:
    """Mean over paired episodes of the relative gain (%) in mean E2E (every request counted) and in p99 E2E."""
    gains = [100.0 * (e2e_all_ms(r) - e2e_all_ms(p)) / max(1e-9, e2e_all_ms(r)) for p, r in zip(rows, ref)]
    p99 = [100.0 * (float(r["p99_e2el_ms"]) - float(p["p99_e2el_ms"])) / max(1e-9, float(r["p99_e2el_ms"]))
           for p, r in zip(rows, ref)]
    return {"gain_pct": float(np.mean(gains)), "worst_gain_pct": float(np.min(gains)),
            "p99_gain_pct": float(np.mean(p99)), "lost": float(np.mean([lost_requests(p) for p in rows]))}


class ObservationGuide:
    """A guide computed from the observation (agents/nets.py ``dedicated_split``) acting alone, as the network
    does at fallback margin infinity: its slot, or the first valid action where it has none to give."""

    def __init__(self, guide: str, spill: Spill = SPILL) -> None:
        self.guide = self.name = guide
        self.spill = spill

    def reset(self, env: Any, seed: int) -> None:
        return None

    def act(self, obs: Any, mask: np.ndarray, env: Any) -> int:
        slot = int(guide_slots(np.asarray(obs, dtype=np.float32)[None], self.guide, self.spill)[0])
        return slot if slot >= 0 and mask[slot] else int(np.flatnonzero(mask)[0])


def reference_rows(env: Any, seeds: list[int], guide: str, spill: Spill = SPILL) -> list[dict[str, Any]]:
    """The guide's episodes on the validation scenarios (computed once per run): the registered heuristic its
    observation column copies, or the guide computed from the observation (with the network's spill rule)."""
    policy = ObservationGuide(guide, spill) if guide in SPLIT_GUIDES else HeuristicPolicy(guide)
    rows, _ = watch_episodes(policy, env, seeds)
    return rows


def collapse_warnings(shares: dict[str, float]) -> list[str]:
    """Every algorithm's collapse lines (one action, waiting; agents/training_warnings.py), and one when the env's
    wait-timeout fallback placed the requests instead of the policy."""
    out = training_collapse_warnings({"decisions_with_choice": 1.0, "drop_share": 0.0, **shares})
    if shares["timeout_share"] >= TIMEOUT_LIMIT:
        out.append(f"{shares['timeout_share']:.0%} of the requests were placed by the env's wait-timeout fallback, "
                   "not by the policy")
    return out


def evaluate_vs_guide(net: torch.nn.Module, env: Any, seeds: list[int],
                      ref: list[dict[str, Any]]) -> tuple[dict[str, float], list[str]]:
    """The greedy policy's gain over the guide on the validation seeds, its decision shares, and warnings."""
    policy = WatchedPolicy(net)
    rows, counts = watch_episodes(policy, env, seeds)
    shares = counts.shares()
    res = {**gain_vs_reference(rows, ref), **shares,
           "mean_e2el_ms": float(np.mean([e2e_all_ms(r) for r in rows])),
           "p99_e2el_ms": float(np.mean([float(r["p99_e2el_ms"]) for r in rows]))}
    return res, collapse_warnings(shares)


def choose_margin(net: SetQNetwork, env: Any, seeds: list[int], margins: list[float],
                  ref: list[dict[str, Any]], worst_gap: float | None = None) -> tuple[float, list[dict[str, float]]]:
    """The fallback margin with the best validation gain over the guide (ties: the larger margin, the safer);
    ``net`` keeps it. With ``worst_gap`` (%), only margins whose worst validation scenario is at most that far
    behind the guide qualify, and the largest margin (the network closest to its guide) when none does: a mean
    gain bought with a loss on one kind of traffic does not carry to traffic never seen. Every candidate's result
    is returned for the record."""
    table = []
    for m in sorted(set(margins)):
        net.fallback_margin.fill_(float(m))
        res, _ = evaluate_vs_guide(net, env, seeds, ref)
        table.append({"margin": float(m), **res})
    best = pick_margin(table, worst_gap)
    net.fallback_margin.fill_(best["margin"])
    return best["margin"], table


def pick_margin(table: list[dict[str, float]], worst_gap: float | None = None) -> dict[str, float]:
    """:func:`choose_margin`'s rule over its table (rows sorted by margin)."""
    within = [r for r in table if worst_gap is None or r["worst_gain_pct"] >= -worst_gap] or table[-1:]
    return max(within, key=lambda r: (round(r["gain_pct"], 6), r["margin"]))


def choose_flat_margin(net: GuidedQNetwork, env: Any, seeds: list[int], margins: list[float],
                       metric: str) -> tuple[float, list[dict[str, float]]]:
    """:func:`choose_margin` for a flat network guided by one fixed action, scored by the run's ``metric``
    (agents/scoring.py) instead of the gain over a guide heuristic's episodes."""
    table = []
    for m in sorted(set(margins)):
        net.fallback_margin.fill_(float(m))
        policy = WatchedPolicy(net)
        res = evaluate_greedy(policy, env, seeds, metric)
        shares = policy.counts.shares()
        table.append({"margin": float(m), **res, "guide_fallback_share": shares["guide_fallback_share"]})
    best = max(table, key=lambda r: (round(r["score"], 6), r["margin"]))
    net.fallback_margin.fill_(best["margin"])
    return best["margin"], table
