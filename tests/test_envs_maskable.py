"""The masks work with sb3-contrib's MaskablePPO (the convention the envs follow)."""

import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401

sb3_contrib = pytest.importorskip("sb3_contrib")


@pytest.mark.parametrize("env_id,kw", [
    ("llmsim/WorkloadRouter-v0", {"num_requests": 60}),
    ("llmsim/Routing-v0", {"num_requests": 60}),
])
def test_maskable_ppo_learns_a_few_steps_and_never_picks_masked_actions(env_id, kw):
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.utils import get_action_masks

    env = gym.make(env_id, **kw)
    model = MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, verbose=0)
    model.learn(total_timesteps=128)
    obs, _ = env.reset(seed=1)
    for _ in range(100):
        masks = get_action_masks(env)
        action, _ = model.predict(obs, action_masks=masks, deterministic=False)
        assert masks[int(action)]
        obs, _, term, trunc, _ = env.step(int(action))
        if term or trunc:
            obs, _ = env.reset()
    assert np.isfinite(model.logger.name_to_value.get("train/loss", 0.0))
