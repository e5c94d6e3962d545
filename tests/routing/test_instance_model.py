"""Routers price an instance by its model as loaded (the state's ``model_spec``), not by the registry's model of
the same name: a config.json that reuses a registered name with a longer context (rope_scaling), and an fp8 KV
cache (``kv_cache_dtype``), which halves the KV bytes per token and so doubles the blocks an instance reports."""

from __future__ import annotations

import json

import pytest

from llmsim import InstanceConfig, simulate
from llmsim.engine.config import EngineConfig
from llmsim.perf.profile import load_profile
from llmsim.request import Request
from llmsim.routing import make_router
from llmsim.routing.base import Router, instance_model
from llmsim.routing.qlm.estimator import rates_from_profile
from llmsim.routing.routebalance.state import PROFILE_CONTEXT
from llmsim.state.cluster_state import LAYOUT_VERSION, NO_REQUESTS, ClusterState, InstanceState

LONG = {"_name_or_path": "meta-llama/Meta-Llama-3-8B", "model_type": "llama", "hidden_size": 4096,
        "intermediate_size": 14336, "max_position_embeddings": 8192, "num_attention_heads": 32,
        "num_hidden_layers": 32, "num_key_value_heads": 8, "torch_dtype": "bfloat16", "vocab_size": 128256,
        "rope_scaling": {"type": "linear", "factor": 4.0}}  # Llama-3-8B at 4 x its registered 8192 tokens


class _Record(Router):
    name = "record"

    def __init__(self) -> None:
        super().__init__()
        self.states: list[ClusterState] = []

    def route(self, req, view) -> int:
        st = view.state()  # (its requests are read only while current: keep the fields)
        self.states.append(st._replace(instances=tuple(i._replace(detail=NO_REQUESTS) for i in st.instances)))
        return 0


class _Hosts(Router):
    name = "hosts"

    def __init__(self) -> None:
        super().__init__()
        self.hosts: list = []

    def route(self, req, view) -> int:
        self.hosts.append(view.model_hosts())
        return 0


@pytest.fixture(scope="module")
def states(tmp_path_factory) -> tuple[InstanceState, InstanceState]:
    """The state of a long-context Llama-3-8B config and of an fp8-KV Llama-3.1-8B, both at tp 1 on an A100."""
    path = tmp_path_factory.mktemp("long") / "config.json"
    path.write_text(json.dumps(LONG))
    rec = _Record()
    simulate([InstanceConfig(model=str(path), gpu="a100-80gb"),
              InstanceConfig(model="llama-3.1-8b", gpu="a100-80gb", kv_cache_dtype="fp8")],
             [Request(0, 0.0, 100, 4)], rec)
    long, fp8 = rec.states[0].instances
    return long, fp8


def test_the_state_publishes_each_instances_model_as_loaded(states) -> None:
    long, fp8 = states
    assert LAYOUT_VERSION == 2
    assert long.model == "llama-3-8b" and long.model_spec.max_position == 32768 == long.max_model_len
    assert fp8.model == "llama-3.1-8b" and fp8.model_spec.kv_dtype_bytes == 1
    back = ClusterState.from_dict(json.loads(json.dumps(ClusterState(0.0, 0.0, 0, False, 0, 0.0, states).to_dict())))
    assert [instance_model(i) for i in back.instances] == [long.model_spec, fp8.model_spec]


def test_routebalance_prices_the_instance_not_its_name(states) -> None:
    """Its per-token prior is the instance's own tp-1 profile; by name, the fp8 instance's doubled KV blocks made
    it look like a tp-2 16-bit one (a faster step)."""
    _, fp8 = states
    own = load_profile("llama-3.1-8b", "a100-80gb", 1, kv_cache_dtype="fp8")
    prior = make_router("routebalance", tpot_prior="profile").priors.prior_s(fp8)
    assert prior == pytest.approx(own.step_time(1, 1, 0, 0, 1, PROFILE_CONTEXT), rel=1e-9)


@pytest.mark.parametrize("which", [0, 1])
def test_qlm_and_shepherd_price_the_instance_not_its_name(states, which) -> None:
    """QLM's estimator fits prefills up to the config's own 32768-token context (not the registry's 8192) and
    reads the fp8 instance at tp 1; Shepherd's batch times come from the same profile."""
    inst = states[which]
    own = load_profile(inst.model_spec, "a100-80gb", 1) if which == 0 else load_profile(
        "llama-3.1-8b", "a100-80gb", 1, kv_cache_dtype="fp8")
    assert own.model == inst.model_spec
    cfg = EngineConfig(max_num_seqs=inst.max_num_seqs, block_size=inst.block_size,
                       num_gpu_blocks=inst.kv_blocks_total)
    qlm = make_router("qlm", slo_s={"batch": 60})
    assert qlm._rates_of(inst) == rates_from_profile(own, cfg, typical_prompt=qlm.typical_prompt,
                                                     typical_output=int(qlm.output_prior[0]))
    shepherd = make_router("shepherd")
    assert shepherd._profile(inst).model == inst.model_spec and shepherd._profile(inst).tp == 1


def test_a_multi_model_instance_publishes_and_qlm_prices_its_other_models_as_the_engine_loads_them() -> None:
    """An fp8-KV host's other model is loaded with an fp8 cache: the catalog's specs say so and QLM's estimator of
    swapping to it reads that spec (by name it was the registry's 16-bit model: half the KV tokens)."""
    a, b, gpu = "mistral-7b", "vicuna-13b", "a100-80gb"
    rec = _Hosts()
    inst = InstanceConfig(model=a, gpu=gpu, models=(b,), kv_cache_dtype="fp8")
    simulate([inst], [Request(0, 0.0, 100, 4, model=a)], rec)
    h = rec.hosts[0][0]
    assert h.catalog == (a, b)
    assert h.specs == tuple(load_profile(m, gpu, kv_cache_dtype="fp8").model for m in (a, b))
    assert h.specs[1].kv_dtype_bytes == 1
    qlm = make_router("qlm", slo_s={"batch": 60})
    reqs = [Request(i, 0.1 * i, 200, 20, slo_class="batch", model=(a, b)[i % 2]) for i in range(6)]
    assert len(simulate([inst, inst], reqs, qlm).requests) == 6
    other = [key[-1] for key in qlm._rates if key[0] == b]
    assert other and all(spec == h.specs[1] for spec in other)
