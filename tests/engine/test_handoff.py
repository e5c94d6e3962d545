"""The engine's side of the P/D hand-off: requests whose KV landed here start even while others are swapped out."""

import dataclasses

import numpy as np
import pytest

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.perf.models import get_model
from llmsim.request import Request
from llmsim.testing import LinearProfile, requests
from tests.helpers import assert_frames_identical

# step time = 0.01 + 0.001 * tokens; Llama-2-7B KV
PROF = LinearProfile(base=0.01, per_token=0.001)


def p_d(policy: str, fast: bool, decode_blocks: int, prof=PROF, **engine) -> list[InstanceConfig]:
    """One prefill and one decode instance; the decode one has a small cache and swap preemption."""
    return [InstanceConfig(profile=prof, role="prefill", engine=EngineConfig(policy=policy, fast_path=fast, **engine)),
            InstanceConfig(profile=prof, role="decode", engine=EngineConfig(
                policy=policy, fast_path=fast, num_gpu_blocks=decode_blocks, preemption="swap", **engine))]


@pytest.mark.parametrize("policy", ["vllm_v0", "chunked"])
@pytest.mark.parametrize("fast", [True, False])
def test_landed_copies_start_while_requests_are_swapped_out(policy, fast, monkeypatch):
    from llmsim.engine.instance import Instance

    start = Instance._start_next

    def checked(self, now):  # at every boundary the block accounting agrees with the requests
        self.settle_running()
        self.kv.check(self.running, self.swapped)
        return start(self, now)

    monkeypatch.setattr(Instance, "_start_next", checked)
    # decodes on a 60-block cache swap each other out; copies keep landing and take the room a swapped-out request
    # waits for. Admitting nothing while a request is swapped out would lock the decode engine (landed copies hold
    # the room, the swapped-out request waits for it, nothing runs); landed requests hold their blocks, the next
    # token's included, so they start, and the run finishes
    rows = [(0.01 * i, 100 + (i * 37) % 200, 40 + (i * 13) % 110) for i in range(80)]
    res = simulate(p_d(policy, fast, 60), requests(rows), "round_robin")
    s = res.summary
    assert s["completed"] == 80 and s["kv_transfers"] == 80 and s["preemptions"] > 0
    assert res.instances["swap_outs"].sum() > 0


def test_windowed_hand_off_with_swaps_and_prefix_caching_steps_as_the_fast_path():
    # the case that exposed the lock: a sliding-window model, prefill + decode + mixed instances, swap preemption,
    # prefix caching and vLLM V0 (a prefix-caching request keeps its whole block table, so one swapped out needs
    # many blocks while landed copies hold theirs)
    model = dataclasses.replace(get_model("mistral-7b"), sliding_window=200)
    prof = LinearProfile(model=model, base=0.01, per_token=1e-4, per_ctx=1e-6)
    seed = 3
    t = np.cumsum(np.random.default_rng(seed).exponential(1 / 6.0, 80))
    prompts = np.random.default_rng(seed + 1).integers(10, 900, 80)
    outputs = np.random.default_rng(seed + 2).integers(1, 700, 80)

    def run(fast: bool):
        reqs = [Request(i, float(t[i]), int(p), int(o), hash_ids=tuple(range(int(p) // 16)) if i % 3 == 0 else None)
                for i, (p, o) in enumerate(zip(prompts, outputs))]
        eng = EngineConfig(policy="vllm_v0", fast_path=fast, num_gpu_blocks=120, max_model_len=2048,
                           preemption="swap", swap_space_gb=1.0, max_num_seqs=16, enable_prefix_caching=True)
        roles = ("prefill", "decode", "mixed")
        return simulate([InstanceConfig(profile=prof, role=role, engine=eng) for role in roles], reqs, "jsq",
                        seed=seed, on_unservable="drop")

    fast, stepped = run(True), run(False)
    assert_frames_identical(fast, stepped)
    assert fast.summary["completed"] + fast.summary["dropped"] == 80
    assert fast.instances["swap_outs"].sum() > 0 and fast.summary["kv_transfers"] > 0
