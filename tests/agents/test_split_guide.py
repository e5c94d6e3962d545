"""The dedicated split as a set network's guide, computed from the instance_set observation (agents/nets.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from llmsim.agents.checkpoint import load_q_net, save_checkpoint  # noqa: E402
from llmsim.agents.export import onnx_inputs, write_onnx  # noqa: E402
from llmsim.agents.nets import HEAVY_AT, SPILL, SetQNetwork, SlotAdapter, Spill, guide_slots, masked_argmax  # noqa: E402
from llmsim.agents.policy import HeuristicPolicy  # noqa: E402
from llmsim.agents.transfer import ObservationGuide, e2e_all_ms, watch_episodes  # noqa: E402
from llmsim.envs.observations.instance_set import (  # noqa: E402
    GLOBAL_FEATURE_NAMES,
    GLOBAL_FEATURES,
    INSTANCE_FEATURE_NAMES,
    INSTANCE_FEATURES,
    LOG_SECONDS,
    layout_size,
)
from llmsim.envs.randomize import SlotEnv  # noqa: E402
from llmsim.envs.testbeds import make_from_config  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402

N_MAX = 8
WORK = INSTANCE_FEATURE_NAMES.index("log_work_s")
LATENCY = INSTANCE_FEATURE_NAMES.index("log_latency_s")
FITS = INSTANCE_FEATURE_NAMES.index("can_serve")
BUSY = INSTANCE_FEATURE_NAMES.index("running_share")
LOADED = Spill(1.0, load=1.5)  # a spill that asks more of a busier instance
LIGHT_LOADED = Spill(1.0, load=1.5, load_light=6.0)  # ... and more still when a light request would spill
UNQUEUED = Spill(1.0, load=1.5, queued=False)  # ... and never to an instance where requests wait
BY_SIZE = Spill(1.0, load=1.5, min_group=2)  # ... only where each group has two instances or more
WAITING = INSTANCE_FEATURE_NAMES.index("waiting_share")
PRED = GLOBAL_FEATURE_NAMES.index("log_predicted_output")
ENV = {"id": "workload_router", "num_requests": 80, "observation": {"kind": "instance_set", "n_max": N_MAX},
       "reward": {"kind": "workload_aware_tail", "guidance": 0.0}}


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here on one torch thread (tests/conftest.py)."""


def obs(works: list[float], heavy: bool | None, fits: list[bool] | None = None) -> np.ndarray:
    """One observation: len(works) instances with these queued-work features; ``heavy`` None = nothing pending."""
    x = np.zeros(layout_size(N_MAX), np.float32)
    n = len(works)
    x[GLOBAL_FEATURES + N_MAX * INSTANCE_FEATURES:][:n] = 1.0
    if heavy is not None:
        x[0] = 1.0
        x[PRED] = HEAVY_AT + 0.01 if heavy else HEAVY_AT
    for k, w in enumerate(works):
        row = GLOBAL_FEATURES + k * INSTANCE_FEATURES
        x[row + WORK] = x[row + LATENCY] = w  # the spill scores latency, the plain split work: the same here
        x[row + FITS] = 1.0 if heavy is not None and (fits is None or fits[k]) else 0.0
    return x


def pick(x: np.ndarray, guide: str = "dedicated_split") -> int:
    return int(guide_slots(x[None], guide)[0])


def test_heavy_requests_go_to_the_last_half_light_ones_to_the_first_each_to_the_least_work():
    works = [0.4, 0.1, 0.3, 0.2]
    assert pick(obs(works, heavy=True)) == 3  # the large group {2, 3}: 0.2 < 0.3
    assert pick(obs(works, heavy=False)) == 1  # exactly 250 tokens is not heavy; the small group {0, 1}
    assert pick(obs([0.2, 0.2, 0.5, 0.5], heavy=True)) == 2  # ties: the lowest index
    assert pick(obs([0.1, 0.2, 0.3, 0.4, 0.0], heavy=True)) == 4  # 5 instances: the last 2 are large
    assert pick(obs([0.1, 0.2, 0.3, 0.4, 0.0], heavy=False)) == 0
    assert pick(obs([0.3], heavy=True)) == 0 and pick(obs([0.3], heavy=False)) == 0  # one instance: it


def test_the_first_candidate_when_no_instance_of_the_group_serves_the_prompt_and_nothing_without_a_request():
    assert pick(obs([0.4, 0.1, 0.3, 0.2], heavy=True, fits=[False, True, False, False])) == 1
    assert pick(obs([0.4, 0.1, 0.3, 0.2], heavy=True, fits=[False] * 4)) == 3  # none fits: every instance counts
    assert pick(obs([0.4, 0.1, 0.3, 0.2], heavy=None)) == -1


def test_the_spill_sends_a_request_to_the_other_group_only_when_that_one_is_far_less_busy():
    spill = "dedicated_split_spill"
    assert pick(obs([0.4, 0.25, 0.3, 0.2], heavy=True), spill) == 3  # the own group is faster: the split's choice
    over = 0.2 + SPILL.at + 0.01
    assert pick(obs([0.5, 0.2, 0.6, over], heavy=True), spill) == 1  # the other group's least, far less busy
    assert pick(obs([0.5, 0.2, 0.6, over], heavy=True)) == 3  # the plain split stays in its group
    assert pick(obs([0.5, 0.2, 0.6, 0.2 + SPILL.at - 0.01], heavy=True), spill) == 3  # not enough below
    assert pick(obs([over, 0.6, 0.5, 0.2], heavy=False), spill) == 3  # light requests spill the other way
    # the other group cannot serve the prompt: no spill; nothing pending: nothing
    assert pick(obs([0.5, 0.2, 0.6, over], heavy=True, fits=[False, False, True, True]), spill) == 3
    assert pick(obs([0.5, 0.2, 0.6, over], heavy=None), spill) == -1


def test_a_spill_with_a_load_asks_more_of_a_busy_instance_of_the_other_group():
    rule = Spill(1.1, load=1.0)
    x = obs([0.5, 0.2, 0.6, 0.2 + SPILL.at + 0.01], heavy=True)
    assert int(guide_slots(x[None], "dedicated_split_spill", rule)[0]) == 1  # instance 1 idle: the plain 1.1 rule
    x[GLOBAL_FEATURES + INSTANCE_FEATURES + BUSY] = 0.5  # half its seats busy: it must be log(1.5) better still
    assert int(guide_slots(x[None], "dedicated_split_spill", rule)[0]) == 3
    assert int(guide_slots(x[None], "dedicated_split_spill")[0]) == 1  # the rule without a load ignores it
    x[GLOBAL_FEATURES + 3 * INSTANCE_FEATURES + LATENCY] += float(np.log(1.5) / LOG_SECONDS)
    assert int(guide_slots(x[None], "dedicated_split_spill", rule)[0]) == 1


def test_a_light_request_spills_by_its_own_load():
    """The same cluster, a light request and then a heavy one, each with its best instance elsewhere busy by half:
    with a light load of 6 the light one stays in its group, the heavy one still spills by the load of 1."""
    rule = Spill(1.0, load=1.0, load_light=6.0)
    at = float(np.log(1.6) / LOG_SECONDS)  # better by x1.6: past 1 + 1 x 0.5, short of 1 + 6 x 0.5
    light = obs([0.5 + at, 0.5 + at, 0.5, 0.5], heavy=False)  # the light group (0, 1) slower than the large one
    heavy = obs([0.5, 0.5, 0.5 + at, 0.5 + at], heavy=True)
    for x, busy in ((light, (2, 3)), (heavy, (0, 1))):
        for k in busy:
            x[GLOBAL_FEATURES + k * INSTANCE_FEATURES + BUSY] = 0.5
    assert int(guide_slots(light[None], "dedicated_split_spill", rule)[0]) in (0, 1)
    assert int(guide_slots(light[None], "dedicated_split_spill", Spill(1.0, load=1.0))[0]) in (2, 3)
    assert int(guide_slots(heavy[None], "dedicated_split_spill", rule)[0]) in (0, 1)
    assert Spill(1.0, load=1.0, load_light=6.0).as_dict()["load_light"] == 6.0
    with pytest.raises(ValueError, match="loads >= 0"):
        Spill(1.0, load_light=-1.0)


def test_a_spill_that_avoids_queues_stays_home_when_the_other_instance_has_one():
    rule = Spill(1.0, queued=False)
    x = obs([0.5, 0.2, 0.6, 0.9], heavy=True)  # the light group's instance 1 far better for this heavy request
    x[GLOBAL_FEATURES + 0 * INSTANCE_FEATURES + WAITING] = 0.3  # requests wait at instance 0, not at 1
    assert int(guide_slots(x[None], "dedicated_split_spill", rule)[0]) == 1
    x[GLOBAL_FEATURES + 1 * INSTANCE_FEATURES + WAITING] = 1.0 / 128  # one request waits at instance 1 too
    assert int(guide_slots(x[None], "dedicated_split_spill", rule)[0]) == 2  # its own group's best
    assert int(guide_slots(x[None], "dedicated_split_spill", Spill(1.0))[0]) == 1  # the rule that spills into queues
    x[GLOBAL_FEATURES + 2 * INSTANCE_FEATURES + WAITING] = 2.0  # its own group queues: still no spill into a queue
    assert int(guide_slots(x[None], "dedicated_split_spill", rule)[0]) == 2
    assert rule.as_dict() == {"ratio": 1.0, "score": "log_latency_s", "queued": False}
    assert "queued" not in Spill(1.0).as_dict()  # a checkpoint without it reads as before
    with pytest.raises(ValueError, match="spill needs"):
        Spill(1.0, queued="no")  # type: ignore[arg-type]


def test_a_spill_by_group_size_stays_home_where_a_group_has_one_instance():
    heavy = obs([0.5, 0.2, 0.9], heavy=True)  # 3 instances: small 0-1, large 2 (n // 2); instance 1 far better
    assert int(guide_slots(heavy[None], "dedicated_split_spill", LOADED)[0]) == 1  # the shipped rule spills
    assert int(guide_slots(heavy[None], "dedicated_split_spill", BY_SIZE)[0]) == 2  # one large instance: it stays
    four = obs([0.5, 0.2, 0.9, 0.95], heavy=True)  # 2 + 2: the size rule spills as the shipped one does
    assert int(guide_slots(four[None], "dedicated_split_spill", BY_SIZE)[0]) == int(
        guide_slots(four[None], "dedicated_split_spill", LOADED)[0]) == 1
    assert BY_SIZE.as_dict()["min_group"] == 2 and "min_group" not in LOADED.as_dict()  # old checkpoints read as before
    with pytest.raises(ValueError, match="min_group >= 1"):
        Spill(1.0, min_group=0)


@pytest.mark.parametrize("rule", [SPILL, LOADED, LIGHT_LOADED, UNQUEUED, BY_SIZE],
                         ids=["ratio", "load", "light_load", "queued", "by_size"])
def test_the_spill_guide_and_its_onnx_export_agree(tmp_path: Path, rule: Spill):
    ort = pytest.importorskip("onnxruntime")
    net = SetQNetwork(layout_size(N_MAX), N_MAX + 2, [8, 8], guide="dedicated_split_spill", fallback_margin=1e3,
                      spill=rule)
    rng = np.random.default_rng(0)
    x = np.stack([obs(list(rng.uniform(0.0, 1.0, 4)), heavy=bool(rng.integers(2))) for _ in range(200)])
    for k in range(4):
        x[:, GLOBAL_FEATURES + k * INSTANCE_FEATURES + BUSY] = rng.uniform(0.0, 1.0, len(x))
    guide = guide_slots(x, "dedicated_split_spill", rule)
    assert (guide != guide_slots(x, "dedicated_split")).sum() > 20  # the spill changes some choices
    plain = make_from_config({**ENV, "num_instances": 4, "rate": 20.0})
    write_onnx(SlotAdapter(net, 4).eval(), onnx_inputs(plain), tmp_path / "p.onnx")
    mask = np.zeros((len(x), 6), np.bool_)
    mask[:, :5] = True
    _, got = ort.InferenceSession(str(tmp_path / "p.onnx")).run(None, {"obs": x, "action_mask": mask})
    assert (got == guide).all()


def test_the_network_falls_back_on_it_and_its_onnx_export_computes_the_same(tmp_path: Path):
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    net = SetQNetwork(layout_size(N_MAX), N_MAX + 2, [16, 16], guide="dedicated_split", fallback_margin=1e3)
    env = SlotEnv(ENV, scenarios=[{"num_instances": 4, "rate": 20.0}])
    xs, ms = [], []
    o, info = env.reset(seed=3)
    policy = ObservationGuide("dedicated_split")
    while not (env.terminated or env.truncated) and len(xs) < 300:
        xs.append(o)
        ms.append(info["action_mask"])
        o, _, _, _, info = env.step(policy.act(o, info["action_mask"], env))
    x, m = np.array(xs, np.float32), np.array(ms)
    guide = guide_slots(x, "dedicated_split")
    pending = guide >= 0
    assert pending.sum() > 50 and len(set(guide[pending])) == 4  # every instance is picked somewhere
    actions = masked_argmax(net(torch.as_tensor(x)), torch.as_tensor(m)).numpy()
    assert (actions[pending] == guide[pending]).all()
    plain = make_from_config({**ENV, "num_instances": 4, "rate": 20.0})
    write_onnx(SlotAdapter(net, 4).eval(), onnx_inputs(plain), tmp_path / "p.onnx")
    env_mask = np.concatenate([m[:, :4], m[:, N_MAX:]], axis=1)
    _, got = ort.InferenceSession(str(tmp_path / "p.onnx")).run(None, {"obs": x, "action_mask": env_mask})
    assert (got[pending] == guide[pending]).all()


def test_it_is_the_dedicated_split_with_work_counted_in_seconds():
    """On a homogeneous cluster it routes as ``dedicated_small_large`` with least work left inside each group, up
    to how the queued work is counted (seconds at the instance's iteration time, not tokens): close, not equal."""
    env = SlotEnv(ENV, scenarios=[{"num_instances": 4, "rate": 20.0}])
    ours, _ = watch_episodes(ObservationGuide("dedicated_split"), env, [1000, 1001])
    split, _ = watch_episodes(HeuristicPolicy("dedicated_small_large", within="least_work_left"), env, [1000, 1001])
    jsq, _ = watch_episodes(HeuristicPolicy("jsq"), env, [1000, 1001])
    for a, b, c in zip(ours, split, jsq):
        assert a["completed"] == a["num_requests"]
        assert abs(e2e_all_ms(a) - e2e_all_ms(b)) < 0.1 * e2e_all_ms(b)
        assert abs(e2e_all_ms(a) - e2e_all_ms(c)) > 0.0  # not some other heuristic by accident


def test_a_checkpoint_records_the_spill_rule_and_loads_it_back(tmp_path: Path):
    net = SetQNetwork(layout_size(N_MAX), N_MAX + 2, [8, 8], guide="dedicated_split_spill", spill=Spill(3.0))
    save_checkpoint(tmp_path / "c", net, {"algo": "ddqn"})
    meta = json.loads((tmp_path / "c" / "checkpoint.json").read_text())
    assert meta["set_net"]["spill"] == {"ratio": 3.0, "score": "log_latency_s"}
    assert load_q_net(tmp_path / "c").spill == Spill(3.0)
    net = SetQNetwork(layout_size(N_MAX), N_MAX + 2, [8, 8], guide="dedicated_split_spill", spill=LOADED)
    save_checkpoint(tmp_path / "d", net, {"algo": "ddqn"})
    assert json.loads((tmp_path / "d" / "checkpoint.json").read_text())["set_net"]["spill"]["load"] == 1.5
    assert load_q_net(tmp_path / "d").spill == LOADED
    net = SetQNetwork(layout_size(N_MAX), N_MAX + 2, [8, 8], guide="dedicated_split_spill", spill=UNQUEUED)
    save_checkpoint(tmp_path / "e", net, {"algo": "ddqn"})
    assert load_q_net(tmp_path / "e").spill == UNQUEUED
    net = SetQNetwork(layout_size(N_MAX), N_MAX + 2, [8, 8], guide="dedicated_split_spill", spill=BY_SIZE)
    save_checkpoint(tmp_path / "f", net, {"algo": "ddqn"})
    assert load_q_net(tmp_path / "f").spill == BY_SIZE
    meta["set_net"]["spill"] = {"ratio": 0.5, "score": "log_latency_s"}
    (tmp_path / "c" / "checkpoint.json").write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="set_net"):
        load_q_net(tmp_path / "c")


@pytest.mark.parametrize("rule", [SPILL, LOADED, LIGHT_LOADED, UNQUEUED, BY_SIZE],
                         ids=["ratio", "load", "light_load", "queued", "by_size"])
def test_the_spill_guide_is_the_registered_split_by_latency_with_its_spill(rule: Spill):
    """The suite holds the router to its own guide: ``dedicated_small_large`` with ``within: least_latency`` and the
    guide's spill ratio routes as the observation's spill guide, up to float32 and the log scale (close, not equal)."""
    env = SlotEnv(ENV, scenarios=[{"num_instances": 4, "rate": 20.0}])
    ours, _ = watch_episodes(ObservationGuide("dedicated_split_spill", rule), env, [1000, 1001])
    heuristic = HeuristicPolicy("dedicated_small_large", within="least_latency", spill=rule.ratio,
                                spill_load=rule.load, spill_load_light=rule.load_light, spill_queued=rule.queued,
                                spill_min_group=rule.min_group)
    theirs, _ = watch_episodes(heuristic, env, [1000, 1001])
    plain, _ = watch_episodes(ObservationGuide("dedicated_split"), env, [1000, 1001])
    for a, b, c in zip(ours, theirs, plain):
        assert a["completed"] == a["num_requests"]
        assert abs(e2e_all_ms(a) - e2e_all_ms(b)) < 0.05 * e2e_all_ms(b)
        assert e2e_all_ms(a) != e2e_all_ms(c)  # the spill changes the routing


def test_the_registered_split_spills_by_group_size_only_where_each_group_has_two_instances():
    """``spill_min_group: 2`` on 2 instances routes exactly as the split without a spill, and on 4 as the spill."""
    kw = {"within": "least_latency", "spill": 1.0, "spill_load": 1.5}
    for n, same_as in ((2, {"within": "least_latency"}), (4, kw)):
        env = SlotEnv(ENV, scenarios=[{"num_instances": n, "rate": 5.0 * n}])
        by_size, _ = watch_episodes(HeuristicPolicy("dedicated_small_large", **kw, spill_min_group=2), env, [1000])
        other, _ = watch_episodes(HeuristicPolicy("dedicated_small_large", **same_as), env, [1000])
        assert e2e_all_ms(by_size[0]) == e2e_all_ms(other[0]), n
    with pytest.raises(ConfigError, match="spill_min_group"):
        HeuristicPolicy("dedicated_small_large", **kw, spill_min_group=0)
