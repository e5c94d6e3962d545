"""DenseHAN (agents/han.py) equals torch_geometric's HANConv applied to one graph at a time, on env graphs and on
hand-built edge cases; batching, gradients, masked-slot invariance, ONNX export and the flat layout."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import llmsim.envs  # noqa: F401

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

from llmsim.agents.han import (  # noqa: E402
    DenseHAN,
    GraphLayout,
    _param_pairs,
    copy_to_pyg,
    export_onnx,
    load_pyg_weights,
    parameter_counts,
    pyg_forward,
    pyg_reference,
    random_observation,
)

ATOL = 1e-5
EXPERTS3 = ["alpaca-native", "chatglm-6b", "mpt-7b-instruct"]


def _env_observations(experts: list[str], rate: float, seed: int = 0, every: int = 3) -> tuple[list, GraphLayout]:
    """Graphs along one episode of random valid routing (loaded queues), the terminal one included."""
    env = gym.make("llmsim/QoSEdge-v0", num_requests=300, rate=rate, experts=experts).unwrapped
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    out, i, done = [obs], 0, False
    while not done:
        obs, _, term, trunc, _ = env.step(int(rng.choice(np.flatnonzero(env.action_masks()))))
        done = term or trunc
        i += 1
        if i % every == 0 or done:
            out.append(obs)
    return out, GraphLayout.from_space(env.observation_space)


def _pair(layout: GraphLayout, heads: int, layers: int = 2, seed: int = 0) -> tuple[DenseHAN, torch.nn.Module]:
    torch.manual_seed(seed)
    convs = pyg_reference(layout, 64, heads, layers)
    dense = DenseHAN(layout, 64, heads, layers)
    load_pyg_weights(dense, convs)
    return dense, convs


def _dense(dense: DenseHAN, layout: GraphLayout, obs_list: list) -> torch.Tensor:
    return dense(torch.from_numpy(np.concatenate([layout.flatten(o) for o in obs_list])))


def _check_parity(dense: DenseHAN, convs: torch.nn.Module, layout: GraphLayout, obs_list: list) -> float:
    with torch.no_grad():
        got = _dense(dense, layout, obs_list)
        ref = torch.stack([pyg_forward(convs, o) for o in obs_list])
    err = float((got - ref).abs().max())
    assert err < ATOL, err
    return err


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here on one torch thread (tests/conftest.py)."""


@pytest.fixture(scope="module")
def env3():
    return _env_observations(EXPERTS3, rate=60.0)


@pytest.mark.parametrize("heads", [4, 8])
def test_parity_on_env_graphs(env3, heads):
    obs_list, layout = env3
    assert layout.n_experts == 3 and layout.cap_running == 10
    assert any(o["running_mask"].sum() > 0 and o["waiting_mask"].sum() > 0 for o in obs_list)
    assert any(o["running_mask"].sum() == layout.shapes["running_mask"][0] for o in obs_list)  # full queues
    assert not obs_list[-1]["arrived_mask"][0] and obs_list[0]["running_mask"].sum() == 0
    dense, convs = _pair(layout, heads)
    _check_parity(dense, convs, layout, obs_list)


def test_parity_on_env_graphs_six_experts():
    from llmsim.envs.tasks import QOS_EXPERTS

    obs_list, layout = _env_observations(list(QOS_EXPERTS), rate=120.0, seed=1, every=6)
    assert layout.n_experts == 6
    dense, convs = _pair(layout, 4, seed=1)
    _check_parity(dense, convs, layout, obs_list)


def _edge_cases(layout: GraphLayout, rng: np.random.Generator) -> list[dict]:
    n, cr, cw = layout.n_experts, layout.cap_running, layout.cap_waiting
    zeros, full_r, full_w = [0] * n, [cr] * n, [cw] * n
    one = [1] + [0] * (n - 1)
    cases = [(True, zeros, zeros), (True, full_r, zeros), (True, zeros, full_w), (True, full_r, full_w),
             (True, one, one), (True, [cr] + [0] * (n - 1), [0] * (n - 1) + [cw]), (False, full_r, full_w),
             (False, zeros, zeros), (True, None, None), (True, None, None)]
    return [random_observation(layout, rng, a, r, w) for a, r, w in cases]


@pytest.mark.parametrize("n,heads", [(3, 4), (3, 8), (6, 4), (6, 8)])
def test_parity_edge_cases(n, heads):
    layout = GraphLayout.for_experts(n)
    obs_list = _edge_cases(layout, np.random.default_rng(n * heads))
    dense, convs = _pair(layout, heads, seed=n)
    _check_parity(dense, convs, layout, obs_list)
    with torch.no_grad():
        got = _dense(dense, layout, obs_list)
    assert torch.equal(got[6], torch.zeros(64)) and torch.equal(got[7], torch.zeros(64))  # no arrived node
    assert (got[0] != 0).any()  # no running nor waiting requests: still an embedding


def test_parity_float64_is_exact_up_to_rounding(env3):
    """In float64 the two agree to ~1e-12: the float32 differences are rounding, not a different function."""
    obs_list, layout = env3
    rng = np.random.default_rng(5)
    obs_list = obs_list[::4] + _edge_cases(layout, rng)
    dense, convs = _pair(layout, 8)
    dense.double()
    convs.double()
    with torch.no_grad():
        got = dense(torch.from_numpy(np.concatenate([layout.flatten(o) for o in obs_list])).double())
        ref = torch.stack([pyg_forward(convs, o, torch.float64) for o in obs_list])
    assert float((got - ref).abs().max()) < 1e-12


@pytest.mark.parametrize("layers", [1, 3])
def test_parity_other_depths(layers):
    layout = GraphLayout.for_experts(3, 4, 5)  # unequal caps
    rng = np.random.default_rng(layers)
    obs_list = _edge_cases(layout, rng) + [random_observation(layout, rng) for _ in range(10)]
    dense, convs = _pair(layout, 4, layers)
    _check_parity(dense, convs, layout, obs_list)


def test_batch_rows_equal_single_calls(env3):
    obs_list, layout = env3
    dense, _ = _pair(layout, 4)
    with torch.no_grad():
        batch = _dense(dense, layout, obs_list)
        singles = torch.cat([_dense(dense, layout, [o]) for o in obs_list])
    assert torch.allclose(batch, singles, atol=1e-6, rtol=0)


def test_gradients_match_pyg_and_off_path_parameters_get_none():
    layout = GraphLayout.for_experts(3)
    obs_list = _edge_cases(layout, np.random.default_rng(7))  # empty relations and a missing arrived node included
    dense, convs = _pair(layout, 4)
    target = torch.randn(len(obs_list), 64, generator=torch.Generator().manual_seed(0))
    ((_dense(dense, layout, obs_list) - target) ** 2).sum().backward()
    ref = torch.stack([pyg_forward(convs, o) for o in obs_list])
    ((ref - target) ** 2).sum().backward()
    mapped = set()
    for d, p in _param_pairs(dense, convs):
        assert d.grad is not None and torch.isfinite(d.grad).all()
        assert torch.allclose(d.grad, p.grad, atol=1e-4, rtol=1e-4)
        mapped.add(id(p))
    assert sum(float(d.grad.abs().sum()) > 0 for d in dense.parameters()) == len(list(dense.parameters()))
    for p in convs.parameters():  # off the arrived node's path: no gradient in the authors' model either
        if id(p) not in mapped:
            assert p.grad is None or not p.grad.any()


def test_masked_slot_garbage_is_ignored():
    layout = GraphLayout.for_experts(4)
    dense, _ = _pair(layout, 4)
    obs_list = _edge_cases(layout, np.random.default_rng(3))
    clean = _dense(dense, layout, obs_list)
    for garbage in (1e3, -1e20, np.nan, np.inf):
        dirty = []
        for o in obs_list:
            d = {k: v.copy() for k, v in o.items()}
            for kind in ("running", "waiting"):
                d[kind][d[f"{kind}_mask"] == 0] = garbage
            if not d["arrived_mask"][0]:
                d["arrived"][:] = garbage
            dirty.append(d)
        x = torch.from_numpy(np.concatenate([layout.flatten(o) for o in dirty])).requires_grad_()
        out = dense(x)
        assert torch.equal(out, clean), garbage
        out.sum().backward()
        assert all(torch.isfinite(p.grad).all() for p in dense.parameters())
        dense.zero_grad()


def test_onnx_matches_torch(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    layout = GraphLayout.for_experts(6)
    dense, _ = _pair(layout, 4)
    path = tmp_path / "han.onnx"
    export_onnx(dense, layout, str(path))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["obs"] and [o.name for o in sess.get_outputs()] == ["embedding"]
    rng = np.random.default_rng(0)
    x = np.concatenate([layout.flatten(o) for o in _edge_cases(layout, rng)
                        + [random_observation(layout, rng) for _ in range(6)]])
    for xb in (x, x[3:4]):
        got = sess.run(None, {"obs": xb})[0]
        with torch.no_grad():
            ref = dense(torch.from_numpy(xb)).numpy()
        assert got.shape == (len(xb), 64)
        assert np.abs(got - ref).max() < 1e-5


def test_layout_round_trip(env3):
    obs_list, layout = env3
    assert layout.flat_dim == 9 + 1 + 9 + 180 + 30 + 180 + 30
    back = GraphLayout.from_dict(json.loads(json.dumps(layout.to_dict())))
    assert back == layout and back.offsets == layout.offsets
    batched = {k: np.stack([o[k] for o in obs_list]) for k in layout.keys}
    flat = layout.flatten(batched, batched=True)
    assert flat.dtype == np.float32 and flat.shape == (len(obs_list), layout.flat_dim)
    assert np.array_equal(flat[:1], layout.flatten(obs_list[0]))
    assert GraphLayout.for_experts(3) == layout
    t = torch.from_numpy(flat)
    views = layout.unflatten(t)
    for k in layout.keys:
        assert views[k].shape == (len(obs_list), *layout.shapes[k])
        assert views[k].untyped_storage().data_ptr() == t.untyped_storage().data_ptr()  # a view, no copy
        assert np.array_equal(views[k].numpy(), batched[k].astype(np.float32)), k
    with pytest.raises(ValueError):
        GraphLayout.from_shapes({**layout.shapes, "expert": (3, 4)})


def test_copy_to_pyg_round_trip():
    layout = GraphLayout.for_experts(3)
    dense, convs = _pair(layout, 4)
    other = pyg_reference(layout, 64, 4, 2)
    copy_to_pyg(dense, other)
    obs_list = _edge_cases(layout, np.random.default_rng(1))
    with torch.no_grad():
        a = torch.stack([pyg_forward(convs, o) for o in obs_list])
        b = torch.stack([pyg_forward(other, o) for o in obs_list])
    assert torch.allclose(a, b, atol=1e-6)


def test_parameter_counts():
    rows = {}
    for n in (3, 6, 12):
        layout = GraphLayout.for_experts(n)
        for heads in (4, 8):
            c = parameter_counts(layout, 64, heads, 2)
            assert c["pyg_hanconv"] == sum(p.numel() for p in pyg_reference(layout, 64, heads, 2).parameters())
            assert c["dense_effective"] == sum(p.numel() for p in DenseHAN(layout, 64, heads, 2).parameters())
            rows[n, heads] = c
        assert rows[n, 4] == rows[n, 8]  # heads split the 64 channels: the count does not depend on them
    print({f"N={n}": rows[n, 4] for n in (3, 6, 12)})
    assert rows[3, 4]["pyg_hanconv"] == 28_416 and rows[6, 4]["pyg_hanconv"] == 28_992  # spec 000 Sec. 4.5
    assert rows[3, 4]["dense_effective"] == 14_848
