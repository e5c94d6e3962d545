"""A set network's seen range: outside the states it was fitted on, its guide decides (and the count says so)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from llmsim.agents.checkpoint import load_q_net, save_checkpoint  # noqa: E402
from llmsim.agents.episodes import evaluate  # noqa: E402
from llmsim.agents.evaluate_report import markdown, summarise  # noqa: E402
from llmsim.agents.export import onnx_inputs, write_onnx  # noqa: E402
from llmsim.agents.nets import SPILL_GUIDE, SetQNetwork, SlotAdapter, guide_slots, masked_argmax  # noqa: E402
from llmsim.agents.transfer import ObservationGuide, WatchedPolicy, watch_episodes  # noqa: E402
from llmsim.envs.observations.instance_set import layout_size  # noqa: E402
from llmsim.envs.randomize import SlotEnv  # noqa: E402
from llmsim.envs.testbeds import make_from_config  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402
from llmsim.state.cluster_state import LAYOUT_VERSION  # noqa: E402

N_MAX = 8
ENV = {"id": "workload_router", "num_requests": 120, "observation": {"kind": "instance_set", "n_max": N_MAX},
       "reward": {"kind": "workload_aware_tail", "guidance": 0.0}}


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here on one torch thread (tests/conftest.py)."""


def states(rate: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The observations and slot masks of one guide-driven episode of 4 instances at ``rate``."""
    env = SlotEnv(ENV, scenarios=[{"num_instances": 4, "rate": rate}])
    policy = ObservationGuide(SPILL_GUIDE)
    xs, ms = [], []
    o, info = env.reset(seed=seed)
    while not (env.terminated or env.truncated):
        xs.append(o)
        ms.append(info["action_mask"])
        o, _, _, _, info = env.step(policy.act(o, info["action_mask"], env))
    return np.array(xs, np.float32), np.array(ms)


def twin_nets() -> tuple[SetQNetwork, SetQNetwork]:
    """The same weights with and without a seen range."""
    torch.manual_seed(0)
    net = SetQNetwork(layout_size(N_MAX), N_MAX + 2, [16, 16], guide=SPILL_GUIDE, hold=False, seen_range=True)
    plain = SetQNetwork(layout_size(N_MAX), N_MAX + 2, [16, 16], guide=SPILL_GUIDE, hold=False)
    plain.load_state_dict({k: v for k, v in net.state_dict().items() if not k.startswith("seen.")})
    return net.eval(), plain.eval()


@pytest.mark.timeout(120)
def test_outside_the_states_it_was_fitted_on_the_network_takes_its_guides_action(tmp_path: Path) -> None:
    net, plain = twin_nets()
    light, _ = states(5.0, 3)
    heavy, masks = states(40.0, 4)
    x_light, x_heavy = torch.as_tensor(light), torch.as_tensor(heavy)
    with torch.no_grad():
        assert torch.equal(net(x_light), plain(x_light))  # unfitted: unbounded, the network as it was
        net.fit_seen_range(x_light, slack=0.0)
        # on the states it was fitted on the gate never fires: the same scores as without it
        assert net.unseen(x_light).sum() == 0 and torch.equal(net(x_light), plain(x_light))
        guide = guide_slots(heavy, SPILL_GUIDE)
        rows = np.arange(len(heavy))
        gated = (net.unseen(x_heavy).numpy() > 0) & (guide >= 0) & masks[rows, np.maximum(guide, 0)]
        assert gated.sum() > 20 and (~gated & (guide >= 0)).any()  # queues the light episode never had
        acts = masked_argmax(net(x_heavy), torch.as_tensor(masks)).numpy()
        own = masked_argmax(plain(x_heavy), torch.as_tensor(masks)).numpy()
    assert (acts[gated] == guide[gated]).all() and (own[gated] != guide[gated]).any()
    assert (acts[~gated] == own[~gated]).all()  # inside the range the network decides as before
    ort = pytest.importorskip("onnxruntime")  # the export carries the gate to the live router
    env4 = make_from_config({**ENV, "num_instances": 4, "rate": 40.0})
    write_onnx(SlotAdapter(net, 4).eval(), onnx_inputs(env4), tmp_path / "p.onnx")
    env_mask = np.concatenate([masks[:, :4], masks[:, N_MAX:]], axis=1)
    _, got = ort.InferenceSession(str(tmp_path / "p.onnx")).run(None, {"obs": heavy, "action_mask": env_mask})
    own_env = np.where(own >= N_MAX, own - N_MAX + 4, own)  # the slots' wait and drop are the env's 4 and 5
    assert (got[gated] == guide[gated]).all() and (got[~gated] == own_env[~gated]).all()
    with pytest.raises(ValueError, match="slack"):
        net.fit_seen_range(x_light, slack=-1.0)
    with pytest.raises(ValueError, match="without a seen range"):
        plain.fit_seen_range(x_light)


@pytest.mark.timeout(120)
def test_a_watched_policy_counts_the_decisions_its_range_handed_to_the_guide() -> None:
    net, plain = twin_nets()
    net.fit_seen_range(torch.as_tensor(states(5.0, 3)[0]), slack=0.0)
    env = SlotEnv(ENV, scenarios=[{"num_instances": 4, "rate": 40.0}])
    gated, ungated = WatchedPolicy(net), WatchedPolicy(plain)
    watch_episodes(gated, env, [1000])
    watch_episodes(ungated, env, [1000])
    shares = gated.counts.shares()
    c = gated.counts
    assert c.unseen > 20 and shares["unseen_share"] == c.unseen / c.decisions and shares["guide_fallback_share"] > 0
    assert ungated.counts.unseen == 0 and ungated.counts.shares()["unseen_share"] == 0.0


@pytest.mark.timeout(120)
def test_a_no_hold_network_that_prefers_to_wait_is_not_counted_as_falling_back() -> None:
    """A network that does not hold places a pending request on its best instance even where its Q-values favour
    waiting: that is its own choice, not its guide's, also where the two agree (the count once compared the guide
    with the plain argmax, which waits)."""
    net, _ = twin_nets()
    with torch.no_grad():
        net.cluster_head[-1].bias[1] += 1000.0  # A_wait: waiting is every state's plain argmax
    net.fit_seen_range(torch.as_tensor(states(40.0, 4)[0]), slack=1000.0)  # a range that never fires
    env = SlotEnv(ENV, scenarios=[{"num_instances": 4, "rate": 40.0}])
    watched = WatchedPolicy(net)
    watch_episodes(watched, env, [1000])
    c = watched.counts
    assert c.decisions > 50 and c.waits == 0 and c.unseen == 0
    assert c.guide_fallbacks == 0


def checkpoint(net: SetQNetwork, path: Path) -> Path:
    obs = {"kind": "instance_set", "shape": [net.obs_dim], "state_layout_version": LAYOUT_VERSION}
    actions = {"n": N_MAX + 2, "kind": "instance_wait", "choices": N_MAX, "wait": N_MAX, "drop": N_MAX + 1}
    return save_checkpoint(path, net, {"agent": "ddqn", "label": path.name, "observation": obs, "actions": actions,
                                       "env": {**ENV, "num_instances": 4}})


@pytest.mark.timeout(120)
def test_the_range_is_saved_with_the_checkpoint_and_each_episode_counts_where_it_decided(tmp_path: Path) -> None:
    net, plain = twin_nets()
    light, _ = states(5.0, 3)
    net.fit_seen_range(torch.as_tensor(light), slack=0.0)
    path = checkpoint(net, tmp_path / "gated")
    assert json.loads((path / "checkpoint.json").read_text())["set_net"]["seen_range"] is True
    loaded = load_q_net(path)
    assert torch.equal(loaded.seen.lo, net.seen.lo) and torch.equal(loaded.seen.hi, net.seen.hi)
    assert load_q_net(checkpoint(plain, tmp_path / "plain")).seen is None  # as before: no range, no gate
    env = {"id": "workload_router", "num_requests": 120, "num_instances": 4, "rate": 40.0}
    rows = evaluate(env, [{"checkpoint": str(path)}, {"checkpoint": str(tmp_path / "plain")}, "round_robin"],
                    seeds=[1000])
    assert 20 < rows[0]["unseen_decisions"] <= 120
    assert "unseen_decisions" not in rows[1] and "unseen_decisions" not in rows[2]
    table = markdown(summarise(rows), {"seeds": [1000]})  # llmsim-evaluate's table shows the count, and says what
    assert "guide decided (unseen)" in table and "outside the states" in table
    assert "unseen" not in markdown(summarise(rows[1:]), {"seeds": [1000]})
    net.fit_seen_range(torch.as_tensor(states(40.0, 1000)[0]), slack=1.0)  # a range that holds that episode
    rows = evaluate(env, [{"checkpoint": str(checkpoint(net, tmp_path / "wide"))}], seeds=[1000])
    assert rows[0]["unseen_decisions"] == 0
    meta = json.loads((path / "checkpoint.json").read_text())
    meta["set_net"]["seen_range"] = "yes"
    (path / "checkpoint.json").write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="seen_range is true or false"):
        load_q_net(path)


@pytest.mark.timeout(300)
def test_a_trained_set_networks_best_gets_the_range_of_its_replay_and_learns_as_without_it(tmp_path: Path) -> None:
    from llmsim.agents.ddqn import DDQNConfig, DoubleDQN
    from llmsim.agents.train import train

    def run(name: str, **agent: object) -> Path:
        cfg = {"env": {**ENV, "num_requests": 60, "num_instances": 4}, "seed": 0, "label": name,
               "randomize": {"sizes": [2, 6], "num_requests": 60, "curriculum_episodes": 2},
               "agent": {"name": "ddqn", "network": "set", "hidden": [16, 16], "batch_size": 32,
                         "learning_starts": 100, "train_freq": 4, **agent},
               "trainer": {"total_steps": 300, "eval_every": 150, "eval_seeds": [1000], "progress": False}}
        train(cfg, tmp_path / name)
        return tmp_path / name / "best"

    gated, plain = run("gated", seen_slack=0.1), run("plain")
    meta = json.loads((gated / "checkpoint.json").read_text())
    assert meta["set_net"]["seen_range"] is True and meta["seen_slack"] == 0.1
    net, same = load_q_net(gated), load_q_net(plain)
    assert torch.isfinite(net.seen.lo).all() and (net.seen.lo <= net.seen.hi).all() and same.seen is None
    weights = {k: v for k, v in net.state_dict().items() if not k.startswith("seen.")}
    assert all(torch.equal(v, same.state_dict()[k]) for k, v in weights.items())  # training never used the range
    with pytest.raises(ConfigError, match="seen range needs agent.network=set"):
        DoubleDQN(10, 3, DDQNConfig(seen_slack=0.1), seed=0)
