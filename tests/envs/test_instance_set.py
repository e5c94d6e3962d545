"""The size-agnostic instance_set observation: layout, padding, normalisation and the heuristics' picks."""

from __future__ import annotations

import numpy as np
import pytest

from llmsim.envs.observations import make_obs
from llmsim.envs.observations.instance_set import (
    GLOBAL_FEATURES,
    GUIDE_COLUMNS,
    INSTANCE_FEATURE_NAMES,
    INSTANCE_FEATURES,
    InstanceSetObs,
    instance_load,
    layout_size,
    log_seconds,
    split_layout,
)
from llmsim.envs.testbeds import WorkloadRouterEnv
from llmsim.errors import ConfigError
from llmsim.routing import make_router
from llmsim.routing.load import DEFAULT_STEP_S

LOG_WORK_S = INSTANCE_FEATURE_NAMES.index("log_work_s")


def make(n: int = 4, n_max: int = 16, **kw) -> WorkloadRouterEnv:
    return WorkloadRouterEnv(num_requests=kw.pop("num_requests", 150), num_instances=n, rate=5.0 * n,
                             observation={"kind": "instance_set", "n_max": n_max}, **kw)


def rows(obs: np.ndarray, n_max: int = 16) -> np.ndarray:
    return obs[GLOBAL_FEATURES:GLOBAL_FEATURES + n_max * INSTANCE_FEATURES].reshape(n_max, INSTANCE_FEATURES)


def test_registered_and_same_shape_for_any_cluster_size():
    assert isinstance(make_obs("instance_set"), InstanceSetObs)
    shapes = {make(n).observation_space.shape for n in (2, 4, 8)}
    assert shapes == {(layout_size(16),)}
    assert split_layout(layout_size(16)) == 16
    with pytest.raises(ConfigError, match="instance_set layout"):
        split_layout(layout_size(16) + 2)  # (+ 1 is the layout with the recent mix, tests/envs/test_recent_mix.py)


def test_padding_mask_and_ranges():
    env = make(3, n_max=8)
    obs, _ = env.reset(seed=0)
    mask = obs[-8:]
    assert mask.tolist() == [1, 1, 1, 0, 0, 0, 0, 0]
    for _ in range(200):
        obs, *_ , term, trunc, _ = env.step(env.heuristic_action(make_router("jsq")))
        assert env.observation_space.contains(obs)
        assert not rows(obs, 8)[3:].any(), "absent instances' rows stay zero"
        if term or trunc:
            break


def test_too_many_instances_for_n_max_is_one_line():
    with pytest.raises(ConfigError, match="n_max"):
        make(6, n_max=4)
    with pytest.raises(ConfigError, match="observation.n_max"):
        InstanceSetObs(n_max=0)


def test_too_many_instances_says_what_a_trained_checkpoint_user_can_do():
    """A checkpoint's n_max is fixed by its weights: the message says its limit and the training option to change."""
    with pytest.raises(ConfigError) as e:
        make(6, n_max=4)
    msg = str(e.value)
    assert "supports at most 4 instances" in msg and "env.observation.n_max=6" in msg
    assert "raise n_max" not in msg


def test_guide_columns_are_the_heuristics_own_picks():
    """The one-hot picks equal what min_min, least_work_left and jsq route (each acting, one episode each)."""
    for name, col in GUIDE_COLUMNS.items():
        env = make(4, num_requests=120)
        router = make_router(name)
        obs, _ = env.reset(seed=3)
        checked = 0
        while True:
            a = env.heuristic_action(router)
            if env.pending is not None:
                assert rows(obs)[:4, col].sum() == 1.0
                assert int(rows(obs)[:4, col].argmax()) == a, name
                checked += 1
            obs, _, term, trunc, _ = env.step(a)
            if term or trunc:
                break
        assert checked == 120


def test_normalised_by_capacity_not_scale():
    """Twice the cluster at twice the rate gives the same per-seat load features on average (a flat, absolute
    layout would double its counts)."""
    def mean_load(n: int) -> float:
        env = make(n, num_requests=400)
        obs, _ = env.reset(seed=1)
        vals = []
        router = make_router("jsq")
        while True:
            vals.append(obs[6])  # running / seats
            obs, _, term, trunc, _ = env.step(env.heuristic_action(router))
            if term or trunc:
                return float(np.mean(vals))

    small, large = mean_load(2), mean_load(4)
    assert small > 0.05
    assert abs(small - large) < 0.35 * small


def test_queued_seconds_count_a_smaller_kv_cache_as_fewer_seats():
    """On unequal GPUs an instance's queued work in seconds is at its seats x its KV tokens / the largest cache's
    (a 16 GB V100 holds ~4,000 tokens of KV against an A100 40 GB's ~50,000); the largest cache keeps its seats."""
    env = make(2, num_requests=200, gpu=["v100-16gb", "a100-40gb"])
    obs, _ = env.reset(seed=3)
    router = make_router("round_robin")
    checked = 0
    for _ in range(400):
        state = env.state()
        kv = [i.kv_blocks_total * i.block_size for i in state.instances]
        assert kv[0] < kv[1] / 5
        r = rows(obs)
        for k, inst in enumerate(state.instances):
            work = instance_load(inst, state.mean_output, {})[0]
            tau = inst.step_time if inst.step_time > 0 else DEFAULT_STEP_S
            seats = max(inst.max_num_seqs * kv[k] / max(kv), 1.0)
            assert r[k, LOG_WORK_S] == pytest.approx(log_seconds(work * tau / seats), rel=1e-5, abs=1e-6)
            checked += work > 0 and k == 0
        obs, _, term, trunc, _ = env.step(env.heuristic_action(router))
        if term or trunc:
            break
    assert checked > 20
