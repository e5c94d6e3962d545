"""Policies that transfer: the network shared across instances, imitation + margin towards the guide, the
decision-time fallback, the collapse warnings, and one checkpoint on 4 and 8 instances, in evaluation, in its ONNX
export and in the onnx router on a plain ClusterState (the live router's path)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from llmsim.agents.checkpoint import CheckpointPolicy, load_policy_net  # noqa: E402
from llmsim.agents.ddqn import DDQNConfig, DoubleDQN  # noqa: E402
from llmsim.agents.export import export  # noqa: E402
from llmsim.agents.nets import SetQNetwork, SlotAdapter, Spill, guide_slots, masked_argmax  # noqa: E402
from llmsim.agents.policy import HeuristicPolicy, run_episode  # noqa: E402
from llmsim.agents.train import train  # noqa: E402
from llmsim.agents.transfer import (  # noqa: E402
    collapse_warnings,
    e2e_all_ms,
    evaluate_vs_guide,
    pick_margin,
    reference_rows,
)
from llmsim.envs.observations.instance_set import GLOBAL_FEATURES, INSTANCE_FEATURES, layout_size  # noqa: E402
from llmsim.envs.policy_router import ExportedRouter  # noqa: E402
from llmsim.envs.randomize import SlotEnv  # noqa: E402
from llmsim.envs.testbeds import make_from_config  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402
from llmsim.request import Request  # noqa: E402
from llmsim.routing import WAIT  # noqa: E402
from llmsim.state.state_view import StateView  # noqa: E402

N_MAX = 8
OBS = {"kind": "instance_set", "n_max": N_MAX}
ENV = {"id": "workload_router", "num_requests": 60, "observation": OBS,
       "reward": {"kind": "workload_aware_tail", "guidance": 0.0}}
VALIDATION = [{"num_instances": 4, "rate": 20.0}, {"num_instances": 8, "rate": 40.0}]


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here on one torch thread (tests/conftest.py)."""


def plain_env(n: int) -> Any:
    return make_from_config({**ENV, "num_instances": n, "rate": 5.0 * n})


def set_obs(n: int, seed: int = 0, steps: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Observations and slot masks of a jsq-driven SlotEnv episode on ``n`` instances."""
    env = SlotEnv(ENV, scenarios=[{"num_instances": n, "rate": 5.0 * n}])
    obs, info = env.reset(seed=seed)
    xs, ms = [], []
    router = HeuristicPolicy("jsq")
    while len(xs) < steps:
        xs.append(obs)
        ms.append(info["action_mask"])
        obs, _, term, trunc, info = env.step(router.act(obs, info["action_mask"], env))
        if term or trunc:
            obs, info = env.reset(seed=seed + len(xs))
    return np.array(xs, np.float32), np.array(ms)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short transfer training run (imitation of Min-Min, then Double DQN), its margin chosen on validation."""
    d = tmp_path_factory.mktemp("transfer")
    cfg = {"env": ENV, "seed": 0, "label": "transfer_test", "validation": VALIDATION,
           "randomize": {"sizes": [2, 6], "num_requests": 60, "curriculum_episodes": 2},
           "agent": {"name": "ddqn", "network": "set", "hidden": [16, 16], "batch_size": 64, "learning_starts": 200,
                     "train_freq": 4, "demo_steps": 1200, "demo_margin_weight": 1.0, "margin_weight": 0.1,
                     "margin": 0.05, "fallback_margins": [0.0, 1000.0], "eps_start": 0.1, "eps_end": 0.05},
           "trainer": {"total_steps": 1600, "eval_every": 800, "eval_seeds": [1000, 1001], "progress": False,
                       "eval_metric": "gain_vs_guide"}}
    train(cfg, d)
    return d


def test_one_network_for_any_cluster_size_and_equivariant_in_instances():
    torch.manual_seed(0)
    net = SetQNetwork(layout_size(N_MAX), N_MAX + 2, [16, 16])
    for n in (2, 4, 8):
        x, m = set_obs(n, steps=10)
        q = net(torch.as_tensor(x))
        assert q.shape == (10, N_MAX + 2)
        assert masked_argmax(q, torch.as_tensor(m)).lt(N_MAX + 2).all()
    x, _ = set_obs(4, steps=30)
    x = x[np.flatnonzero(x[:, 0])[:1]]  # a decision with a request pending
    swapped = x.copy()
    a, b = GLOBAL_FEATURES, GLOBAL_FEATURES + INSTANCE_FEATURES
    swapped[0, a:b], swapped[0, b:b + INSTANCE_FEATURES] = x[0, b:b + INSTANCE_FEATURES], x[0, a:b]
    q, qs = net(torch.as_tensor(x))[0], net(torch.as_tensor(swapped))[0]
    assert torch.allclose(q[[1, 0, 2, 3]], qs[[0, 1, 2, 3]], atol=1e-6)  # swapping two rows swaps their values
    assert torch.allclose(q[N_MAX:], qs[N_MAX:], atol=1e-6)


def test_fallback_margin_takes_the_guide_unless_the_advantage_exceeds_it():
    torch.manual_seed(1)
    net = SetQNetwork(layout_size(N_MAX), N_MAX + 2, [16, 16])
    x, m = set_obs(4, steps=60)
    xt, mt = torch.as_tensor(x), torch.as_tensor(m)
    guide = guide_slots(x)
    pending = guide >= 0
    own = masked_argmax(net.q_values(xt), mt).numpy()
    assert (own[pending] != guide[pending]).any(), "an untrained network disagrees with the guide somewhere"
    net.fallback_margin.fill_(1e3)
    assert (masked_argmax(net(xt), mt).numpy()[pending] == guide[pending]).all()
    net.fallback_margin.fill_(0.0)
    assert (masked_argmax(net(xt), mt).numpy() == own).all()


def test_margin_loss_teaches_the_guide():
    """DQfD's large-margin loss alone (no reward signal) makes the network's argmax the guide's."""
    cfg = DDQNConfig(network="set", hidden=[16, 16], lr=3e-3, margin=0.1, margin_weight=1.0)
    agent = DoubleDQN(layout_size(N_MAX), N_MAX + 2, cfg, seed=0)
    x, m = set_obs(4, steps=128)
    xt, mt = torch.as_tensor(x), torch.as_tensor(m)
    before = agent.margin_loss(xt, agent.q.q_values(xt), mt)
    for _ in range(150):
        loss, _ = agent.margin_loss(xt, agent.q.q_values(xt), mt)
        agent.opt.zero_grad()
        loss.backward()
        agent.opt.step()
    after = agent.margin_loss(xt, agent.q.q_values(xt), mt)
    assert before[0].item() > 0 and after[0].item() < 0.2 * before[0].item()
    assert after[1] == 1.0 and before[1] < 1.0


def test_collapse_warnings_name_what_happened():
    ok = {"most_frequent_action_share": 0.3, "wait_share": 0.0, "guide_fallback_share": 0.1, "timeout_share": 0.0}
    assert collapse_warnings(ok) == []
    lines = collapse_warnings({**ok, "most_frequent_action_share": 0.95, "wait_share": 0.95, "timeout_share": 0.4})
    assert len(lines) == 3 and "one action" in lines[0] and "waits" in lines[1] and "fallback" in lines[2]


def test_a_waiting_policy_is_caught_at_evaluation():
    torch.manual_seed(0)
    net = SetQNetwork(layout_size(N_MAX), N_MAX + 2, [16, 16])
    with torch.no_grad():
        net.cluster_head[-1].bias.copy_(torch.tensor([0.0, 100.0, 0.0]))  # A_wait huge: always wait
    env = SlotEnv({**ENV, "num_requests": 30}, scenarios=[{"num_instances": 2, "rate": 10.0}])
    ref = reference_rows(env, [1000], "min_min")
    res, warnings = evaluate_vs_guide(net, env, [1000], ref)
    assert res["wait_share"] > 0.9 and res["timeout_share"] > 0.9
    assert any("waits" in w for w in warnings) and any("wait-timeout" in w for w in warnings)
    assert res["gain_pct"] < 0


def test_a_split_guide_is_measured_with_the_network_own_spill_rule():
    """A network that always falls back on its guide equals it: against the guide's episodes with its own spill rule
    the gain is zero; against another rule it is not (the training's score would then compare with the wrong guide)."""
    rule = Spill(1.0, load=1.5)
    net = SetQNetwork(layout_size(N_MAX), N_MAX + 2, [8, 8], guide="dedicated_split_spill", fallback_margin=1e3,
                      spill=rule)
    env = SlotEnv({**ENV, "num_requests": 80}, scenarios=[{"num_instances": 4, "rate": 20.0}])
    own, _ = evaluate_vs_guide(net, env, [1000], reference_rows(env, [1000], "dedicated_split_spill", rule))
    other, _ = evaluate_vs_guide(net, env, [1000], reference_rows(env, [1000], "dedicated_split_spill"))
    assert own["gain_pct"] == 0.0 and other["gain_pct"] != 0.0


def test_a_worst_gap_keeps_a_margin_that_loses_somewhere_from_being_chosen():
    table = [{"margin": 0.0, "gain_pct": -8.7, "worst_gain_pct": -49.7},
             {"margin": 0.02, "gain_pct": 1.1, "worst_gain_pct": -12.4},
             {"margin": 0.1, "gain_pct": 0.4, "worst_gain_pct": -1.5},
             {"margin": 1000.0, "gain_pct": 0.0, "worst_gain_pct": 0.0}]
    assert pick_margin(table)["margin"] == 0.02  # the best mean
    assert pick_margin(table, 2.0)["margin"] == 0.1  # the best mean among those at most 2 % behind anywhere
    assert pick_margin(table[:2], 2.0)["margin"] == 0.02  # none within: the largest margin


def test_every_request_counts_in_the_score():
    s = {"num_requests": 10, "completed": 8, "mean_e2el_ms": 1000.0, "duration": 50.0}
    assert e2e_all_ms(s) == pytest.approx((8 * 1000.0 + 2 * 50_000.0) / 10)


@pytest.mark.slow
def test_training_imitates_then_chooses_the_margin_on_validation(run: Path):
    meta = json.loads((run / "training.json").read_text())
    assert meta["updates"] > 0
    for e in meta["evaluations"]:
        for k in ("gain_pct", "p99_gain_pct", "most_frequent_action_share", "wait_share", "timeout_share"):
            assert k in e
    choice = json.loads((run / "best" / "checkpoint.json").read_text())
    assert choice["set_net"] == {"n_max": N_MAX, "guide": "min_min"}
    assert [r["margin"] for r in choice["fallback_margin_choice"]] == [0.0, 1000.0]
    always_guide = choice["fallback_margin_choice"][1]
    assert always_guide["gain_pct"] == pytest.approx(0.0, abs=1e-9)  # margin 1000 is the guide itself
    assert float(load_policy_net(run / "best").fallback_margin) == choice["fallback_margin"]
    # a margin whose checkpoint routes exactly as its guide on validation is said in one warning, and only then
    chosen = next(r for r in choice["fallback_margin_choice"] if r["margin"] == choice["fallback_margin"])
    as_guide = all(chosen[k] == 0.0 for k in ("gain_pct", "worst_gain_pct", "p99_gain_pct"))
    said = [w for w in meta["warnings"] if "route exactly as its guide" in w["message"]]
    assert len(said) == int(as_guide)


@pytest.mark.slow
def test_one_checkpoint_runs_on_4_and_8_instances(run: Path):
    for n in (4, 8):
        env = plain_env(n)
        pol = CheckpointPolicy(run / "best")
        out = run_episode(pol, env, seed=1000, workload_seed=1000)
        # 4 of 8 slots: through the adapter's columns; 8 of 8: the slots are the env's actions
        assert (isinstance(pol.net, SlotAdapter) and pol.net.k == n) if n < N_MAX else isinstance(pol.net, SetQNetwork)
        assert out["summary"]["completed"] == 60
    with pytest.raises(ConfigError, match="instance slots"):
        CheckpointPolicy(run / "best").reset(make_from_config({**ENV, "action": "model_wait"}), 0)


@pytest.mark.slow
def test_one_export_of_the_checkpoint_routes_4_and_8_instances_live(run: Path, tmp_path: Path):
    pytest.importorskip("onnxruntime")
    out = export(run / "best", out=tmp_path / "x", check_steps=96)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["policy"]["type"] == "ddqn_set" and manifest["actions"]["n"] == N_MAX + 2
    assert manifest["actions"]["slots"] == N_MAX and manifest["export_check"]["mismatches_outside_ties"] == 0
    for n in (4, 8):
        env = plain_env(n)
        ckpt = CheckpointPolicy(run / "best")
        router = ExportedRouter(path=str(out))
        obs, info = env.reset(seed=1000, options={"workload_seed": 1000})
        ckpt.reset(env, 0)
        for _ in range(40):  # the live router's path: a plain ClusterState behind a StateView
            req = env.pending
            a = ckpt.act(obs, info["action_mask"], env)
            if req is not None:
                d = router.route(Request(req.id, req.arrival, req.prompt_tokens, req.output_tokens),
                                 StateView(env.state()))
                assert d == (a if a < n else WAIT)  # the same instance, or WAIT for the wait action
            obs, _, term, trunc, info = env.step(a)
            if term or trunc:
                break


def test_a_policy_that_does_not_hold_never_waits_with_a_request_pending():
    torch.manual_seed(0)
    net = SetQNetwork(layout_size(N_MAX), N_MAX + 2, [16, 16], hold=False)
    with torch.no_grad():
        net.cluster_head[-1].bias.copy_(torch.tensor([0.0, 100.0, 0.0]))  # the network itself prefers waiting
    x, m = set_obs(4, steps=60)
    acts = masked_argmax(net(torch.as_tensor(x)), torch.as_tensor(m)).numpy()
    pending = x[:, 0] > 0.5
    assert (acts[pending] < N_MAX).all() and (acts[~pending] == N_MAX).all()
    agent = DoubleDQN(layout_size(N_MAX), N_MAX + 2, DDQNConfig(network="set", hidden=[16, 16], hold=False), 0)
    assert not agent.allowed(m, x)[pending, N_MAX].any() and agent.allowed(m, x)[~pending, N_MAX].all()
