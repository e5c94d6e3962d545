"""A batch policy declares its engine defaults (watermark, token budget, whole-prompt prefill); subclasses
inherit them and the engine reads them from the class, never from the policy's name."""

from __future__ import annotations

import pytest

from llmsim import EngineConfig, InstanceConfig, simulate
from llmsim.engine.scheduling import (
    BATCH_POLICIES,
    BatchPolicy,
    ChunkedPrefillPolicy,
    ChunkedSJFPolicy,
    VllmV0Policy,
    VllmV0SJFPolicy,
    register_batch_policy,
)
from llmsim.errors import ConfigError
from llmsim.registry import Registry
from llmsim.request import Request


@pytest.mark.parametrize(("cls", "watermark", "whole", "budget_4096", "budget_1024"), [
    (VllmV0Policy, True, True, 4096, 2048),
    (VllmV0SJFPolicy, True, True, 4096, 2048),
    (ChunkedPrefillPolicy, False, False, 2048, 2048),
    (ChunkedSJFPolicy, False, False, 2048, 2048),
])
def test_each_policy_declares_its_defaults(cls, watermark, whole, budget_4096, budget_1024):
    assert cls.uses_watermark is watermark
    assert cls.prefills_whole_prompts is whole
    assert cls.default_max_num_batched_tokens(4096) == budget_4096
    assert cls.default_max_num_batched_tokens(1024) == budget_1024
    assert BATCH_POLICIES[cls.name] is cls


def test_batch_policies_live_in_the_one_registry():
    assert isinstance(BATCH_POLICIES, Registry)
    assert {"vllm_v0", "vllm_v0_sjf", "chunked", "chunked_sjf"} <= set(BATCH_POLICIES)
    with pytest.raises(ConfigError, match="unknown batch policy 'nope'"):
        BATCH_POLICIES.get("nope")


@pytest.fixture
def scratch_policies():
    """Names registered by a test, removed afterwards so other tests see the shipped policies only."""
    names: list[str] = []
    yield names
    for n in names:
        BATCH_POLICIES._entries.pop(n, None)


def test_a_registered_subclass_inherits_and_the_engine_reads_the_class(scratch_policies):
    scratch_policies += ["test_tiny_budget_chunked", "test_whole_prompt_fifo"]

    @register_batch_policy
    class TinyBudget(ChunkedPrefillPolicy):
        name = "test_tiny_budget_chunked"

        @classmethod
        def default_max_num_batched_tokens(cls, max_model_len: int) -> int:
            return 64

    @register_batch_policy
    class WholePromptFifo(VllmV0Policy):
        name = "test_whole_prompt_fifo"

    assert BATCH_POLICIES["test_tiny_budget_chunked"] is TinyBudget
    tiny = EngineConfig(policy="test_tiny_budget_chunked").resolved(4096)
    assert tiny.max_num_batched_tokens == 64 and tiny.watermark == 0.0
    whole = EngineConfig(policy="test_whole_prompt_fifo").resolved(4096)
    assert whole.max_num_batched_tokens == 4096 and whole.watermark == 0.01
    with pytest.raises(ConfigError, match="prefills whole prompts"):
        EngineConfig(policy="test_whole_prompt_fifo", max_num_batched_tokens=1000).resolved(4096)
    assert BatchPolicy.default_max_num_batched_tokens(4096) == 2048


@pytest.mark.parametrize(("policy", "budget", "watermark"), [("vllm_v0_sjf", 4096, 0.01), ("chunked_sjf", 2048, 0.0)])
def test_sjf_variants_get_their_base_policys_engine_defaults(policy, budget, watermark):
    cfg = EngineConfig(policy=policy).resolved(4096)
    assert (cfg.max_num_batched_tokens, cfg.watermark) == (budget, watermark)


def test_vllm_v0_sjf_serves_a_3000_token_prompt():
    # it used to get the chunked policy's 2,048-token budget and drop this request as cannot_be_scheduled
    inst = InstanceConfig("llama-2-7b", "a100-80gb", engine=EngineConfig(policy="vllm_v0_sjf", max_model_len=4096))
    res = simulate([inst], [Request(0, 0.0, 3000, 20), Request(1, 0.5, 100, 5)], "round_robin")
    assert len(res.dropped) == 0
    assert sorted(res.requests.id) == [0, 1]
    assert res.requests.set_index("id").loc[0, "output_tokens"] == 20
