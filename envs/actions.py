"""The action space of one routing decision: which actions are valid, and what an action does.

One code path for :class:`llmsim.envs.routing_env.RoutingEnv` (``action_masks()`` / ``decode()``) and for a trained
policy running as an llmsim router (:class:`llmsim.envs.policy_router.ExportedRouter`), so a policy is offered the same
valid actions and its choice means the same instance in front of real backends as in training. Both functions are
pure: they read the request's prompt length and the public :class:`~llmsim.state.cluster_state.InstanceState` rows
only. :func:`check_action` refuses what is not an action at all, as Gymnasium's own envs do.

Layout (Discrete(K + 2) in every env, see envs/routing_env.py): index i < K chooses instance i (``instance*``)
or model i (``model*``: its least-loaded replica that can serve the request), K is wait and K + 1 is drop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmsim.envs.config import action_layout
from llmsim.errors import LLMSimError
from llmsim.routing.base import DROP, WAIT


class InvalidAction(LLMSimError):
    """An action outside the env's action space (what Gymnasium's own envs reject with an error)."""


def check_action(action: Any, n: int) -> int:
    """The action as an int in [0, n): Python / numpy integers (or 0-d / 1-element integer arrays) only."""
    a = action
    if isinstance(a, np.ndarray) and a.size == 1 and np.issubdtype(a.dtype, np.integer):
        a = a.reshape(()).item()
    if isinstance(a, bool | np.bool_) or not isinstance(a, int | np.integer):
        raise InvalidAction(f"action {action!r} ({type(action).__name__}) is not valid for Discrete({n}): "
                            f"expected an integer in [0, {n - 1}]")
    a = int(a)
    if not 0 <= a < n:
        raise InvalidAction(f"action {a} is out of range for Discrete({n}): expected an integer in [0, {n - 1}]")
    return a


@dataclass(frozen=True)
class ActionSpec:
    """What the actions of an env mean: the kind, K, the offered extras, each model's replicas, the queue cap."""

    kind: str
    n_choices: int
    offer_wait: bool
    offer_drop: bool
    replicas: tuple[tuple[int, ...], ...]  # instance indices of each model, in ``models`` order
    max_waiting: int | None = None

    @classmethod
    def build(cls, kind: str, instance_models: Sequence[str], max_waiting: int | None = None) -> ActionSpec:
        """From the env's action kind and its instances' models (models in first-appearance order)."""
        models = list(dict.fromkeys(instance_models))
        reps = tuple(tuple(k for k, m in enumerate(instance_models) if m == name) for name in models)
        k, wait, drop = action_layout(kind, len(instance_models), len(models))
        return cls(kind, k, wait, drop, reps, max_waiting)

    @property
    def by_model(self) -> bool:
        return self.kind.startswith("model")

    @property
    def wait_action(self) -> int:
        return self.n_choices

    @property
    def drop_action(self) -> int:
        return self.n_choices + 1

    @property
    def n(self) -> int:
        return self.n_choices + 2

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "n": self.n, "choices": self.n_choices, "wait": self.wait_action,
                "drop": self.drop_action, "offer_wait": self.offer_wait, "offer_drop": self.offer_drop,
                "replicas": [list(r) for r in self.replicas], "max_waiting": self.max_waiting}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ActionSpec:
        return cls(str(d["kind"]), int(d["choices"]), bool(d["offer_wait"]), bool(d["offer_drop"]),
                   tuple(tuple(int(k) for k in r) for r in d["replicas"]),
                   None if d.get("max_waiting") is None else int(d["max_waiting"]))


def fill_mask(m: np.ndarray, spec: ActionSpec, prompt_tokens: int | None,
              instances: Callable[[], Sequence[Any]]) -> np.ndarray:
    """Write the valid actions into ``m`` (bool, length K + 2) and return it.

    ``prompt_tokens`` None: nothing to decide (a drain step, an empty tick), every action is a no-op and the mask
    marks the usual no-op: wait where offered, else every choice (never drop). Otherwise: choices whose instance
    (or a replica of the model) can serve the prompt and is not full (``max_waiting``), then wait / drop where
    offered; if that leaves nothing, choices that can serve it, then every choice. ``instances`` is called only
    when a request is pending (a simulator state is built lazily)."""
    m.fill(False)
    k_n = spec.n_choices
    if prompt_tokens is None:
        if spec.offer_wait:
            m[k_n] = True
        else:
            m[:k_n] = True
        return m
    insts = instances()
    p = prompt_tokens
    ok = [p <= i.max_prompt_tokens for i in insts]  # (= i.can_serve(p))
    free = ok
    if spec.max_waiting is not None:
        mw = spec.max_waiting
        free = [ok[k] and insts[k].num_waiting < mw for k in range(len(insts))]
    m[k_n] = spec.offer_wait
    m[k_n + 1] = spec.offer_drop
    by_model = spec.by_model
    for allowed in (free, ok, [True] * len(insts)):  # the first that leaves something valid
        if by_model:
            for a, reps in enumerate(spec.replicas):
                m[a] = any(allowed[k] for k in reps)
        else:
            m[:k_n] = allowed
        # (= m.any(): every instance is a replica of some model)
        if spec.offer_wait or spec.offer_drop or any(allowed):
            break
    return m


def action_mask(spec: ActionSpec, prompt_tokens: int | None, instances: Sequence[Any]) -> np.ndarray:
    """A fresh mask (see :func:`fill_mask`) from a ClusterState's ``instances``."""
    return fill_mask(np.zeros(spec.n, dtype=np.bool_), spec, prompt_tokens, lambda: instances)


def decode_action(action: int, spec: ActionSpec, prompt_tokens: int | None,
                  instances: Callable[[], Sequence[Any]]) -> int:
    """Instance index, WAIT or DROP for ``action``. A model choice goes to its replica with the fewest requests
    among those that can serve the prompt (ties: lowest index; none can: the first replica); drop where the kind
    does not offer it is carried out as wait, so no env loses a request to an action its setting lacks."""
    a = int(action)
    if a == spec.n_choices:
        return WAIT
    if a == spec.n_choices + 1:
        return DROP if spec.offer_drop else WAIT
    if spec.by_model:
        reps = spec.replicas[a]
        if prompt_tokens is None:
            return reps[0]
        insts = instances()
        return min((k for k in reps if insts[k].can_serve(prompt_tokens)),
                   key=lambda k: insts[k].num_requests, default=reps[0])
    return a


# ------------------------------------------------------------------------------------------ slots <-> env actions
# A policy over ``n_max`` instance slots (llmsim.envs.randomize.SlotEnv) acts in Discrete(n_max + 2): slot k < K is
# instance k of a K-instance cluster, slots K .. n_max - 1 are absent instances (never valid), n_max waits, n_max + 1
# drops.
def slot_mask(mask: np.ndarray, n_max: int) -> np.ndarray:
    """An env's action mask (K choices + wait + drop) as a slot mask (n_max + 2; absent instances invalid)."""
    k = len(mask) - 2
    out = np.zeros(n_max + 2, np.bool_)
    out[:k] = mask[:k]
    out[n_max:] = mask[k:]
    return out


def slot_columns(k: int, n_max: int) -> list[int]:
    """The slot of each env action of a K-instance env, in env action order (instances, wait, drop)."""
    return [*range(k), n_max, n_max + 1]


def env_action(slot: int, k: int, n_max: int) -> int:
    """The env action of a slot (an absent instance's slot, never valid, falls back to wait)."""
    if slot < k:
        return int(slot)
    return k + 1 if slot == n_max + 1 else k


def slot_action(action: int, k: int, n_max: int) -> int:
    """The slot of an env action."""
    return int(action) if action < k else n_max + (int(action) - k)
