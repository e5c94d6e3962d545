"""A checkpoint is a directory a router can be loaded from without the training code's state:

    checkpoint.json   format, agent, network shape, observation layout, action layout, env config, metrics
    q_net.pt          Double DQN: the online network's weights (torch state_dict)
    policy.pt         SAC: the actor's weights, encoder included (``arch`` in checkpoint.json rebuilds it)
    config.yaml       the resolved training config (Hydra), for the record and for ``trainer.resume``
    trainer.pt        optimiser, target network, counters, RNG states, episodes in progress (agents/resume.py)
    replay.npz        the replay buffer (only with ``trainer.save_replay``; resuming without it refills it)

checkpoint.json's layouts and the check that an env matches them are agents/checkpoint_meta.py's (no torch); how
each file is read (tensors, arrays and JSON only: nothing in a checkpoint runs code) is agents/checkpoint_files.py's.
``updates`` in checkpoint.json counts the gradient steps behind the weights: 0 means the network is still its
random initialisation (a "best" checkpoint saved before learning started).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from llmsim.agents.checkpoint_files import load_weights, save_trainer_state
from llmsim.agents.checkpoint_meta import FORMAT, check_compatible, default_label, read_meta
from llmsim.agents.nets import (
    SPILL_GUIDE,
    GuidedQNetwork,
    GuideSwitch,
    QNetwork,
    SetQNetwork,
    SlotAdapter,
    Spill,
    masked,
    masked_argmax,
)
from llmsim.agents.sac_nets import SACActor, build_actor
from llmsim.envs.load_gate import LoadGate, costless_decision, unsure
from llmsim.envs.routing_env import RoutingEnv
from llmsim.errors import ConfigError


def net_arch(net: torch.nn.Module) -> dict[str, Any]:
    """What checkpoint.json records to rebuild ``net``: a QNetwork's shape, or an actor's ``arch``."""
    if isinstance(net, QNetwork):
        guide: dict[str, Any] = {}
        if isinstance(net, GuidedQNetwork):
            guide["guide_action"] = net.guide_action
            if net.switch is not None:
                guide["guide_switch"] = net.switch.as_dict()
        return {"obs_dim": net.obs_dim, "n_actions": net.n_actions, "hidden": net.hidden, "dueling": net.dueling,
                **guide}
    if isinstance(net, SetQNetwork):  # slots: n_max instances + wait + drop (llmsim.envs.randomize)
        return {"obs_dim": net.obs_dim, "n_actions": net.n_actions, "hidden": net.hidden, "dueling": False,
                "set_net": {"n_max": net.n_max, "guide": net.guide,
                            **({"spill": net.spill.as_dict()} if net.guide == SPILL_GUIDE else {}),
                            **({"seen_range": True} if net.seen is not None else {})}}
    arch = getattr(net, "arch", None)
    if not isinstance(arch, dict):
        raise TypeError(f"cannot checkpoint a {type(net).__name__}: no arch description")
    slots = getattr(net, "slots", None)  # a padded graph layout: one actor for up to ``slots`` experts
    return {"n_actions": arch["n_actions"], "arch": arch, **({"slots": slots} if slots is not None else {})}


def _weights_file(meta: dict[str, Any]) -> str:
    return "policy.pt" if meta.get("arch") else "q_net.pt"


def save_checkpoint(path: str | Path, net: torch.nn.Module, meta: dict[str, Any], config_yaml: str | None = None,
                    trainer_state: dict[str, Any] | None = None) -> Path:
    """Write (or overwrite) checkpoint ``path``; ``meta`` must hold ``agent``, ``observation``, ``actions``."""
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    body = {"format": FORMAT, **net_arch(net), **meta}
    torch.save(net.state_dict(), p / _weights_file(body))
    if config_yaml is not None:
        (p / "config.yaml").write_text(config_yaml)
    if trainer_state is not None:
        save_trainer_state(p, trainer_state)
    tmp = p / "checkpoint.json.tmp"
    tmp.write_text(json.dumps(body, indent=1, sort_keys=True, default=_jsonable) + "\n")
    tmp.replace(p / "checkpoint.json")  # written last: a directory with checkpoint.json is complete
    return p


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"{type(x).__name__} is not JSON serialisable")


def load_policy_net(path: str | Path, meta: dict[str, Any] | None = None) -> torch.nn.Module:
    """The network a checkpoint's router acts with: a Q-network (DDQN) or an actor (SAC), in eval mode."""
    p = Path(path)
    meta = meta or read_meta(p)
    if not meta.get("arch"):
        return load_q_net(p, meta)
    try:
        net = build_actor(meta["arch"])
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{p / 'checkpoint.json'}: arch is not a network this llmsim builds ({e})") from None
    load_weights(net, p / "policy.pt", "the actor's weights saved with checkpoint.json")
    net.eval()
    return net


def q_net_shape(meta: dict[str, Any], where: Path) -> tuple[int, int, list[int], bool]:
    """(obs_dim, n_actions, hidden, dueling) of checkpoint.json ``where``, checked before a network is built."""
    obs_dim, n, hidden, dueling = (meta.get(k) for k in ("obs_dim", "n_actions", "hidden", "dueling"))
    dueling = False if dueling is None else dueling

    def count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 1

    if not (count(obs_dim) and count(n) and isinstance(hidden, list) and all(count(h) for h in hidden)
            and isinstance(dueling, bool)):
        raise ConfigError(f"{where}: expected obs_dim and n_actions positive integers, hidden a list of positive "
                          f"integers and dueling true or false; got obs_dim={obs_dim!r} n_actions={n!r} "
                          f"hidden={hidden!r} dueling={dueling!r}"[:400])
    return obs_dim, n, hidden, dueling


def guide_switch(meta: dict[str, Any], where: Path) -> GuideSwitch | None:
    """The guided network's switch recorded in checkpoint.json (none when absent)."""
    sw = meta.get("guide_switch")
    if sw is None:
        return None
    ok = isinstance(sw, dict) and set(sw) == {"feature", "at", "action"} and all(
        isinstance(sw[k], int) and not isinstance(sw[k], bool) for k in ("feature", "action")) and isinstance(
        sw["at"], (int, float)) and not isinstance(sw["at"], bool)
    if not ok:
        raise ConfigError(f"{where}: guide_switch {sw!r}: expected {{feature: int, at: number, action: int}}"[:400])
    return GuideSwitch(sw["feature"], float(sw["at"]), sw["action"])


def load_q_net(path: str | Path, meta: dict[str, Any] | None = None) -> QNetwork | SetQNetwork:
    p = Path(path)
    meta = meta or read_meta(p)
    obs_dim, n, hidden, dueling = q_net_shape(meta, p / "checkpoint.json")
    set_net, guide = meta.get("set_net"), meta.get("guide_action")
    if set_net is None and guide is None:
        net: QNetwork | SetQNetwork = QNetwork(obs_dim, n, hidden, dueling)
    elif set_net is None:
        if not (isinstance(guide, int) and not isinstance(guide, bool) and 0 <= guide < n):
            raise ConfigError(f"{p / 'checkpoint.json'}: guide_action {guide!r} is not an action in [0, {n - 1}]"[:400])
        net = GuidedQNetwork(obs_dim, n, hidden, dueling, guide, switch=guide_switch(meta, p / "checkpoint.json"))
    else:
        try:
            spill = Spill(**set_net["spill"]) if "spill" in set_net else None
            seen = set_net.get("seen_range", False)
            if not isinstance(seen, bool):
                raise ValueError(f"seen_range is true or false, not {seen!r}")
            net = SetQNetwork(obs_dim, n, hidden, set_net["guide"], spill=spill, seen_range=seen)
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"{p / 'checkpoint.json'}: set_net {set_net!r} is not a network this llmsim builds "
                              f"({e})"[:400]) from None
    load_weights(net, p / "q_net.pt", "the Q-network's weights saved with checkpoint.json")
    net.eval()
    return net


def policy_input(net: torch.nn.Module, obs: Any) -> torch.Tensor:
    """One observation as the network's float input row (an SAC actor flattens a graph observation itself)."""
    if isinstance(net, SACActor):
        return net.prepare(obs)
    return torch.as_tensor(np.asarray(obs, dtype=np.float32))


class QPolicy:
    """Greedy (masked argmax) router of a Q-network, or of an actor's logits (the mode of its policy).

    ``mode="sample"`` draws from an actor's masked policy instead (SAC's stochastic policy: softmax of the
    logits, or the squashed Gaussian of agents/sac_argmax.py decoded by argmax), seeded by ``reset``."""

    def __init__(self, net: torch.nn.Module, name: str = "ddqn", mode: str = "greedy") -> None:
        self.net, self.name, self.mode = net, name, mode
        self.rng = np.random.default_rng(0)
        if mode == "sample" and not hasattr(net, "head"):
            raise ConfigError(f"{name}: mode=sample needs a policy network (SAC); a Q-network only acts greedily")

    def reset(self, env: RoutingEnv, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    @torch.no_grad()
    def act(self, obs: Any, mask: np.ndarray, env: RoutingEnv | None = None) -> int:
        x = policy_input(self.net, obs).unsqueeze(0)
        m = torch.as_tensor(mask).unsqueeze(0)
        if self.mode == "sample":
            return self._sample(x, m)
        return int(masked_argmax(self.net(x), m).item())

    def _sample(self, x: torch.Tensor, m: torch.Tensor) -> int:
        head = self.net.head
        emb = self.net.encoder(x)
        valid = m[0].numpy() | ~m[0].numpy().any()
        if hasattr(head, "dist"):  # squashed Gaussian: argmax over the valid entries of a sample
            mu, log_std = head.dist(emb)
            vec = np.tanh((mu + log_std.exp() * torch.from_numpy(self.rng.standard_normal(mu.shape).astype(
                np.float32)))[0].numpy())
            return int(np.where(valid, vec, -np.inf).argmax())
        p = torch.softmax(masked(head(emb), m), dim=-1)[0].double().numpy()
        p = np.where(valid, p, 0.0)
        return int(self.rng.choice(len(p), p=p / p.sum()))


def for_env(net: torch.nn.Module, env: Any) -> torch.nn.Module:
    """``net`` as it acts on ``env``: a slot network on a plain K-instance env through its
    :class:`~llmsim.agents.nets.SlotAdapter` (the env's K + 2 actions), an actor over expert slots through
    :meth:`~llmsim.agents.sac_nets.SACActor.on_choices`, anything else as it is."""
    base = net.net if isinstance(net, SlotAdapter) else net
    n = int(env.action_space.n)
    if isinstance(base, SACActor) and base.slots is not None:  # an actor over expert slots (padded graph)
        base = base.slot_actor()
        return base.on_choices(n - 2) if n != base.slots + 2 else base
    if isinstance(base, SetQNetwork) and n != base.n_actions:
        return SlotAdapter(base, n - 2)
    return base


class CheckpointPolicy(QPolicy):
    """The greedy router of a checkpoint directory; refuses an env with another layout at ``reset``. A slot
    policy (one network for any number of instances) acts on each env through its slots. With a ``gate``
    (envs/load_gate.py), ``fallback`` (its heuristic, built for the env) decides at light load, and above it
    wherever the network is unsure (the gate's ``margin``; greedy mode) or, with the gate's ``costless``, wherever
    the heuristic's choice costs nothing by its own estimate; with ``informed`` the heuristic is told every
    decision."""

    def __init__(self, path: str | Path, label: str | None = None, mode: str = "greedy",
                 gate: LoadGate | None = None, fallback: Any = None) -> None:
        self.path = Path(path)
        self.meta = read_meta(self.path)
        super().__init__(load_policy_net(self.path, self.meta),
                         label or default_label(self.meta), mode)
        if (gate is None) != (fallback is None):
            raise ConfigError(f"{self.path}: a load gate needs its fallback heuristic (and only a gate has one)")
        self.gate, self.fallback = gate, fallback
        self.meter = None if gate is None else gate.meter()
        self._checked: int | None = None
        # decisions whose state left the network's seen range, where its guide decided (None: it has no range)
        self.unseen_decisions: int | None = 0 if getattr(self.net, "seen", None) is not None else None

    def reset(self, env: RoutingEnv, seed: int) -> None:
        super().reset(env, seed)
        if self.unseen_decisions is not None:
            self.unseen_decisions = 0
        if self.gate is not None:
            self.fallback.reset(env, seed)
            self.meter = self.gate.meter()
        if self._checked != id(env):
            check_compatible(self.meta, env, str(self.path))
            self.net = for_env(self.net, env)
            self._checked = id(env)

    def act(self, obs: Any, mask: np.ndarray, env: RoutingEnv | None = None) -> int:
        if self.unseen_decisions is not None and env is not None and env.pending is not None:
            base = self.net.net if isinstance(self.net, SlotAdapter) else self.net
            self.unseen_decisions += int(base.unseen(policy_input(base, obs).unsqueeze(0)).item())
        if self.meter is None or env is None:
            return super().act(obs, mask, env)
        if self.meter.light(env.cluster.view.state()):
            return self.fallback.act(obs, mask, env)
        req = env.pending if self.gate.tells and env.pending_stage == "prefill" else None
        if req is not None and self.gate.costless:  # where the heuristic's choice costs nothing by its estimate
            d = costless_decision(self.fallback.router, req, env.cluster.view)
            if d is not None:
                self.fallback.router.remember(req, d)
                return env.decision_action(d)
        margin = self.gate.margin_now(self.meter)
        if margin > 0.0 and self.mode == "greedy":  # where the network is unsure, the heuristic's action
            a = self.unless_unsure(obs, mask, env, margin)
        else:
            a = super().act(obs, mask, env)
        if req is not None:
            self.fallback.router.remember(req, env.decode(a))
        return a

    @torch.no_grad()
    def unless_unsure(self, obs: Any, mask: np.ndarray, env: RoutingEnv, margin: float) -> int:
        """The greedy action, or the heuristic's where the network prefers its own by less than ``margin``
        (envs/load_gate.py ``unsure``)."""
        scores = masked(self.net(policy_input(self.net, obs).unsqueeze(0)), torch.as_tensor(mask).unsqueeze(0))[0]
        mine, theirs = int(scores.argmax()), int(self.fallback.act(obs, mask, env))
        return theirs if unsure(scores.numpy(), mine, theirs, margin) else mine
