"""The tail-pricing option of the workload-aware reward (workload_aware_tail)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from llmsim.envs.rewards import TailAwareReward, WorkloadAwareReward, make_reward
from llmsim.envs.testbeds import WorkloadRouterEnv
from llmsim.errors import ConfigError
from llmsim.request import Request
from llmsim.routing import make_router


def finished(arrival: float, finish: float) -> Request:
    r = Request(0, arrival, 10, 10)
    r.finish = finish
    return r


def test_tail_component_prices_lateness_beyond_the_target():
    rw = make_reward({"kind": "workload_aware_tail", "e2e_target_s": 10.0, "tail_cap": 2.0})
    assert isinstance(rw, TailAwareReward)
    rw.on_finish(finished(0.0, 5.0), 0)  # within the target: no tail cost
    rw.on_finish(finished(0.0, 15.0), 0)  # 50 % late
    rw.on_finish(finished(0.0, 100.0), 0)  # capped at 2
    _, comps = rw.end_step(SimpleNamespace(decision="tick", tick=0.02), 0.0)
    assert comps["tail"] == pytest.approx(-2.5)
    assert comps["completion"] == pytest.approx(180.0)
    # weighted like a completion: a request twice as slow as the target costs what serving it earns
    assert rw.weights["tail"] == rw.weights["completion"] * rw.r_c


def test_zero_weights_are_the_workload_aware_reward():
    def episode(reward) -> float:
        env = WorkloadRouterEnv(num_requests=80, rate=20.0, reward=reward)
        router = make_router("jsq")
        env.reset(seed=4)
        total = 0.0
        while True:
            _, r, term, trunc, _ = env.step(env.heuristic_action(router))
            total += r
            if term or trunc:
                return total

    plain = episode({"kind": "workload_aware"})
    zeroed = episode({"kind": "workload_aware_tail", "tail_weight": 0.0, "held_weight": 0.0})
    priced = episode({"kind": "workload_aware_tail", "e2e_target_s": 1.0})
    assert zeroed == pytest.approx(plain)
    assert priced < plain


def test_the_paper_env_keeps_its_reward_and_bad_options_fail():
    assert type(WorkloadRouterEnv(num_requests=10).reward_fn) is WorkloadAwareReward
    with pytest.raises(ConfigError, match="reward.e2e_target_s"):
        TailAwareReward(e2e_target_s=0.0)


def test_a_request_count_backlog_charges_every_request_in_the_system_as_one():
    """backlog: requests charges the central queue plus each instance's requests (the integral is the summed time in
    the system); the default charges each request its unfinished share, so it is never more."""
    env = SimpleNamespace(true_progress=lambda: (2, ((3, 1.25), (1, 0.5))))
    assert WorkloadAwareReward(backlog="requests")._backlog(env) == 6.0
    assert WorkloadAwareReward()._backlog(env) == pytest.approx(2 + 1.75 + 0.5)
    with pytest.raises(ConfigError, match="reward.backlog"):
        make_reward({"kind": "workload_aware_tail", "backlog": "tokens"})
