"""The fast paths of Double DQN training compute the same numbers as the plain definitions they replace: the
replay's one-step batch, the gradient clipping, the Q-network's forward and a whole gradient step (same weights
bit for bit as torch's per-tensor Adam after ``clip_grad_norm_``)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from llmsim.agents.base import clip_grad_norm  # noqa: E402
from llmsim.agents.buffer import Batch, ReplayBuffer  # noqa: E402
from llmsim.agents.ddqn import DDQNConfig, DoubleDQN  # noqa: E402
from llmsim.agents.loop import stacked  # noqa: E402
from llmsim.agents.nets import QNetwork, masked_argmax  # noqa: E402


def _random_buffer(num_envs: int, slots: int, seed: int = 3) -> ReplayBuffer:
    rb = ReplayBuffer(40 * num_envs, num_envs, 5, 3, seed=7)
    r = np.random.default_rng(seed)
    for _ in range(slots):
        m = r.random((num_envs, 3)) < 0.6
        rb.add(r.random((num_envs, 5), dtype=np.float32), r.integers(0, 3, num_envs),
               r.standard_normal(num_envs).astype(np.float32), -r.random(num_envs, dtype=np.float32),
               r.random(num_envs, dtype=np.float32) * 0.1, r.random((num_envs, 5), dtype=np.float32), m,
               r.random(num_envs) < 0.1, r.random(num_envs) < 0.05, masks=m)
    return rb


@pytest.mark.parametrize("num_envs, slots", [(1, 25), (1, 90), (3, 70)])
@pytest.mark.parametrize("gamma, tau, shaping", [(0.99, 0.02, 0.0), (0.9, None, 0.5), (0.0, 0.02, 1.0)])
def test_one_step_batch_is_the_definition(num_envs: int, slots: int, gamma: float, tau: float | None,
                                          shaping: float) -> None:
    """R = r + w h and D = gamma ** (dt / tau) (gamma per decision without tau), 0 after a terminal transition,
    each field read at the drawn (slot, env), in the order the generator draws them."""
    rb = _random_buffer(num_envs, slots)
    draws = copy.deepcopy(rb.rng)
    b = rb.sample(64, gamma, tau, shaping)
    c = draws.integers(0, rb.size, size=64)
    env = draws.integers(0, num_envs, size=64)
    p = (rb.pos - rb.size + c) % rb.cap
    r = rb.rewards[p, env] + shaping * rb.heuristic[p, env]
    g = np.zeros(64) if gamma <= 0 else np.full(64, gamma) if tau is None else \
        np.exp(np.log(gamma) / tau * rb.dt[p, env].astype(np.float64))
    assert np.array_equal(b.returns, (0.0 + r.astype(np.float64)).astype(np.float32))
    assert np.array_equal(b.discounts, np.where(rb.terminated[p, env], 0.0, g).astype(np.float32))
    for got, field in ((b.obs, rb.obs), (b.next_obs, rb.next_obs), (b.next_masks, rb.next_masks),
                       (b.masks, rb.masks), (b.actions, rb.actions)):
        assert np.array_equal(got, field[p, env])


def test_one_step_equals_the_n_step_chain_of_length_one() -> None:
    """The n-step loop with n = 1 and the one-step path give identical batches from the same draws."""
    rb = _random_buffer(2, 60)
    state = copy.deepcopy(rb.rng.bit_generator.state)
    one = rb.sample(128, 0.97, 0.02, 0.3, n_step=1)
    rb.rng.bit_generator.state = state
    c = rb.rng.integers(0, rb.size, size=128)
    env = rb.rng.integers(0, 2, size=128)
    p0 = (rb.pos - rb.size + c) % rb.cap
    ret, disc, last = rb.n_step_returns(p0, env, 0.97, 0.02, 0.3, 1)
    assert np.array_equal(last, p0)
    assert np.array_equal(one.returns, ret.astype(np.float32))
    assert np.array_equal(one.discounts, np.where(rb.terminated[p0, env], 0.0, disc).astype(np.float32))


@pytest.mark.parametrize("max_norm", [1e-3, 0.5, 1e6])
def test_clip_grad_norm_gives_torchs_numbers(max_norm: float) -> None:
    gen = torch.Generator().manual_seed(0)
    shapes = [(64, 27), (64,), (64, 64), (64,), (6, 64), (6,)]
    ours = [torch.zeros(s, requires_grad=True) for s in shapes]
    theirs = [torch.zeros(s, requires_grad=True) for s in shapes]
    for a, b in zip(ours, theirs):
        a.grad = torch.randn(a.shape, generator=gen)
        b.grad = a.grad.clone()
    clip_grad_norm(ours, max_norm)
    torch.nn.utils.clip_grad_norm_(theirs, max_norm, foreach=False)
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(ours, theirs))
    if max_norm < 1:
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(a.grad) for a in ours]))
        assert norm.item() == pytest.approx(max_norm, rel=1e-4)


@pytest.mark.parametrize("dueling", [False, True])
def test_qnetwork_forward_is_the_sequential_call(dueling: bool) -> None:
    torch.manual_seed(0)
    q = QNetwork(27, 6, [64, 64], dueling)
    x = torch.rand(33, 27)
    out = q.net(x)
    if dueling:
        adv = out[..., 1:]
        out = out[..., :1] + adv - adv.mean(dim=-1, keepdim=True)
    assert torch.equal(q(x), out)


def _plain_update(q: QNetwork, q_target: QNetwork, opt: torch.optim.Optimizer, batch: Batch,
                  max_norm: float) -> None:
    """The gradient step as written before the fast paths: module calls, torch's clipping, per-tensor Adam."""
    next_obs = torch.as_tensor(batch.next_obs)
    with torch.no_grad():
        a_star = masked_argmax(q(next_obs), torch.as_tensor(batch.next_masks))
        q_next = q_target(next_obs).gather(1, a_star.unsqueeze(1)).squeeze(1)
        disc = torch.as_tensor(batch.discounts)
        q_next = torch.where(disc > 0, q_next, torch.zeros_like(q_next))
        y = torch.as_tensor(batch.returns) + disc * q_next
    q_sa = q(torch.as_tensor(batch.obs)).gather(1, torch.as_tensor(batch.actions).unsqueeze(1)).squeeze(1)
    loss = F.smooth_l1_loss(q_sa, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(q.parameters(), max_norm, foreach=False)
    opt.step()


@pytest.mark.parametrize("max_norm", [0.5, 1e6])  # clipped, and within the bound (the clip is skipped)
def test_gradient_steps_give_the_plain_steps_weights_bit_for_bit(max_norm: float) -> None:
    cfg = DDQNConfig(hidden=[64, 64], batch_size=256, lr=1e-3, max_grad_norm=max_norm)
    agent = DoubleDQN(27, 6, cfg, seed=0)
    q, q_target = copy.deepcopy(agent.q), copy.deepcopy(agent.q_target)
    opt = torch.optim.Adam(q.parameters(), lr=cfg.lr, foreach=False)
    rb = ReplayBuffer(4000, 1, 27, 6, seed=1)
    r = np.random.default_rng(2)
    for _ in range(1000):
        m = r.random((1, 6)) < 0.6
        rb.add(r.random((1, 27), dtype=np.float32), r.integers(0, 6, 1), r.standard_normal(1).astype(np.float32),
               np.zeros(1, np.float32), r.random(1, dtype=np.float32) * 0.1, r.random((1, 27), dtype=np.float32),
               m, r.random(1) < 0.05, np.zeros(1, bool), masks=m)
    for _ in range(12):
        batch = rb.sample(cfg.batch_size, cfg.gamma, cfg.tau)
        agent.update(batch)
        _plain_update(q, q_target, opt, batch, cfg.max_grad_norm)
    moved = [not torch.equal(a, b) for a, b in zip(agent.q.parameters(), agent.q_target.parameters())]
    assert all(moved)  # the steps changed every tensor ...
    assert all(torch.equal(a, b) for a, b in zip(agent.q.parameters(), q.parameters()))  # ... identically


def _plain_act(agent: DoubleDQN, obs: np.ndarray, masks: np.ndarray, eps: float) -> np.ndarray:
    """Masked epsilon-greedy as written before the fast path: the torch network's masked argmax, numpy draws."""
    explore = agent.rng.random(len(obs)) < eps
    with torch.no_grad():
        actions = masked_argmax(agent.q(torch.as_tensor(obs)), torch.as_tensor(masks)).numpy().astype(np.int64)
    for i in np.flatnonzero(explore):
        valid = np.flatnonzero(masks[i])
        actions[i] = valid[agent.rng.integers(len(valid))] if len(valid) else agent.rng.integers(agent.n_actions)
    return actions


@pytest.mark.parametrize("n_envs", [1, 3])
@pytest.mark.parametrize("eps", [0.0, 0.4, 1.0])
def test_epsilon_greedy_actions_and_draws_are_the_definitions(n_envs: int, eps: float) -> None:
    ours, ref = DoubleDQN(27, 6, DDQNConfig(), seed=5), DoubleDQN(27, 6, DDQNConfig(), seed=5)
    r = np.random.default_rng(9)
    for _ in range(60):
        obs = r.random((n_envs, 27), dtype=np.float32)
        masks = r.random((n_envs, 6)) < 0.5
        masks[0] = masks[0] if r.random() < 0.8 else False  # now and then a row with no valid action
        got, want = ours.act(obs, masks, eps), _plain_act(ref, obs, masks, eps)
        assert got.dtype == np.int64 and np.array_equal(got, want)
    assert ours.rng.bit_generator.state == ref.rng.bit_generator.state


def test_stacked_is_a_fresh_np_stack() -> None:
    one = np.array([True, False, True])
    got = stacked([one])
    assert np.array_equal(got, np.stack([one])) and got.shape == (1, 3)
    one[0] = False
    assert got[0, 0]  # a copy, not a view of the env's array
    two = [np.arange(3), np.arange(3) + 1]
    assert np.array_equal(stacked(two), np.stack(two))
