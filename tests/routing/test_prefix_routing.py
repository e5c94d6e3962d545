"""Prefix-aware routing (docs/prefix_routing.md): scorers, approx index, session affinity, picker,
options, the flat observation's prefix-hit flag, and an end-to-end hit-rate comparison."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.errors import ConfigError
from llmsim.request import Request
from llmsim.routing import ROUTERS, make_router
from llmsim.routing.prefix.routers import PrefixAwareRouter, SessionAffinityRouter, session_of
from llmsim.routing.prefix.scorers import (
    DEFAULT_LRU_BLOCKS,
    ApproxPrefixIndex,
    kv_scores,
    pick,
    precise_prefix_scores,
    queue_scores,
)
from llmsim.testing import LinearProfile
from tests.helpers import REPO


class FakeView:
    """The slice of ClusterView the prefix routers read, set by hand."""

    def __init__(self, n: int = 3, queues=None, waiting=None, kv=None, hits=None, bs: int = 16,
                 kv_total: int | None = 100, cands=None) -> None:
        self.num_instances = n
        self.queues = list(queues or [0] * n)
        self.waiting = list(waiting or [0] * n)
        self.kv = list(kv or [0.0] * n)
        self.hits = list(hits or [0] * n)
        self.bs = bs
        self.kv_total = kv_total
        self.cands = cands
        self.hit_calls = 0

    def candidates(self, req):
        return self.cands if self.cands is not None else list(range(self.num_instances))

    def queue_lengths(self):
        return self.queues

    def num_waiting(self):
        return self.waiting

    def kv_used_fractions(self):
        return self.kv

    def prefix_hit_tokens(self, i, req):
        self.hit_calls += 1
        return self.hits[i]

    def block_size(self, i):
        return self.bs

    def state(self):
        if self.kv_total is None:
            return SimpleNamespace(instances=())
        return SimpleNamespace(instances=tuple(SimpleNamespace(kv_blocks_total=self.kv_total)
                                               for _ in range(self.num_instances)))


def req(i: int = 0, prompt: int = 64, ids=(1, 2, 3, 4), hb: int = 16, extra=None) -> Request:
    return Request(i, 0.0, prompt, 8, hash_ids=tuple(ids) if ids is not None else None, hash_block=hb, extra=extra)


# ------------------------------------------------------------------ scorers and picker
def test_scorer_values_on_hand_made_cases():
    v = FakeView(4, hits=[0, 50, 100, 160])
    assert precise_prefix_scores(req(prompt=100), v, [0, 1, 2, 3]) == [0.0, 0.5, 1.0, 1.0]
    assert precise_prefix_scores(req(prompt=100, ids=None), v, [0, 1]) == [0.0, 0.0]
    assert queue_scores([2, 4, 6, 100], [0, 1, 2]) == [1.0, 0.5, 0.0]
    assert queue_scores([3, 3, 3], [0, 1, 2]) == [1.0, 1.0, 1.0]
    assert kv_scores(FakeView(3, kv=[0.25, 1.2, 0.0]), [0, 1, 2]) == [0.75, 0.0, 1.0]


def test_picker_ties_go_to_shorter_queue_then_lower_index():
    assert pick([0, 1, 2], [1.0, 1.0, 1.0], [3, 1, 1]) == 1
    assert pick([2, 1, 0], [1.0, 1.0, 1.0], [0, 0, 0]) == 0
    assert pick([0, 1, 2], [1.0, 1.0 + 1e-15, 0.5], [5, 5, 0]) == 0  # within EPS: a tie
    assert pick([0, 1, 2], [0.2, 0.3, 0.1], [0, 9, 0]) == 1


def test_prefix_aware_weights_and_load_guard():
    # prompt 100: hits give prefix scores [0, 0.5, 1]; queues [0, 2, 4] give queue scores [1, 0.5, 0]
    v = FakeView(3, queues=[0, 2, 4], hits=[0, 50, 100])
    r = PrefixAwareRouter(kv_weight=0)
    assert r.scores(req(prompt=100), v, [0, 1, 2], v.queues, None) == [2.0, 2.5, 3.0]
    assert r.route(req(prompt=100), v) == 2
    assert PrefixAwareRouter(load_guard=3).route(req(prompt=100), v) == 1  # instance 2 is 4 above the shortest
    assert PrefixAwareRouter(load_guard=1).route(req(prompt=100), v) == 0
    assert PrefixAwareRouter(prefix_weight=0).route(req(prompt=100), v) == 0
    w = FakeView(3, queues=[0, 2, 4], waiting=[5, 0, 0], hits=[0, 0, 0])  # waiting-only queue scorer
    assert PrefixAwareRouter(queue_metric="waiting", kv_weight=0).route(req(), w) == 1
    assert v.hit_calls > 0 and PrefixAwareRouter().route(req(), FakeView(1)) == 0


def test_approx_index_lru_eviction():
    idx = ApproxPrefixIndex(capacity=4)
    idx.bind(FakeView(2))
    idx.record(0, [1, 2, 3])  # touched tail first: 3 is the oldest, 1 the newest
    assert idx.match(0, [1, 2, 3]) == 3 and idx.match(1, [1, 2, 3]) == 0
    idx.record(0, [5, 6])  # 5 keys > 4: evicts 3
    assert list(idx.lru[0]) == [2, 1, 6, 5]
    assert idx.match(0, [1, 2, 3]) == 2 and idx.match(0, [9, 1]) == 0
    idx.record(0, [2])  # a touch refreshes: 1 is now the oldest
    idx.record(0, [7])
    assert list(idx.lru[0]) == [6, 5, 2, 7] and idx.match(0, [1]) == 0


def test_approx_capacity_defaults_to_kv_blocks_then_constant():
    a = ApproxPrefixIndex()
    a.bind(FakeView(2, kv_total=123))
    assert a.caps == [123, 123]
    b = ApproxPrefixIndex()
    b.bind(FakeView(2, kv_total=None))
    assert b.caps == [DEFAULT_LRU_BLOCKS] * 2


def test_approx_router_follows_what_it_sent():
    v = FakeView(3, queues=[0, 0, 0])
    r = make_router("prefix_aware", variant="approx")
    assert r.route(req(0), v) == 0  # nothing known: all tie, lowest index
    v.queues = [1, 0, 0]  # queue scores [0, 1, 1] (x2) but a full prefix match on 0 (x3)
    assert r.route(req(1), v) == 0
    assert r.route(req(2, ids=(7, 8, 9, 10)), v) == 1  # another prefix: the shorter queue
    half = req(3, ids=(1, 2, 99, 98))  # shares the first two blocks of 0's prefix
    assert r.index.scores(half, v, [0, 1, 2], r.index.keys(half, v, [0, 1, 2])) == [0.5, 0.0, 0.0]
    assert v.hit_calls == 0  # the approximate variant never reads the engines' caches
    r.reset()
    v.queues = [1, 0, 0]
    assert r.route(req(4), v) == 1  # forgotten on reset


# ------------------------------------------------------------------ session affinity
def test_session_affinity_sticks_and_falls_back():
    v = FakeView(3, queues=[2, 0, 1])
    r = SessionAffinityRouter(overload=2)
    assert r.route(req(0, ids=(5, 6)), v) == 1  # new session: JSQ
    v.queues = [0, 2, 0]
    assert r.route(req(1, ids=(5, 7)), v) == 1  # same first id: sticky, 2 above the shortest is allowed
    v.queues = [0, 3, 0]
    assert r.route(req(2, ids=(5, 8)), v) == 0  # overloaded: JSQ, and the session moves there
    v.queues = [1, 0, 0]
    assert r.route(req(3, ids=(5,)), v) == 0
    assert r.route(req(4, ids=None), v) == 1  # no session: JSQ
    s = req(5, ids=(5,), extra={"session": "alice"})
    assert session_of(s) == ("session", "alice") and r.route(s, v) == 1  # extra["session"] wins over the id
    assert session_of(req(ids=None)) is None
    assert SessionAffinityRouter(overload=None).overload is None


def test_session_table_is_bounded():
    v = FakeView(2)
    r = SessionAffinityRouter(max_sessions=2)
    for k in range(3):
        r.route(req(k, ids=(100 + k,)), v)
    assert list(r.sticky) == [("prefix", 101), ("prefix", 102)]


# ------------------------------------------------------------------ options
@pytest.mark.parametrize(("name", "kwargs", "key"), [
    ("prefix_aware", {"variant": "exact"}, "variant"),
    ("prefix_aware", {"prefix_weight": -1}, "prefix_weight"),
    ("prefix_aware", {"queue_weight": "2"}, "queue_weight"),
    ("prefix_aware", {"kv_weight": float("nan")}, "kv_weight"),
    ("prefix_aware", {"prefix_weight": 0, "queue_weight": 0, "kv_weight": 0}, "prefix_weight"),
    ("prefix_aware", {"queue_metric": "running"}, "queue_metric"),
    ("prefix_aware", {"load_guard": -1}, "load_guard"),
    ("prefix_aware", {"load_guard": 2.5}, "load_guard"),
    ("prefix_aware", {"variant": "approx", "lru_blocks": 0}, "lru_blocks"),
    ("prefix_aware", {"lru_blocks": 100}, "lru_blocks"),  # precise tracks nothing
    ("prefix_aware", {"weight": 1}, "kwargs"),
    ("session_affinity", {"overload": True}, "overload"),
    ("session_affinity", {"max_sessions": 0}, "max_sessions"),
])
def test_bad_options_name_the_key(name, kwargs, key):
    with pytest.raises(ConfigError) as e:
        make_router(name, **kwargs)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("policy.kwargs") and key in msg


@pytest.mark.parametrize("name", ["prefix_aware", "session_affinity"])
def test_shipped_configs_build(name):
    cfg = yaml.safe_load((REPO / "conf" / "policy" / f"{name}.yaml").read_text())
    assert cfg["name"] == name and name in ROUTERS
    r = make_router(cfg["name"], **cfg["kwargs"])
    if name == "prefix_aware":
        assert (r.w_prefix, r.w_queue, r.w_kv) == (3.0, 2.0, 2.0)


# ------------------------------------------------------------------ on the simulator
def shared_prompts(n: int = 400, groups: int = 16, sys_blocks: int = 4, hb: int = 512, rate: float = 20.0,
                   seed: int = 0) -> list[Request]:
    """Requests drawing one of ``groups`` long system prompts (sys_blocks x hb tokens) plus a unique 256-token
    question."""
    rnd = random.Random(seed)
    out = []
    for k in range(n):
        g = rnd.randrange(groups)
        ids = tuple(g * 1000 + j for j in range(sys_blocks)) + (10**6 + k,)
        out.append(Request(k, k / rate, sys_blocks * hb + 256, 32, hash_ids=ids, hash_block=hb))
    return out


def cluster(blocks: int = 1500, n: int = 4) -> list[InstanceConfig]:
    return [InstanceConfig(profile=LinearProfile(per_token=2e-4), engine=EngineConfig(num_gpu_blocks=blocks))
            for _ in range(n)]


def test_prefix_aware_raises_the_cluster_hit_rate():
    """16 system prompts over 4 instances whose caches hold only a few of them: routing by prefix keeps
    each prompt on few instances, round robin makes every instance cache all 16 (and evict)."""
    rate = {}
    for name, kw in [("round_robin", {}), ("prefix_aware", {}), ("prefix_aware_approx", {"variant": "approx"}),
                     ("session_affinity", {})]:
        s = simulate(cluster(), shared_prompts(), name.removesuffix("_approx"), policy_kwargs=kw).summary
        rate[name] = s["prefix_cache_hit_rate"]
    assert rate["prefix_aware"] > rate["round_robin"] + 0.1, rate
    assert rate["prefix_aware_approx"] > rate["round_robin"] + 0.1, rate
    assert rate["session_affinity"] > rate["round_robin"] + 0.1, rate


@pytest.mark.parametrize("kw", [{"variant": "precise"}, {"variant": "approx", "lru_blocks": 200}])
def test_prefix_aware_is_deterministic(kw):
    runs = [simulate(cluster(600), shared_prompts(150), "prefix_aware", policy_kwargs=kw, seed=s).requests
            for s in (0, 1)]
    assert runs[0].instance.tolist() == runs[1].instance.tolist()
    assert len(set(runs[0].instance)) > 1


# ------------------------------------------------------------------ the flat observation's flag
def test_observation_flag_adds_one_feature_per_instance():
    from llmsim.envs.routing_env import RoutingEnv

    def env(obs):
        return RoutingEnv(instances=[{"model": "llama-2-7b", "gpu": "a100-80gb", "count": 3}],
                          workload={"kind": "mixture", "preset": "workload_router"}, num_requests=5, observation=obs)

    plain, off, on = env("flat"), env({"kind": "flat", "prefix_hit": False}), env({"kind": "flat", "prefix_hit": True})
    assert plain.observation_space.shape == off.observation_space.shape == (3 + 6 * 3,)
    assert on.observation_space.shape == (3 + 6 * 3 + 3,)
    o_off, _ = off.reset(seed=3)
    o_on, _ = on.reset(seed=3)
    np.testing.assert_array_equal(o_on[:21], o_off)
    assert not o_on[21:].any()  # these requests carry no hash ids
    with pytest.raises(ConfigError, match=r"^observation\.prefix_hit: expected true or false, got 'yes'$"):
        env({"kind": "flat", "prefix_hit": "yes"})


def test_observation_flag_reads_the_view():
    from llmsim.envs.observations import make_obs
    from llmsim.envs.policy_router import DecisionContext
    from llmsim.envs.predictors.base import OraclePredictor

    b = make_obs({"kind": "flat", "prefix_hit": True})
    n = 4
    view = FakeView(n, hits=[0, 32, 64, 80])
    ctx = SimpleNamespace(num_instances=n, prefix_hit_tokens=view.prefix_hit_tokens)  # the env's: its cluster view's
    b.bind(ctx)
    b.buf[:] = 0.0
    b.fill_prefix_hits(ctx, req(prompt=64), 3 + 6 * n)
    assert b.buf[-n:].tolist() == [0.0, 0.5, 1.0, 1.0]
    b.fill_prefix_hits(ctx, None, 3 + 6 * n)
    assert not b.buf[-n:].any()
    # a router outside the env (an exported policy) answers from its own view, and refuses without one
    outside = DecisionContext({"instance_models": ["m"] * n, "models": ["m"]}, OraclePredictor())
    with pytest.raises(ConfigError, match="observation.prefix_hit"):
        b.fill_prefix_hits(outside, req(prompt=64), 3 + 6 * n)
    outside.view = FakeView(n, hits=[64, 0, 0, 16])
    b.fill_prefix_hits(outside, req(prompt=64), 3 + 6 * n)
    assert b.buf[-n:].tolist() == [1.0, 0.0, 0.0, 0.25]


def test_observation_flag_on_the_simulator():
    """Routing every request to instance 0: once the shared prompt is cached there, the feature shows it on 0
    only, as the cluster view reports."""
    from llmsim.envs.routing_env import RoutingEnv
    from llmsim.envs.workloads import EnvWorkload

    class Shared(EnvWorkload):
        def requests(self, seed: int, k: int) -> list[Request]:
            return [Request(j, j * 1.0, 4 * 512 + 256, 8, hash_ids=(1, 2, 3, 4, 10**6 + j)) for j in range(k)]

    env = RoutingEnv(instances=[{"model": "llama-2-7b", "gpu": "a100-80gb", "count": 2}], workload=Shared(),
                     num_requests=6, observation={"kind": "flat", "prefix_hit": True})
    obs, _ = env.reset(seed=0)
    seen = [obs[15:].tolist()]
    for _ in range(5):
        obs, *_ = env.step(0)
        seen.append(obs[15:].tolist())
    assert seen[0] == [0.0, 0.0]
    assert all(b == 0.0 for _, b in seen) and max(a for a, _ in seen) == pytest.approx(2048 / 2304)


def test_session_affinity_follows_the_workloads_session_ids():
    from llmsim.routing.prefix.routers import session_of

    r = Request(0, 0.0, 64, 8, hash_ids=(1, 2, 3, 4), extra={"session_id": 7, "turn": 2})
    assert session_of(r) == ("session", 7)
    assert session_of(Request(1, 0.0, 64, 8, hash_ids=(1, 2))) == ("prefix", 1)
