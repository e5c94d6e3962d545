"""Dense heterogeneous graph attention (HAN) encoder for the QoS-aware edge router's graph observation (QoS-Aware
LLM Routing for Edge Computing with Multiple Experts, Sec. 4.5).

The paper's encoder is L x ``torch_geometric.nn.HANConv`` (hidden 64; 4 heads in the paper, 8 in the released code)
on the graph of envs/observations/graph.py; its output is the final embedding of the single arrived node. PyG is
slow on many small graphs (``python -m experiments.bench train --encoder``) and does not export to ONNX, so
:class:`DenseHAN` computes the same function on the padded arrays + masks (flattened by :class:`GraphLayout` for
replay buffers) with masked dense attention, no loop over graphs. It is HANConv applied to ONE graph at a time:
semantic attention averages over the destination nodes of the same graph (PyG on a multi-graph Batch would mix
graphs in that mean; the per-graph model is the paper's). The tests check equality with PyG on env graphs.

Only what reaches the arrived node's final embedding is computed. Relations where every destination has exactly one
incoming edge (arrived -> expert, expert -> running / waiting) have softmax exactly 1: the message is ReLU(projected
source) and their attention vectors never change the output (zero gradient in PyG too). A destination type with a
single relation (arrived, running, waiting) gets semantic weight exactly 1, so ``k_lin`` / ``q`` only matter in
layers that output experts (not the last). :func:`parameter_counts` gives both counts.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from llmsim.envs.observations.graph import to_hetero_data

NODE_TYPES = ("arrived", "expert", "running", "waiting")
# Relations into each destination type: (PyG name, source type, each destination has exactly one incoming edge).
INCOMING: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "arrived": (("expert__rev_to__arrived", "expert", False),),
    "expert": (("arrived__to__expert", "arrived", True), ("running__on__expert", "running", False),
               ("waiting__at__expert", "waiting", False)),
    "running": (("expert__rev_on__running", "expert", True),),
    "waiting": (("expert__rev_at__waiting", "expert", True),),
}
OBS_KEYS = ("arrived", "arrived_mask", "expert", "running", "running_mask", "waiting", "waiting_mask")
EXPERT_MASK = "expert_mask"  # only in a padded layout (GraphObs max_experts): which expert slots hold an expert
_NEG = 1e30  # masked attention logits get -_NEG added: finite, so a destination without sources gives 0, not NaN


@dataclass
class GraphLayout:
    """Key order and shapes of the graph observation, so it can live in a replay buffer as one flat float row.

    ``n_experts`` is the number of expert slots; a padded layout (``padded``: an ``expert_mask`` key) marks which
    slots hold an expert, so a network built on it runs on any cluster with up to ``n_experts`` experts."""

    keys: tuple[str, ...]
    shapes: dict[str, tuple[int, ...]]
    offsets: dict[str, int] = field(init=False)
    n_experts: int = field(init=False)
    cap_running: int = field(init=False)
    cap_waiting: int = field(init=False)
    flat_dim: int = field(init=False)

    def __post_init__(self) -> None:
        self.keys = tuple(self.keys)
        self.shapes = {k: tuple(int(d) for d in self.shapes[k]) for k in self.keys}
        missing = set(OBS_KEYS) - set(self.keys)
        if missing:
            raise ValueError(f"graph observation lacks {sorted(missing)}")
        self.offsets, off = {}, 0
        for k in self.keys:
            self.offsets[k] = off
            off += math.prod(self.shapes[k])
        self.flat_dim = off
        n = self.shapes["expert"][0]
        self.n_experts = n
        self.cap_running = self.shapes["running"][0] // n
        self.cap_waiting = self.shapes["waiting"][0] // n
        expect = {"arrived": (1, 3 * n), "arrived_mask": (1,), "expert": (n, 3), "running": (n * self.cap_running, 6),
                  "running_mask": (n * self.cap_running,), "waiting": (n * self.cap_waiting, 6),
                  "waiting_mask": (n * self.cap_waiting,)}
        if self.padded:
            expect[EXPERT_MASK] = (n,)
        for k, shape in expect.items():
            if self.shapes[k] != shape:
                raise ValueError(f"graph observation {k}: shape {self.shapes[k]}, expected {shape}")

    @property
    def padded(self) -> bool:
        return EXPERT_MASK in self.shapes

    @classmethod
    def from_space(cls, space: Any) -> GraphLayout:
        """From the env's gymnasium Dict observation space (its key order is kept)."""
        return cls(tuple(space.spaces), {k: tuple(s.shape) for k, s in space.spaces.items()})

    @classmethod
    def from_shapes(cls, shapes: Mapping[str, Sequence[int]]) -> GraphLayout:
        return cls(tuple(shapes), {k: tuple(v) for k, v in shapes.items()})

    @classmethod
    def for_experts(cls, n_experts: int, cap_running: int = 10, cap_waiting: int = 10,
                    padded: bool = False) -> GraphLayout:
        """The layout GraphObs produces for ``n_experts`` (expert slots with ``padded``; gymnasium's sorted key
        order)."""
        n, cr, cw = n_experts, cap_running, cap_waiting
        shapes: dict[str, tuple[int, ...]] = {"arrived": (1, 3 * n), "arrived_mask": (1,), "expert": (n, 3)}
        if padded:
            shapes[EXPERT_MASK] = (n,)
        shapes.update({"running": (n * cr, 6), "running_mask": (n * cr,), "waiting": (n * cw, 6),
                       "waiting_mask": (n * cw,)})
        return cls.from_shapes(shapes)

    def to_dict(self) -> dict[str, Any]:
        return {"keys": list(self.keys), "shapes": {k: list(v) for k, v in self.shapes.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GraphLayout:
        return cls(tuple(d["keys"]), {k: tuple(v) for k, v in d["shapes"].items()})

    def flatten(self, obs: Mapping[str, Any], batched: bool = False) -> np.ndarray:
        """(n, flat_dim) float32 rows (masks as 0/1) from one observation or a batch with a leading axis."""
        parts = []
        for k in self.keys:
            v = np.asarray(obs[k], dtype=np.float32)
            parts.append(v.reshape(v.shape[0] if batched else 1, -1))
        return np.concatenate(parts, axis=1)

    def unflatten(self, x: Tensor) -> dict[str, Tensor]:
        """Views (no copy for a row-major tensor) of a (B, flat_dim) tensor with the observation's shapes (B, ...)."""
        b = x.shape[0]
        return {k: x[:, o:o + math.prod(self.shapes[k])].reshape((b, *self.shapes[k]))
                for k, o in self.offsets.items()}

    def zeros(self) -> dict[str, np.ndarray]:
        """An empty observation (env dtypes), e.g. for building PyG metadata."""
        return {k: np.zeros(self.shapes[k], np.int8 if k.endswith("_mask") else np.float32) for k in self.keys}


def needed_types(layers: int) -> list[tuple[str, ...]]:
    """Node types whose embedding after layer ``l`` (0 = input) reaches the arrived node's output of layer L."""
    need: list[set[str]] = [set() for _ in range(layers + 1)]
    need[layers] = {"arrived"}
    for layer in range(layers, 0, -1):
        for t in need[layer]:
            for _, src, single in INCOMING[t]:
                need[layer - 1].add(src)
                if not single:  # the destination's own projection enters the attention logits
                    need[layer - 1].add(t)
    return [tuple(t for t in NODE_TYPES if t in s) for s in need]


def _glorot(p: Tensor) -> None:
    """PyG's glorot (uniform, fan = the last two dims)."""
    a = math.sqrt(6.0 / (p.size(-2) + p.size(-1)))
    nn.init.uniform_(p, -a, a)


REV_TO = "expert__rev_to__arrived"
QUEUE_RELS = ("running__on__expert", "waiting__at__expert")  # running and waiting are handled stacked, in this order


class _Layer(nn.Module):
    """One HANConv restricted to the output types ``outputs`` (inputs: the types those depend on).

    Running and waiting nodes are processed together as a "queue" tensor (2, B, N, S, F) (S = the larger cap),
    their projections and the two relations into the experts as batched matmuls."""

    def __init__(self, in_dims: Mapping[str, int], outputs: Sequence[str], hidden: int, heads: int,
                 negative_slope: float) -> None:
        super().__init__()
        self.outputs, self.hidden, self.heads = tuple(outputs), hidden, heads
        self.negative_slope = negative_slope
        self.proj = nn.ModuleDict({t: nn.Linear(d, hidden) for t, d in in_dims.items()})
        self.lin_src, self.lin_dst = nn.ParameterDict(), nn.ParameterDict()
        for t in self.outputs:
            for rel, _, single in INCOMING[t]:
                if not single:
                    self.lin_src[rel] = nn.Parameter(torch.empty(1, heads, hidden // heads))
                    self.lin_dst[rel] = nn.Parameter(torch.empty(1, heads, hidden // heads))
                    _glorot(self.lin_src[rel])
                    _glorot(self.lin_dst[rel])
        self.semantic = any(len(INCOMING[t]) > 1 for t in self.outputs)
        if self.semantic:
            self.k_lin = nn.Linear(hidden, hidden)
            self.q = nn.Parameter(torch.empty(1, hidden))
            _glorot(self.q)
        self.register_buffer("eye_c", torch.eye(hidden), persistent=False)
        self.register_buffer("eye_h", torch.eye(heads), persistent=False)

    def _rows(self, vec: Tensor) -> Tensor:
        """(H, C) matrix mapping a projection to GAT's per-head score (proj in heads * vec).sum(-1)."""
        return (self.eye_h.unsqueeze(-1) * vec).reshape(self.heads, self.hidden)

    def _fold(self, t: str, rows: list[Tensor]) -> tuple[Tensor, Tensor]:
        """Weight and bias of rows @ proj_t, applied to the inputs directly: the scores (and projection, rows = I)
        in one matmul, without materialising the projection of every neighbour."""
        lin = self.proj[t]
        m = torch.cat(rows) if len(rows) > 1 else rows[0]
        return m @ lin.weight, m @ lin.bias

    def _block_diag(self, lin: nn.Module) -> Tensor:
        """(H (F+1), C) weight of the per-head projection, bias included, of per-head aggregates (..., H, F+1) of
        inputs with a trailing ones column."""
        nh = self.heads
        w = torch.cat([lin.weight, lin.bias.unsqueeze(-1)], -1)  # (C, F+1)
        wt = w.view(nh, self.hidden // nh, w.shape[-1]).transpose(-1, -2)  # (H, F+1, D)
        return (self.eye_h.view(nh, 1, nh, 1) * wt.unsqueeze(-2)).reshape(nh * w.shape[-1], self.hidden)

    def _softmax_sum(self, e: Tensor, hs: Tensor, mask: Tensor | None) -> Tensor:
        """Softmax of logits e (M, S, H) over the S sources of M destinations (mask: 0 / -1e30 to add), applied to
        source inputs with a trailing ones column hs (M, S, F+1) -> (M, H (F+1)) per-head aggregates; the ones
        column becomes the softmax total (1, or 0 without sources), i.e. the bias coefficient. Masked sources must
        be all zeros, mask column included: their (tiny or, without real sources, 1) weights then add nothing.

        Sources are aggregated before the (linear) projection: sum_s a_s (W h_s + b) = [W b] (sum_s a_s [h_s 1]),
        per head; with 6-dim inputs that is ~10x fewer flops than projecting every source first."""
        e = F.leaky_relu(e, self.negative_slope)
        if mask is None:
            p = torch.exp(e - e.detach().amax(1, keepdim=True))
        else:  # max over real sources; exp(<= -80) is 0 to float32 precision and avoids exp's slow underflow path
            e = e + mask
            p = torch.exp((e - e.detach().amax(1, keepdim=True)).clamp_min(-80.0))
        g = torch.bmm(p.transpose(1, 2), hs)  # (M, H, F+1); the total is >= 1 whenever a source exists
        return (g * (1.0 / g[..., -1:].clamp_min(1.0))).reshape(g.shape[0], -1)

    def _to_arrived(self, h: dict[str, Tensor], a_src: Tensor, a_dst: Tensor, m: dict[str, Any]) -> Tensor:
        """expert -> arrived attention (B, N, H) + (B, 1, H) logits -> the arrived output (B, 1, C)."""
        hs = F.pad(h["expert"], (0, 1), value=1.0)
        if "expert" in m:  # padded layout: absent experts are no sources (all zeros, -1e30 logits)
            hs = hs * m["expert"]
        g = self._softmax_sum(a_src + a_dst, hs, m.get("expert_att"))  # (B, H (F+1))
        out = F.relu(g @ self._block_diag(self.proj["expert"]))
        return (out * m["arrived"][:, 0]).unsqueeze(1)

    def _queue_scores(self, hq: Tensor) -> Tensor:
        """GAT source scores of the running / waiting nodes hq (2, B, N, S, F+1) for their relation to the experts."""
        wq = torch.stack([torch.cat([self.proj[t].weight, self.proj[t].bias.unsqueeze(-1)], -1)
                          for t in ("running", "waiting")])  # (2, C, F+1)
        rows = torch.stack([self._rows(self.lin_src[r]) for r in QUEUE_RELS])  # (2, H, C)
        return torch.bmm(hq.reshape(2, -1, hq.shape[-1]), (rows @ wq).transpose(1, 2))  # (2, B N S, H)

    def _to_expert(self, h: dict[str, Tensor], x_arr: Tensor, a_dst: Tensor, m: dict[str, Any]) -> Tensor:
        """Expert outputs (B, N, C): arrived -> expert (one edge), the two queue relations, semantic attention
        (mean over the graph's N experts). x_arr: arrived projection (B, 1, C); a_dst: (B, N, 2, H)."""
        hq = h["queue"]  # (2, B, N, S, F+1)
        _, b, n, s, f = hq.shape
        to = F.relu(x_arr) * m["arrived"]  # (B, 1, C): the same message for every expert
        e = self._queue_scores(hq).view(2, b, n, s, -1) + a_dst.permute(2, 0, 1, 3).unsqueeze(3)
        g = self._softmax_sum(e.view(2 * b * n, s, -1), hq.view(2 * b * n, s, f), m["queue_att"])
        wq = torch.stack([self._block_diag(self.proj[t]) for t in ("running", "waiting")])  # (2, H (F+1), C)
        qo = F.relu(torch.bmm(g.view(2, b * n, -1), wq)).view(2, b, n, -1)
        # semantic scores q . mean_n tanh(k_lin(out_r)); "to" is the same for every expert, so its mean is itself
        # mean tanh(y) = 2 mean sigmoid(2 y) - 1: torch's CPU tanh is ~3x slower than sigmoid (equal to ~2e-7)
        w2, b2 = 2.0 * self.k_lin.weight, 2.0 * self.k_lin.bias
        s_to = ((2.0 * torch.sigmoid(F.linear(to[:, 0], w2, b2)) - 1.0) * self.q).sum(-1)  # (B,)
        if "expert" in m:  # padded layout: the mean over the present experts; absent experts output zeros
            em = m["expert"]  # (B, N, 1)
            mean = (torch.sigmoid(F.linear(qo, w2, b2)) * em).sum(2) / em.sum(1).clamp_min(1.0)
            s_q = ((2.0 * mean - 1.0) * self.q).sum(-1)  # (2, B)
            w = torch.softmax(torch.cat([s_to.unsqueeze(0), s_q]), 0).view(3, b, 1, 1)
            return (w[0] * to + (w[1:] * qo).sum(0)) * em
        s_q = (((2.0 / n) * torch.sigmoid(F.linear(qo, w2, b2)).sum(2) - 1.0) * self.q).sum(-1)  # (2, B)
        w = torch.softmax(torch.cat([s_to.unsqueeze(0), s_q]), 0).view(3, b, 1, 1)
        return w[0] * to + (w[1:] * qo).sum(0)

    def forward(self, h: dict[str, Tensor], m: dict[str, Any]) -> dict[str, Tensor]:
        c, nh = self.hidden, self.heads
        a_out, e_out, q_out = ("arrived" in self.outputs, "expert" in self.outputs, "running" in self.outputs)
        rows_e = ([self.eye_c] if q_out else []) + ([self._rows(self.lin_src[REV_TO])] if a_out else [])
        rows_e += [self._rows(self.lin_dst[r]) for r in QUEUE_RELS] if e_out else []
        ye = F.linear(h["expert"], *self._fold("expert", rows_e))  # (B, N, [C] [H] [2H])
        out: dict[str, Tensor] = {}
        if a_out or e_out:
            rows_a = ([self.eye_c] if e_out else []) + ([self._rows(self.lin_dst[REV_TO])] if a_out else [])
            ya = F.linear(h["arrived"], *self._fold("arrived", rows_a))  # (B, 1, [C] [H])
        if a_out:
            c0 = c if q_out else 0
            out["arrived"] = self._to_arrived(h, ye[..., c0:c0 + nh], ya[..., -nh:], m)
        if e_out:
            b, n, _ = ye.shape
            out["expert"] = self._to_expert(h, ya[..., :c], ye[..., -2 * nh:].reshape(b, n, 2, nh), m)
        if q_out:
            s = m["queue"].shape[3]
            q = F.relu(ye[..., :c]).unsqueeze(2).unsqueeze(0).expand(2, -1, -1, s, -1) * m["queue"]
            out["queue"] = torch.cat([q, m["queue"]], -1)  # the mask as trailing "ones" column, see _softmax_sum
        return out


class DenseHAN(nn.Module):
    """``layers`` HANConv layers on padded graphs: (B, flat_dim) observations -> (B, hidden) arrived embeddings.

    Zeros for rows without an arrived node (``arrived_mask`` 0). Masked slots never influence anything (their
    features are replaced by zeros before use). Initialised like PyG; :func:`load_pyg_weights` copies PyG's.
    """

    def __init__(self, layout: GraphLayout, hidden: int = 64, heads: int = 4, layers: int = 2,
                 negative_slope: float = 0.2) -> None:
        super().__init__()
        if hidden % heads or layers < 1:
            raise ValueError(f"need layers >= 1 and hidden ({hidden}) divisible by heads ({heads})")
        self.layout, self.hidden, self.heads, self.num_layers = layout, hidden, heads, layers
        self.out_dim = hidden
        need = needed_types(layers)
        in_dims = {"arrived": 3 * layout.n_experts, "expert": 3, "running": 6, "waiting": 6}
        self.layers = nn.ModuleList()
        for layer in range(1, layers + 1):
            dims = {t: (in_dims[t] if layer == 1 else hidden) for t in need[layer - 1]}
            self.layers.append(_Layer(dims, need[layer], hidden, heads, negative_slope))

    def _queue(self, o: dict[str, Tensor], experts: Tensor | None) -> tuple[Tensor, Tensor]:
        """Running and waiting slots stacked (2, B, N, S, 6 + mask) with their 0/1 masks (2, B, N, S, 1), S = the
        larger cap; masked slots (and every slot of an absent expert, ``experts`` (B, N) 0) are all zeros."""
        lay = self.layout
        s = max(lay.cap_running, lay.cap_waiting)
        feats, masks = [], []
        for t, cap in (("running", lay.cap_running), ("waiting", lay.cap_waiting)):
            x, mk = o[t].view(-1, lay.n_experts, cap, 6), o[t + "_mask"].view(-1, lay.n_experts, cap, 1)
            if cap < s:
                x, mk = F.pad(x, (0, 0, 0, s - cap)), F.pad(mk, (0, 0, 0, s - cap))
            feats.append(x)
            masks.append(mk)
        mask = (torch.stack(masks) > 0.5).to(o["expert"].dtype)
        if experts is not None:
            mask = mask * experts.view(1, *experts.shape, 1, 1)
        feats = torch.where(mask > 0, torch.stack(feats), torch.zeros((), dtype=mask.dtype))  # NaN garbage too
        return torch.cat([feats, mask], -1), mask  # the mask as trailing "ones" column, see _Layer._softmax_sum

    def forward(self, x: Tensor) -> Tensor:
        return self.embed(x)[0]

    @property
    def expert_dim(self) -> int:
        """Width of the per-expert embeddings :meth:`embed` returns."""
        return self.hidden if self.num_layers >= 2 else 3

    def embed(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(arrived embedding (B, hidden), per-expert embeddings (B, N, expert_dim)): the latter are the last
        layer's inputs for the experts (layer L-1's expert outputs; the raw expert features when L = 1). The arrived
        embedding alone is invariant to permuting the experts with their queues (HANConv has no self-loops and
        expert nodes carry no identity), so a policy that must name an expert needs these too (agents/sac_nets.py)."""
        o = self.layout.unflatten(x)
        am = (o["arrived_mask"] > 0.5).to(x.dtype).unsqueeze(-1)  # (B, 1, 1)
        em = expert_mask(self.layout, o)
        hq, qm = self._queue(o, em)
        zero = torch.zeros((), dtype=x.dtype)
        h = {"expert": o["expert"], "arrived": torch.where(am > 0, o["arrived"], zero), "queue": hq}
        b, n, s = x.shape[0], self.layout.n_experts, hq.shape[3]
        m = {"arrived": am, "queue": qm, "queue_att": (qm.view(2 * b * n, s, 1) - 1.0) * _NEG}
        if em is not None:  # absent experts: zero features, no attention weight, outside every mean
            h["expert"] = torch.where(em.unsqueeze(-1) > 0, o["expert"], zero)
            h["arrived"] = torch.where(em.repeat(1, 3).unsqueeze(1) > 0, h["arrived"], zero)
            m["expert"], m["expert_att"] = em.unsqueeze(-1), (em.unsqueeze(-1) - 1.0) * _NEG
        experts = h["expert"]
        for layer in self.layers:
            experts = h["expert"]
            h = layer(h, m)
        return h["arrived"][:, 0], experts


def expert_mask(layout: GraphLayout, o: Mapping[str, Tensor]) -> Tensor | None:
    """(B, N) 0/1 float mask of the present experts of a padded layout's unflattened rows; None when unpadded."""
    if not layout.padded:
        return None
    return (o[EXPERT_MASK] > 0.5).to(o["expert"].dtype)


def _param_pairs(dense: DenseHAN, convs: Sequence[nn.Module]) -> Iterator[tuple[Tensor, Tensor]]:
    """(DenseHAN parameter, the PyG HANConv parameter it stands for), one to one."""
    if len(convs) != len(dense.layers):
        raise ValueError(f"{len(convs)} PyG layers for a {len(dense.layers)}-layer DenseHAN")
    for layer, conv in zip(dense.layers, convs, strict=True):
        for t, lin in layer.proj.items():
            yield lin.weight, conv.proj[t].weight
            yield lin.bias, conv.proj[t].bias
        for rel in layer.lin_src:
            yield layer.lin_src[rel], conv.lin_src[rel]
            yield layer.lin_dst[rel], conv.lin_dst[rel]
        if layer.semantic:
            yield layer.k_lin.weight, conv.k_lin.weight
            yield layer.k_lin.bias, conv.k_lin.bias
            yield layer.q, conv.q


@torch.no_grad()
def load_pyg_weights(dense: DenseHAN, convs: Sequence[nn.Module]) -> None:
    """Copy PyG HANConv weights into ``dense`` (those on the path to the arrived output)."""
    for d, p in _param_pairs(dense, convs):
        d.copy_(p)


@torch.no_grad()
def copy_to_pyg(dense: DenseHAN, convs: Sequence[nn.Module]) -> None:
    """The inverse of :func:`load_pyg_weights` (PyG parameters off the path keep their values)."""
    for d, p in _param_pairs(dense, convs):
        p.copy_(d)


def pyg_reference(layout: GraphLayout, hidden: int = 64, heads: int = 4, layers: int = 2) -> nn.ModuleList:
    """The authors' encoder: ``layers`` HANConv modules with the metadata of ``to_hetero_data`` graphs."""
    from torch_geometric.nn import HANConv  # optional: PyG, only for the reference encoder and its tests

    meta = to_hetero_data(layout.zeros()).metadata()
    dims: dict[str, int] = {"arrived": 3 * layout.n_experts, "expert": 3, "running": 6, "waiting": 6}
    return nn.ModuleList([HANConv(dims if i == 0 else hidden, hidden, meta, heads=heads) for i in range(layers)])


def pyg_forward(convs: Sequence[nn.Module], obs: Mapping[str, Any], dtype: torch.dtype = torch.float32) -> Tensor:
    """PyG's arrived embedding (hidden,) of ONE observation (zeros without an arrived node)."""
    data = to_hetero_data(obs)
    x = {k: v.to(dtype) for k, v in data.x_dict.items()}
    for conv in convs:
        x = conv(x, data.edge_index_dict)
    a = x["arrived"]
    return a[0] if len(a) else torch.zeros(convs[-1].out_channels, dtype=dtype)


def parameter_counts(layout: GraphLayout, hidden: int = 64, heads: int = 4, layers: int = 2) -> dict[str, int]:
    """Parameters of the full PyG encoder and of DenseHAN (the ones that can change the arrived output).

    The difference never gets a gradient in the authors' model either: HANConv computes every node type, but only
    the arrived embedding is used, and single-edge relations / single-relation semantic attention have zero
    gradient (a softmax over one element).
    """
    count = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    return {"pyg_hanconv": count(pyg_reference(layout, hidden, heads, layers)),
            "dense_effective": count(DenseHAN(layout, hidden, heads, layers))}


def random_observation(layout: GraphLayout, rng: np.random.Generator, arrived: bool = True,
                       n_running: Sequence[int] | None = None, n_waiting: Sequence[int] | None = None
                       ) -> dict[str, np.ndarray]:
    """A synthetic observation (env dtypes, zeros in masked slots): random features, ``n_*[k]`` filled slots for
    expert k (uniform in 0..cap when None), for benchmarks and edge-case tests. A padded layout gets every expert
    slot marked present (tests then mark some absent)."""
    n = layout.n_experts
    obs = layout.zeros()
    if layout.padded:
        obs[EXPERT_MASK][:] = 1
    if arrived:
        obs["arrived"][:] = rng.uniform(0, 2, obs["arrived"].shape)
        obs["arrived_mask"][0] = 1
    obs["expert"][:] = rng.uniform(0, 1.5, (n, 3))
    for kind, cap, counts in (("running", layout.cap_running, n_running), ("waiting", layout.cap_waiting, n_waiting)):
        counts = rng.integers(0, cap + 1, n) if counts is None else counts
        mask = (np.arange(cap)[None, :] < np.asarray(counts)[:, None]).reshape(-1)
        obs[kind][mask] = rng.uniform(0, 1.5, (int(mask.sum()), 6))
        obs[f"{kind}_mask"][:] = mask
    return obs


def export_onnx(module: DenseHAN, layout: GraphLayout, path: str, opset: int = 17) -> None:
    """Export to ONNX: input "obs" (batch, flat_dim), output "embedding" (batch, hidden), dynamic batch axis.

    The TorchScript exporter (``dynamo=False``) is tried first: the graph is small and static, it exports in ~1 s
    (the dynamo exporter takes ~15 s here, printing progress) and both match onnxruntime to ~1e-7. If a later
    torch drops it, the dynamo exporter with a dynamic batch dimension is used instead.
    """
    was_training = module.training
    module.eval()
    dummy = torch.zeros(2, layout.flat_dim)
    names = {"input_names": ["obs"], "output_names": ["embedding"]}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # "legacy TorchScript-based ONNX export"
            warnings.filterwarnings("ignore", "Constant folding", UserWarning)  # harmless, about Slice steps
            torch.onnx.export(module, (dummy,), path, dynamic_axes={"obs": {0: "batch"}, "embedding": {0: "batch"}},
                              opset_version=opset, dynamo=False, **names)
    except (TypeError, RuntimeError, NotImplementedError):  # pragma: no cover - torch without the TorchScript path
        batch = torch.export.Dim("batch")
        torch.onnx.export(module, (dummy,), path, dynamic_shapes=({0: batch},), dynamo=True, **names)
    finally:
        module.train(was_training)


class PackedHAN(nn.Module):
    """DenseHAN whose output also names the experts: ``[z, e_1..e_N, r_1..r_N]`` flattened, with z the arrived
    embedding, e_k expert k's embedding (:meth:`DenseHAN.embed`) and r_k = (prompt, predicted quality, predicted
    length) of the request on expert k from the arrived node's raw features. The arrived embedding alone cannot
    tell the experts apart (tests/agents/test_han.py shows it is invariant to permuting them), so a router that
    picks an expert needs e_k and r_k (agents/sac_nets.py, ``head: experts``)."""

    def __init__(self, han: DenseHAN) -> None:
        super().__init__()
        self.han = han
        self.n, self.z_dim, self.e_dim = han.layout.n_experts, han.hidden, han.expert_dim
        self.out_dim = self.z_dim + self.n * (self.e_dim + 3)

    def forward(self, x: Tensor) -> Tensor:
        z, e = self.han.embed(x)
        b = x.shape[0]
        o = self.han.layout.unflatten(x)
        arrived = o["arrived"].reshape(b, 3, self.n).transpose(1, 2)
        em = expert_mask(self.han.layout, o)
        if em is not None:  # an absent expert's request features are zeros, whatever its slot holds
            arrived = torch.where(em.unsqueeze(-1) > 0, arrived, torch.zeros((), dtype=x.dtype))
        return torch.cat([z, e.reshape(b, -1), arrived.reshape(b, -1)], dim=1)
