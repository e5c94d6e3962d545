"""The split guide's balance while most recent requests are heavy (agents/nets.py ``Spill.balance_heavy``), read
from the instance_set observation's recent mix: the least KV demand only above the share, the same in the network
and its ONNX export, refused where the observation has no recent mix."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from llmsim.agents.export import onnx_inputs, write_onnx  # noqa: E402
from llmsim.agents.nets import SPILL_GUIDE, SetQNetwork, SlotAdapter, Spill, guide_slots  # noqa: E402
from llmsim.envs.observations.instance_set import (  # noqa: E402
    GLOBAL_FEATURES,
    INSTANCE_FEATURE_NAMES,
    INSTANCE_FEATURES,
    RECENT_HEAVY,
    layout_size,
)
from llmsim.envs.testbeds import make_from_config  # noqa: E402

KV_DEMAND = INSTANCE_FEATURE_NAMES.index("kv_demand")
CAN_SERVE = INSTANCE_FEATURE_NAMES.index("can_serve")
LOG_LATENCY = INSTANCE_FEATURE_NAMES.index("log_latency_s")
BALANCED = Spill(1.0, load=1.5, min_group=2, balance_heavy=0.5)
PLAIN = Spill(1.0, load=1.5, min_group=2)


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here on one torch thread (tests/conftest.py)."""


def _obs(share: float, demand: list[float], latency: list[float], heavy: bool) -> np.ndarray:
    """A 4-instance observation in an 8-slot recent-mix layout: a pending request, every instance serving it."""
    n_max, g = 8, GLOBAL_FEATURES + 1
    x = np.zeros(layout_size(n_max, recent_mix=True), np.float32)
    x[0] = 1.0
    x[2] = 0.9 if heavy else 0.3
    x[RECENT_HEAVY] = share
    rows = x[g:g + n_max * INSTANCE_FEATURES].reshape(n_max, INSTANCE_FEATURES)
    rows[:4, CAN_SERVE] = 1.0
    rows[:4, KV_DEMAND] = demand
    rows[:4, LOG_LATENCY] = latency
    x[g + n_max * INSTANCE_FEATURES:][:4] = 1.0
    return x[None]


def test_the_guide_balances_by_kv_demand_only_while_most_recent_requests_are_heavy():
    demand, heavy, light = [0.9, 0.2, 0.6, 0.4], [0.30, 0.31, 0.50, 0.12], [0.10, 0.11, 0.50, 0.40]
    # a heavy request: the split's large group is instances 2 and 3, its least latency 3 (no spill: the small
    # group's best is slower), or the least KV demand over the cluster
    assert guide_slots(_obs(0.4, demand, heavy, True), SPILL_GUIDE, BALANCED).tolist() == [3]
    assert guide_slots(_obs(0.6, demand, heavy, True), SPILL_GUIDE, BALANCED).tolist() == [1]
    assert guide_slots(_obs(0.6, demand, heavy, True), SPILL_GUIDE, PLAIN).tolist() == [3]
    # a light one: the small group's least latency 0, or the least KV demand
    assert guide_slots(_obs(0.4, demand, light, False), SPILL_GUIDE, BALANCED).tolist() == [0]
    assert guide_slots(_obs(0.6, demand, light, False), SPILL_GUIDE, BALANCED).tolist() == [1]
    # the network carries the same guide (what its ONNX export runs)
    net = SetQNetwork(layout_size(8, recent_mix=True), 10, (8, 8), SPILL_GUIDE, spill=BALANCED)
    pick = net.guide_onehot(torch.from_numpy(_obs(0.6, demand, heavy, True)))
    assert int(pick.argmax()) == 1


def test_a_balance_needs_the_recent_mix_and_the_spill_guide():
    with pytest.raises(ValueError, match="recent_mix"):
        SetQNetwork(layout_size(8), 10, (8, 8), SPILL_GUIDE, spill=BALANCED)
    with pytest.raises(ValueError, match="recent_mix"):
        SetQNetwork(layout_size(8, recent_mix=True), 10, (8, 8), "min_min", spill=BALANCED)
    for bad in (0.0, 1.0, 1.5, True):
        with pytest.raises(ValueError, match="balance_heavy"):
            Spill(1.0, balance_heavy=bad)
    assert Spill(**BALANCED.as_dict()) == BALANCED  # as checkpoint.json records and reads it
    assert "balance_heavy" not in PLAIN.as_dict()


def test_the_balanced_guide_and_its_onnx_export_agree(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(0)
    x = np.concatenate([_obs(float(rng.uniform()), list(rng.uniform(0.0, 2.0, 4)), list(rng.uniform(0.0, 1.0, 4)),
                             bool(rng.integers(2))) for _ in range(200)])
    guide = guide_slots(x, SPILL_GUIDE, BALANCED)
    assert (guide != guide_slots(x, SPILL_GUIDE, PLAIN)).sum() > 20  # the balance changes some choices
    net = SetQNetwork(x.shape[1], 10, [8, 8], SPILL_GUIDE, fallback_margin=1e3, spill=BALANCED)
    env = make_from_config({"id": "workload_router", "num_requests": 40, "num_instances": 4, "rate": 20.0,
                            "observation": {"kind": "instance_set", "n_max": 8, "recent_mix": True}})
    write_onnx(SlotAdapter(net, 4).eval(), onnx_inputs(env), tmp_path / "p.onnx")
    mask = np.zeros((len(x), 6), np.bool_)
    mask[:, :5] = True
    _, got = ort.InferenceSession(str(tmp_path / "p.onnx")).run(None, {"obs": x, "action_mask": mask})
    assert (got == guide).all()
