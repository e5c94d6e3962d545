"""Prefill/decode disaggregation: hand-computed transfers, one copy per request, memory on both sides, roles."""

import pandas as pd
import pytest

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.cluster import Cluster
from llmsim.errors import ConfigError
from llmsim.perf.hardware import LINKS, get_gpu, transfer_seconds
from llmsim.request import Request
from llmsim.routing import Router, make_router
from llmsim.testing import LinearProfile, requests

# step time = 0.01 + 0.001 * tokens; Llama-2-7B KV: 512 KiB per token
PROF = LinearProfile(base=0.01, per_token=0.001)
KV_PER_TOKEN = 524288


def split(n_prefill=1, n_decode=2, **engine):
    eng = EngineConfig(**engine)
    return ([InstanceConfig(profile=PROF, role="prefill", engine=eng)] * n_prefill
            + [InstanceConfig(profile=PROF, role="decode", engine=eng)] * n_decode)


def test_transfer_time_is_latency_plus_bytes_over_bandwidth():
    ib = LINKS["infiniband"]
    a100 = get_gpu("a100-80gb")
    assert transfer_seconds(100 * KV_PER_TOKEN, ib, a100) == pytest.approx(10e-6 + 100 * KV_PER_TOKEN / 20e9)
    # NVLink uses the GPU's own interconnect; per-GPU links scale with the smaller TP degree
    nv = LINKS["nvlink"]
    assert transfer_seconds(10**9, nv, a100, 4, 2) == pytest.approx(5e-6 + 1e9 / (300e9 * 0.8 * 2))
    eth = LINKS["ethernet"]
    assert transfer_seconds(10**9, eth, a100, 8, 8) == pytest.approx(50e-6 + 1e9 / (12.5e9 * 0.8))


@pytest.mark.parametrize("fast", [True, False])
def test_hand_computed_disaggregated_request(fast):
    # prefill of 100 tokens on the prefill instance: TTFT 110 ms; the KV (100 x 512 KiB) crosses InfiniBand in
    # 10 us + 52.4288 MB / 20 GB/s = 2.63144 ms; on the decode instance an iteration of 1 token (11 ms) samples
    # token 2, then 3 decodes of 11 ms: e2e 110 + 2.63144 + 44 ms
    res = simulate(split(fast_path=fast), requests([(0.0, 100, 5)]), "round_robin")
    r = res.requests.iloc[0]
    assert r.ttft_ms == pytest.approx(110.0)
    assert r.e2el_ms == pytest.approx(110.0 + 2.63144 + 44.0)
    assert r.instance == 1  # finished on the decode instance
    s = res.summary
    assert s["kv_transfers"] == 1 and s["mean_kv_transfer_ms"] == pytest.approx(2.63144)
    assert list(res.instances["role"]) == ["prefill", "decode", "decode"]


def test_blocking_transfers_stall_the_prefill_engine():
    # B arrives while A prefills; with blocking sends the prefill engine waits for A's copy before B's prefill
    rows = [(0.0, 100, 5), (0.1, 110, 5)]
    over = simulate(split(), requests(rows), "round_robin").requests
    block = simulate(split(), requests(rows), "round_robin", kv_transfer="blocking").requests
    assert over.ttft_ms.tolist() == pytest.approx([110.0, 130.0])
    assert block.ttft_ms.tolist() == pytest.approx([110.0, 130.0 + 2.63144])


def _cluster(insts, router="jsq", **kw):
    return Cluster(insts, make_router(router) if isinstance(router, str) else router, **kw)


def test_every_request_crosses_the_link_once_with_the_computed_time():
    rows = [(0.02 * i, 50 + 37 * (i % 9), 1 + (i * 7) % 30) for i in range(120)]
    cl = _cluster(split(n_prefill=2, n_decode=2, num_gpu_blocks=60), kv_link="pcie")
    cl.run(requests(rows))
    log = {k: list(v) for k, v in cl.transfers.log.items()}
    multi = [i for i, (_, _, o) in enumerate(rows) if o > 1]  # one-token requests finish on the prefill side
    assert sorted(log["id"]) == multi  # once each
    link = LINKS["pcie"]
    for start, end, nbytes, rid in zip(log["start"], log["end"], log["bytes"], log["id"]):
        assert nbytes == rows[rid][1] * KV_PER_TOKEN
        assert end - start == pytest.approx(transfer_seconds(nbytes, link, PROF.gpu))
    assert all(s >= r for s, r in zip(log["start"], log["ready"]))
    for inst in cl.instances:  # nothing leaks: every block is free (or cached) again
        assert inst.kv.free == inst.kv.total and (inst.handoff is None or not inst.handoff.pending)
    assert cl.transfers.in_flight == 0
    roles = [cl.instances[i].role for i in log["dst"]]
    assert set(roles) == {"decode"} and {cl.instances[i].role for i in log["src"]} == {"prefill"}


def test_memory_is_held_on_both_sides_until_the_copy_lands():
    # a decode instance with room for one prompt at a time: later copies wait for room (counted), and the prefill
    # instance keeps their blocks meanwhile, so it too runs out of room
    rows = [(0.0, 150, 40)] + [(0.001 * i, 150, 40) for i in range(1, 6)]
    res = simulate([InstanceConfig(profile=PROF, role="prefill", engine=EngineConfig(num_gpu_blocks=30)),
                    InstanceConfig(profile=PROF, role="decode", engine=EngineConfig(num_gpu_blocks=14))],
                   requests(rows), "round_robin")
    s = res.summary
    assert s["completed"] == 6 and s["kv_transfers"] == 6
    assert s["mean_kv_transfer_wait_ms"] > 100.0
    # at most 3 prompts (10 blocks each) fit the prefill cache: the 4th waits for a copy to land before prefill
    ttft = res.requests.sort_values("id").ttft_ms.tolist()
    assert ttft[3] > ttft[2] + 100.0


def test_decode_preemption_recomputes_there_and_still_one_copy():
    rows = [(0.0, 60, 200), (0.001, 60, 200), (0.002, 60, 200)]
    res = simulate([InstanceConfig(profile=PROF, role="prefill"),
                    InstanceConfig(profile=PROF, role="decode", engine=EngineConfig(num_gpu_blocks=20))],
                   requests(rows), "round_robin")
    s = res.summary
    assert s["completed"] == 3 and s["kv_transfers"] == 3 and s["preemptions"] > 0


def test_mixed_instances_serve_both_stages_and_new_requests_skip_decode_ones():
    insts = [InstanceConfig(profile=PROF, role="prefill"), InstanceConfig(profile=PROF, role="mixed"),
             InstanceConfig(profile=PROF, role="decode")]
    cl = _cluster(insts, "round_robin")
    view = cl.view
    r = Request(0, 0.0, 100, 5)
    assert view.candidates(r) == [0, 1]
    r.instance = 0
    view.stage = "decode"
    assert view.candidates(r) == [1, 2]
    view.stage = "prefill"
    assert view.roles() == ("prefill", "mixed", "decode")


class _BadDecode(Router):
    name = "bad_decode"

    def route(self, req, view):
        return 0

    def route_decode(self, req, view):
        return 0  # the prefill instance: not a decode candidate


def test_a_wrong_decode_choice_is_one_clear_error_and_decode_only_instances_refuse_new_requests():
    with pytest.raises(ConfigError, match=r"decode instance of request 0; expected one of the decode-stage"):
        simulate(split(), requests([(0.0, 100, 5)]), _BadDecode())

    class ToDecode(Router):
        name = "to_decode"

        def route(self, req, view):
            return 1

    res = simulate(split(), requests([(0.0, 100, 5)]), ToDecode())
    assert res.dropped.reason.tolist() == ["routed_to_unfit_instance:decode_only_instance"]


@pytest.mark.parametrize("insts, match", [
    ([InstanceConfig(profile=PROF, role="prefill")], "needs a decode or mixed instance of the same model"),
    ([InstanceConfig(profile=PROF, role="decode")], "every instance has role decode"),
    ([InstanceConfig(profile=PROF, role="both")], r"cluster.instances\[0\].role: 'both' is not one of"),
    # a decode pool that no prefill instance of its model feeds (a mixed one keeps its requests)
    ([InstanceConfig("llama-2-7b", "a100-80gb", role="prefill"),
      InstanceConfig("llama-2-7b", "a100-80gb", role="decode"),
      InstanceConfig("opt-13b", "a100-80gb", role="decode"), InstanceConfig("opt-13b", "a100-80gb")],
     r"instances\[2\].*decode instance of opt-13b needs a prefill instance of the same model"),
    ([InstanceConfig("llama-2-7b", "a100-80gb", role="prefill"),
      InstanceConfig("llama-2-7b", "a100-80gb", role="decode", models=("mistral-7b",))],
     r"instances\[1\].*a decode instance cannot load other models"),
])
def test_impossible_role_layouts_name_the_key(insts, match):
    with pytest.raises(ConfigError, match=match):
        _cluster(insts)


def test_config_keys_are_checked_by_the_schemas():
    from llmsim.cluster.config import instances_from_config, sim_options

    with pytest.raises(ConfigError, match="role"):
        instances_from_config({"instances": [{"model": "llama-2-7b", "role": "prefil"}]})
    with pytest.raises(ConfigError, match="kv_link"):
        sim_options({"kv_link": "carrier_pigeon"})
    assert [i.role for i in instances_from_config({"instances": [{"role": "prefill"}, {"role": "decode"}]})] == \
        ["prefill", "decode"]


def test_same_config_same_bytes():
    rows = [(0.013 * i, 40 + 17 * (i % 11), 2 + (i * 5) % 40) for i in range(150)]
    a = simulate(split(2, 2, num_gpu_blocks=50), requests(rows), "jsq")
    b = simulate(split(2, 2, num_gpu_blocks=50), requests(rows), "jsq")
    pd.testing.assert_frame_equal(a.requests, b.requests)
    assert a.summary["kv_transfer_gb"] == b.summary["kv_transfer_gb"]


@pytest.mark.parametrize("policy", ["vllm_v0", "chunked"])
def test_landed_copies_are_not_locked_out_by_a_preempted_head(policy, monkeypatch):
    from llmsim.engine.instance import Instance

    start = Instance._start_next

    def checked(self, now):  # at every boundary: block accounting and the queued requests' bookkeeping agree
        self.settle_running()  # (a decode cohort writes the running requests' counts lazily)
        self.kv.check(self.running, self.swapped)
        assert list(self.queued.waiting_started) == [r for r in self.waiting if r.generated]
        landed = [bool(r.blocks) for r in self.waiting]
        assert landed == sorted(landed, reverse=True)  # requests holding blocks come first
        return start(self, now)

    monkeypatch.setattr(Instance, "_start_next", checked)
    # a small decode cache under a stream of copies: decodes preempt each other (recompute), and a preempted request
    # at the head of the waiting queue needs more room than is left while landed requests hold theirs; landed
    # requests go ahead of it (they hold their blocks, the next token's included), so the run always finishes
    rows = [(0.01 * i, 100 + (i * 37) % 200, 40 + (i * 13) % 110) for i in range(80)]
    res = simulate([InstanceConfig(profile=PROF, role="prefill", engine=EngineConfig(policy=policy)),
                    InstanceConfig(profile=PROF, role="decode", engine=EngineConfig(policy=policy,
                                                                                      num_gpu_blocks=60))],
                   requests(rows), "round_robin")
    s = res.summary
    assert s["completed"] == 80 and s["kv_transfers"] == 80 and s["preemptions"] > 0


def test_a_kv_copy_goes_only_to_an_instance_with_the_same_kv_cache_dtype():
    """vLLM's KV connector refuses a peer whose cache dtype differs: an fp8-KV prefill instance with only a 16-bit
    decode instance is one line at build time, and with both kinds its copies land only on the fp8 one."""
    fp8 = InstanceConfig(model="llama-3.1-8b", gpu="a100-80gb", kv_cache_dtype="fp8", role="prefill")
    bf16 = InstanceConfig(model="llama-3.1-8b", gpu="a100-80gb", role="decode")
    with pytest.raises(ConfigError, match=r"instances\[0\].*same model with the same KV cache dtype \(65536 bytes"):
        simulate([fp8, bf16], requests([(0.0, 100, 4)]))
    fp8_decode = InstanceConfig(model="llama-3.1-8b", gpu="a100-80gb", kv_cache_dtype="fp8", role="decode")
    bf16_prefill = InstanceConfig(model="llama-3.1-8b", gpu="a100-80gb", role="prefill")
    cl = _cluster([fp8, bf16, fp8_decode, bf16_prefill], "round_robin")
    cl.run(requests([(0.01 * i, 100, 4) for i in range(12)]))
    log = cl.transfers.log
    assert len(log["dst"]) == 12 and set(zip(log["src"], log["dst"])) == {(0, 2), (3, 1)}


def test_a_prompt_no_decode_instance_can_hold_is_refused_at_arrival():
    """A prompt that fits the prefill instance but no decode instance's cache (or window) can never be decoded:
    it is the unservable error (or, with on_unservable=drop, one counted drop), not a crash at the copy."""
    insts = [InstanceConfig(profile=PROF, role="prefill", engine=EngineConfig(num_gpu_blocks=100)),
             InstanceConfig(profile=PROF, role="decode", engine=EngineConfig(num_gpu_blocks=10))]
    rows = [(0.0, 1000, 5), (0.1, 50, 5)]
    with pytest.raises(ConfigError, match="request 0 .* can never be served: decode_prompt_exceeds_kv_capacity"):
        simulate(insts, requests(rows), "round_robin")
    res = simulate(insts, requests(rows), "round_robin", on_unservable="drop")
    assert res.dropped.reason.tolist() == ["decode_prompt_exceeds_kv_capacity"]
    assert res.requests.id.tolist() == [1] and res.summary["kv_transfers"] == 1


def test_a_prompt_longer_than_every_prefill_window_is_the_unservable_error():
    """Only instances that take new requests decide whether a request can be served: a decode instance's longer
    window does not let a prompt through to be dropped silently at the prefill instance."""
    insts = [InstanceConfig(profile=PROF, role="prefill", engine=EngineConfig(max_model_len=512)),
             InstanceConfig(profile=PROF, role="decode", engine=EngineConfig(max_model_len=4096))]
    with pytest.raises(ConfigError, match="request 0 .* can never be served: prompt_exceeds_max_model_len"):
        simulate(insts, requests([(0.0, 1000, 5)]), "round_robin")
    res = simulate(insts, requests([(0.0, 1000, 5)]), "round_robin", on_unservable="drop")
    assert res.dropped.reason.tolist() == ["prompt_exceeds_max_model_len"]


def test_a_multi_model_instance_takes_no_kv_copies():
    """A model swap rebuilds the KV cache, so a copy reserved there could land on another model: a prefill
    instance whose only peer is a multi-model mixed instance is one line, and with a one-model decode instance
    too every copy goes there while the multi-model one swaps and serves both models itself."""
    llama_p = InstanceConfig("llama-2-7b", "a100-80gb", role="prefill")
    multi = InstanceConfig("llama-2-7b", "a100-80gb", models=("mistral-7b",), host_cache_gb=100)
    with pytest.raises(ConfigError, match=r"instances\[0\].*prefill instance of llama-2-7b needs .* no other models"):
        _cluster([llama_p, multi], "round_robin")
    reqs = [Request(id=i, arrival=0.5 * i, prompt_tokens=100 + 7 * i, output_tokens=20,
                    model="mistral-7b" if i % 2 else "llama-2-7b") for i in range(24)]
    cl = _cluster([llama_p, multi, InstanceConfig("llama-2-7b", "a100-80gb", role="decode")], "round_robin")
    cl.run(reqs)
    assert len(cl.recorder.requests_frame()) == 24 and len(cl.recorder.dropped_frame()) == 0
    assert set(cl.transfers.log["dst"]) == {2} and cl.model_swap_stats["model_swaps"] > 0
    assert all(i.kv.free == i.kv.total for i in cl.instances)


@pytest.mark.parametrize("prefill_len, decode_len, out, truncated", [
    (4096, 512, 12, True),  # the decode instance's window cuts the output (512 - 500 tokens)
    (600, 4096, 200, False),  # the prefill instance returns one token: its own window does not cut the output
])
def test_the_decode_instance_window_cuts_the_output(prefill_len, decode_len, out, truncated):
    insts = [InstanceConfig(profile=PROF, role="prefill", engine=EngineConfig(max_model_len=prefill_len)),
             InstanceConfig(profile=PROF, role="decode", engine=EngineConfig(max_model_len=decode_len))]
    r = simulate(insts, requests([(0.0, 500, 200)]), "round_robin").requests.iloc[0]
    assert (r.output_tokens, bool(r.truncated), r.instance) == (out, truncated, 1)


class _ToLast(Router):
    name = "to_last"

    def route(self, req, view):
        return 0

    def route_decode(self, req, view):
        return view.num_instances - 1


def test_a_copy_that_finishes_on_landing_frees_room_for_the_next():
    """Two 500-token prompts copied to a decode instance whose window (501) leaves no second token and whose cache
    (40 blocks) holds one copy at a time: the first finishes as it lands and the second's copy then starts."""
    insts = [InstanceConfig(profile=PROF, role="prefill"),
             InstanceConfig(profile=PROF, role="decode", engine=EngineConfig(max_model_len=4096)),
             InstanceConfig(profile=PROF, role="decode", engine=EngineConfig(max_model_len=501, num_gpu_blocks=40))]
    cl = _cluster(insts, _ToLast())
    cl.run(requests([(0.0, 500, 20), (0.0, 500, 20)]))
    df = cl.recorder.requests_frame()
    assert df.output_tokens.tolist() == [1, 1] and len(cl.transfers.log["id"]) == 2
    assert all(i.kv.free == i.kv.total and not i.kv.outside for i in cl.instances)


def test_a_copy_landing_where_no_second_token_fits_finishes_with_the_first():
    insts = [InstanceConfig(profile=PROF, role="prefill"),
             InstanceConfig(profile=PROF, role="decode", engine=EngineConfig(max_model_len=4096)),
             InstanceConfig(profile=PROF, role="decode", engine=EngineConfig(max_model_len=501))]
    cl = _cluster(insts, "round_robin")
    cl.run(requests([(0.0, 500, 20), (0.6, 500, 20)]))
    df = cl.recorder.requests_frame().set_index("id")
    assert df.output_tokens.tolist() == [20, 1] and df.truncated.tolist() == [False, True]
    assert df.instance.tolist() == [1, 2] and all(i.kv.free == i.kv.total and not i.kv.outside for i in cl.instances)


@pytest.mark.parametrize("policy", ["vllm_v0", "chunked"])
@pytest.mark.parametrize("fast", [True, False])
def test_a_copy_waiting_for_room_starts_when_a_drop_frees_it(policy, fast):
    """Request 0 outgrows the decode cache (8 blocks) and is dropped at the boundary where request 1's copy waits
    for room: the freed room starts the copy (it was left waiting forever, request 1 counted nowhere)."""
    eng = {"policy": policy, "fast_path": fast}
    res = simulate([InstanceConfig(profile=PROF, role="prefill", engine=EngineConfig(**eng)),
                    InstanceConfig(profile=PROF, role="decode", engine=EngineConfig(num_gpu_blocks=8, **eng))],
                   requests([(0.0, 100, 100), (0.2, 100, 5)]), "round_robin")
    assert res.dropped.id.tolist() == [0] and res.requests.id.tolist() == [1]
    assert res.summary["kv_transfers"] == 2
