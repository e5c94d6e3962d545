"""The QoSEdge graph state padded to ``max_experts`` slots: the same features in the first N slots, zeros and a 0
mask in the others, the expert count drawn per episode by a slot env, and one line refusing too many experts."""

from __future__ import annotations

import numpy as np
import pytest

from llmsim.envs.randomize import RandomizeConfig, SlotEnv, draw_scenario
from llmsim.envs.testbeds import make_from_config
from llmsim.errors import ConfigError

ENV = {"id": "qos_edge", "num_requests": 120, "experts": 3, "rate": 12.0}


def _run(env, steps: int = 60) -> dict[str, np.ndarray]:
    obs, _ = env.reset(seed=1, options={"workload_seed": 1})
    for _ in range(steps):
        obs, *_ = env.step(int(np.flatnonzero(env.action_masks())[0]))
    return obs


def test_padded_state_holds_the_plain_state_in_its_first_slots():
    plain, padded = _run(make_from_config(ENV)), _run(make_from_config({**ENV, "max_experts": 7}))
    assert "expert_mask" not in plain
    assert padded["expert_mask"].tolist() == [1, 1, 1, 0, 0, 0, 0]
    n, m, cap = 3, 7, 10
    assert plain["running_mask"].sum() > 0 and plain["arrived_mask"][0] == 1
    for g in range(3):  # prompt, quality, length: one group of M per feature
        assert np.array_equal(padded["arrived"][0, g * m:g * m + n], plain["arrived"][0, g * n:(g + 1) * n])
        assert not padded["arrived"][0, g * m + n:(g + 1) * m].any()
    assert np.array_equal(padded["expert"][:n], plain["expert"]) and not padded["expert"][n:].any()
    for k in ("running", "running_mask", "waiting", "waiting_mask"):
        assert np.array_equal(padded[k][:n * cap], plain[k]), k
        assert not padded[k][n * cap:].any(), k


def test_more_experts_than_slots_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"max_experts: 2 expert slots cannot hold 3 experts") as e:
        make_from_config({**ENV, "max_experts": 2})
    assert "\n" not in str(e.value)
    assert "train one with env.max_experts=3" in str(e.value)


def test_qos_edge_sizes_are_drawn_per_episode_at_the_load_per_expert():
    cfg = RandomizeConfig.parse({"size_option": "experts", "sizes": [3, 10], "rate_per_instance": 0.8333,
                                 "rate_scale": [1.0, 1.0], "mixes": [], "gpus": ["rtx4090"],
                                 "curriculum_episodes": 0, "start_size": 6})
    rng = np.random.default_rng(0)
    draws = [draw_scenario(cfg, rng, e) for e in range(40)]
    assert {d["experts"] for d in draws} == set(range(3, 11))
    assert all(set(d) == {"experts", "rate", "gpu"} and d["rate"] == round(0.8333 * d["experts"], 4) for d in draws)


def test_slot_env_masks_absent_experts_and_keeps_wait_and_drop_last():
    env = SlotEnv({**ENV, "max_experts": 6}, scenarios=[{"experts": 2, "rate": 8.0}])
    obs, info = env.reset(seed=0)
    assert env.action_space.n == 8 and obs["expert"].shape == (6, 3)
    mask = info["action_mask"]
    assert not mask[2:6].any() and mask[:2].any() and mask[7]  # absent slots never valid; drop (slot 7) offered
    _, _, _, _, info = env.step(7)  # slot M + 1 is the env's drop
    assert info["agent_dropped"] == 1 and info["decisions"] == 1
    with pytest.raises(ConfigError, match="padded observation"):
        SlotEnv(ENV, scenarios=[{}])
