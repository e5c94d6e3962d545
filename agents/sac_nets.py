"""The networks of both SAC variants: encoders, policy heads and the actor a checkpoint stores.

* Encoders: ``han`` embeds the graph observation (flattened by :class:`llmsim.agents.han.GraphLayout`, so the
  replay stores vectors) with :class:`llmsim.agents.han.DenseHAN`, wrapped in :class:`~llmsim.agents.han.PackedHAN`
  to also name the experts (``head: experts``); ``mlp`` feeds a flat observation straight to the heads.
* Heads: :class:`ExpertHead` scores expert k from [z, e_k, r_k] (discrete SAC's actor and critics), a plain MLP
  otherwise, and :class:`GaussianHead` (the released code's continuous SAC, agents/sac_argmax.py).
* :class:`SACActor` = encoder + head; ``arch`` (in checkpoint.json) is enough for :func:`build_actor` to rebuild
  it, so loading a checkpoint needs neither algorithm module.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from llmsim.agents.han import DenseHAN, GraphLayout, PackedHAN
from llmsim.agents.nets import mlp

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def graph_encoder(layout: GraphLayout, hidden: int, heads: int, layers: int, state_head: str) -> nn.Module:
    """DenseHAN over ``layout``; ``state_head: experts`` packs the per-expert embeddings beside the arrived one."""
    han = DenseHAN(layout, hidden=hidden, heads=heads, layers=layers)
    return PackedHAN(han) if state_head == "experts" else han


def make_encoder(kind: str, obs_space: Any, han: tuple[int, int, int], state_head: str
                 ) -> tuple[nn.Module, GraphLayout | None]:
    """(encoder, graph layout or None) for an env's observation space: ``han`` = (hidden, heads, layers)."""
    if kind == "han":
        if not hasattr(obs_space, "spaces"):
            raise ValueError("agent.encoder=han needs the graph observation (env.observation.kind=graph)")
        layout = GraphLayout.from_space(obs_space)
        return graph_encoder(layout, *han, state_head), layout
    if getattr(obs_space, "shape", None) is None or len(obs_space.shape) != 1:
        raise ValueError(f"agent.encoder=mlp needs a flat observation, got {type(obs_space).__name__}")
    return nn.Identity(), None


def embed_dim(encoder: nn.Module, obs_space: Any) -> int:
    """Width of the encoder's output: the HAN's, or the flat observation's."""
    return int(encoder.out_dim) if hasattr(encoder, "out_dim") else int(obs_space.shape[0])


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
    if isinstance(encoder, PackedHAN):
        return ExpertHead(encoder.z_dim, encoder.e_dim, encoder.n, hidden, n_out)
    return mlp(d, hidden, n_out)


class GaussianHead(nn.Module):
    """MLP -> (mu, log sigma); ``forward`` returns mu only, so an actor built on it routes greedily by argmax."""

    def __init__(self, d: int, hidden: list[int], n: int) -> None:
        super().__init__()
        self.net = mlp(d, hidden, 2 * n)
        self.n = n

    def dist(self, emb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.net(emb)
        mu, log_std = out[..., :self.n], out[..., self.n:]
        return mu, torch.tanh(log_std) * 0.5 * (LOG_STD_MAX - LOG_STD_MIN) + 0.5 * (LOG_STD_MAX + LOG_STD_MIN)

    def forward(self, emb: torch.Tensor) -> torch.Tensor:
        return self.dist(emb)[0]


class ColumnHead(nn.Module):
    """A head over expert slots (a padded graph layout: M slots, wait, drop) scored for the actions of a K-expert
    env (experts 0..K-1, wait, drop), so a policy trained in slots runs on a plain env and in its ONNX export."""

    def __init__(self, head: nn.Module, k: int, slots: int) -> None:
        super().__init__()
        self.head, self.k, self.slots = head, k, slots
        self.register_buffer("columns", torch.tensor([*range(k), slots, slots + 1], dtype=torch.int64))

    def forward(self, emb: torch.Tensor) -> torch.Tensor:
        return self.head(emb).index_select(1, self.columns)


class SACActor(nn.Module):
    """Encoder + policy head; what a checkpoint stores and a router runs (greedy: argmax of the logits)."""

    def __init__(self, encoder: nn.Module, head: nn.Module, layout: GraphLayout | None, arch: dict[str, Any]) -> None:
        super().__init__()
        self.encoder, self.head, self.layout, self.arch = encoder, head, layout, arch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))

    @property
    def slots(self) -> int | None:
        """Expert slots of a padded graph layout (one actor for any number of experts up to it), else None."""
        return self.layout.n_experts if self.layout is not None and self.layout.padded else None

    def slot_actor(self) -> SACActor:
        """The actor over all its slots (itself unless it was narrowed by :meth:`on_choices`)."""
        if not isinstance(self.head, ColumnHead):
            return self
        return SACActor(self.encoder, self.head.head, self.layout, {**self.arch, "n_actions": self.head.slots + 2})

    def on_choices(self, k: int) -> SACActor:
        """This slot actor scoring the K + 2 actions of a K-expert env (K <= slots); shares the weights."""
        base, slots = self.slot_actor(), self.slots
        if slots is None or not 1 <= k <= slots:
            raise ValueError(f"the actor has {slots} expert slots; an env of {k} experts does not fit")
        return SACActor(base.encoder, ColumnHead(base.head, k, slots), self.layout, {**base.arch, "n_actions": k + 2})

    def prepare(self, obs: Any) -> torch.Tensor:
        """One observation (a vector, or the graph Dict) as a float tensor row."""
        if self.layout is not None and isinstance(obs, dict):
            return torch.from_numpy(self.layout.flatten(obs, batched=False)).reshape(-1)
        return torch.as_tensor(np.asarray(obs, dtype=np.float32))


def build_actor(arch: dict[str, Any]) -> SACActor:
    """An untrained actor of the shape ``arch`` describes (checkpoint loading; weights come after)."""
    layout = None
    if arch["encoder"] == "han":
        layout = GraphLayout.from_dict(arch["layout"])
        han = arch["han"]
        encoder = graph_encoder(layout, int(han["hidden"]), int(han["heads"]), int(han["layers"]),
                                arch.get("state_head", "arrived"))
    elif arch["encoder"] == "mlp":
        encoder = nn.Identity()
    else:
        raise ValueError(f"encoder {arch['encoder']!r}")
    d, hidden, n = int(arch["embed_dim"]), list(arch["hidden"]), int(arch["n_actions"])
    if arch.get("head", "categorical") == "gaussian":
        head: nn.Module = GaussianHead(d, hidden, n)
    else:
        head = make_head(encoder, d, hidden, n)
    return SACActor(encoder, head, layout, dict(arch))
