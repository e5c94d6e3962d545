"""A flat Q-network guided by one fixed action (the Learned Best-Effort router started from a static model size):
the decision-time fallback, its checkpoint and ONNX export, imitation of the guide, and the margin chosen on
validation seeds, where "always the guide" must score exactly what the static heuristic scores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from llmsim.agents.checkpoint import CheckpointPolicy, load_q_net  # noqa: E402
from llmsim.agents.ddqn import DDQNConfig, DoubleDQN  # noqa: E402
from llmsim.agents.export import export  # noqa: E402
from llmsim.agents.nets import GuidedQNetwork, NumpyActor, masked, masked_argmax  # noqa: E402
from llmsim.agents.policy import HeuristicPolicy, run_episode  # noqa: E402
from llmsim.agents.train import train  # noqa: E402
from llmsim.envs.testbeds import make_from_config  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402
from tests.agents.helpers import episode_observations, save_flat_checkpoint  # noqa: E402

ENV = {"id": "best_effort", "num_requests": 80, "num_gpus": 2, "schedule": "stable", "rate": 6.0}
GUIDE = 1  # opt-1.3b: the env's models are opt-125m, opt-1.3b, opt-6.7b
N_ACTIONS = 5  # the three sizes, wait, drop


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here on one torch thread (tests/conftest.py)."""


def observations(n: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """Observations and masks of the small best-effort env, its model sizes taken in turn."""
    return episode_observations(ENV, n)


def test_fallback_takes_the_guide_unless_the_advantage_exceeds_the_margin():
    torch.manual_seed(0)
    x, m = observations()
    net = GuidedQNetwork(x.shape[1], N_ACTIONS, [16, 16], guide_action=GUIDE)
    xt, mt = torch.as_tensor(x), torch.as_tensor(m)
    q = net.q_values(xt).detach()
    own = masked_argmax(q, mt)
    assert (own != GUIDE).any(), "an untrained network disagrees with the guide somewhere"
    assert torch.equal(net(xt).detach(), q)  # margin 0: the network itself
    lead = (masked(q, mt).max(dim=1).values - q[:, GUIDE]).numpy()
    margin = float(np.median(lead[lead > 0]))
    net.fallback_margin.fill_(margin)
    chosen = masked_argmax(net(xt), mt).numpy()
    assert (chosen[lead < margin] == GUIDE).all() and (chosen[lead > margin] == own.numpy()[lead > margin]).all()
    assert (NumpyActor(net).act(x, m) == chosen).all()  # the numpy actor honours the fallback too
    net.fallback_margin.fill_(1e3)
    assert (masked_argmax(net(xt), mt) == GUIDE).all()


def test_checkpoint_and_onnx_export_carry_the_guide_and_its_margin(tmp_path: Path):
    pytest.importorskip("onnxruntime")
    torch.manual_seed(1)
    x, m = observations(40)
    net = GuidedQNetwork(x.shape[1], N_ACTIONS, [16, 16], guide_action=GUIDE, fallback_margin=0.05)
    ckpt = save_flat_checkpoint(tmp_path / "ckpt", net, ENV, "guided")
    loaded = load_q_net(ckpt)
    assert isinstance(loaded, GuidedQNetwork) and loaded.guide_action == GUIDE
    assert float(loaded.fallback_margin) == pytest.approx(0.05)
    assert torch.equal(loaded(torch.as_tensor(x)).detach(), net(torch.as_tensor(x)).detach())
    out = export(ckpt, out=tmp_path / "export", check_steps=64)  # parity checked on 64 observations
    import onnxruntime as ort

    sess = ort.InferenceSession(str(Path(out) / "policy.onnx"))
    outs = sess.run(None, {"obs": x, "action_mask": m})
    want = masked_argmax(net(torch.as_tensor(x)), torch.as_tensor(m)).numpy()
    assert any(np.array_equal(np.asarray(o).reshape(-1), want) for o in outs)  # the export's action is the fallback's
    body = json.loads((ckpt / "checkpoint.json").read_text())
    body["guide_action"] = 7
    (ckpt / "checkpoint.json").write_text(json.dumps(body))
    with pytest.raises(ConfigError, match="guide_action 7 is not an action in"):
        load_q_net(ckpt)


def test_a_guide_action_outside_the_action_space_is_refused():
    with pytest.raises(ConfigError, match="agent.guide_action=3"):
        DoubleDQN(10, 3, DDQNConfig(guide_action=3), seed=0)
    with pytest.raises(ConfigError, match="set network reads agent.guide"):
        DoubleDQN(10, 3, DDQNConfig(guide_action=1, network="set"), seed=0)
    assert make_from_config(ENV).action_space.n == N_ACTIONS


def test_demonstrations_are_the_guide_and_the_margin_loss_teaches_it():
    x, m = observations(128)
    agent = DoubleDQN(x.shape[1], N_ACTIONS, DDQNConfig(guide_action=GUIDE, hidden=[16, 16], demo_epsilon=0.0, lr=3e-3,
                                               margin=0.1), seed=0)
    assert (agent.guide_act(x, m) == GUIDE).all()
    xt, mt = torch.as_tensor(x), torch.as_tensor(m)
    for _ in range(150):
        loss, _ = agent.margin_loss(xt, agent.q.q_values(xt), mt)
        agent.opt.zero_grad()
        loss.backward()
        agent.opt.step()
    _, agree = agent.margin_loss(xt, agent.q.q_values(xt), mt)
    assert agree == 1.0


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short guided run: demonstrations of opt-1.3b, then Double DQN; the margin chosen on validation seeds."""
    d = tmp_path_factory.mktemp("guided_flat")
    cfg = {"env": ENV, "seed": 0, "label": "guided_test",
           "agent": {"name": "ddqn", "hidden": [16, 16], "tau": None, "batch_size": 64, "learning_starts": 100,
                     "train_freq": 4, "guide_action": GUIDE, "demo_steps": 300, "demo_margin_weight": 1.0,
                     "margin": 0.1, "fallback_margins": [0.0, 1000.0], "eps_start": 0.1, "eps_end": 0.05},
           "trainer": {"total_steps": 500, "eval_every": 250, "eval_seeds": [1000, 1001], "progress": False}}
    train(cfg, d)
    return d


def test_margin_choice_scores_always_the_guide_as_the_static_heuristic(run: Path):
    meta = json.loads((run / "training.json").read_text())
    during_demo = [w for e in meta["evaluations"] if e["step"] <= 300 for w in e["warnings"]]
    assert during_demo and all("still imitating its guide (agent.demo_steps=300)" in w for w in during_demo)
    table = {r["margin"]: r for r in meta["fallback_margin_choice"]}
    assert set(table) == {0.0, 1000.0}
    env = make_from_config(ENV)
    static: Any = HeuristicPolicy("static_model", model="opt-1.3b", models=list(env.instance_models))
    ret = np.mean([run_episode(static, env, seed=s, workload_seed=s)["return"] for s in (1000, 1001)])
    assert table[1000.0]["return"] == pytest.approx(ret, abs=1e-9)
    assert table[1000.0]["guide_fallback_share"] >= 0.0
    best = json.loads((run / "best" / "checkpoint.json").read_text())
    chosen = max(table.values(), key=lambda r: (round(r["score"], 6), r["margin"]))
    assert best["guide_action"] == GUIDE and best["fallback_margin"] == chosen["margin"]
    policy = CheckpointPolicy(run / "best")
    assert float(policy.net.fallback_margin) == chosen["margin"]  # the shipped checkpoint acts with it
