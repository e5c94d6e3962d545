"""The QoS-aware edge router's heterogeneous graph state (Eqs. 6-8) as a single-level Dict of padded arrays + masks.

Node types and features (float32; the normalisation constants are constructor arguments):

* ``arrived`` (1 node, 3N features): prompt tokens / prompt_scale repeated per expert (one shared
  tokenizer), predicted quality on each expert, predicted output tokens on each expert / out_scale
  (the paper's released code's 3N layout). ``arrived_mask`` is 0 when nothing is decided.
* ``expert`` (N nodes, 3): KV blocks in use / total (e_n), running count / cap_running, waiting count
  / cap_waiting (counts beyond the caps are still counted here).
* ``running`` / ``waiting`` (N * cap slots each, 6 features, Eq. 6): prompt / prompt_scale, predicted
  quality, predicted output / out_scale, memory share (prompt + generated) / KV capacity in tokens
  (0 when waiting), generated / out_scale, current latency per token / latency_scale (0 before the
  first token). Slot k * cap + i holds the i-th request of expert k's queue; ``*_mask`` marks real nodes.
  Swapped requests count as waiting. Everything is read from the (possibly stale) ClusterState, plus the
  predicted quality the router recorded when it routed each request (``env.routed_quality``).
* ``max_experts`` M (default None: N slots, the layout above): every expert block has M slots (the arrived node's
  three groups of M, M expert nodes, M * cap queue slots) and ``expert_mask`` (M) marks the N present experts (the
  first N slots), so one policy runs on any cluster of up to M experts. Absent slots are zeros.

Edges are implicit (a slot belongs to expert slot // cap; the arrived node links to every expert), so
:func:`to_hetero_data` rebuilds the torch_geometric ``HeteroData`` exactly, with both directions of
arrived-expert, expert-running and expert-waiting (6 relations), and :func:`from_hetero_data` inverts it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from llmsim.envs.observations.base import ObsBuilder
from llmsim.envs.options import positive
from llmsim.errors import ConfigError

if TYPE_CHECKING:
    from llmsim.envs.context import ObservationContext
    from llmsim.request import Request
    from llmsim.state.cluster_state import ClusterState

FEAT_HIGH = 1e3  # features are clipped to [0, FEAT_HIGH]
RELATIONS = (("arrived", "to", "expert"), ("expert", "rev_to", "arrived"), ("running", "on", "expert"),
             ("expert", "rev_on", "running"), ("waiting", "at", "expert"), ("expert", "rev_at", "waiting"))


class GraphObs(ObsBuilder):
    name = "graph"
    reads_quality = True

    def __init__(self, cap_running: int = 10, cap_waiting: int = 10, prompt_scale: float = 1000.0,
                 out_scale: float = 300.0, latency_scale: float = 0.03, max_experts: int | None = None) -> None:
        if max_experts is not None and (isinstance(max_experts, bool) or not isinstance(max_experts, int)
                                        or max_experts < 1):
            raise ConfigError(f"observation.max_experts: expected a positive integer or null, got {max_experts!r}")
        self.max_experts = max_experts
        self.cap_r = positive("observation.cap_running", cap_running, integer=True)
        self.cap_w = positive("observation.cap_waiting", cap_waiting, integer=True)
        self.ps = positive("observation.prompt_scale", prompt_scale)
        self.os = positive("observation.out_scale", out_scale)
        self.ls = positive("observation.latency_scale", latency_scale)

    def bind(self, env: ObservationContext) -> gym.Space:
        n = env.num_instances
        m = n if self.max_experts is None else self.max_experts
        if n > m:
            raise ConfigError(f"observation.max_experts: {m} expert slots cannot hold {n} experts (a policy trained "
                              f"with max_experts={m} runs on at most {m} experts: use at most {m}, or train one with "
                              f"env.max_experts={n})")
        self.n, self.m = n, m
        self.bufs = {
            "arrived": np.zeros((1, 3 * m), np.float32),
            "arrived_mask": np.zeros(1, np.int8),
            "expert": np.zeros((m, 3), np.float32),
            "running": np.zeros((m * self.cap_r, 6), np.float32),
            "running_mask": np.zeros(m * self.cap_r, np.int8),
            "waiting": np.zeros((m * self.cap_w, 6), np.float32),
            "waiting_mask": np.zeros(m * self.cap_w, np.int8),
        }
        if self.max_experts is not None:
            self.bufs["expert_mask"] = (np.arange(m) < n).astype(np.int8)
        spaces = {}
        for k, b in self.bufs.items():
            if k.endswith("_mask"):
                spaces[k] = gym.spaces.MultiBinary(b.shape[0])
            else:
                spaces[k] = gym.spaces.Box(0.0, FEAT_HIGH, b.shape, np.float32)
        return gym.spaces.Dict(spaces)

    def build(self, env: ObservationContext, state: ClusterState, req: Request | None) -> dict[str, np.ndarray]:
        b = self.bufs
        n, m = self.n, self.m
        arr = b["arrived"]
        if req is None:
            arr.fill(0.0)
            b["arrived_mask"][0] = 0
        else:
            lens, quals = env.predictions(req)
            mi = env.inst_model_idx
            arr[0, :n] = min(FEAT_HIGH, req.prompt_tokens / self.ps)
            arr[0, m:m + n] = quals[mi]
            arr[0, 2 * m:2 * m + n] = np.minimum(FEAT_HIGH, lens[mi] / self.os)
            b["arrived_mask"][0] = 1
        run, wai = b["running"], b["waiting"]
        run.fill(0.0)
        b["running_mask"].fill(0)
        wai.fill(0.0)
        b["waiting_mask"].fill(0)
        for k, inst in enumerate(state.instances):
            self._fill_expert(k, inst, state.now, env.routed_quality)
        np.minimum(run, FEAT_HIGH, out=run)
        np.minimum(wai, FEAT_HIGH, out=wai)
        return {k: v.copy() for k, v in b.items()}

    def _fill_expert(self, k: int, inst: Any, now: float, pq: dict[int, float]) -> None:
        """Expert node k and its first ``cap`` running and waiting (then swapped) requests (Eq. 6). The rows of a
        queue go into the float32 buffer in one store (the same float32 values as a store per feature)."""
        b = self.bufs
        cr, cw = self.cap_r, self.cap_w
        ex = b["expert"]
        ex[k] = (inst.kv_blocks_used / inst.kv_blocks_total, min(FEAT_HIGH, inst.num_running / cr),
                 min(FEAT_HIGH, (inst.num_waiting + inst.num_swapped) / cw))
        kv_tok = inst.kv_blocks_total * inst.block_size
        detail = inst.detail
        running = detail.head("running", cr)
        if running:
            s = k * cr
            b["running"][s:s + len(running)] = self._rows(running, now, pq, kv_tok)
            b["running_mask"][s:s + len(running)] = 1
        queued = detail.head("waiting", cw)
        if len(queued) < cw and inst.num_swapped:  # (the state counts its swapped rows; a live router has none)
            queued += detail.head("swapped", cw - len(queued))
        if queued:
            s = k * cw
            b["waiting"][s:s + len(queued)] = self._rows(queued, now, pq, 0)
            b["waiting_mask"][s:s + len(queued)] = 1

    def _rows(self, reqs: Any, now: float, pq: dict[int, float], kv_tok: int) -> list[tuple[float, ...]]:
        """Eq. 6 features of each request; the memory share (index 3) only with ``kv_tok`` (running requests)."""
        ps, os_, ls = self.ps, self.os, self.ls
        return [(p / ps, pq.get(rid, 0.0), (d or 0.0) / os_, (p + g) / kv_tok if kv_tok else 0.0, g / os_,
                 min(FEAT_HIGH, (now - arrival) / g / ls) if g > 0 else 0.0)
                for rid, p, g, _, d, _, arrival in reqs]


def _edges(src: np.ndarray, dst: np.ndarray):
    import torch  # optional: the rl extra

    return torch.from_numpy(np.stack([src, dst]).astype(np.int64))


def to_hetero_data(obs: dict[str, Any]):
    """Rebuild the torch_geometric ``HeteroData`` of one (unbatched) graph observation exactly."""
    import torch  # optional: the rl extra
    from torch_geometric.data import HeteroData  # optional: the rl extra

    o = {k: np.asarray(v) for k, v in obs.items()}
    slots_n = o["expert"].shape[0]
    cap_r = o["running"].shape[0] // slots_n
    cap_w = o["waiting"].shape[0] // slots_n
    # a padded observation (max_experts): only the present experts (the first ones) are nodes
    n = int((o["expert_mask"].reshape(-1) > 0).sum()) if "expert_mask" in o else slots_n
    data = HeteroData()
    has_arrived = bool(o["arrived_mask"].reshape(-1)[0])
    arrived = o["arrived"].reshape(1, -1)[:1 if has_arrived else 0]
    data["arrived"].x = torch.from_numpy(arrived.astype(np.float32))
    data["expert"].x = torch.from_numpy(o["expert"][:n].astype(np.float32))
    for kind, cap in (("running", cap_r), ("waiting", cap_w)):
        slots = np.flatnonzero(o[f"{kind}_mask"].reshape(-1) > 0)
        slots = slots[slots // cap < n]
        data[kind].x = torch.from_numpy(o[kind][slots].astype(np.float32))
        data[kind].slot = torch.from_numpy(slots.astype(np.int64))
        rel = {"running": ("on", "rev_on"), "waiting": ("at", "rev_at")}[kind]
        local = np.arange(len(slots))
        owner = slots // cap
        data[kind, rel[0], "expert"].edge_index = _edges(local, owner)
        data["expert", rel[1], kind].edge_index = _edges(owner, local)
    a_src = np.zeros(n if has_arrived else 0, np.int64)
    a_dst = np.arange(n if has_arrived else 0)
    data["arrived", "to", "expert"].edge_index = _edges(a_src, a_dst)
    data["expert", "rev_to", "arrived"].edge_index = _edges(a_dst, a_src)
    return data


def from_hetero_data(data, n_experts: int, cap_running: int, cap_waiting: int) -> dict[str, np.ndarray]:
    """Inverse of :func:`to_hetero_data` (padded arrays + masks), for round-trip tests."""
    n = n_experts
    arrived = np.zeros((1, 3 * n), np.float32)
    x = data["arrived"].x.numpy()
    if len(x):
        arrived[0] = x[0]
    out = {"arrived": arrived, "arrived_mask": np.array([1 if len(x) else 0], np.int8),
           "expert": data["expert"].x.numpy().astype(np.float32)}
    for kind, cap in (("running", cap_running), ("waiting", cap_waiting)):
        feats = np.zeros((n * cap, 6), np.float32)
        mask = np.zeros(n * cap, np.int8)
        slots = data[kind].slot.numpy()
        feats[slots] = data[kind].x.numpy()
        mask[slots] = 1
        out[kind] = feats
        out[f"{kind}_mask"] = mask
    return out


def to_hetero_batch(obs: dict[str, Any]):
    """A ``torch_geometric`` Batch from batched observations (leading batch dimension, e.g. from SB3)."""
    from torch_geometric.data import Batch  # optional: the rl extra

    first = next(iter(obs.values()))
    bsz = first.shape[0]
    graphs = [to_hetero_data({k: (v[i].cpu().numpy() if hasattr(v, "cpu") else v[i]) for k, v in obs.items()})
              for i in range(bsz)]
    return Batch.from_data_list(graphs)
