"""The QoS-aware edge router's Baseline RL state (envs/observations/expert_flat.py) equals the graph state's expert
features."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gymnasium")

from llmsim.envs.testbeds import make_from_config  # noqa: E402

EXPERTS = ["alpaca-native", "chatglm-6b", "mpt-7b-instruct"]


def _env(obs: dict):
    return make_from_config({"id": "qos_edge", "num_requests": 120, "experts": EXPERTS, "observation": obs})


@pytest.mark.parametrize("request_features", [False, True])
def test_expert_flat_matches_the_graph_state_step_by_step(request_features):
    flat = _env({"kind": "expert_flat", "request_features": request_features})
    graph = _env({"kind": "graph"})
    n = len(EXPERTS)
    assert flat.observation_space.shape == ((6 if request_features else 3) * n,)
    fo, fi = flat.reset(seed=4)
    go, gi = graph.reset(seed=4)
    rng = np.random.default_rng(0)
    loaded = 0
    for _ in range(100):
        off = 3 * n if request_features else 0
        np.testing.assert_allclose(fo[off:].reshape(n, 3), go["expert"], rtol=1e-6)
        if request_features:
            np.testing.assert_allclose(fo[:off], go["arrived"][0], rtol=1e-6)
        loaded += go["expert"][:, 1].sum() > 0
        a = int(rng.choice(np.flatnonzero(fi["action_mask"])))
        fo, _, term, trunc, fi = flat.step(a)
        go, _, _, _, gi = graph.step(a)
        if term or trunc:
            break
    assert loaded > 10  # the comparison covered busy experts, not only an idle cluster
