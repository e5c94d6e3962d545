"""The papers' baselines as llmsim routers, each on a hand-made case that a wrong implementation fails.

Clusters use :class:`llmsim.testing.LinearProfile` (step = base + per_token x tokens + per_ctx x decode
context), so every routing instant can be worked out by hand.
"""

from __future__ import annotations

import pytest
import yaml

from llmsim.cluster import InstanceConfig
from llmsim.engine.config import EngineConfig
from llmsim.errors import ConfigError
from llmsim.request import Request
from llmsim.routing import ROUTERS, make_router
from llmsim.simulation.run import simulate
from llmsim.testing import LinearProfile, requests
from tests.helpers import REPO

CONF = REPO / "conf" / "policy"
NEW = ("earliest_available", "max_capacity", "min_min", "decode_balancer", "dedicated_small_large",
       "quality_first", "qos_lookahead", "static_model", "capped_model")


def _cluster(n: int, kv_tokens: int = 1_000_000, models: list[str] | None = None, **prof) -> list[InstanceConfig]:
    models = models or ["llama-2-7b"] * n
    return [InstanceConfig(model=m, engine=EngineConfig(policy="vllm_v0"),
                           profile=LinearProfile(kv_tokens=kv_tokens, **prof)) for m in models]


def _by_id(res) -> dict[int, dict]:
    return {int(r.id): r._asdict() for r in res.requests.itertuples()}


@pytest.mark.parametrize("name", NEW)
def test_registered_with_a_policy_config(name):
    assert name in ROUTERS
    cfg = yaml.safe_load((CONF / f"{name}.yaml").read_text())
    assert cfg["name"] == name


def test_earliest_available_waits_for_space_in_arrival_order():
    # 10 blocks of 16 tokens per instance; two 96-token prompts fill 6 blocks each
    rows = [(0.0, 96, 40), (0.001, 96, 50), (0.002, 80, 5), (0.003, 16, 5)]
    res = simulate(_cluster(2, kv_tokens=160), requests(rows), "earliest_available", central_queue_tick=0.02,
                   policy_kwargs={"kv_tokens": 160})
    r = _by_id(res)
    assert (r[0]["instance"], r[1]["instance"]) == (0, 1)
    # the 80-token prompt fits nowhere until request 0 leaves instance 0
    assert r[2]["routed_time"] >= r[0]["finish"] and r[2]["instance"] == 0
    # the small request behind it would fit at once, but the router keeps arrival order
    assert r[3]["routed_time"] >= r[2]["routed_time"]


def test_max_capacity_routes_on_the_second_to_the_freest_instance():
    rows = [(0.3, 96, 400), (1.2, 16, 300), (2.5, 16, 20)]
    res = simulate(_cluster(2, kv_tokens=2000), requests(rows), "max_capacity", central_queue_tick=0.02,
                   policy_kwargs={"kv_tokens": 2000})
    r = _by_id(res)
    assert [r[i]["routed_time"] for i in range(3)] == pytest.approx([1.0, 2.0, 3.0], abs=0.021)
    # request 2: instance 1 holds 16 + ~70 tokens, instance 0 holds 96 + ~250: the freer one is 1
    assert [r[i]["instance"] for i in range(3)] == [0, 1, 1]


def test_min_min_uses_the_bucket_upper_bound():
    # job times: 251 tokens -> bucket 1,000 (20 s); 200 -> bucket 250 (5 s). By bucket bounds instance 0
    # holds 20 s and instance 1 holds 2 x 5 s, so request 3 goes to 1; by true tokens (251 < 400) it would go to 0
    rows = [(0.0, 10, 251), (0.001, 10, 200), (0.002, 10, 200), (0.003, 10, 50)]
    res = simulate(_cluster(2), requests(rows), "min_min")
    assert [_by_id(res)[i]["instance"] for i in range(4)] == [0, 1, 1, 1]
    by_tokens = simulate(_cluster(2), requests(rows), "decode_balancer")
    assert _by_id(by_tokens)[3]["instance"] == 0  # balancing true tokens differs here


def test_decode_balancer_balances_known_decode_tokens_not_queue_lengths():
    rows = [(0.0, 10, 300), (0.001, 10, 10), (0.002, 10, 10), (0.003, 10, 10)]
    res = simulate(_cluster(2), requests(rows), "decode_balancer")
    assert [_by_id(res)[i]["instance"] for i in range(4)] == [0, 1, 1, 1]


def test_dedicated_small_large_splits_by_predicted_decode():
    rows = [(0.0, 10, 10), (0.001, 10, 500), (0.002, 10, 20), (0.003, 10, 600), (0.004, 10, 30)]
    res = simulate(_cluster(4), requests(rows), "dedicated_small_large", policy_kwargs={"large": 2})
    assert [_by_id(res)[i]["instance"] for i in range(5)] == [0, 2, 1, 3, 0]


def test_dedicated_split_with_least_work_left_inside_each_group():
    """The same split, the least loaded instance of the group instead of its turn: the fourth light request goes
    to instance 0 again (two short requests' work) and not, in turn, to instance 1 (a 2,000-token prompt's)."""
    rows = [(0.0, 10, 5), (0.001, 2000, 200), (0.002, 10, 5), (0.003, 10, 5), (0.004, 10, 900)]
    placed = {}
    for within in ("round_robin", "least_work_left"):
        reqs = requests(rows)
        for r in reqs:
            r.predicted_output = r.output_tokens
        res = simulate(_cluster(4), reqs, "dedicated_small_large", policy_kwargs={"large": 2, "within": within})
        placed[within] = [_by_id(res)[i]["instance"] for i in range(5)]
    assert placed == {"round_robin": [0, 1, 0, 1, 2], "least_work_left": [0, 1, 0, 0, 2]}
    with pytest.raises(ConfigError, match="policy.kwargs.within"):
        make_router("dedicated_small_large", within="shortest")


def test_dedicated_split_spills_light_requests_over_when_the_heavy_group_is_far_faster():
    """Only light requests with long prompts: the plain split queues them all on the light half; by latency with a
    spill, the idle heavy half takes some once the light half's queue is 10 % (+0.1 s) slower."""
    rows = [(0.001 * i, 3000, 200) for i in range(8)]
    placed = {}
    for spill in (None, 1.1):
        reqs = requests(rows)
        for r in reqs:
            r.predicted_output = r.output_tokens
        res = simulate(_cluster(4), reqs, "dedicated_small_large",
                       policy_kwargs={"large": 2, "within": "least_latency", "spill": spill})
        placed[spill] = [_by_id(res)[i]["instance"] for i in range(8)]
    assert set(placed[None]) == {0, 1}
    assert placed[1.1][:2] == [0, 1] and {2, 3} <= set(placed[1.1])
    for bad in ({"spill": 0.5, "within": "least_latency"}, {"spill": 2.0}, {"spill": True, "within": "least_latency"}):
        with pytest.raises(ConfigError, match="policy.kwargs.spill"):
            make_router("dedicated_small_large", **bad)


def test_a_spill_load_keeps_requests_off_an_instance_of_the_other_group_while_it_runs_some():
    """Light requests with long prompts every 50 ms: the spill sends the third and fourth to the idle heavy half and,
    without a load, also the ninth and tenth while those still run; a spill raised by the heavy instances' busy
    seats (a load this large: any running request) keeps them on the light half."""
    placed = {}
    for load in (0.0, 1000.0):
        reqs = requests([(0.05 * i, 3000, 200) for i in range(12)])
        for r in reqs:
            r.predicted_output = r.output_tokens
        res = simulate(_cluster(4), reqs, "dedicated_small_large",
                       policy_kwargs={"large": 2, "within": "least_latency", "spill": 1.1, "spill_load": load})
        placed[load] = [_by_id(res)[i]["instance"] for i in range(12)]
    assert placed[0.0][2:4] == placed[1000.0][2:4] == [2, 3]
    assert placed[0.0][8:10] == [2, 3] and placed[1000.0][8:10] == [0, 1]
    for light_load, heavy_load in ((1000.0, 0.0), (0.0, 1000.0)):  # these light requests spill by the light load
        reqs = requests([(0.05 * i, 3000, 200) for i in range(12)])
        for r in reqs:
            r.predicted_output = r.output_tokens
        res = simulate(_cluster(4), reqs, "dedicated_small_large",
                       policy_kwargs={"large": 2, "within": "least_latency", "spill": 1.1, "spill_load": heavy_load,
                                      "spill_load_light": light_load})
        assert [_by_id(res)[i]["instance"] for i in range(12)] == placed[light_load]
    with pytest.raises(ConfigError, match="policy.kwargs.spill_load_light"):
        make_router("dedicated_small_large", within="least_latency", spill=1.1, spill_load_light=-2.0)
    for bad in ({"spill_load": 1.0, "within": "least_latency"}, {"spill": 1.1, "spill_load": -1.0},
                {"spill": 1.1, "spill_load": float("inf")}, {"spill": 1.1, "spill_load": True}):
        with pytest.raises(ConfigError, match="policy.kwargs.spill_load"):
            make_router("dedicated_small_large", **{"within": "least_latency", **bad})


def test_a_light_only_spill_keeps_heavy_requests_in_their_group():
    """Heavy requests with long prompts: the spill sends some to the idle light half, ``spill_heavy: false`` keeps
    them all on the heavy half; light requests (the test above) still spill the other way."""
    placed = {}
    for output, heavy in ((600, True), (600, False), (200, False)):
        reqs = requests([(0.001 * i, 3000, output) for i in range(8)])
        for r in reqs:
            r.predicted_output = r.output_tokens
        res = simulate(_cluster(4), reqs, "dedicated_small_large",
                       policy_kwargs={"large": 2, "within": "least_latency", "spill": 1.1, "spill_heavy": heavy})
        placed[output, heavy] = {_by_id(res)[i]["instance"] for i in range(8)}
    assert placed[600, True] == {0, 1, 2, 3} and placed[600, False] == {2, 3}
    assert placed[200, False] == {0, 1, 2, 3}
    with pytest.raises(ConfigError, match="policy.kwargs.spill_heavy"):
        make_router("dedicated_small_large", within="least_latency", spill=1.1, spill_heavy="no")


def _unequal(kv_tokens: list[int]) -> list[InstanceConfig]:
    return [InstanceConfig(model="llama-2-7b", engine=EngineConfig(policy="vllm_v0"),
                           profile=LinearProfile(kv_tokens=kv)) for kv in kv_tokens]


def test_a_kv_aware_split_puts_the_heavy_group_on_the_largest_caches_and_fewer_seats_on_small_ones():
    """Heavy requests go to the two instances with the most KV (listed first and third here), not the last two;
    light requests with a spill count a cache a tenth the size as a tenth of the seats, so fewer go there."""
    reqs = requests([(0.001 * i, 500, 600) for i in range(4)])
    for r in reqs:
        r.predicted_output = r.output_tokens
    res = simulate(_unequal([200_000, 20_000, 200_000, 20_000]), reqs, "dedicated_small_large",
                   policy_kwargs={"kv_aware": True})
    assert [_by_id(res)[i]["instance"] for i in range(4)] == [0, 2, 0, 2]
    counts = {}
    for kv_aware in (False, True):
        reqs = requests([(0.002 * i, 3000, 200) for i in range(24)])
        for r in reqs:
            r.predicted_output = r.output_tokens
        res = simulate(_unequal([20_000, 200_000, 200_000, 200_000]), reqs, "dedicated_small_large",
                       policy_kwargs={"within": "least_latency", "spill": 1.0, "kv_aware": kv_aware})
        counts[kv_aware] = sum(_by_id(res)[i]["instance"] == 0 for i in range(24))
    assert counts[True] < counts[False], counts
    with pytest.raises(ConfigError, match="policy.kwargs.kv_aware"):
        make_router("dedicated_small_large", kv_aware="yes")


def test_a_kv_aware_split_changes_nothing_on_equal_gpus():
    rows = [(0.01 * i, 200 + 97 * (i % 23), 20 + 53 * (i % 17)) for i in range(120)]
    placed = []
    for kv_aware in (False, True):
        reqs = requests(rows)
        for r in reqs:
            r.predicted_output = r.output_tokens
        res = simulate(_cluster(4, kv_tokens=30_000), reqs, "dedicated_small_large",
                       policy_kwargs={"within": "least_latency", "spill": 1.0, "spill_load": 1.5,
                                      "kv_aware": kv_aware})
        placed.append([_by_id(res)[i]["instance"] for i in range(120)])
    assert placed[0] == placed[1] and len(set(placed[0])) == 4


def _qos_requests(rows: list[tuple[float, int, int, dict[str, float]]]) -> list[Request]:
    return [Request(i, a, p, o, outputs_by_model={m: o for m in q}, quality_by_model=q)
            for i, (a, p, o, q) in enumerate(rows)]


def test_quality_first_takes_the_best_expert_until_its_queue_is_full():
    models = ["alpaca-native", "chatglm-6b", "koala-7b"]
    q = {"alpaca-native": 0.6, "chatglm-6b": 0.8, "koala-7b": 0.7}
    reqs = _qos_requests([(0.0, 50, 5, q), (0.0, 50, 5, q), (0.0, 50, 5, q)])
    res = simulate(_cluster(3, models=models), reqs, "quality_first", policy_kwargs={"models": models})
    assert [_by_id(res)[i]["instance"] for i in range(3)] == [1, 1, 1]
    # same instant: the first request still waits at chatglm when the second arrives
    reqs = _qos_requests([(0.0, 50, 5, q), (0.0, 50, 5, q), (0.0, 50, 5, q)])
    res = simulate(_cluster(3, models=models), reqs, "quality_first",
                   policy_kwargs={"models": models, "max_waiting": 1})
    assert [_by_id(res)[i]["instance"] for i in range(3)] == [1, 2, 0]
    with pytest.raises(ConfigError, match="models"):
        make_router("quality_first", models="alpaca-native")  # a list of names, not one
    with pytest.raises(ConfigError, match="needs policy.kwargs.models"):
        make_router("qos_lookahead", k1={"alpaca-native": 7e-5})


def test_qos_lookahead_spares_the_running_request():
    # step = 0.01 + 2e-5 x decode context; L = 30 ms/token. Alone, an 800-token prompt decodes at ~27 ms/token;
    # a second such request on the same expert pushes both over L, so the lookahead sends it to the worse expert
    models = ["alpaca-native", "chatglm-6b"]
    q = {"alpaca-native": 0.9, "chatglm-6b": 0.5}
    rows = [(0.0, 800, 200, q), (1.0, 800, 200, q)]
    prof = {"base": 0.01, "per_token": 0.0, "per_ctx": 2e-5}
    kw = {"models": models, "k1": 0.0, "k2": 2e-5, "base": 0.01, "latency_limit": 0.03}
    res = simulate(_cluster(2, models=models, **prof), _qos_requests(rows), "qos_lookahead", policy_kwargs=kw)
    r = _by_id(res)
    assert [r[0]["instance"], r[1]["instance"]] == [0, 1]
    assert all((r[i]["finish"] - r[i]["arrival"]) / 200 <= 0.03 for i in (0, 1))
    greedy = simulate(_cluster(2, models=models, **prof), _qos_requests(rows), "quality_first",
                      policy_kwargs={"models": models})
    g = _by_id(greedy)
    assert g[1]["instance"] == 0 and (g[0]["finish"] - g[0]["arrival"]) / 200 > 0.03


def test_static_model_uses_only_its_replicas_smallest_batch_first():
    models = ["opt-125m", "opt-1.3b", "opt-125m", "opt-1.3b"]
    rows = [(0.0, 10, 200), (0.001, 10, 200), (0.002, 10, 200)]
    res = simulate(_cluster(4, models=models), requests(rows), "static_model",
                   policy_kwargs={"model": "opt-1.3b", "models": models})
    assert [_by_id(res)[i]["instance"] for i in range(3)] == [1, 3, 1]
    with pytest.raises(ConfigError, match="not among"):
        make_router("static_model", model="opt-6.7b", models=models)


def test_capped_model_takes_the_preferred_size_until_its_least_loaded_replica_is_full():
    models = ["opt-125m", "opt-1.3b", "opt-125m", "opt-1.3b"]
    rows = [(0.001 * i, 10, 400) for i in range(6)]
    res = simulate(_cluster(4, models=models), requests(rows), "capped_model",
                   policy_kwargs={"models": models, "order": ["opt-1.3b", "opt-125m"], "caps": {"opt-1.3b": 2}})
    # 1.3b replicas 1, 3 take two requests each (cap 2 on the least loaded), then the 125m replicas, smallest first
    assert [_by_id(res)[i]["instance"] for i in range(6)] == [1, 3, 1, 3, 0, 2]
    uncapped = simulate(_cluster(4, models=models), requests(rows), "capped_model",
                        policy_kwargs={"models": models, "order": ["opt-1.3b", "opt-125m"]})
    assert {_by_id(uncapped)[i]["instance"] for i in range(6)} == {1, 3}  # no cap: static opt-1.3b
    with pytest.raises(ConfigError, match="caps: 'opt-6.7b' is not in policy.kwargs.order"):
        make_router("capped_model", models=models, caps={"opt-6.7b": 1})
    with pytest.raises(ConfigError, match=r"caps.opt-1.3b: expected a batch size >= 0"):
        make_router("capped_model", models=models, caps={"opt-1.3b": -1})
    with pytest.raises(ConfigError, match="capped_model needs the model name of every instance"):
        make_router("capped_model", caps={"opt-1.3b": 2})
    one_model = simulate(_cluster(2), requests(rows[:4]), "capped_model")  # no models: the least-loaded instance
    assert [_by_id(one_model)[i]["instance"] for i in range(4)] == [0, 1, 0, 1]


def test_a_spill_that_avoids_queues_sends_at_most_a_seat_and_one_waiting_request_to_each_other_instance():
    """Sixteen light requests at once on instances of one seat each: the spill sends many to the heavy half; with
    ``spill_queued: false`` only while nothing waits there (one running and one queued each, the rest stay home)."""
    placed = {}
    for queued in (True, False):
        reqs = requests([(0.001 * i, 3000, 200) for i in range(16)])
        for r in reqs:
            r.predicted_output = r.output_tokens
        cluster = [InstanceConfig(model="llama-2-7b", engine=EngineConfig(policy="vllm_v0", max_num_seqs=1),
                                  profile=LinearProfile(kv_tokens=1_000_000)) for _ in range(4)]
        res = simulate(cluster, reqs, "dedicated_small_large",
                       policy_kwargs={"large": 2, "within": "least_latency", "spill": 1.0, "spill_queued": queued})
        placed[queued] = [_by_id(res)[i]["instance"] for i in range(16)]
    spilled = {q: sum(i in (2, 3) for i in p) for q, p in placed.items()}
    assert spilled[False] == 4 and spilled[True] > 4
    with pytest.raises(ConfigError, match="policy.kwargs.spill_queued"):
        make_router("dedicated_small_large", within="least_latency", spill=1.0, spill_queued="no")


class _WorkView:
    """What the split's latency scores read: each instance's state and tokens of work left."""

    def __init__(self, instances, work):
        from llmsim.state.cluster_state import ClusterState
        self._state = ClusterState(0.0, 0.0, 0, False, 0, 0.0, tuple(instances))
        self._work = work
        self.num_instances = len(instances)

    def state(self):
        return self._state

    def work_left(self):
        return list(self._work)


def test_batch_seats_count_the_batch_a_full_kv_cache_holds_not_max_num_seqs():
    """Four requests fill 200 of 256 blocks: the cache holds 4 x 256 / 200 = 5.12 at that footprint, so 1,000 tokens
    of queued work drain at 5.12 tokens an iteration, not 128; an idle instance keeps its 128 seats."""
    from llmsim.routing.load import held_seats
    from llmsim.state.cluster_state import InstanceState

    def state(idx, running, used):
        return InstanceState(idx, f"{idx}", "llama-2-7b", "v100-16gb", True, running, 0, 0, used, 256, 16, 128,
                             4096, 4096, 0.05, 0.0)

    full, idle = state(0, 4, 200), state(1, 0, 0)
    assert held_seats(full) == pytest.approx(5.12) and held_seats(idle) == 128.0
    req = Request(0, 0.0, 100, 300)
    view = _WorkView([full, idle], [1000, 1000])
    plain = make_router("dedicated_small_large", within="least_latency").scores(req, view)
    held = make_router("dedicated_small_large", within="least_latency", batch_seats=True).scores(req, view)
    assert plain[0] == pytest.approx(1000 * 0.05 / 128 + 300 * 0.05)
    assert held[0] == pytest.approx(1000 * 0.05 / 5.12 + 300 * 0.05)
    assert held[1] == plain[1]  # nothing runs there: max_num_seqs
    with pytest.raises(ConfigError, match="policy.kwargs.batch_seats"):
        make_router("dedicated_small_large", batch_seats="yes")


def test_a_split_by_work_gives_the_heavy_requests_the_instances_their_share_of_the_work_asks_for():
    """Nine heavy requests of 600 predicted tokens for each light one of 100: 98 % of the work is heavy, so three of
    four instances are large (never all: the light requests keep one); an even mix keeps the halves."""
    router = make_router("dedicated_small_large", large="by_work")
    sizes = [router.work_share_large(4, i % 10 != 0, 600 if i % 10 else 100) for i in range(200)]
    assert sizes[-1] == 3 and max(sizes) == 3
    router.reset()
    assert [router.work_share_large(4, i % 2 == 1, 300) for i in range(100)][-1] == 2
    reqs = requests([(0.01 * i, 50, 600 if i % 10 else 100) for i in range(60)])
    for r in reqs:
        r.predicted_output = r.output_tokens
    res = simulate(_cluster(4), reqs, "dedicated_small_large", policy_kwargs={"large": "by_work"})
    on = _by_id(res)
    assert {on[i]["instance"] for i in range(30, 60) if i % 10} == {1, 2, 3}  # heavy: the last three, in turns
    with pytest.raises(ConfigError, match="policy.kwargs.large"):
        make_router("dedicated_small_large", large="by_load")


def test_a_split_that_balances_while_most_requests_are_heavy():
    """Only heavy requests: the split gives them the two large instances, a balance above a 0.5 heavy share spreads
    them over all four by KV demand; one heavy request in ten changes nothing."""
    def placed(rows, **kw):
        reqs = requests(rows)
        for r in reqs:
            r.predicted_output = r.output_tokens
        res = simulate(_cluster(4), reqs, "dedicated_small_large", policy_kwargs={"large": 2, **kw})
        return [_by_id(res)[i]["instance"] for i in range(len(rows))]

    heavy = [(0.01 * i, 50, 600) for i in range(12)]
    assert set(placed(heavy)) == {2, 3}
    assert set(placed(heavy, balance_heavy=0.5)) == {0, 1, 2, 3}
    mixed = [(0.01 * i, 50, 600 if i % 10 == 9 else 100) for i in range(40)]
    assert placed(mixed, balance_heavy=0.5) == placed(mixed)
    router = make_router("dedicated_small_large", balance_heavy=0.7)
    assert [router.mostly_heavy(h) for h in (True, True, False, True)][-1]  # a 3-in-4 share is above 0.7
    router = make_router("dedicated_small_large", balance_heavy=0.8)
    assert not [router.mostly_heavy(h) for h in (True, True, False, True)][-1]
    for bad in (0, 1, 1.5, -0.1, True, "0.5", float("nan")):
        with pytest.raises(ConfigError, match="policy.kwargs.balance_heavy"):
            make_router("dedicated_small_large", balance_heavy=bad)
