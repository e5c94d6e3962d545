"""Property-based invariants over random clusters and workloads, and fast-path equivalence."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.cluster import Cluster
from llmsim.policies import make_router
from llmsim.request import Request
from llmsim.testing import LinearProfile

ROUTERS = ["random", "round_robin", "jsq", "least_kv", "least_work_left", "power_of_two"]


@st.composite
def scenarios(draw):
    n_inst = draw(st.integers(1, 3))
    insts = []
    for _ in range(n_inst):
        policy = draw(st.sampled_from(["vllm_v0", "chunked", "vllm_v0_sjf", "chunked_sjf"]))
        bs = draw(st.sampled_from([1, 2, 4, 16]))
        max_len = draw(st.integers(40, 300))
        eng = dict(
            policy=policy,
            block_size=bs,
            num_gpu_blocks=draw(st.integers(max(3, -(-max_len // bs) // 2), 4 * max_len // bs + 4)),
            max_num_seqs=draw(st.integers(1, 24)),
            max_model_len=max_len,
            max_num_batched_tokens=(draw(st.integers(max_len, 2 * max_len)) if policy.startswith("vllm_v0")
                                    else draw(st.integers(4, 2 * max_len))),
            preemption=draw(st.sampled_from(["recompute", "swap"])),
            swap_space_gb=draw(st.sampled_from([0.0005, 0.01])),
            watermark=draw(st.sampled_from([0.0, 0.05])),
        )
        prof = LinearProfile(base=draw(st.floats(0.001, 0.02)), per_token=draw(st.floats(1e-5, 1e-3)),
                             per_ctx=draw(st.sampled_from([0.0, 1e-5])))
        insts.append((prof, eng))
    n_req = draw(st.integers(1, 60))
    seed = draw(st.integers(0, 2**31 - 1))
    rate = draw(st.floats(0.5, 200.0))
    router = draw(st.sampled_from(ROUTERS))
    quantise = draw(st.booleans())  # coinciding arrival times stress same-instant ordering
    devices = [draw(st.sampled_from([None, "gpu0", "gpu1"])) for _ in insts]  # co-located instances
    return [(p, {**e, "gpu_memory_utilization": 0.3}, d) for (p, e), d in zip(insts, devices)], n_req, seed, rate, \
        router, quantise


def workload(n, seed, rate, quantise, max_prompt=200, max_out=120):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1.0 / rate, n))
    if quantise:
        t = np.ceil(t * 20) / 20
    p = rng.integers(1, max_prompt, n)
    o = rng.integers(1, max_out, n)
    return [Request(i, float(t[i]), int(p[i]), int(o[i])) for i in range(n)]


def build(insts, fast):
    return [InstanceConfig(profile=prof, engine=EngineConfig(fast_path=fast, **eng), device=dev)
            for prof, eng, dev in insts]


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scenarios())
def test_invariants_hold_every_event(sc):
    insts, n, seed, rate, router, quantise = sc
    reqs = workload(n, seed, rate, quantise)
    cluster = Cluster(build(insts, fast=False), make_router(router, seed=seed), on_unservable="drop",
                      metrics_interval=0.25)
    cluster.start(reqs)
    env = cluster.env
    while env._queue:
        env.step()
        for inst in cluster.instances:
            assert 0 <= inst.kv_free <= inst.kv_total
            on_gpu = sum(r.blocks for r in inst.running)
            assert on_gpu + inst.kv_free == inst.kv_total
            assert 0 <= inst.cpu_free <= inst.cpu_total
    cluster.finish()
    rec = cluster.recorder
    done = list(rec.cols["id"])
    dropped = [d[0] for d in rec.dropped]
    assert sorted(done + dropped) == list(range(n)), "every request finished exactly once or dropped"
    df = rec.requests_frame()
    assert (df.arrival <= df.routed_time).all()
    assert (df.routed_time <= df.first_scheduled).all()
    assert (df.first_scheduled <= df.first_token).all()
    assert (df.first_token <= df.finish).all()
    by_id = {r.id: r for r in reqs}
    for row in df.itertuples():
        r = by_id[row.id]
        inst = cluster.instances[row.instance]
        assert row.output_tokens == min(r.output_tokens, inst.max_model_len - r.prompt_tokens)


@SETTINGS
@given(scenarios(), st.sampled_from([0.0, 0.3]))
def test_fast_path_equals_stepping(sc, staleness):
    insts, n, seed, rate, router, quantise = sc
    out = []
    for fast in (True, False):
        res = simulate(build(insts, fast), workload(n, seed, rate, quantise), router, seed=seed,
                       on_unservable="drop", metrics_interval=0.37, view_staleness=staleness)
        out.append(res)
    a, b = out
    assert a.requests.equals(b.requests)
    assert a.dropped.equals(b.dropped)
    assert a.timeline.equals(b.timeline)
    assert a.instances.equals(b.instances)
    for k, v in a.summary.items():
        w = b.summary[k]
        assert v == w or (v != v and w != w), k


def test_same_seed_gives_identical_tables_and_different_seed_differs():
    from llmsim.workload import build_workload

    cfg = {"kind": "synthetic", "arrival": {"process": "poisson", "rate": 20.0},
           "prompt": {"dist": "lognormal", "mean": 300, "sigma": 0.8, "max": 1500},
           "output": {"dist": "lognormal", "mean": 80, "sigma": 0.8, "max": 400}, "num_requests": 400}
    insts = [InstanceConfig(engine=EngineConfig(max_num_seqs=16)) for _ in range(3)]

    def go(seed):
        return simulate(insts, build_workload(cfg, seed), "power_of_two", seed=seed)

    a, b, c = go(7), go(7), go(8)
    assert a.requests.equals(b.requests) and a.summary == b.summary
    assert not a.requests.equals(c.requests)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([("llama-2-7b", "a100-80gb"), ("llama-3.1-8b", "rtx4090"), ("llama-2-7b", "v100-32gb"),
                        ("opt-6.7b", "titan-rtx"), ("qwen2.5-7b", "h100")]),
       st.integers(1, 512), st.integers(1, 10**6))
def test_profile_decode_closure_is_bit_identical_to_step_time(pair, n, ctx):
    from llmsim.profile import load_profile

    prof = load_profile(*pair)
    fn = getattr(prof, "decode_step_fn", None)
    if fn is not None:
        assert fn(n)(ctx) == prof.step_time(n, n, 0, 0, n, ctx)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**31 - 1), st.sampled_from(["vllm_v0", "chunked"]), st.floats(2.0, 30.0))
def test_fast_path_equals_stepping_with_measured_profiles(seed, policy, rate):
    insts = [InstanceConfig("llama-2-7b", "a100-80gb", engine=EngineConfig(policy=policy, fast_path=fast,
                                                                           max_num_seqs=32))
             for fast in (True, False)]
    out = [simulate([i], workload(80, seed, rate, False, 2000, 300), "round_robin") for i in insts]
    assert out[0].requests.equals(out[1].requests)
