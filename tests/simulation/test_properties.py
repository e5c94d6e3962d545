"""Property-based invariants over random clusters, workloads and routers, and fast-path equivalence.

Every generated run must satisfy: each request is finished or dropped exactly once; a finished request
generated exactly its target (its output on that instance's model, truncated at max_model_len); times
are monotone; the fast path equals stepping bit for bit; the same inputs give identical tables. The
generators cover heuristic routers, routers that WAIT (central queue, retried at completions and at
``central_queue_tick``) and DROP, swap preemption, heterogeneous clusters (GPUs, models, max_model_len)
and co-located instances. Example counts scale with the Hypothesis profile (tests/conftest.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import currently_in_test_context, event, given, settings
from hypothesis import strategies as st

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.cluster import Cluster
from llmsim.errors import ConfigError
from llmsim.perf.hardware import get_gpu
from llmsim.perf.models import get_model
from llmsim.request import Request
from llmsim.routing import DROP, WAIT, Router, make_router
from llmsim.testing import LinearProfile
from tests.helpers import assert_frames_identical, examples, hang_limit
from tests.perf.helpers import tiny

HEURISTICS = ["random", "round_robin", "jsq", "least_kv", "least_work_left", "power_of_two"]
# the last two: a sliding window on every layer (Mistral-7B's 4,096 tokens, a tiny model's 24: its engines free blocks
# as the window moves, on the fast path too, and vLLM V0's decode cohort keeps them as sums: llmsim.engine.window,
# llmsim.engine.window_run, llmsim.engine.window_cohort)
MODELS = ["llama-2-7b", "opt-125m", "opt-1.3b", "qwen2.5-3b", "mistral-7b", tiny("tiny-mistral-window-24")]
GPUS = ["a100-80gb", "h100", "a10"]
HANG_LIMIT = hang_limit(240)
DROP_REASONS = {"router", "prompt_exceeds_max_model_len", "prompt_exceeds_kv_capacity", "exceeds_kv_capacity",
                "cannot_be_scheduled"}  # never_routed is not expected: generated routers route everything


class ScriptedRouter(Router):
    """Answers DROP with probability p_drop, WAIT with probability p_wait (at most ``max_waits`` times per
    request), otherwise a random instance that can serve the request.

    It only answers WAIT when a retry is certain to come: with a central-queue tick, or without one while
    some instance holds a request (its completion triggers the retry; the generator gives such clusters
    enough KV cache that no request is dropped instead of finishing). So every request is eventually
    routed or dropped by the router, and a run never ends with requests left in the central queue.
    """

    name = "scripted_test"

    def __init__(self, seed: int, p_wait: float, p_drop: float, max_waits: int, ticking: bool,
                 hold: frozenset[int] = frozenset()) -> None:
        super().__init__(seed)
        self.p_wait, self.p_drop, self.max_waits, self.ticking = p_wait, p_drop, max_waits, ticking
        self.hold = hold  # ids answered WAIT forever: they must end never_routed
        self.waits: dict[int, int] = {}
        self.drops = 0

    def route(self, req: Request, view) -> int:
        if req.id in self.hold:
            return WAIT
        u = self.rng.random()
        if u < self.p_drop:
            self.drops += 1
            return DROP
        n = self.waits.get(req.id, 0)
        if u < self.p_drop + self.p_wait and n < self.max_waits and (self.ticking or any(view.queue_lengths())):
            self.waits[req.id] = n + 1
            return WAIT
        c = view.candidates(req)
        return c[int(self.rng.integers(len(c)))]


# ---------------------------------------------------------------------------------------------- generators
@st.composite
def instance_spec(draw, ample_kv: bool, swap: bool | None, hetero: bool) -> dict:
    """One instance: a LinearProfile on some (model, GPU) and random engine settings.

    ``ample_kv``: the cache holds a whole max_model_len sequence, so no request can outgrow it.
    ``swap``: True forces swap preemption with a large swap space and a tight cache, None draws it.
    """
    model = draw(st.sampled_from(MODELS)) if hetero else "llama-2-7b"
    gpu = draw(st.sampled_from(GPUS)) if hetero else "a100-80gb"
    policy = draw(st.sampled_from(["vllm_v0", "chunked", "vllm_v0_sjf", "chunked_sjf"]))
    bs = draw(st.sampled_from([1, 2, 4, 16]))
    max_len = draw(st.integers(40, 300))
    watermark = draw(st.sampled_from([0.0, 0.05]))
    whole = -(-(max_len + 1) // bs)  # blocks of one max_model_len sequence
    if ample_kv:
        blocks = draw(st.integers(math.ceil(whole * 1.1) + 2, 4 * whole + 4))
    elif swap:
        blocks = draw(st.integers(max(3, whole // 2), whole + 4))
    else:
        blocks = draw(st.integers(max(3, whole // 2), 4 * whole + 4))
    eng = dict(
        policy=policy, block_size=bs, num_gpu_blocks=blocks, max_num_seqs=draw(st.integers(1, 24)),
        max_model_len=max_len, watermark=watermark, gpu_memory_utilization=0.3,
        max_num_batched_tokens=(draw(st.integers(max_len, 2 * max_len)) if policy.startswith("vllm_v0")
                                else draw(st.integers(4, 2 * max_len))),
        preemption="swap" if swap else draw(st.sampled_from(["recompute", "swap"])),
        swap_space_gb=1.0 if swap else draw(st.sampled_from([0.0, 0.0005, 0.01, 0.2])),
    )
    prof = dict(base=draw(st.floats(0.001, 0.02)), per_token=draw(st.floats(1e-5, 1e-3)),
                per_ctx=draw(st.sampled_from([0.0, 1e-5])), model=model, gpu=gpu)
    # co-located instances must share a GPU type: the device name carries it
    device = draw(st.sampled_from([None, f"{gpu}:0", f"{gpu}:1"]))
    return {"profile": prof, "engine": eng, "device": device}


@st.composite
def scenarios(draw, routing: str = "any", swap: bool | None = None, hetero: bool | None = None) -> dict:
    """A cluster, a workload and a router. ``routing``: 'heuristic', 'scripted' (WAIT / DROP) or 'any'."""
    if routing == "any":
        routing = draw(st.sampled_from(["heuristic", "scripted"]))
    hetero = draw(st.booleans()) if hetero is None else hetero
    tick = draw(st.sampled_from([None, 0.05, 0.3])) if routing == "scripted" else None
    ample = routing == "scripted" and tick is None
    insts = draw(st.lists(instance_spec(ample, swap, hetero), min_size=1, max_size=3))
    if routing == "heuristic":
        router = {"kind": "heuristic", "name": draw(st.sampled_from(HEURISTICS))}
    else:
        router = {"kind": "scripted", "p_wait": draw(st.sampled_from([0.3, 0.8])),
                  "p_drop": draw(st.sampled_from([0.0, 0.1, 0.3])), "max_waits": draw(st.integers(1, 4))}
    n = draw(st.integers(10, 50) if swap else st.integers(1, 50))  # swapping needs contention
    longest = max(i["engine"]["max_model_len"] for i in insts)
    return {
        "insts": insts, "router": router, "n": n, "seed": draw(st.integers(0, 2**31 - 1)),
        "rate": draw(st.floats(0.5, 200.0)),
        "quantise": draw(st.booleans()),  # coinciding arrival times stress same-instant ordering
        "max_prompt": draw(st.integers(2, int(longest * 1.2))),  # some prompts fit only some instances
        "max_out": draw(st.integers(50, 200) if swap else st.integers(1, 150)),
        "per_model": hetero and draw(st.booleans()),  # per-model output lengths (outputs_by_model)
        "sim": {"central_queue_tick": tick, "metrics_interval": draw(st.sampled_from([0.1, 0.37, 1.0])),
                "view_staleness": 0.0 if ample else draw(st.sampled_from([0.0, 0.3])),
                "colocation_interference": draw(st.sampled_from([0.0, 1.0, 2.5]))},
    }


# ---------------------------------------------------------------------------------------------- running
def workload(n: int, seed: int, rate: float, quantise: bool, max_prompt: int = 200, max_out: int = 120,
             per_model: bool = False) -> list[Request]:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1.0 / rate, n))
    if quantise:
        t = np.ceil(t * 20) / 20
    p = rng.integers(1, max_prompt, n, endpoint=True)
    o = rng.integers(1, max_out, n, endpoint=True)
    out = []
    for i in range(n):
        by_model = None
        if per_model and rng.random() < 0.7:
            by_model = {m: int(rng.integers(1, max_out, endpoint=True)) for m in MODELS if rng.random() < 0.5}
        out.append(Request(i, float(t[i]), int(p[i]), int(o[i]), outputs_by_model=by_model))
    return out


def sc_workload(sc: dict) -> list[Request]:
    return workload(sc["n"], sc["seed"], sc["rate"], sc["quantise"], sc["max_prompt"], sc["max_out"],
                    sc["per_model"])


def build(insts: list[dict], fast: bool) -> list[InstanceConfig]:
    out = []
    for spec in insts:
        p = dict(spec["profile"])
        prof = LinearProfile(model=get_model(p.pop("model")), gpu=get_gpu(p.pop("gpu")), **p)
        out.append(InstanceConfig(profile=prof, engine=EngineConfig(fast_path=fast, **spec["engine"]),
                                  device=spec["device"]))
    return out


def sc_router(sc: dict) -> Router:
    r = sc["router"]
    if r["kind"] == "heuristic":
        return make_router(r["name"], seed=sc["seed"])
    return ScriptedRouter(sc["seed"], r["p_wait"], r["p_drop"], r["max_waits"],
                          ticking=sc["sim"]["central_queue_tick"] is not None, hold=frozenset(r.get("hold", ())))


def run(sc: dict, fast: bool, router: Router | None = None):
    return simulate(build(sc["insts"], fast), sc_workload(sc), router or sc_router(sc), seed=sc["seed"],
                    on_unservable="drop", **sc["sim"])


def check_result(sc: dict, res, router: Router) -> None:
    """Conservation, token targets, monotone times and drop bookkeeping of one finished run."""
    reqs = {r.id: r for r in sc_workload(sc)}
    df, dropped = res.requests, res.dropped
    assert sorted([*df["id"], *dropped["id"]]) == sorted(reqs), "every request finished or dropped, exactly once"
    assert res.summary["completed"] == len(df) and res.summary["dropped"] == len(dropped)
    assert res.summary["num_requests"] == len(reqs)
    never = set(getattr(router, "hold", ()))
    allowed = DROP_REASONS | ({"never_routed"} if never else set())
    assert set(dropped["reason"]) <= allowed, set(dropped["reason"])
    # held requests end never_routed, unless no instance could ever serve them (dropped before routing)
    held_out = dropped.loc[dropped["reason"] == "never_routed", "id"]
    assert set(held_out) <= never
    assert never <= set(held_out) | set(dropped.loc[dropped["reason"].str.startswith("prompt_exceeds"), "id"])
    assert (dropped["time"] >= dropped["arrival"]).all()
    if isinstance(router, ScriptedRouter):
        assert (dropped["reason"] == "router").sum() == router.drops
    else:
        assert (dropped["reason"] != "router").all()
    assert (df.arrival <= df.routed_time).all()
    assert (df.routed_time <= df.first_scheduled).all()
    assert (df.first_scheduled <= df.first_token).all()
    assert (df.first_token <= df.finish).all()
    models = list(res.instances["model"])
    for row in df.itertuples():
        r = reqs[row.id]
        limit = sc["insts"][row.instance]["engine"]["max_model_len"] - r.prompt_tokens
        want = r.output_for(models[row.instance])
        assert row.output_tokens == min(want, limit), (row.id, row.output_tokens, want, limit)
        assert row.truncated == (want > limit)
        assert row.requested_output_tokens == r.output_tokens
    if currently_in_test_context():
        _coverage_events(sc, df, dropped, router)


def _coverage_events(sc: dict, df, dropped, router: Router) -> None:
    """What a generated run exercised, shown by ``pytest --hypothesis-show-statistics``."""
    reasons = set(dropped.reason)
    for what, hit in (("waited", bool(getattr(router, "waits", None))), ("router drop", "router" in reasons),
                      ("other drop", bool(reasons - {"router"})), ("swapped", df.swaps.sum() > 0),
                      ("preempted", df.preemptions.sum() > 0), ("truncated", df.truncated.any()),
                      ("co-located", any(i["device"] for i in sc["insts"]))):
        event(f"{what}: {bool(hit)}")


# ---------------------------------------------------------------------------------------------- properties
@HANG_LIMIT
@settings(max_examples=examples(60))
@given(scenarios())
def test_invariants_hold_every_event(sc):
    """KV and swap accounting after every event (a wrapped ``env.step``), then the end-of-run invariants."""
    from llmsim.schema import SLO
    from llmsim.simulation.run import collect

    router = sc_router(sc)
    cluster = Cluster(build(sc["insts"], fast=False), router, on_unservable="drop", **sc["sim"])
    env = cluster.env
    inner = env.step

    def checked_step() -> None:
        inner()
        for inst in cluster.instances:
            assert 0 <= inst.kv.free <= inst.kv_total
            assert sum(r.blocks for r in inst.running) + inst.kv.free == inst.kv_total
            assert 0 <= inst.kv.cpu_free <= inst.kv.cpu_total
            assert sum(r.blocks for r in inst.swapped) + inst.kv.cpu_free == inst.kv.cpu_total

    env.step = checked_step  # the run loop looks step up on the instance
    cluster.run(sc_workload(sc))
    check_result(sc, collect(cluster, SLO()), router)


@HANG_LIMIT
@settings(max_examples=examples(60))
@given(scenarios())
def test_fast_path_equals_stepping_and_reruns_are_identical(sc):
    r1 = sc_router(sc)
    a = run(sc, fast=True, router=r1)
    check_result(sc, a, r1)
    assert_frames_identical(a, run(sc, fast=False))
    assert_frames_identical(a, run(sc, fast=True))


@HANG_LIMIT
@settings(max_examples=examples(40))
@given(scenarios(routing="scripted"))
def test_wait_and_drop_routers(sc):
    """Central queue with and without a tick: WAITed requests are routed later, DROPs are counted."""
    router = sc_router(sc)
    res = run(sc, fast=True, router=router)
    check_result(sc, res, router)
    df = res.requests
    # only requests the router WAITed are routed after their arrival; the others at their arrival instant
    late = set(df.loc[df.routed_time > df.arrival, "id"])
    assert late <= set(router.waits)
    assert (df.loc[~df["id"].isin(list(router.waits)), "routed_time"] == df.loc[
        ~df["id"].isin(list(router.waits)), "arrival"]).all()
    assert res.timeline["central_queue"].max() <= len(router.waits)
    assert_frames_identical(res, run(sc, fast=False))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("tick", [None, 0.05])
def test_wait_scenarios_do_wait(tick):
    """The scripted router's shape does WAIT and route later, with and without a tick (not vacuous)."""
    inst = {"profile": {"base": 0.01, "per_token": 1e-4, "per_ctx": 0.0, "model": "llama-2-7b", "gpu": "a100-80gb"},
            "engine": {"policy": "chunked", "block_size": 16, "num_gpu_blocks": 60, "max_num_seqs": 4,
                       "max_model_len": 300, "watermark": 0.0, "gpu_memory_utilization": 0.3,
                       "max_num_batched_tokens": 256, "preemption": "recompute", "swap_space_gb": 0.0},
            "device": None}
    sc = {"insts": [inst, inst], "router": {"kind": "scripted", "p_wait": 0.6, "p_drop": 0.1, "max_waits": 3},
          "n": 40, "seed": 2, "rate": 40.0, "quantise": False, "max_prompt": 200, "max_out": 60, "per_model": False,
          "sim": {"central_queue_tick": tick, "metrics_interval": 0.1, "view_staleness": 0.0,
                  "colocation_interference": 1.0}}
    router = sc_router(sc)
    res = run(sc, fast=True, router=router)
    check_result(sc, res, router)
    df = res.requests
    assert router.drops > 0
    assert (df.routed_time > df.arrival).sum() >= 5
    assert res.timeline["central_queue"].max() > 0
    assert_frames_identical(res, run(sc, fast=False))


@HANG_LIMIT
@settings(max_examples=examples(30))
@given(scenarios(swap=True))
def test_swap_preemption(sc):
    """Tight caches, swap preemption with room on the host: swap accounting holds, fast path exact."""
    router = sc_router(sc)
    res = run(sc, fast=True, router=router)
    check_result(sc, res, router)
    assert (res.requests["swaps"] <= res.requests["preemptions"]).all()
    assert_frames_identical(res, run(sc, fast=False))


def test_swap_scenarios_do_swap():
    """The swap generator's shape does swap (the property above is not vacuous): a tight cache, long outputs."""
    inst = {"profile": {"base": 0.01, "per_token": 1e-4, "per_ctx": 0.0, "model": "opt-125m", "gpu": "a100-80gb"},
            "engine": {"policy": "vllm_v0", "block_size": 4, "num_gpu_blocks": 40, "max_num_seqs": 8,
                       "max_model_len": 150, "watermark": 0.0, "gpu_memory_utilization": 0.3,
                       "max_num_batched_tokens": 300, "preemption": "swap", "swap_space_gb": 1.0},
            "device": None}
    sc = {"insts": [inst], "router": {"kind": "heuristic", "name": "round_robin"}, "n": 12, "seed": 1,
          "rate": 100.0, "quantise": False, "max_prompt": 40, "max_out": 100, "per_model": False,
          "sim": {"central_queue_tick": None, "metrics_interval": 1.0, "view_staleness": 0.0,
                  "colocation_interference": 1.0}}
    router = sc_router(sc)
    res = run(sc, fast=True, router=router)
    check_result(sc, res, router)
    assert res.instances["swap_outs"].sum() > 0
    assert res.requests["swaps"].sum() > 0
    assert_frames_identical(res, run(sc, fast=False))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("field", ["prompt_tokens", "output_tokens"])
@pytest.mark.parametrize("k", [0, 7])
def test_zero_length_requests_are_rejected_naming_the_request(field, k):
    """Prompt 0 or output 0 through the Python API: a ConfigError that names the request, not a silent 1."""
    reqs = workload(10, 5, 50.0, False)
    bad_id = 900_000 + k
    lengths = {"prompt_tokens": reqs[k].prompt_tokens, "output_tokens": reqs[k].output_tokens, field: 0}
    insts = [InstanceConfig(profile=LinearProfile(), engine=EngineConfig(max_model_len=400))]
    with pytest.raises(ConfigError, match=rf"\b{bad_id}\b"):  # raised by Request() or by the cluster
        reqs[k] = Request(bad_id, reqs[k].arrival, **lengths)
        simulate(insts, reqs, "round_robin", on_unservable="drop")


@HANG_LIMIT
@settings(max_examples=examples(30))
@given(scenarios(routing="scripted"), st.data())
def test_requests_held_forever_end_never_routed(sc, data):
    """A router that never routes some requests: the run still ends, and exactly those are never_routed."""
    hold = data.draw(st.sets(st.integers(0, sc["n"] - 1), min_size=1))
    sc = {**sc, "router": {**sc["router"], "hold": sorted(hold)}}
    router = sc_router(sc)
    res = run(sc, fast=True, router=router)
    check_result(sc, res, router)
    assert_frames_identical(res, run(sc, fast=False))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("tick", [None, 0.1])
def test_always_wait_router_ends_with_never_routed(tick):
    """A router that never routes: the run ends (idle cluster) and every request is counted never_routed."""

    class AlwaysWait(Router):
        name = "always_wait_test"

        def route(self, req, view):
            return WAIT

    reqs = workload(20, 3, 10.0, False)
    res = simulate([InstanceConfig(profile=LinearProfile())], reqs, AlwaysWait(), central_queue_tick=tick)
    assert len(res.requests) == 0
    assert sorted(res.dropped["id"]) == list(range(20))
    assert set(res.dropped["reason"]) == {"never_routed"}
    assert res.summary["dropped_by_reason"] == {"never_routed": 20}


@settings(max_examples=examples(200))
@given(st.sampled_from([("llama-2-7b", "a100-80gb"), ("llama-3.1-8b", "rtx4090"), ("llama-2-7b", "v100-32gb"),
                        ("opt-6.7b", "titan-rtx"), ("qwen2.5-7b", "h100")]),
       st.integers(1, 512), st.integers(1, 10**6))
def test_profile_decode_closure_is_bit_identical_to_step_time(pair, n, ctx):
    from llmsim.perf.profile import load_profile

    prof = load_profile(*pair)
    assert prof.decode_step_fn(n)(ctx) == prof.step_time(n, n, 0, 0, n, ctx)


MEASURED = [("llama-2-7b", "a100-80gb"), ("opt-1.3b", "a10"), ("llama-3.1-8b", "h100"), ("qwen2.5-3b", "a100-80gb"),
            ("opt-125m", "h100")]


@HANG_LIMIT
@settings(max_examples=examples(25))
@given(st.integers(0, 2**31 - 1), st.sampled_from(["vllm_v0", "chunked"]), st.floats(2.0, 30.0),
       st.lists(st.tuples(st.sampled_from(MEASURED), st.sampled_from([None, 1024, 2048])), min_size=1, max_size=3),
       st.sampled_from(HEURISTICS))
def test_fast_path_equals_stepping_on_measured_heterogeneous_clusters(seed, policy, rate, members, router):
    """Measured profiles of different models and GPUs, different max_model_len, in one cluster."""

    def cluster(fast):
        return [InstanceConfig(m, g, engine=EngineConfig(policy=policy, fast_path=fast, max_num_seqs=32,
                                                         max_model_len=ml, gpu_memory_utilization=0.3))
                for (m, g), ml in members]

    out = [simulate(cluster(fast), workload(80, seed, rate, False, 3000, 300), router, seed=seed,
                    on_unservable="drop") for fast in (True, False)]
    assert_frames_identical(*out)
    assert len(out[0].requests) + len(out[0].dropped) == 80


def test_same_seed_gives_identical_tables_and_different_seed_differs():
    from llmsim.workload import build_workload

    cfg = {"kind": "synthetic", "arrival": {"process": "poisson", "rate": 20.0},
           "prompt": {"dist": "lognormal", "mean": 300, "sigma": 0.8, "max": 1500},
           "output": {"dist": "lognormal", "mean": 80, "sigma": 0.8, "max": 400}, "num_requests": 400}
    insts = [InstanceConfig(engine=EngineConfig(max_num_seqs=16)) for _ in range(3)]

    def go(seed):
        return simulate(insts, build_workload(cfg, seed), "power_of_two", seed=seed)

    a, b, c = go(7), go(7), go(8)
    assert_frames_identical(a, b)
    assert not a.requests.equals(c.requests)
