"""Graph observation (the QoS-aware edge router's): exact HeteroData round trip and features checked against the
cluster."""

from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

import llmsim.envs  # noqa: F401
from llmsim.envs.observations import from_hetero_data, to_hetero_batch, to_hetero_data
from llmsim.envs.observations.graph import GraphObs
from llmsim.state.cluster_state import ClusterState, InstanceRequests, InstanceState, RequestState

torch = pytest.importorskip("torch")


def _busy_env():
    env = gym.make("llmsim/QoSEdge-v0", num_requests=400, rate=40.0).unwrapped
    obs, _ = env.reset(seed=1)
    rng = np.random.default_rng(0)
    for _ in range(150):
        obs, *_ = env.step(int(rng.choice(np.flatnonzero(env.action_masks()))))
    return env, obs


def test_round_trip_exact():
    env, obs = _busy_env()
    assert obs["running_mask"].sum() > 0 and obs["waiting_mask"].sum() > 0
    data = to_hetero_data(obs)
    back = from_hetero_data(data, env.num_instances, 10, 10)
    assert set(back) == set(obs)
    for k in obs:
        assert np.array_equal(back[k], obs[k]), k
        assert back[k].dtype == obs[k].dtype, k


def test_nodes_and_edges_match_cluster_state():
    env, obs = _busy_env()
    data = to_hetero_data(obs)
    c = env.cluster
    c.sync_all()  # the engines as the observation saw them (envs read the state without syncing the engines)
    now = c.env.now
    n = env.num_instances
    assert data["expert"].x.shape == (n, 3)
    assert data["arrived"].x.shape == (1, 3 * n)
    rows, owners = [], []
    for k, inst in enumerate(c.instances):
        kv_tok = inst.kv_total * inst.block_size
        for r in inst.running[:10]:
            g = r.generated
            lat = (now - r.arrival) / g / 0.03 if g else 0.0
            rows.append([r.prompt_tokens / 1000, env.routed_quality[r.id], r.predicted_output / 300,
                         (r.prompt_tokens + g) / kv_tok, g / 300, lat])
            owners.append(k)
        assert float(data["expert"].x[k, 0]) == pytest.approx((inst.kv_total - inst.kv.free) / inst.kv_total)
        assert float(data["expert"].x[k, 1]) == pytest.approx(len(inst.running) / 10)
    assert np.allclose(data["running"].x.numpy(), np.array(rows, np.float32), rtol=1e-6)
    ei = data["running", "on", "expert"].edge_index.numpy()
    assert list(ei[0]) == list(range(len(owners))) and list(ei[1]) == owners
    rev = data["expert", "rev_on", "running"].edge_index.numpy()
    assert np.array_equal(rev, ei[::-1])
    a = data["arrived", "to", "expert"].edge_index.numpy()
    assert list(a[1]) == list(range(n)) and not a[0].any()
    # arrived node: prompt, predicted quality and length on each expert
    req = env.pending
    lens, quals = env.predictions(req)
    x = data["arrived"].x.numpy()[0]
    assert np.allclose(x[:n], req.prompt_tokens / 1000)
    assert np.allclose(x[n:2 * n], quals[env.inst_model_idx])
    assert np.allclose(x[2 * n:], lens[env.inst_model_idx] / 300)


def test_batch_and_han_forward():
    from torch_geometric.nn import HANConv

    env, obs = _busy_env()
    obs2, *_ = env.step(int(np.flatnonzero(env.action_masks())[0]))
    batched = {k: np.stack([obs[k], obs2[k]]) for k in obs}
    b = to_hetero_batch(batched)
    assert b.num_graphs == 2
    data = to_hetero_data(obs)
    conv = HANConv({k: data[k].x.shape[1] for k in data.node_types}, 16, data.metadata(), heads=4)
    out = conv(data.x_dict, data.edge_index_dict)
    assert out["arrived"].shape == (1, 16)


def test_swapped_requests_fill_the_waiting_slots_after_the_waiting_ones():
    def row(rid: int, g: int) -> RequestState:
        return RequestState(rid, 100 + rid, g, 0, 50.0, None, 0.0)

    def inst(k: int, waiting: tuple, swapped: tuple) -> InstanceState:
        return InstanceState(k, f"i{k}", "m", "g", True, 0, len(waiting), len(swapped), 1, 10, 16, 8, 4096, 4095,
                             0.0, 0.0, InstanceRequests((), waiting, swapped))

    ctx = SimpleNamespace(num_instances=2, inst_model_idx=np.zeros(2, np.int64), routed_quality={})
    obs = GraphObs(cap_running=2, cap_waiting=3)
    obs.bind(ctx)
    state = ClusterState(1.0, 1.0, 0, False, 4, 50.0, (inst(0, (row(1, 0),), (row(2, 7), row(3, 9), row(4, 1))),
                                                        inst(1, (), ())))
    o = obs.build(ctx, state, None)
    assert list(o["waiting_mask"]) == [1, 1, 1, 0, 0, 0]  # the cap: one waiting, then two of the three swapped
    assert np.allclose(o["waiting"][:3, 0], [101 / 1000, 102 / 1000, 103 / 1000])
    assert np.allclose(o["waiting"][:3, 4], [0.0, 7 / 300, 9 / 300])
    assert o["expert"][0, 2] == np.float32(min(1e3, 4 / 3))
