"""The skewed-decode term (llmsim.perf.decode_skew) in the engine: stepping, the fast path and the decode cohort
compute the same iteration times with a profile that has it, and the term changes a run only for such profiles."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.engine.iteration import stepped_time
from llmsim.engine.scheduling import VllmV0Policy
from llmsim.perf.profile import load_profile
from llmsim.perf.profile_table import MeasuredProfile
from llmsim.request import Request
from tests.helpers import assert_frames_identical, examples

# (model, GPU, TP): two profiles with a decode_skew part, one without
SKEWED = [("llama-3.1-8b", "rtx4090", 1), ("qwen3-32b", "rtx-pro-6000", 2)]
PLAIN = ("llama-2-7b", "a100-80gb", 1)


def _requests(n: int, seed: int, rate: float, max_prompt: int = 1500, max_out: int = 300) -> list[Request]:
    """Prompts and outputs of very different lengths, so decode batches are skewed."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1.0 / rate, n))
    p = rng.integers(1, max_prompt, n, endpoint=True)
    o = rng.integers(1, max_out, n, endpoint=True)
    return [Request(i, float(t[i]), int(p[i]), int(o[i])) for i in range(n)]


def _run(members, policy: str, fast: bool, reqs: list[Request], profile=None):
    cfg = [InstanceConfig(m, g, tp=tp, profile=profile,
                          engine=EngineConfig(policy=policy, fast_path=fast, max_num_seqs=48,
                                              gpu_memory_utilization=0.9))
           for m, g, tp in members]
    return simulate(cfg, reqs, "round_robin", seed=1, on_unservable="drop")


def _without_skew(model: str, gpu: str, tp: int) -> MeasuredProfile:
    """The same profile with its decode_skew part taken out."""
    p = load_profile(model, gpu, tp)
    data = {k: v for k, v in p.data.items() if k != "decode_skew"}
    data["parts"] = {k: v for k, v in data["parts"].items() if k != "decode_skew"}
    return MeasuredProfile(data, p.path + " (no skew)")


@pytest.mark.parametrize("policy", ["vllm_v0", "chunked"])
@pytest.mark.parametrize("member", SKEWED)
def test_fast_path_and_cohort_equal_stepping_with_a_skew_profile(member, policy, monkeypatch):
    reqs = _requests(120, 3, 8.0)
    fast = _run([member], policy, True, reqs)
    assert_frames_identical(fast, _run([member], policy, False, reqs))
    monkeypatch.setattr(VllmV0Policy, "lazy_running", False)  # the per-request fast path, without the cohort
    assert_frames_identical(fast, _run([member], policy, True, reqs))


@settings(max_examples=examples(10), deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from(["vllm_v0", "chunked"]), st.floats(2.0, 20.0),
       st.lists(st.sampled_from([*SKEWED, PLAIN]), min_size=1, max_size=3))
def test_fast_path_equals_stepping_on_clusters_with_skew_profiles(seed, policy, rate, members):
    reqs = _requests(60, seed, rate, 1200, 200)
    out = [_run(members, policy, fast, reqs) for fast in (True, False)]
    assert_frames_identical(*out)
    assert len(out[0].requests) + len(out[0].dropped) == 60


@pytest.mark.parametrize("policy", ["vllm_v0", "chunked"])
def test_the_term_slows_skewed_batches_and_only_with_a_skew_part(policy):
    member = SKEWED[1]
    reqs = _requests(120, 5, 6.0)
    with_skew = _run([member], policy, True, reqs)
    without = _run([member], policy, True, reqs, _without_skew(*member))
    tpot, tpot0 = with_skew.requests["tpot_ms"].mean(), without.requests["tpot_ms"].mean()
    assert tpot > tpot0  # skewed batches take longer than their mean context says
    assert tpot < 1.1 * tpot0  # ... by a few percent (alpha of decode-only batches is about 0.03)


def _decoding(computed: int) -> Request:
    r = Request(0, 0.0, 10, 100)
    r.computed, r.generated, r.n_new = computed, computed - 9, 1
    return r


def test_stepped_time_adds_alpha_times_the_spread_for_decodes_only():
    p = load_profile(*SKEWED[0][:2])
    batch = [_decoding(c) for c in (100, 100, 100, 3000)]
    ctx = sum(r.computed + 1 for r in batch)
    base = p.step_time(4, 4, 0, 0, 4, ctx)
    spread = 4 * 3001 - ctx
    assert stepped_time(p, batch, 4, 0, 0, 4, ctx) == base + p.decode_skew.pure_extra(spread)
    assert p.decode_skew.pure_extra(spread) == pytest.approx(p.decode_skew.pure * p.data["decode_attention"][
        "per_ctx_token"] * spread)
    equal = [_decoding(500) for _ in range(4)]
    assert stepped_time(p, equal, 4, 0, 0, 4, 4 * 501) == p.step_time(4, 4, 0, 0, 4, 4 * 501)
    plain = load_profile(*PLAIN[:2])
    assert getattr(plain, "decode_skew", None) is None
    assert stepped_time(plain, batch, 4, 0, 0, 4, ctx) == plain.step_time(4, 4, 0, 0, 4, ctx)


@settings(max_examples=examples(100))
@given(st.sampled_from(SKEWED), st.integers(1, 256), st.integers(1, 10**6), st.integers(0, 10**6))
def test_the_run_closure_with_a_spread_equals_stepping(member, n, ctx, spread):
    p = load_profile(*member)
    base = p.step_time(n, n, 0, 0, n, ctx)
    want = base + p.decode_skew.pure_extra(spread) if spread else base
    assert p.decode_step_fn(n, spread)(ctx) == want
