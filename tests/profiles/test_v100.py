"""The V100 facts of "Intelligent Router for LLM Workloads": prefill spikes from arrivals slow a long request down
by about 1.8 x (the paper's Fig. 1a)."""

from llmsim import EngineConfig, InstanceConfig, Request, simulate


def _e2e(reqs):
    inst = InstanceConfig("llama-2-7b", "v100-32gb", engine=EngineConfig(policy="vllm_v0", max_num_seqs=128))
    return simulate([inst], reqs, "round_robin").requests.e2el_ms.iloc[0] / 1e3


def test_long_request_alone_and_with_periodic_arrivals():
    alone = _e2e([Request(0, 0.0, 1000, 1000)])
    assert 15.0 < alone < 25.0  # paper: ~17 s (its 0.02 s minimum iteration implies >= 20 s)
    busy = _e2e([Request(0, 0.0, 1000, 1000)] + [Request(i, i * 50 * 0.0215, 500, 500) for i in range(1, 40)])
    assert 1.6 < busy / alone < 2.2  # the paper's Fig. 1a: 17 s -> 31 s, a factor of 1.82
