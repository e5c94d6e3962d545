"""QoSEdge's step model: the paper's Eqs. 13-14 plus the measured intercept (the env's default timing)."""

import gymnasium as gym
import numpy as np
import pytest

import llmsim.envs  # noqa: F401
from llmsim.envs.paper_timing import measured_intercept, qos_edge_paper_profile
from llmsim.perf.hardware import get_gpu
from llmsim.perf.models import get_model


def test_paper_profile_is_the_linear_fit():
    p = qos_edge_paper_profile("alpaca-native")
    # 200-token prefill: 200 * 7.2e-5; a decode step over 1,200 context tokens: 1200 * 2.5e-5 = 30 ms
    assert p.step_time(200, 1, 200 * 200, 0, 0, 0) == pytest.approx(0.0144)
    assert p.step_time(4, 4, 0, 0, 4, 1200) == pytest.approx(0.030)
    assert p.kv_capacity_tokens(0.9) > 10_000


@pytest.mark.parametrize("base", [0.0, None])
def test_the_decode_closure_is_step_time_bit_for_bit(base):
    """The fast path plans a decode run with ``decode_step_fn``; stepping calls ``step_time``: equal floats."""
    p = qos_edge_paper_profile("chatglm-6b", base=base)
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 64):
        fn = p.decode_step_fn(n)
        for ctx in [0, 1, 299, 1200, *rng.integers(0, 200_000, 200).tolist()]:
            assert fn(ctx) == p.step_time(n, n, 0, 0, n, ctx)


def test_intercept_is_the_measured_fixed_step_cost():
    c0 = measured_intercept("alpaca-native", "rtx4090")
    floor = get_model("alpaca-native").weight_bytes / get_gpu("rtx4090").bandwidth  # streaming the weights
    assert floor < c0 < 0.02
    p = qos_edge_paper_profile("alpaca-native", base=None)
    assert p.step_time(4, 4, 0, 0, 4, 600) == pytest.approx(c0 + 600 * 2.5e-5)


def test_experts_beyond_the_code_s_six_get_a_scaled_fixed_cost():
    """No measured profile: the roofline's fixed cost times the measured/roofline ratio of the six, so a ~7B
    stand-in is neither free nor ~35 % slower than the measured experts (the roofline alone)."""
    from llmsim.perf.profile import load_profile

    for m in ("oasst-stablelm-7b", "dolly-v2-7b"):
        roof = load_profile(m, "rtx4090", kind="roofline").step_time(1, 1, 0, 0, 1, 0)
        c = measured_intercept(m, "rtx4090")
        assert 0.65 * roof < c < 0.85 * roof
        floor = get_model(m).weight_bytes / get_gpu("rtx4090").bandwidth
        assert floor < c < 0.02
    assert measured_intercept("vicuna-7b", "rtx4090") == measured_intercept("alpaca-native", "rtx4090")  # measured


def test_qos_edge_takes_a_number_of_experts():
    from llmsim.envs.tasks import QOS_EXPERTS, QOS_MORE_EXPERTS
    from llmsim.errors import ConfigError

    env = gym.make("llmsim/QoSEdge-v0", experts=10, num_requests=50)
    assert env.unwrapped.instance_models == [*QOS_EXPERTS, *QOS_MORE_EXPERTS]
    assert gym.make("llmsim/QoSEdge-v0", experts=3, num_requests=50).unwrapped.instance_models == list(QOS_EXPERTS[:3])
    with pytest.raises(ConfigError, match="from 1 to 10"):
        gym.make("llmsim/QoSEdge-v0", experts=11)


def _per_token_latency(greedy: bool, **kw) -> np.ndarray:
    env = gym.make("llmsim/QoSEdge-v0", num_requests=400, rate=5.0, **kw)
    env.reset(seed=0)
    done = False
    while not done:
        m = env.unwrapped.action_masks()
        if greedy:
            a = next(k for k in range(len(m)) if m[k])
        else:
            q = [len(i.waiting) + len(i.running) for i in env.unwrapped.cluster.instances]
            a = min((k for k in range(len(m) - 1) if m[k]), key=lambda k: q[k])
        _, _, term, trunc, _ = env.step(a)
        done = term or trunc
    df = env.unwrapped.cluster.recorder.requests_frame()
    return ((df.finish - df.arrival) / df.output_tokens).to_numpy()


def test_limit_binds_under_the_default_timing():
    greedy = _per_token_latency(True)
    balanced = _per_token_latency(False)
    assert np.mean(greedy > 0.03) > 0.5
    # load balancing misses L for some requests, but far fewer
    assert 0.02 < np.mean(balanced > 0.03) < np.mean(greedy > 0.03) / 2
    # without the intercept (the paper's equations alone) it almost never does
    assert np.mean(_per_token_latency(False, intercept=0.0) > 0.03) < 0.05
