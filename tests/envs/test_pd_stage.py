"""RL envs drive either routing stage of a disaggregated cluster (envs/pd_stage.py)."""

import numpy as np
import pytest

from llmsim.envs.routing_env import RoutingEnv
from llmsim.envs.workloads import EnvWorkload
from llmsim.errors import ConfigError
from llmsim.request import Request
from llmsim.routing import make_router

SPLIT = [{"model": "llama-2-7b", "gpu": "a100-80gb", "count": 1, "role": "prefill"},
         {"model": "llama-2-7b", "gpu": "a100-80gb", "count": 2, "role": "decode"}]


class Small(EnvWorkload):
    def requests(self, seed: int, k: int) -> list[Request]:
        rng = np.random.default_rng(seed)
        return [Request(j, j * 0.05, int(rng.integers(50, 400)), int(rng.integers(2, 60))) for j in range(k)]


def play(env, pick):
    """Run an episode choosing ``pick(mask)`` among the valid actions; returns (stage, valid actions) per step."""
    env.reset(seed=0)
    seen = []
    while True:
        mask = env.action_masks()
        seen.append((env.pending_stage if env.pending is not None else None, tuple(np.flatnonzero(mask))))
        _, _, term, trunc, _ = env.step(pick(np.flatnonzero(mask)))
        if term or trunc:
            return seen


@pytest.mark.parametrize("stage", ["prefill", "decode", "both"])
def test_the_agent_decides_the_stages_it_drives_and_only_among_their_candidates(stage):
    env = RoutingEnv(instances=SPLIT, workload=Small(), num_requests=30, stage=stage)
    seen = play(env, lambda valid: int(valid[-1]))
    decided = {s for s, _ in seen if s is not None}
    assert decided == ({"prefill", "decode"} if stage == "both" else {stage})
    for s, valid in seen:
        if s == "decode":
            assert valid == (1, 2)  # the decode instances, never wait or drop
        elif s == "prefill":
            assert valid == (0,)  # new requests never go to a decode-only instance
    s = env.cluster
    assert len(s.recorder.cols["id"]) == 30 and env.stage_fallbacks == 0
    if stage != "prefill":  # one decode decision per copy
        assert sum(1 for st, _ in seen if st == "decode") == s.transfers.summary()["kv_transfers"] == 30
    # the agent's choice is carried out: always the last decode instance
    if stage != "prefill":
        assert set(s.transfers.log["dst"]) == {2}


def test_heuristics_answer_the_decode_stage_inside_the_env():
    env = RoutingEnv(instances=SPLIT, workload=Small(), num_requests=10, stage="decode")
    env.reset(seed=0)
    jsq = make_router("jsq")
    while env.pending is None:
        env.step(0)
    assert env.pending_stage == "decode" and env.heuristic_action(jsq) in (1, 2)


def test_stage_needs_a_disaggregated_arrival_env():
    mixed = [{"model": "llama-2-7b", "gpu": "a100-80gb", "count": 2}]
    with pytest.raises(ConfigError, match=r"env.stage: 'decode' needs a disaggregated cluster"):
        RoutingEnv(instances=mixed, workload=Small(), num_requests=5, stage="decode")
    with pytest.raises(ConfigError, match=r"env.stage: 'both' needs decision='arrival' and action='instance'"):
        RoutingEnv(instances=SPLIT, workload=Small(), num_requests=5, stage="both", decision="tick",
                   action="instance_wait")
    with pytest.raises(ConfigError, match="stage"):
        RoutingEnv(instances=SPLIT, workload=Small(), num_requests=5, stage="middle")


@pytest.mark.parametrize("stage", ["prefill", "decode"])
def test_first_stage_is_a_router_name_under_its_own_key(stage):
    """A misspelt first_stage was taken without a word unless stage='decode', and then told as policy.name."""
    with pytest.raises(ConfigError, match=r"^env.first_stage: unknown routing policy 'least_kb' \(did you mean|"
                                          r"^env.first_stage: unknown routing policy 'least_kb'; expected one of"):
        RoutingEnv(instances=SPLIT, workload=Small(), num_requests=5, stage=stage, first_stage="least_kb")
    with pytest.raises(ConfigError, match=r"^env.first_stage: 'onnx' cannot run without options \(policy.kwargs.path"):
        RoutingEnv(instances=SPLIT, workload=Small(), num_requests=5, stage="decode", first_stage="onnx")
