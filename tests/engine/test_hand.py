"""Hand-computed scenarios: every number below is worked out in the comments."""

import pytest

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.testing import LinearProfile, requests

# step time = 0.01 + 0.001 * tokens in the iteration
PROF = LinearProfile(base=0.01, per_token=0.001)


def run(rows, fast=True, **engine):
    inst = InstanceConfig(profile=PROF, engine=EngineConfig(fast_path=fast, **engine))
    return simulate([inst], requests(rows), "round_robin")


@pytest.mark.parametrize("fast", [True, False])
def test_single_request_ttft_is_prefill_and_e2e_adds_decodes(fast):
    # prefill of 100 tokens: 0.01 + 0.1 = 0.110 s; each decode step 0.011 s; 5 outputs -> 4 decodes
    df = run([(0.0, 100, 5)], fast).requests
    r = df.iloc[0]
    assert r.ttft_ms == pytest.approx(110.0)
    assert r.e2el_ms == pytest.approx(110.0 + 4 * 11.0)
    assert r.tpot_ms == pytest.approx(11.0)
    assert r.output_tokens == 5


@pytest.mark.parametrize("fast", [True, False])
def test_two_requests_interleave_vllm_v0(fast):
    # A (100 prompt, 5 out) at 0; B (50, 3) at 0.12.
    # [0, .110] prefill A -> A tok1 | [.110, .121] decode A -> tok2 (B not there yet)
    # [.121, .181] prefill B (50 tok; prefill-first stalls A) -> B tok1, TTFT 61 ms
    # [.181, .193] decode A,B (2 tok) | [.193, .205] decode A,B -> B done (3 tokens)
    # [.205, .216] decode A -> A tok5, done
    res = run([(0.0, 100, 5), (0.12, 50, 3)], fast)
    a, b = res.requests.iloc[0], res.requests.iloc[1]
    assert a.ttft_ms == pytest.approx(110.0)
    assert a.finish == pytest.approx(0.216)
    assert b.ttft_ms == pytest.approx(61.0)
    assert b.finish == pytest.approx(0.205)
    # A's inter-token gaps 11, 72 (stalled by B's prefill), 12, 11 ms; B's 12, 12
    s = res.summary
    assert s["mean_itl_ms"] == pytest.approx((11 + 72 + 12 + 11 + 12 + 12) / 6)
    assert s["median_itl_ms"] == pytest.approx(12.0, rel=1e-3)
    assert s["iterations"] == 6


@pytest.mark.parametrize("fast", [True, False])
def test_chunked_prefill_splits_prompt_and_mixes_decodes(fast):
    # budget 64: A (100, 3) at 0 -> chunk 64 [0, .074], chunk 36 [.074, .120] -> first token at .120
    # B (10, 2) at 0.05 is admitted with the second chunk? budget 64 - 36 = 28 >= 10: yes, same
    # iteration: [.074, .130] (46 tokens) -> A tok1 and B tok1 at .130
    # then decode A,B [.130, .142] -> A tok2, B tok2 (B done); decode A [.142, .153] -> A done
    res = run([(0.0, 100, 3), (0.05, 10, 2)], fast, policy="chunked", max_num_batched_tokens=64)
    a, b = res.requests.iloc[0], res.requests.iloc[1]
    assert a.first_token == pytest.approx(0.130)
    assert b.first_token == pytest.approx(0.130)
    assert b.finish == pytest.approx(0.142)
    assert a.finish == pytest.approx(0.153)


@pytest.mark.parametrize("fast", [True, False])
def test_recompute_preemption_with_tiny_kv_cache(fast):
    # block 4 tokens, 6 blocks, no watermark. A and B: 8 prompt, 10 output, both at 0.
    # [0, .026] prefill both (16 tok; 2 blocks each, 2 free) -> tok1
    # decode at computed 8 needs a block each (0 free left); 4 decodes (n=2, .012 each) to .074
    # at computed 12 both need a block, none free: B (last admitted) is preempted (recompute),
    # A decodes alone (.011 each) 5 times to .129 and finishes (its 5th block at computed 16).
    # B re-prefills prompt + 5 generated = 13 tokens [.129, .152] -> tok6, then 4 decodes to .196.
    res = run([(0.0, 8, 10), (0.0, 8, 10)], fast, block_size=4, num_gpu_blocks=6, watermark=0.0)
    a, b = res.requests.iloc[0], res.requests.iloc[1]
    assert a.preemptions == 0 and b.preemptions == 1
    assert a.first_token == pytest.approx(0.026) and b.first_token == pytest.approx(0.026)
    assert a.finish == pytest.approx(0.129)
    assert b.finish == pytest.approx(0.196)
    assert res.summary["preemptions"] == 1
    assert list(res.requests.output_tokens) == [10, 10]


@pytest.mark.parametrize("fast", [True, False])
def test_swap_preemption_moves_blocks_and_comes_back(fast):
    res = run([(0.0, 8, 10), (0.0, 8, 10)], fast, block_size=4, num_gpu_blocks=6, watermark=0.0,
              preemption="swap", swap_space_gb=1.0)
    b = res.requests.iloc[1]
    assert b.swaps == 1 and b.preemptions == 1
    assert res.instances.iloc[0].swap_outs == 1
    assert list(res.requests.output_tokens) == [10, 10]
    # swapping keeps B's KV: no re-prefill, so B ends earlier than with recompute (0.196)
    assert b.finish < 0.196


def test_output_is_truncated_at_max_model_len():
    res = run([(0.0, 90, 50)], max_model_len=100)
    r = res.requests.iloc[0]
    assert r.output_tokens == 10 and bool(r.truncated)
    assert res.summary["truncated"] == 1


def test_single_output_token_has_ttft_equal_e2e():
    r = run([(0.0, 10, 1)]).requests.iloc[0]
    assert r.ttft_ms == pytest.approx(r.e2el_ms)
    assert r.output_tokens == 1


@pytest.mark.parametrize("fast", [True, False])
def test_shortest_predicted_job_first_admits_short_prompt_first(fast):
    # A occupies one of two sequence slots; B (long) and C (short) wait for the other; SJF takes C first
    rows = [(0.0, 100, 20), (0.01, 300, 5), (0.02, 10, 5)]
    fcfs = run(rows, fast, max_num_seqs=2).requests
    sjf = run(rows, fast, policy="vllm_v0_sjf", max_num_seqs=2).requests
    assert fcfs.iloc[1].first_token < fcfs.iloc[2].first_token
    assert sjf.iloc[2].first_token < sjf.iloc[1].first_token


@pytest.mark.parametrize("fast", [True, False])
def test_colocated_instances_slow_each_other(fast):
    # two instances on one device, interference 1: while both are busy each step takes twice as long.
    # A (100, 5) -> instance 0 and B (100, 3) -> instance 1, both at 0: prefills .220 each (both busy);
    # B decodes 2 x .022 -> done at .264; A decodes 2 x .022 to .264. B going idle at .264 counts from the
    # next instant (same-instant order must not matter), so A's step at .264 is still .022 -> .286, then .011.
    insts = [InstanceConfig(profile=PROF, engine=EngineConfig(fast_path=fast, gpu_memory_utilization=0.45),
                            device="gpu0") for _ in range(2)]
    res = simulate(insts, requests([(0.0, 100, 5), (0.0, 100, 3)]), "round_robin")
    a, b = res.requests.iloc[0], res.requests.iloc[1]
    assert a.first_token == pytest.approx(0.220) and b.first_token == pytest.approx(0.220)
    assert b.finish == pytest.approx(0.264)
    assert a.finish == pytest.approx(0.297)
    # on separate devices nothing changes from the single-instance case
    alone = simulate([InstanceConfig(profile=PROF, engine=EngineConfig(fast_path=fast)) for _ in range(2)],
                     requests([(0.0, 100, 5), (0.0, 100, 3)]), "round_robin").requests
    assert alone.iloc[0].finish == pytest.approx(0.154)


def test_colocation_memory_split_must_fit():
    from llmsim.errors import ConfigError

    insts = [InstanceConfig(profile=PROF, engine=EngineConfig(gpu_memory_utilization=0.6), device="g")
             for _ in range(2)]
    with pytest.raises(ConfigError, match="adds up to 1.20"):
        simulate(insts, [], "round_robin")


@pytest.mark.parametrize("fast", [True, False])
def test_step_time_scale_stretches_every_iteration(fast):
    r = run([(0.0, 100, 5)], fast, step_time_scale=2.0).requests.iloc[0]
    assert r.ttft_ms == pytest.approx(220.0)
    assert r.e2el_ms == pytest.approx(220.0 + 4 * 22.0)


@pytest.mark.parametrize("fast", [True, False])
def test_max_tokens_caps_the_output_like_the_api(fast):
    # 100 prompt tokens, 9 outputs wanted but max_tokens=3: prefill 0.110 s then 2 decodes of 0.011 s
    reqs = requests([(0.0, 100, 9)])
    reqs[0].max_tokens = 3
    inst = InstanceConfig(profile=PROF, engine=EngineConfig(fast_path=fast))
    r = simulate([inst], reqs, "round_robin").requests.iloc[0]
    assert r.output_tokens == 3
    assert r.e2el_ms == pytest.approx(110.0 + 2 * 11.0)
