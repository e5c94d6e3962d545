"""A flat Q-network whose guide switches with one observation feature (the Learned Best-Effort router: the larger
model below a rate, the smallest above): the fallback follows each row's guide, the numpy actor, the checkpoint and
the ONNX export agree, demonstrations follow the switch, and a bad switch is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from llmsim.agents.checkpoint import load_q_net  # noqa: E402
from llmsim.agents.ddqn import DDQNConfig, DoubleDQN  # noqa: E402
from llmsim.agents.export import export  # noqa: E402
from llmsim.agents.nets import GuidedQNetwork, GuideSwitch, NumpyActor, masked_argmax  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402
from tests.agents.helpers import episode_observations, save_flat_checkpoint  # noqa: E402

ENV = {"id": "best_effort", "num_requests": 80, "num_gpus": 2, "schedule": "bursty"}
N_ACTIONS = 5  # opt-125m, opt-1.3b, opt-6.7b, wait, drop
RATE = -1  # the observation's last feature: the arrival rate / 48
SWITCH = GuideSwitch(feature=RATE, at=0.5, action=0)  # opt-125m from 24 req/s on, else opt-1.3b


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here on one torch thread (tests/conftest.py)."""


def observations(n: int = 80) -> tuple[np.ndarray, np.ndarray]:
    """Observations and masks of the small bursty best-effort env, with rates on both sides of the switch."""
    x, m = episode_observations(ENV, n)
    x[::2, RATE] = np.float32(0.75)  # every other row above the switch, whatever the bursts were
    x[1::2, RATE] = np.float32(0.25)
    return x, m


def guided(x: np.ndarray, margin: float) -> GuidedQNetwork:
    torch.manual_seed(0)
    return GuidedQNetwork(x.shape[1], N_ACTIONS, [16, 16], guide_action=1, fallback_margin=margin, switch=SWITCH)


def test_the_fallback_follows_each_rows_guide():
    x, m = observations()
    net = guided(x, 1e3)
    want = np.where(x[:, RATE] >= 0.5, 0, 1)
    assert np.array_equal(net.guides(x), want) and set(want) == {0, 1}
    assert np.array_equal(masked_argmax(net(torch.as_tensor(x)), torch.as_tensor(m)).numpy(), want)
    net.fallback_margin.fill_(0.0)
    own = masked_argmax(net.q_values(torch.as_tensor(x)), torch.as_tensor(m)).numpy()
    assert np.array_equal(masked_argmax(net(torch.as_tensor(x)), torch.as_tensor(m)).numpy(), own)
    for margin in (0.0, 0.02, 1e3):  # the numpy actor (training's acting path) adds the same per-row bias
        net.fallback_margin.fill_(margin)
        torch_choice = masked_argmax(net(torch.as_tensor(x)), torch.as_tensor(m)).numpy()
        assert np.array_equal(NumpyActor(net).act(x, m), torch_choice)


def test_checkpoint_and_onnx_export_carry_the_switch(tmp_path: Path):
    pytest.importorskip("onnxruntime")
    x, m = observations(40)
    net = guided(x, 1e3)
    ckpt = save_flat_checkpoint(tmp_path / "ckpt", net, ENV, "switch")
    loaded = load_q_net(ckpt)
    assert isinstance(loaded, GuidedQNetwork) and loaded.switch == SWITCH
    assert torch.equal(loaded(torch.as_tensor(x)).detach(), net(torch.as_tensor(x)).detach())
    out = export(ckpt, out=tmp_path / "export", check_steps=32)
    import onnxruntime as ort

    outs = ort.InferenceSession(str(Path(out) / "policy.onnx")).run(None, {"obs": x, "action_mask": m})
    want = np.where(x[:, RATE] >= 0.5, 0, 1)
    assert any(np.array_equal(np.asarray(o).reshape(-1), want) for o in outs)
    body = json.loads((ckpt / "checkpoint.json").read_text())
    body["guide_switch"] = {"feature": "rate", "at": 0.5, "action": 0}
    (ckpt / "checkpoint.json").write_text(json.dumps(body))
    with pytest.raises(ConfigError, match="guide_switch .* expected {feature: int, at: number, action: int}"):
        load_q_net(ckpt)


def test_demonstrations_follow_the_switch_and_a_bad_switch_is_refused():
    x, m = observations()
    cfg = DDQNConfig(guide_action=1, guide_switch={"feature": RATE, "at": 0.5, "action": 0}, hidden=[16, 16],
                     demo_epsilon=0.0)
    agent = DoubleDQN(x.shape[1], N_ACTIONS, cfg, seed=0)
    assert np.array_equal(agent.guide_act(x, m), np.where(x[:, RATE] >= 0.5, 0, 1))
    with pytest.raises(ConfigError, match="agent.guide_switch=.*needs agent.guide_action"):
        DoubleDQN(x.shape[1], N_ACTIONS, DDQNConfig(guide_switch={"feature": RATE, "at": 0.5, "action": 0}), seed=0)
    with pytest.raises(ConfigError, match="a feature in"):
        DoubleDQN(x.shape[1], N_ACTIONS, DDQNConfig(guide_action=1, guide_switch={"feature": 99, "at": 0.5,
                                                                                  "action": 0}), seed=0)
