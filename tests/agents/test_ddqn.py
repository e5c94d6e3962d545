"""Double DQN: the target, masks, semi-MDP discounting, n-step returns, the guided schedule, and learning."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from llmsim.agents import guided  # noqa: E402
from llmsim.agents.base import LoopState  # noqa: E402
from llmsim.agents.buffer import Batch, ReplayBuffer  # noqa: E402
from llmsim.agents.checkpoint import QPolicy  # noqa: E402
from llmsim.agents.ddqn import DDQNConfig, DoubleDQN, epsilon  # noqa: E402
from llmsim.agents.env_setup import make_env  # noqa: E402
from llmsim.agents.loop import learn  # noqa: E402
from llmsim.agents.nets import NumpyActor, QNetwork, masked_argmax  # noqa: E402
from llmsim.agents.train import make_vec  # noqa: E402


def _set_linear_q(net: QNetwork, table: np.ndarray) -> None:
    """Make ``net`` output ``table[i]`` for the one-hot observation e_i (a single linear layer)."""
    lin = net.net[0]
    with torch.no_grad():
        lin.weight.copy_(torch.as_tensor(table.T, dtype=torch.float32))
        lin.bias.zero_()


def _agent(q_online: np.ndarray, q_target: np.ndarray) -> DoubleDQN:
    """An agent whose networks are single linear layers (a config must name hidden layers; a QNetwork may not)."""
    n_obs, n_act = q_online.shape
    a = DoubleDQN(n_obs, n_act, DDQNConfig(hidden=[1]), seed=0)
    a.q, a.q_target = QNetwork(n_obs, n_act, []), QNetwork(n_obs, n_act, [])
    _set_linear_q(a.q, q_online)
    _set_linear_q(a.q_target, q_target)
    return a


def _batch(next_obs_idx: list[int], n_obs: int, masks: np.ndarray, returns=None, discounts=None) -> Batch:
    k = len(next_obs_idx)
    eye = np.eye(n_obs, dtype=np.float32)
    return Batch(obs=eye[next_obs_idx], actions=np.zeros(k, np.int64),
                 returns=np.asarray(returns if returns is not None else [1.0] * k, np.float32),
                 discounts=np.asarray(discounts if discounts is not None else [0.5] * k, np.float32),
                 next_obs=eye[next_obs_idx], next_masks=masks)


def test_double_q_target_uses_online_argmax_and_target_value():
    # online prefers action 0, the target network values action 2 most: Double DQN takes Q_target(s', 0)
    q_on = np.array([[5.0, 1.0, 0.0]])
    q_tg = np.array([[2.0, 3.0, 10.0]])
    agent = _agent(q_on, q_tg)
    b = _batch([0], 1, np.ones((1, 3), bool), returns=[1.0], discounts=[0.5])
    y = agent.td_target(b).item()
    assert y == pytest.approx(1.0 + 0.5 * 2.0)  # Double DQN
    vanilla = 1.0 + 0.5 * q_tg.max()
    assert y != pytest.approx(vanilla)  # vanilla DQN would bootstrap from max Q_target = 10


def test_masked_actions_never_chosen_nor_in_target():
    q_on = np.array([[100.0, 1.0, 0.0]])  # action 0 is best but masked
    q_tg = np.array([[1000.0, 3.0, 7.0]])
    agent = _agent(q_on, q_tg)
    mask = np.array([[False, True, True]])
    y = agent.td_target(_batch([0], 1, mask, returns=[0.0], discounts=[1.0])).item()
    assert y == pytest.approx(3.0)  # online argmax among {1, 2} is 1; target value of 1 is 3
    obs = np.eye(1, dtype=np.float32)
    for eps in (0.0, 0.5, 1.0):
        acts = [int(agent.act(obs, mask, eps)[0]) for _ in range(200)]
        assert 0 not in acts
    assert int(masked_argmax(torch.tensor(q_on), torch.tensor(mask)).item()) == 1
    assert int(NumpyActor(agent.q).act(obs, mask)[0]) == 1


def test_terminal_transition_does_not_bootstrap():
    agent = _agent(np.array([[1.0, 2.0]]), np.array([[50.0, 60.0]]))
    y = agent.td_target(_batch([0], 1, np.ones((1, 2), bool), returns=[2.0], discounts=[0.0])).item()
    assert y == pytest.approx(2.0)


def _fill(rb: ReplayBuffer, rows: list[dict]) -> None:
    for r in rows:
        rb.add(np.zeros((1, 1)), np.array([0]), np.array([r["r"]]), np.array([r.get("h", 0.0)]),
               np.array([r["dt"]]), np.full((1, 1), r.get("next", 0.0)), np.ones((1, 2), bool),
               np.array([r.get("term", False)]), np.array([r.get("trunc", False)]))


def test_semi_mdp_discount_gamma_pow_dt_over_tau():
    rb = ReplayBuffer(10, 1, 1, 2, seed=0)
    _fill(rb, [{"r": 1.0, "dt": 0.1}])
    b = rb.sample(4, gamma=0.9, tau=0.02)
    assert np.allclose(b.discounts, 0.9 ** 5)
    assert np.allclose(b.returns, 1.0)
    b = rb.sample(4, gamma=0.9, tau=None)  # per decision
    assert np.allclose(b.discounts, 0.9)


def test_n_step_returns_chain_until_episode_end():
    rb = ReplayBuffer(10, 1, 1, 2, seed=0)
    _fill(rb, [{"r": 1.0, "dt": 0.02, "next": 1}, {"r": 2.0, "dt": 0.04, "next": 2, "term": True},
               {"r": 4.0, "dt": 0.02, "next": 3, "trunc": True}, {"r": 8.0, "dt": 0.02, "next": 4}])
    g = 0.5
    rb.rng = np.random.default_rng(0)
    b = rb.sample(64, gamma=g, tau=0.02, n_step=2)
    got = set(zip(np.round(b.returns, 6).tolist(), np.round(b.discounts, 6).tolist(), b.next_obs[:, 0].tolist()))
    # slot 0: 1 + 0.5 * 2, and slot 1 ends the episode (terminated): no bootstrap, s' of slot 1
    # slot 1: 2, terminated: no bootstrap
    # slot 2: 4, truncated: bootstraps with 0.5 from its own s' (no chaining past an episode end)
    # slot 3: the newest, no complete 2-step window yet: never drawn
    assert got == {(2.0, 0.0, 2.0), (4.0, 0.5, 3.0)}


def test_shaping_weight_applied_at_sample_time():
    rb = ReplayBuffer(10, 1, 1, 2, seed=0)
    _fill(rb, [{"r": 1.0, "h": -2.0, "dt": 0.02}])
    assert np.allclose(rb.sample(2, 0.9, 0.02, shaping=0.0).returns, 1.0)
    assert np.allclose(rb.sample(2, 0.9, 0.02, shaping=0.5).returns, 0.0)


def test_guided_schedule():
    assert guided.stage("none", 5, 0.99) == (0.0, 0.99)
    assert guided.stage("aware", 5, 0.99) == (1.0, 0.99)
    w0, g0 = guided.stage("guided", 0, 0.99)
    assert (w0, g0) == (pytest.approx(0.99), pytest.approx(0.0))
    w2, g2 = guided.stage("guided", 2, 0.99)
    assert w2 == pytest.approx(0.99 * math.exp(-1.0)) and g2 == pytest.approx(0.99 * (1 - math.exp(-1.0)))
    w, g = guided.stage("guided", 40, 0.99)
    assert w < 1e-8 and g == pytest.approx(0.99)
    with pytest.raises(ValueError, match="agent.guidance"):
        guided.stage("hurl", 0, 0.99)


def test_epsilon_schedules():
    cfg = DDQNConfig(eps_start=1.0, eps_end=0.1, eps_fraction=0.5)
    assert epsilon(cfg, 0, 0, 100) == 1.0 and epsilon(cfg, 50, 0, 100) == pytest.approx(0.1)
    cfg = DDQNConfig(eps_start=1.0, eps_end=0.1, eps_episodes=20)
    assert epsilon(cfg, 10**6, 10, 100) == pytest.approx(0.55)
    assert epsilon(cfg, 0, 20, 100) == 0.0  # no random actions after episode 20


TWO_SPEEDS = {"id": "routing", "num_requests": 150, "decision": "arrival", "action": "instance",
              "instances": [{"model": "llama-2-7b", "gpu": "a100-80gb", "engine": {"step_time_scale": 10.0}},
                            {"model": "llama-2-7b", "gpu": "a100-80gb"}],
              "workload": {"kind": "mixture", "preset": "workload_router",
                           "arrival": {"kind": "poisson", "rate": 4.0}},
              "reward": {"kind": "workload_aware", "guidance": 0.0}}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_learns_to_avoid_the_slow_instance():
    """Two instances, one ten times slower: a random policy sends half the requests there; after a few
    seconds of training the greedy policy sends > 90 % to the fast one."""
    torch.set_num_threads(1)
    vec = make_vec(TWO_SPEEDS, 1)
    cfg = DDQNConfig(learning_starts=500, batch_size=128, train_freq=2, target_update=500, lr=1e-3,
                     eps_fraction=0.3, tau=1.0, gamma=0.9)
    agent = DoubleDQN(vec.observation_space.shape[0], int(vec.action_space.n), cfg, 0)
    rb = ReplayBuffer(20_000, 1, vec.observation_space.shape[0], int(vec.action_space.n))
    learn(agent, vec, rb, 3000, LoopState(), seed=0)
    vec.close()
    env, pol = make_env(TWO_SPEEDS), QPolicy(agent.q)
    routed = np.zeros(env.action_space.n)
    obs, info = env.reset(seed=99, options={"workload_seed": 99})
    while True:
        a = pol.act(obs, info["action_mask"])
        if env.pending is not None:
            routed[a] += 1
        obs, _, term, trunc, info = env.step(a)
        if term or trunc:
            break
    assert routed[1] / routed.sum() > 0.9, routed
