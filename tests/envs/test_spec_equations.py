"""The three testbeds' equations, features and parameters pinned on numbers computed by hand from the papers' text
(the QoS-aware edge router, "Intelligent Router for LLM Workloads", "Learned Best-Effort LLM Serving"): each
expected value below is worked out in the comment beside it, never by running the code under test twice."""

from __future__ import annotations

import math
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

import llmsim.envs  # noqa: F401  (registers the ids)
from llmsim.cluster import InstanceConfig
from llmsim.engine.config import EngineConfig
from llmsim.envs import testbeds as TB
from llmsim.envs.observations.model_select import ModelSelectObs
from llmsim.envs.paper_timing import qos_edge_paper_profile
from llmsim.envs.qos_metrics import episode_qos
from llmsim.envs.routing_env import RoutingEnv
from llmsim.envs.tasks import BEST_EFFORT_ACCURACY, QOS_QUALITY, WORKLOAD_ROUTER_TASKS, WORKLOAD_ROUTER_WEIGHTS
from llmsim.request import Request
from llmsim.simulation.run import simulate
from tests.envs.test_rewards import _Fixed

M = "alpaca-native"  # k1 = 7.2e-5 s per prompt token, k2 = 2.5e-5 s per context token (the released code)


def _paper_env(reqs, **kw) -> RoutingEnv:
    """QoS-style env on alpaca-native with the paper's Eqs. 13-14 and no intercept: timing computable by hand."""
    return RoutingEnv(instances=TB.qos_edge_instances([M] * kw.pop("n", 1), intercept=0.0), workload=_Fixed(reqs),
                      num_requests=len(reqs), **kw)


# ------------------------------------------------------------------------------ QoS-aware edge router
def test_eqs_13_14_drive_the_engine_exactly():
    # one request, p = 100, d = 5: prefill k1 * 100 = 7.2 ms gives token 1; then 4 decode iterations over the
    # context p + g for g = 1..4: k2 * (101 + 102 + 103 + 104) = 2.5e-5 * 410 = 10.25 ms -> finish 17.45 ms
    res = simulate(TB.qos_edge_instances([M], intercept=0.0), [Request(0, 0.0, 100, 5)], "round_robin", seed=0)
    row = res.requests.iloc[0]
    assert row.first_token == pytest.approx(0.0072, abs=1e-12) and row.finish == pytest.approx(0.01745, abs=1e-12)
    # two requests admitted together: one prefill iteration of k1 * (100 + 200) = 21.6 ms; request 1 (d = 3) then
    # decodes twice over both contexts: k2 * ((101 + 201) + (102 + 202)) = 15.15 ms -> 36.75 ms; request 0 (d = 5)
    # two more alone: k2 * (103 + 104) = 5.175 ms -> 41.925 ms
    res = simulate(TB.qos_edge_instances([M], intercept=0.0), [Request(0, 0.0, 100, 5), Request(1, 0.0, 200, 3)],
                   "round_robin", seed=0)
    fin = dict(zip(res.requests.id, res.requests.finish))
    assert fin[1] == pytest.approx(0.03675, abs=1e-12) and fin[0] == pytest.approx(0.041925, abs=1e-12)


@pytest.mark.parametrize(("limit", "phi"), [(0.0035, 0.7), (0.0034, 0.0)])
def test_eq1_and_eq16_first_term_at_the_latency_limit(limit, phi):
    # finish 17.45 ms over d = 5 tokens: l = 3.49 ms per token; phi = s * I[l <= L]
    env = _paper_env([Request(0, 0.0, 100, 5, quality_by_model={M: 0.7})], action="instance_drop",
                     reward={"kind": "qos", "latency_limit": limit})
    env.reset(seed=0)
    _, r, term, _, info = env.step(0)
    assert term and r == pytest.approx(phi)
    c = info["episode_components"]
    assert c["qos_completed"] == pytest.approx(phi) and c["completed_late"] == (0.0 if phi else 1.0)


@pytest.mark.parametrize(("limit", "penalty"), [(0.0143, -0.6), (0.0144, 0.0)])
def test_eq15_penalty_reads_the_running_request_at_the_decision(limit, penalty):
    # A: p = 100, d = 250 at t = 0. Its prefill ends at 7.2 ms; after n decode iterations the clock is
    # 7.2 ms + k2 (100 n + n (n + 1) / 2): n = 31 -> 97.1 ms, n = 32 -> 100.4 ms, so at B's arrival (0.1 s) A has
    # d_it = 32 tokens and l_it = 0.1 / 32 = 3.125 ms. B: p = 400, d = 300. m = min(250 - 32, 300) = 218,
    # sum = 218 * 400 + 218 * 219 / 2 = 111,071; l+ = (7.2e-5 * 400 + 2.5e-5 * 111,071) / 250 = 11.2223 ms;
    # l_hat = 14.3473 ms: over L = 14.3 ms (penalty s_A = 0.6), under L = 14.4 ms (none)
    reqs = [Request(0, 0.0, 100, 250, quality_by_model={M: 0.6}), Request(1, 0.1, 400, 300, quality_by_model={M: 0.8})]
    env = _paper_env(reqs, action="instance_drop", reward={"kind": "qos", "latency_limit": limit})
    env.reset(seed=0)
    env.step(0)
    assert [(r.generated, r.arrival) for r in env.true_state().instances[0].running] == [(32, 0.0)]
    info = env.step(0)[-1]
    assert info["reward_components"]["qos_penalty"] == pytest.approx(penalty)


def test_average_qos_and_latency_per_token_as_the_paper_reports_them():
    # three requests: served within L on expert 0 (s = 0.8, l = 1.0 / 50 = 20 ms), served late on expert 1
    # (l = 4.0 / 100 = 40 ms > 30 ms), dropped. avg QoS = (0.8 + 0 + 0) / 3 (a drop counts 0); latency per token =
    # the mean over the two completed = 30 ms; within L: 1 of 3
    def req(finish, gen, inst, dropped=""):
        return SimpleNamespace(arrival=0.0, finish=finish, generated=gen, instance=inst, dropped=dropped,
                               quality_by_model={"a": 0.8, "b": 0.9})
    out = episode_qos([req(1.0, 50, 0), req(4.0, 100, 1), req(-1.0, 0, -1, "router")], ["a", "b"], 0.03)
    assert out["avg_qos"] == pytest.approx(0.8 / 3)
    assert out["latency_per_token_ms"] == pytest.approx(30.0)
    assert out["within_l"] == pytest.approx(1 / 3)


def test_qos_edge_defaults_are_the_paper_s():
    env = gym.make("llmsim/QoSEdge-v0", num_requests=20).unwrapped
    # N = 6 experts (the released code's six), drop = index N + 1 offered, wait not offered; L = 30 ms
    assert env.instance_models == ["alpaca-native", "chatglm-6b", "mpt-7b-instruct", "koala-7b", "baize-7b", "mpt-7b"]
    assert env.action_space.n == 8 and env.reward_fn.limit == 0.03
    mask = np.asarray(env.reset(seed=0)[1]["action_mask"])
    assert mask.tolist() == [True] * 6 + [False, True]
    # the released code's slopes; chatglm-6b's faster prefill
    assert (env.reward_fn.k1, env.reward_fn.k2) == (None, None)
    assert qos_edge_paper_profile("chatglm-6b").k1 == 6.8e-5 and qos_edge_paper_profile("koala-7b").k2 == 2.5e-5
    # experts' mean BERTScore: the LLM-Blender card's (x 100): alpaca 71.46, chatglm 70.38, baize 65.57, koala 63.96,
    # mpt 63.21
    assert [QOS_QUALITY[m] for m in env.instance_models] == [0.7146, 0.7038, 0.6321, 0.6396, 0.6557, 0.6321]
    defaults = TB.QoSEdgeEnv.__init__.__wrapped__.__defaults__
    assert defaults[:3] == (5000, 5.0, 0.03)  # 5,000 requests, lambda = 5 req/s, L = 30 ms


# ------------------------------------------------------------------------------ Intelligent Router
def _wr_env(reqs, n=2, ms=4) -> RoutingEnv:
    inst = InstanceConfig(model=M, gpu="rtx4090", engine=EngineConfig(policy="vllm_v0", max_num_seqs=ms),
                          profile=qos_edge_paper_profile(M, base=0.0))
    return RoutingEnv(instances=[inst] * n, workload=_Fixed(reqs), num_requests=len(reqs), decision="tick",
                      tick=0.02, action="instance_wait", observation="flat", reward="workload_aware")


def test_workload_aware_mixing_and_heuristic_on_the_live_state():
    # two requests at t = 0, decided at the 0.02 s tick; the first goes to instance 0 (both empty), the next tick
    # (0.04 s: the first still in its 21.6 ms prefill, resident p + g = 300) decides the second (p = 1500, d = 2500):
    # instance 0: T_p = 3.2e-4 (1500 + 300) = 0.576 s < 5 -> r_p = 1; r_d = -3.3e-5 (300 + 1500 + 2500) = -0.1419
    #             r_mix = 0.5 - 0.07095 = 0.42905
    # instance 1: r_d = -3.3e-5 (1500 + 2500) = -0.132; r_mix = 0.434 -> h(0) = 0.42905 - 0.434 = -0.00495
    env = _wr_env([Request(0, 0.0, 300, 300), Request(1, 0.0, 1500, 2500)])
    env.reset(seed=0)
    c = env.step(0)[-1]["reward_components"]
    # first decision on an empty cluster: r_d = -3.3e-5 (300 + 300) = -0.0198, r_mix = 0.4901, h = 0
    assert c["mixing_decode"] == pytest.approx(-0.0198) and c["mixing"] == pytest.approx(0.4901)
    assert c["heuristic"] == 0.0
    c = env.step(0)[-1]["reward_components"]
    assert c["mixing_prefill"] == 1.0 and c["mixing_decode"] == pytest.approx(-0.1419)
    assert c["mixing"] == pytest.approx(0.42905) and c["heuristic"] == pytest.approx(-0.00495)


def test_unfinished_term_charges_one_per_held_request_per_tick():
    # a held request has done nothing: 1 - f = 1 per 0.02 s tick; the first step also carries its own decision tick
    env = _wr_env([Request(0, 0.0, 300, 300)])
    env.reset(seed=0)
    wait = env.wait_action
    steps = [env.step(wait)[-1] for _ in range(3)]
    assert [s["reward_components"]["unfinished"] for s in steps] == [-2.0, -1.0, -1.0]
    assert [s["dt"] for s in steps] == pytest.approx([0.02] * 3)


def test_flat_state_by_hand():
    env = _wr_env([Request(0, 0.0, 300, 300), Request(1, 0.0, 1500, 2500)])
    obs, _ = env.reset(seed=0)
    # queue 2 / 512; p = 300 / 1000; predicted 300 is in the 256-2048 bucket (1 / 2); empty instances: C = 1, T = 0
    empty = [0.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    assert obs.tolist() == pytest.approx([2 / 512, 0.3, 0.5, *empty, *empty])
    obs = env.step(0)[0]  # at 0.04 s the first request is in its prefill (ends at 41.6 ms), 19 KV blocks of 16
    total = env.true_state().instances[0].kv_blocks_total
    c0 = round(1 - max(1 / 4, 19 / total), 2)  # = 0.75: one of four batch seats
    assert obs.tolist() == pytest.approx([1 / 512, 1.5, 1.0, 1 / 4, 0, 0, 0, c0, 0.0, *empty])
    obs = env.step(env.wait_action)[0]
    # at 0.06 s it decodes: token 1 at 41.6 ms, iterations of k2 (300 + g) = 7.5 ms -> g = 3 at 0.06 s;
    # bucket 256-2048; T = (300 - 3) x max(0.02, 3.3e-5 x 303) / 10 = 0.594 -> 0.59
    assert obs.tolist() == pytest.approx([1 / 512, 1.5, 1.0, 0, 0, 1 / 4, 0, 0.75, 0.59, *empty])


def test_workload_router_table1_parameters():
    # Table 1: samples, mean prompt and decode tokens per source
    assert WORKLOAD_ROUTER_WEIGHTS == (7351, 6988, 6564, 7122, 3304)
    assert [(t[1], t[2]) for t in WORKLOAD_ROUTER_TASKS] == [(29.09, 61.76), (29.83, 334.40), (211.54, 142.53),
                                                             (125.16, 220.02), (26.41, 64.10)]
    # the decode sigma is fitted to the heavy-decode share above 120 tokens: P(LogNormal(mean, s) > 120) =
    # Q((ln 120 - ln mean + s^2 / 2) / s) against Table 1's 9.18 / 58.18 / 41.01 / 47.95 / 8.71 %
    heavy = (9.18, 58.18, 41.01, 47.95, 8.71)
    for (_, _, mean, s), share in zip(WORKLOAD_ROUTER_TASKS, heavy):
        z = (math.log(120) - math.log(mean) + s * s / 2) / s
        assert 50 * math.erfc(z / math.sqrt(2)) == pytest.approx(share, abs=0.6)
    env = gym.make("llmsim/WorkloadRouter-v0", num_requests=20).unwrapped
    r = env.reward_fn
    assert (r.r_c, r.grad_p, r.grad_d, r.alpha, r.eps) == (60.0, 3.2e-4, 3.3e-5, 0.5, 5.0)
    assert env.observation_space.shape == (27,) and env.action_space.n == 6 and env.config.tick == 0.02
    assert [i.engine.max_num_seqs for i in env.config.instances] == [128] * 4


# ------------------------------------------------------------------------------ Learned Best-Effort
def test_best_effort_table1_and_memory_split():
    assert BEST_EFFORT_ACCURACY == {"hellaswag": (0.45, 0.78, 1.00), "copa": (0.80, 0.95, 1.00),
                                    "piqa": (0.82, 0.96, 1.00), "openbookqa": (0.70, 0.94, 1.00)}
    insts = TB.best_effort_instances()
    assert len(insts) == 12  # 4 GPUs x 3 sizes
    assert [(i.model, i.engine.gpu_memory_utilization, i.device) for i in insts[:3]] == [
        ("opt-125m", 0.05, "gpu0"), ("opt-1.3b", 0.20, "gpu0"), ("opt-6.7b", 0.75, "gpu0")]
    env = gym.make("llmsim/BestEffort-v0", num_requests=20).unwrapped
    assert env.reward_fn.deadline == 0.04 and env.action_space.n == 5 and env.observation_space.shape == (8,)


def test_best_effort_rate_feature():
    # the running estimate over the last 5 inter-arrival gaps: arrivals 0, 0.1, 0.3, 0.6, 1.0, 1.5, 2.5 -> the last
    # six span 2.4 s: 5 / 2.4 req/s; the true rate, when the workload gives it, wins in "true" mode
    obs = ModelSelectObs(tasks=["copa"], rate="estimate")
    obs.reset(None)
    for t in (0.0, 0.1, 0.3, 0.6, 1.0, 1.5, 2.5):
        obs.on_arrival(None, Request(0, t, 10, 10))
    assert obs.rate() == pytest.approx(5 / 2.4)
    true = ModelSelectObs(tasks=["copa"], rate="true")
    true.reset(None)
    true.on_arrival(None, Request(0, 0.0, 10, 10, extra={"rate": 12.5}))
    assert true.rate() == 12.5


def test_best_effort_task_ids_stay_the_paper_s_on_a_task_subset():
    # the paper runs its four-task policy on one- and two-task workloads without retraining (section 4.5, App. C):
    # the state's task id must keep its meaning (hellaswag 0, copa 1, piqa 2, openbookqa 3) and the shape its size
    full = gym.make("llmsim/BestEffort-v0", num_requests=20).unwrapped
    for tasks, hot in ((["copa"], 1), (["openbookqa"], 3), (["hellaswag", "copa"], None)):
        env = gym.make("llmsim/BestEffort-v0", num_requests=20, tasks=tasks).unwrapped
        assert env.observation_space == full.observation_space
        obs, _ = env.reset(seed=0)
        task = env.pending.task
        assert obs[:4].tolist() == [1.0 if i == ["hellaswag", "copa", "piqa", "openbookqa"].index(task) else 0.0
                                    for i in range(4)]
        if hot is not None:
            assert obs[hot] == 1.0


def test_soft_deadline_band_on_the_testbed_s_512_token_requests():
    """The documented reading (docs/testbeds.md, known differences): with ``soft_violation: total`` the 1 %/ms decay
    runs on the whole request, so a 512-token request (budget 512 x 40 ms = 20.48 s) keeps credit only within
    100 ms of total overshoot and the 10 % cut-off (2,048 ms) never binds; ``per_token`` gives the 10 % band."""
    from llmsim.envs.rewards import deadline_weight

    budget = 512 * 0.04  # 20.48 s
    assert deadline_weight(budget + 0.05, 512, 0.04, soft=True) == pytest.approx(0.5)  # 50 ms over: 1 - 0.5
    assert deadline_weight(budget + 0.1, 512, 0.04, soft=True) == pytest.approx(0.0, abs=1e-9)
    # per token: 42 ms per token is 2 ms over -> 0.98; 44.5 ms is past the 4 ms (10 %) band -> 0
    assert deadline_weight(512 * 0.042, 512, 0.04, soft=True, soft_violation="per_token") == pytest.approx(0.98)
    assert deadline_weight(512 * 0.0445, 512, 0.04, soft=True, soft_violation="per_token") == 0.0


def test_best_effort_arrival_schedules_are_app_b_s():
    from llmsim.envs.tasks import BEST_EFFORT_SCHEDULES

    # unpredictable 1: rate from U[0.25, 2] w.p. 0.90, U[2, 40] w.p. 0.08, U[40, 48] w.p. 0.02, Geometric requests
    # with mean 20 x rate per phase (~20 s); unpredictable 2: U[1, 48], Geometric with mean 500; the stable schedule
    # without a rate: U[0.25, 48] held ~40 s
    one, two, stable = (BEST_EFFORT_SCHEDULES[k] for k in ("bursty", "bursty2", "stable"))
    assert [list(c) for c in one["mixture"]] == [[0.90, 0.25, 2.0], [0.08, 2.0, 40.0], [0.02, 40.0, 48.0]]
    assert one["mean_seconds"] == 20.0 and "mean_requests" not in one
    assert [list(c) for c in two["mixture"]] == [[1.0, 1.0, 48.0]] and two["mean_requests"] == 500.0
    assert [list(c) for c in stable["mixture"]] == [[1.0, 0.25, 48.0]] and stable["mean_seconds"] == 40.0


def test_flat_state_stays_in_its_space_when_waiting_requests_exceed_the_batch():
    # max_num_seqs 2 and four requests sent to instance 0: its prefill count is 4 / 2 = 2 (a waiting queue longer than
    # the batch, as round robin builds on WorkloadRouter-v0: up to 339 / 128 there); the space must hold it
    env = _wr_env([Request(i, 0.0, 1500, 300) for i in range(5)], ms=2)  # prefills of 2 x 1500 take 0.216 s
    obs, _ = env.reset(seed=0)
    for _ in range(4):
        obs = env.step(0)[0]
        assert env.observation_space.contains(obs)
    assert obs[3] == pytest.approx(4 / 2)


def test_workload_router_scalability_preset_is_the_paper_s():
    # 8 instances, 40 req/s, 4,000 requests (its section 6), built from conf/env/workload_router_8.yaml
    from omegaconf import OmegaConf

    from tests.helpers import REPO

    cfg = OmegaConf.to_container(OmegaConf.load(REPO / "conf/env/workload_router_8.yaml"))
    assert (cfg["num_instances"], cfg["rate"], cfg["num_requests"], cfg["tick"]) == (8, 40.0, 4000, 0.02)
    env = TB.make_from_config({**cfg, "num_requests": 20})
    assert env.num_instances == 8 and env.observation_space.shape == (3 + 6 * 8,) and env.action_space.n == 10
