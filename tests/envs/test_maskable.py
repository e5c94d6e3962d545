"""MaskablePPO (sb3-contrib, the convention the envs' masks follow) learns a clear rule and respects masks.

The learning env has one fast instance between two 40x slower ones, and a reward of +1 per request that
meets a 500 ms end-to-end target: only requests sent to the fast instance can. The fast instance's
max_model_len (300) masks it for longer prompts, so masks bind on about a third of the steps. A random
mask-respecting policy meets about a third of what it can; the rule "fast instance whenever allowed"
meets all of it. The trained policy is evaluated stochastically, so a lucky argmax at initialisation
cannot pass.
"""

import gymnasium as gym
import numpy as np
import pytest

import llmsim.envs  # noqa: F401

pytest.importorskip("sb3_contrib")  # the rl extra (third-party); the project's own modules are plain imports
torch = pytest.importorskip("torch")

SLOW = {"model": "opt-125m", "gpu": "a100-80gb", "engine": {"step_time_scale": 40.0}}
FAST = {"model": "opt-125m", "gpu": "a100-80gb", "engine": {"max_model_len": 300}}
EVAL_SEEDS = range(100, 105)


def _learning_env():
    return gym.make(
        "llmsim/Routing-v0", num_requests=64, instances=[SLOW, FAST, SLOW], action="instance", observation="flat",
        workload={"kind": "synthetic", "arrival": {"process": "poisson", "rate": 2.0}, "num_requests": 64,
                  "prompt": {"dist": "uniform", "min": 50, "max": 400},
                  "output": {"dist": "uniform", "min": 20, "max": 60}},
        reward={"kind": "latency", "e2el_ms": 500.0},
    )


def _episode_returns(env, policy) -> tuple[float, int]:
    """Mean return over the evaluation seeds, and how many steps had a masked action; asserts every action
    the policy picks is allowed by the env's mask."""
    from sb3_contrib.common.maskable.utils import get_action_masks

    returns, masked_steps = [], 0
    for seed in EVAL_SEEDS:
        obs, _ = env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        total = 0.0
        while True:
            masks = get_action_masks(env)
            masked_steps += int(not masks.all())
            a = policy(obs, masks, rng)
            assert masks[a], (a, masks)
            obs, r, term, trunc, _ = env.step(a)
            total += r
            if term or trunc:
                break
        returns.append(total)
    return float(np.mean(returns)), masked_steps


def _quiet_logger(model) -> None:
    """A logger that writes nowhere: without one, ``learn`` makes an empty /tmp/SB3-<date> directory per run."""
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(folder=None, output_formats=[]))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_maskable_ppo_learns_the_fast_instance_rule_beyond_a_random_policy():
    from sb3_contrib import MaskablePPO

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two xdist workers on two cores
    try:
        env = _learning_env()
        random_ret, masked = _episode_returns(env, lambda o, m, rng: int(rng.choice(np.flatnonzero(m))))
        best_ret, _ = _episode_returns(env, lambda o, m, rng: 1 if m[1] else int(np.flatnonzero(m)[0]))
        assert masked > 0  # the masks bind: the mask check below is not vacuous
        assert best_ret > 2.5 * random_ret  # the env has a clear optimum

        model = MaskablePPO("MlpPolicy", env, n_steps=256, batch_size=64, n_epochs=4, learning_rate=3e-3,
                            gamma=0.5, seed=0, verbose=0)
        _quiet_logger(model)
        model.learn(total_timesteps=2048)
        ppo_ret, _ = _episode_returns(
            env, lambda o, m, rng: int(model.predict(o, action_masks=m, deterministic=False)[0]))
    finally:
        torch.set_num_threads(threads)
    assert ppo_ret >= 0.9 * best_ret, (ppo_ret, best_ret, random_ret)
    assert ppo_ret - random_ret >= 0.7 * (best_ret - random_ret)


@pytest.mark.timeout(120)
def test_maskable_ppo_smoke_on_tick_env_never_picks_masked_actions():
    """Smoke test only (no learning claim): MaskablePPO trains a few steps on the tick-mode env, whose masks
    allow only 'wait' with an empty queue, and its actions always respect the masks."""
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.utils import get_action_masks

    env = gym.make("llmsim/WorkloadRouter-v0", num_requests=60, tick_when_empty=True)
    model = MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, verbose=0)
    _quiet_logger(model)
    model.learn(total_timesteps=128)
    assert np.isfinite(model.logger.name_to_value["train/loss"])
    obs, _ = env.reset(seed=1)
    masked = 0
    for _ in range(300):
        masks = get_action_masks(env)
        masked += int(not masks.all())
        action, _ = model.predict(obs, action_masks=masks, deterministic=False)
        assert masks[int(action)]
        obs, _, term, trunc, _ = env.step(int(action))
        if term or trunc:
            obs, _ = env.reset()
    assert masked > 0
