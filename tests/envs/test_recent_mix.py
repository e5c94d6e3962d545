"""The instance_set observation's recent mix: its layout, and the share of heavy arrivals counted as the dedicated
split heuristic counts it (the guide that reads it: tests/agents/test_recent_mix_guide.py)."""

from __future__ import annotations

import numpy as np
import pytest

from llmsim.envs.observations.instance_set import (
    GLOBAL_FEATURES,
    RECENT_HEAVY,
    InstanceSetObs,
    heavy_request,
    layout_globals,
    layout_size,
    split_layout,
)
from llmsim.envs.policy_router import builder_spec
from llmsim.envs.testbeds import WorkloadRouterEnv
from llmsim.errors import ConfigError
from llmsim.routing import make_router


def test_the_layout_with_the_recent_mix_has_one_more_global_and_is_told_apart_by_length():
    for n_max in (1, 4, 16):
        plain, mixed = layout_size(n_max), layout_size(n_max, recent_mix=True)
        assert mixed == plain + 1
        assert (layout_globals(plain), layout_globals(mixed)) == (GLOBAL_FEATURES, GLOBAL_FEATURES + 1)
        assert split_layout(plain) == split_layout(mixed) == n_max
    with pytest.raises(ConfigError, match="instance_set layout"):
        layout_globals(layout_size(16) + 2)
    with pytest.raises(ConfigError, match="observation.recent_mix"):
        InstanceSetObs(recent_mix="yes")
    assert builder_spec(InstanceSetObs(recent_mix=True))["recent_mix"] is True  # an export rebuilds it


def test_heavy_is_above_the_first_bucket_bound_as_the_guide_reads_it():
    for p in [*range(0, 600), 250.01, 250.5, 4096.0, 10_000.0]:
        assert heavy_request(float(p)) == (p > 250), p


def test_the_recent_heavy_share_is_what_the_split_heuristic_counts():
    """Every observation's share equals the decayed count the ``dedicated_small_large`` router keeps (its own code)
    fed the same arrivals, and the share resets with the episode."""
    env = WorkloadRouterEnv(num_requests=200, num_instances=4, rate=20.0,
                            observation={"kind": "instance_set", "n_max": 8, "recent_mix": True})
    reference = make_router("dedicated_small_large", balance_heavy=0.5)
    builder = env.obs_builder
    told, reset = builder.on_arrival, builder.reset

    def on_arrival(ctx, req):
        told(ctx, req)
        reference.mostly_heavy(heavy_request(builder.predicted(ctx, req)))

    def on_reset(ctx):
        reset(ctx)
        reference.reset()

    builder.on_arrival, builder.reset = on_arrival, on_reset
    router = make_router("least_work_left")
    for seed in (0, 1):
        obs, _ = env.reset(seed=seed)
        shares = []
        while True:
            seen = reference._seen
            want = seen[1] / (seen[0] + seen[1]) if seen[0] + seen[1] else 0.0
            assert obs[RECENT_HEAVY] == np.float32(want)
            shares.append(float(obs[RECENT_HEAVY]))
            obs, _, term, trunc, _ = env.step(env.heuristic_action(router))
            if term or trunc:
                break
        assert 0.0 < max(shares) < 1.0 and len(set(shares)) > 10
