"""Domain randomisation (SlotEnv): scenarios on a curriculum, slot actions, fixed validation scenarios."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from llmsim.envs.actions import InvalidAction, env_action, slot_action, slot_columns, slot_mask
from llmsim.envs.predictors.base import OraclePredictor
from llmsim.envs.randomize import RandomizeConfig, SlotEnv, draw_scenario
from llmsim.errors import ConfigError

BASE = {"id": "workload_router", "num_requests": 60, "observation": {"kind": "instance_set", "n_max": 8}}


def test_curriculum_starts_at_the_paper_regime_and_widens():
    cfg = RandomizeConfig(curriculum_episodes=10)
    rng = np.random.default_rng(0)
    first = [draw_scenario(cfg, rng, 0) for _ in range(20)]
    assert all(s["num_instances"] == 4 and s["rate"] == 20.0 and s["task_weights"] == "table1" for s in first)
    late = [draw_scenario(cfg, rng, 50) for _ in range(300)]
    sizes = {s["num_instances"] for s in late}
    assert sizes == set(range(2, 9))
    scales = [s["rate"] / (5.0 * s["num_instances"]) for s in late]
    assert min(scales) >= 0.25 - 1e-6 and max(scales) <= 2.0 + 1e-6
    assert min(scales) < 0.4 and max(scales) > 1.6
    assert any(isinstance(s["task_weights"], dict) for s in late)  # random Dirichlet mixes


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="randomize.mixes"):
        RandomizeConfig(mixes=["nope"])
    with pytest.raises(ConfigError, match="randomize.start_size"):
        RandomizeConfig(sizes=[2, 3], start_size=4)


def test_requests_per_instance_scale_an_episode_with_its_cluster():
    cfg = RandomizeConfig(curriculum_episodes=0, sizes=[2, 16], requests_per_instance=250)
    rng = np.random.default_rng(0)
    drawn = [draw_scenario(cfg, rng, 50) for _ in range(50)]
    assert len({s["num_instances"] for s in drawn}) > 5
    assert all(s["num_requests"] == 250 * s["num_instances"] for s in drawn)
    assert "num_requests" not in draw_scenario(RandomizeConfig(curriculum_episodes=0), rng, 0)
    with pytest.raises(ConfigError, match="not both"):
        RandomizeConfig(num_requests=1000, requests_per_instance=250)


def test_hetero_share_draws_one_gpu_per_instance_in_that_share_of_episodes():
    gpus = ["v100-16gb", "v100-32gb", "a100-40gb"]
    cfg = RandomizeConfig(curriculum_episodes=0, gpus=gpus, hetero_share=0.5)
    drawn = [draw_scenario(cfg, np.random.default_rng(s), 50) for s in range(200)]
    mixed = [s for s in drawn if isinstance(s["gpu"], list)]
    assert 60 < len(mixed) < 140
    assert all(len(s["gpu"]) == s["num_instances"] and set(s["gpu"]) <= set(gpus) for s in mixed)
    assert any(len(set(s["gpu"])) > 1 for s in mixed)
    assert all(s["gpu"] in gpus for s in drawn if not isinstance(s["gpu"], list))
    # the curriculum's first episode, and no share at all, draw as before (the same random stream)
    early = cfg.model_copy(update={"curriculum_episodes": 10})
    assert not any(isinstance(draw_scenario(early, np.random.default_rng(s), 0)["gpu"], list) for s in range(50))
    plain = RandomizeConfig(curriculum_episodes=0, gpus=gpus)
    a, b = np.random.default_rng(7), np.random.default_rng(7)
    assert [draw_scenario(plain, a, 50) for _ in range(20)] == [
        draw_scenario(plain.model_copy(update={"hetero_share": 0.0}), b, 50) for _ in range(20)]
    with pytest.raises(ConfigError, match="hetero_share"):
        RandomizeConfig(hetero_share=1.5)


def test_slot_mapping_round_trips():
    k, n_max = 3, 8
    m = np.array([True, False, True, True, False])
    sm = slot_mask(m, n_max)
    assert sm.tolist() == [True, False, True, False, False, False, False, False, True, False]
    for a in range(k + 2):
        assert env_action(slot_action(a, k, n_max), k, n_max) == a
    assert slot_columns(k, n_max) == [0, 1, 2, 8, 9]
    assert env_action(5, k, n_max) == k  # an absent instance's slot falls back to wait


def test_slot_env_runs_drawn_scenarios_with_one_shape():
    env = SlotEnv(BASE, {"curriculum_episodes": 0, "num_requests": 40, "sizes": [2, 6], "start_size": 2})
    assert env.action_space.n == 10
    sizes = set()
    for ep in range(6):
        obs, info = env.reset(seed=ep)
        sizes.add(env.scenario["num_instances"])
        assert obs.shape == env.observation_space.shape and info["action_mask"].shape == (10,)
        done = False
        while not done:
            m = info["action_mask"]
            assert not m[env.env.n_choices:8].any(), "absent instances are never valid"
            obs, _, term, trunc, info = env.step(int(np.flatnonzero(m)[0]))
            done = term or trunc
        assert env.summary()["completed"] == 40
    assert len(sizes) > 1


def test_a_predictor_object_is_shared_by_every_episode_env():
    """A predictor the env does not build itself (a learned one, fitted once by its caller) is that one object in
    every episode's env: not a copy per episode."""
    pred = OraclePredictor()
    env = SlotEnv({**BASE, "predictor": pred}, {"curriculum_episodes": 0, "num_requests": 10, "sizes": [2, 6]})
    used = [env.env.predictor]
    for seed in range(3):
        env.reset(seed=seed)
        used.append(env.env.predictor)
    assert all(p is pred for p in used)


def test_validation_scenarios_follow_the_workload_seed():
    env = SlotEnv(BASE, scenarios=[{"num_instances": 2}, {"num_instances": 5}])
    for seed, n in ((1000, 2), (1001, 5), (1002, 2)):
        env.reset(seed=seed, options={"workload_seed": seed})
        assert env.env.num_instances == n and env.env.workload_seed == seed


def test_needs_the_padded_observation():
    with pytest.raises(ConfigError, match="instance_set"):
        SlotEnv({"id": "workload_router", "num_requests": 20}, scenarios=[{}])
    with pytest.raises(ConfigError, match="either"):
        SlotEnv(BASE)


@pytest.mark.parametrize("action", [1.5, math.nan, None, True, -1, 10, 99])
def test_slot_env_rejects_what_is_not_a_slot(action):
    """A float used to be floored, NaN / None raised a bare ValueError / TypeError, and a slot past the space
    (10 or 99 of Discrete(10)) was silently carried out as wait."""
    env = SlotEnv(BASE, scenarios=[{"num_instances": 2}])
    env.reset(seed=0)
    with pytest.raises(InvalidAction, match=r"for Discrete\(10\): expected an integer in \[0, 9\]$"):
        env.step(action)


def test_slot_env_checks_its_reset_options():
    """The validation scenario is picked from the workload seed before the inner env sees it: a text seed used to
    raise a bare ValueError there."""
    env = SlotEnv(BASE, scenarios=[{"num_instances": 2}])
    with pytest.raises(ConfigError, match=r"^reset options.workload_seed: expected an integer >= 0, got 'a'$"):
        env.reset(seed=0, options={"workload_seed": "a"})
    with pytest.raises(ConfigError, match=r"^reset options: expected a mapping like .* got 7$"):
        env.reset(seed=0, options=7)  # a bare TypeError from dict() before


def test_gymnasium_check_env_passes_and_each_info_has_its_own_scenario():
    """The info's ``scenario`` was the env's own dict on every step: a caller editing one info edited them all (and
    Gymnasium's checker refused the env)."""
    env = SlotEnv({**BASE, "num_requests": 10}, {"curriculum_episodes": 0, "sizes": [2, 4], "start_size": 2})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its note that a spec-less env's render modes cannot be tried
        check_env(env)
    _, first = env.reset(seed=0)
    _, _, _, _, second = env.step(int(np.flatnonzero(env.action_masks())[0]))
    assert first["scenario"] == second["scenario"] and first["scenario"] is not second["scenario"]
