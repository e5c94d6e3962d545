"""The live router's parts without a network: config validation, vLLM metrics parsing, the state it assembles
from scrapes and its own bookkeeping, and the checks on client requests."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the serving extra is not installed: pip install 'llmsim[serve]'")

from llmsim.errors import ConfigError  # noqa: E402
from llmsim.request import Request  # noqa: E402
from llmsim.routing import Router, register_router  # noqa: E402
from llmsim.schema import Schema  # noqa: E402
from llmsim.serving.config import PolicyConfig, RouterConfig, load_config, parse_config  # noqa: E402
from llmsim.serving.decider import Decider  # noqa: E402
from llmsim.serving.inbound import BadRequest, check_request, parse_json  # noqa: E402
from llmsim.serving.scrape import MetricsParseError, parse_metrics, parse_models, samples_read  # noqa: E402
from llmsim.serving.tracker import Backend, Flight, cluster_state  # noqa: E402

pytestmark = pytest.mark.timeout(60)

BASE = {"backends": [{"name": "a", "url": "http://127.0.0.1:9001"}, {"name": "b", "url": "http://127.0.0.1:9002"}],
        "policy": {"heuristic": "jsq"}}

VLLM_V1 = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="1000",engine="0"} 1.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 500.0
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 10.0
vllm:time_per_output_token_seconds_count{engine="0",model_name="m"} 10.0
vllm:time_per_output_token_seconds_sum{engine="0",model_name="m"} 0.3
"""


def test_config_parses_and_names_the_bad_key(tmp_path) -> None:
    cfg = parse_config(BASE)
    assert [b.name for b in cfg.backends] == ["a", "b"] and cfg.policy.heuristic == "jsq" and cfg.port == 8000
    cases = [
        ({**BASE, "backends": []}, "backends"),
        ({**BASE, "backends": [{"name": "a", "url": "ftp://x"}]}, r"backends\[0\]\.url"),
        ({**BASE, "policy": {"heuristic": "jsq", "onnx": "d"}}, "exactly one"),
        ({**BASE, "limits": {"max_in_flight": 0}}, "limits.max_in_flight"),
        ({**BASE, "bogus": 1}, "bogus"),
        ({**BASE, "backends": BASE["backends"] + [BASE["backends"][0]]}, "unique"),
        ({**BASE, "api_key": "env:LLMSIM_TEST_SURELY_UNSET"}, "LLMSIM_TEST_SURELY_UNSET"),
    ]
    for data, needle in cases:
        with pytest.raises(ConfigError, match=needle) as e:
            parse_config(data)
        assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="no such router config"):
        load_config(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("backends: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    good = tmp_path / "r.yaml"
    good.write_text("backends:\n  - {name: a, url: 'http://h:1'}\npolicy: {heuristic: round_robin}\nport: 9\n")
    assert load_config(good).port == 9 and load_config(good, port=8123).port == 8123


def test_the_config_is_validated_like_every_llmsim_config() -> None:
    """One config style: the router's groups are llmsim Schemas (a misspelt key gets a hint, direct construction
    raises the same one-line ConfigError)."""
    assert issubclass(RouterConfig, Schema)
    with pytest.raises(ConfigError, match=r"r.yaml: limits: unknown key 'max_wait' \(did you mean 'max_wait_s'\?\)"):
        parse_config({**BASE, "limits": {"max_wait": 3}}, "r.yaml")
    with pytest.raises(ConfigError, match="port: expected a number, not a boolean"):
        parse_config({**BASE, "port": True})
    with pytest.raises(ConfigError, match="^policy: expected exactly one of"):
        PolicyConfig(heuristic="jsq", onnx="d")


def test_vllm_metrics_are_read_in_both_spellings() -> None:
    m = parse_metrics(VLLM_V1)
    assert (m.running, m.waiting, m.swapped, m.kv_usage) == (3, 2, 0, 0.25)
    assert (m.num_gpu_blocks, m.block_size, m.generation_tokens) == (1000, 16, 500)
    v0 = VLLM_V1.replace("kv_cache_usage_perc", "gpu_cache_usage_perc") + \
        '# TYPE vllm:num_requests_swapped gauge\nvllm:num_requests_swapped{model_name="m"} 1.0\n'
    m0 = parse_metrics(v0)
    assert m0.kv_usage == 0.25 and m0.swapped == 1
    assert parse_metrics("# nothing here\n").kv_usage is None
    with pytest.raises(MetricsParseError):
        parse_metrics("vllm:num_requests_running{ 3\n")
    assert parse_models({"data": [{"id": "llama", "max_model_len": 8192}]}) == ("llama", 8192)
    assert parse_models({"data": []}) == (None, None) and parse_models("x") == (None, None)


def test_only_the_samples_read_are_parsed_and_a_page_that_is_no_exposition_is_refused() -> None:
    """The router parses only the samples it reads (a vLLM exposition's buckets are most of it): the numbers are those
    of parsing the whole text, with a thousand more unread lines around them; a page that is not an exposition is a
    MetricsParseError naming its line (a scrape failure), as before."""
    buckets = "".join(f'vllm:e2e_request_latency_seconds_bucket{{le="{k}.0",model_name="m"}} {k}\n'
                      for k in range(1000))
    padded = "# TYPE vllm:e2e_request_latency_seconds histogram\n" + buckets + VLLM_V1 + 'process_open_fds 12.0\n'
    assert parse_metrics(padded) == parse_metrics(VLLM_V1)
    assert samples_read(padded) == samples_read(VLLM_V1) and "bucket" not in samples_read(padded)
    spaced = VLLM_V1.replace("\n", "\n\n") + 'odd{path="a}b",x="y z"} +Inf 1700000000000\n'
    assert parse_metrics(spaced) == parse_metrics(VLLM_V1)
    for page, line in (("<html><body>Not found</body></html>\n", 1), ('{"detail":"Not Found"}', 1),
                       (VLLM_V1 + "hello world\n", VLLM_V1.count("\n") + 1)):
        with pytest.raises(MetricsParseError, match=f"line {line} is not a sample"):
            parse_metrics(page)


def test_step_time_is_read_from_vllms_inter_token_latency_of_every_version() -> None:
    """vLLM 0.11 renamed its per-gap histogram vllm:inter_token_latency_seconds (the old name deprecated, then
    hidden in 0.12, then gone): a router reading only the old name saw no step time from a current vLLM. The new
    name is read, the old one only without it (0.11 exports both, the same gaps), never the per-request mean."""
    def itl(name: str, count: float, total: float) -> str:
        return (f"# TYPE {name} histogram\n{name}_count{{engine=\"0\",model_name=\"m\"}} {count}\n"
                f"{name}_sum{{engine=\"0\",model_name=\"m\"}} {total}\n")

    head = VLLM_V1[:VLLM_V1.index("# TYPE vllm:time_per_output_token_seconds")]
    new = itl("vllm:inter_token_latency_seconds", 40.0, 0.8)
    per_request = itl("vllm:request_time_per_output_token_seconds", 2.0, 0.05)
    old = itl("vllm:time_per_output_token_seconds", 10.0, 0.3)
    for page, want in ((head + new + per_request, (0.8, 40.0)),  # 0.12 and later
                       (head + old + new + per_request, (0.8, 40.0)),  # 0.11: both names, one read
                       (VLLM_V1, (0.3, 10.0)),  # before 0.11
                       (head + per_request, (None, None))):  # no per-gap histogram: no step time from it
        m = parse_metrics(page)
        assert (m.tpot_sum, m.tpot_count) == want


def test_state_dead_reckons_between_scrapes() -> None:
    cfg = parse_config(BASE)
    a, b = Backend(0, cfg.backends[0], model="m", up=True), Backend(1, cfg.backends[1], model="m", up=True)
    a.record_scrape(parse_metrics(VLLM_V1), now=1.0)
    st = a.instance_state()
    assert (st.num_running, st.num_waiting, st.kv_blocks_used, st.kv_blocks_total) == (3, 2, 250, 1000)
    a.send(Flight(7, 100, None, None, 1.5))  # sent after the scrape: one more waiting, its prompt's 7 blocks
    st = a.instance_state()
    assert (st.num_running, st.num_waiting, st.kv_blocks_used) == (3, 3, 257)
    assert st.waiting[0].id == 7 and st.waiting[0].computed == 0
    a.flights[7].started, a.flights[7].generated = True, 5
    st = a.instance_state()
    assert st.running[0].computed == 104 and st.num_requests == 6
    a.record_scrape(parse_metrics(VLLM_V1.replace("500.0", "700.0").replace(
        "_count{engine=\"0\",model_name=\"m\"} 10.0", "_count{engine=\"0\",model_name=\"m\"} 20.0").replace(
        "0.3\n", "0.5\n")), now=3.0)
    assert a.throughput == pytest.approx(100.0) and a.step_time == pytest.approx(0.02)
    # a backend without metrics: the router's own bookkeeping only
    b.send(Flight(8, 10, None, None, 0.0))
    st = cluster_state([a, b], now=4.0, central_queue=1, num_arrived=9, mean_output=50.0)
    assert st.instances[1].num_waiting == 1 and st.instances[1].num_running == 0 and st.taken_at == 3.0
    assert st.check_version() is st
    # jsq on the live state: b has 1 request, a has 6
    d = Decider(cfg.policy)
    assert d.decide(Request(9, 4.0, 10, 10), st) == 1
    assert d.decide(Request(9, 4.0, 10, 10), st, allowed=[0]) == 0
    b.up = False
    assert d.decide(Request(9, 4.0, 10, 10), cluster_state([a, b], 4.0, 1, 9, 50.0)) == 0


def test_client_requests_are_checked() -> None:
    ok = check_request({"model": "m", "prompt": "x" * 40, "max_tokens": 5, "stream": True}, False, 4.0)
    assert (ok.prompt_tokens, ok.max_tokens, ok.stream) == (10, 5, True)
    assert check_request({"model": "m", "prompt": [1, 2, 3]}, False, 4.0).prompt_tokens == 3
    chat = check_request({"model": "m", "messages": [{"role": "user", "content": "abcd" * 3}]}, True, 4.0)
    assert chat.prompt_tokens == 3 + 4
    bad = [
        ({"prompt": "x"}, False, "'model'"),
        ({"model": "m"}, False, "'prompt' is required"),
        ({"model": "m", "prompt": {"a": 1}}, False, "'prompt' must be"),
        ({"model": "m", "prompt": "x", "max_tokens": 0}, False, "'max_tokens'"),
        ({"model": "m", "prompt": "x", "max_tokens": True}, False, "'max_tokens'"),
        ({"model": "m", "prompt": "x", "stream": "yes"}, False, "'stream'"),
        ({"model": "m", "messages": []}, True, "'messages'"),
        ({"model": "m", "messages": [{"content": "x"}]}, True, r"messages\[0\]"),
    ]
    for body, chat_, needle in bad:
        with pytest.raises(BadRequest, match=needle) as e:
            check_request(body, chat_, 4.0)
        assert e.value.status == 400 and e.value.body()["error"]["code"] == 400
    for raw in (b"{", b"[1]", b"\xff"):
        with pytest.raises(BadRequest):
            parse_json(raw)


# ---------------------------------------------------------------------- RouteBalance's static_tpot_ms at startup
@pytest.mark.timeout(30)
@pytest.mark.parametrize("tpot,want", [
    (None, "static_tpot_ms: missing"), ({"llama-3.1-8b": -1.0}, "static_tpot_ms.llama-3.1-8b: expected a finite"),
    ({"llama-3.1-8b": float("nan")}, "static_tpot_ms.llama-3.1-8b: expected a finite"),
    ({"llama-3.1-8b": 0}, "static_tpot_ms.llama-3.1-8b: expected a finite"), ([8.0], "expected a mapping"),
    ({"other-model": 8.0}, "no entry for backend model(s) ['llama-3.1-8b']")])
def test_routebalance_static_tpot_is_checked_at_startup(tpot, want) -> None:
    """policy routebalance: static_tpot_ms missing / non-positive / NaN / not covering a backend's model is one
    ConfigError naming the key (before any backend is contacted)."""
    kwargs = {} if tpot is None else {"static_tpot_ms": tpot}
    cfg = {"backends": [{"name": "b0", "url": "http://127.0.0.1:9", "model": "llama-3.1-8b"}],
           "policy": {"heuristic": "routebalance", "kwargs": kwargs}}
    with pytest.raises(ConfigError, match="policy.kwargs.static_tpot_ms") as e:
        parse_config(cfg)
    assert want in str(e.value) and "\n" not in str(e.value)
    ok = {**cfg, "policy": {"heuristic": "routebalance", "kwargs": {"static_tpot_ms": {"llama-3.1-8b": 8.0}}}}
    parse_config(ok)  # a complete table passes; a model found only at discovery is checked by the decider
    d = Decider(PolicyConfig(heuristic="routebalance", kwargs={"static_tpot_ms": {"llama-3.1-8b": 8.0}}))
    d.check_backends(["llama-3.1-8b", ""])  # "" : a backend down at start (model unknown yet)
    with pytest.raises(ConfigError, match=r"static_tpot_ms: no entry for backend model\(s\) \['qwen'\]"):
        d.check_backends(["llama-3.1-8b", "qwen"])


def test_a_backend_model_list_without_a_usable_context_keeps_the_default() -> None:
    for mml in (True, 0, -5, "4096", 2.5):
        assert parse_models({"data": [{"id": "m", "max_model_len": mml}]}) == ("m", None)


def test_a_live_export_takes_the_clients_predictions_without_simulated_error() -> None:
    """In the simulator an export's ``noisy`` predictor stands for a predictor's error, and keeps it (its decisions
    equal the checkpoint's); live, the client's routing hints and max_tokens already are predictions: the router
    only buckets them, as the policy saw its inputs."""
    pytest.importorskip("onnxruntime", reason="an export runs on onnxruntime (the rl or serve extra)")
    from llmsim.routing import make_router

    live = Decider(PolicyConfig(onnx="zoo:qos_edge")).router
    sim = make_router("onnx", path="zoo:qos_edge")
    models = live.ctx.models[:3]
    req = Request(1, 0.0, 20, 64, quality_by_model={models[0]: 0.81, models[1]: 0.64, models[2]: 0.07},
                  outputs_by_model={models[0]: 120, models[1]: 33, models[2]: 299})
    for _ in range(3):  # the same answer every time: no draw moves it
        lens, quals = live.ctx.predictor.predict(req, models)
        assert quals.tolist() == pytest.approx([0.85, 0.65, 0.05]) and lens.tolist() == pytest.approx([135, 45, 285])
    draws = {tuple(sim.ctx.predictor.predict(req, models)[1]) for _ in range(20)}
    assert len(draws) > 1, "the simulator's export keeps its predictor's noise"
    with pytest.raises(ConfigError, match="predictor_noise"):
        make_router("onnx", path="zoo:qos_edge", predictor_noise="no")


@register_router
class TripsOnOptions(Router):
    """A plugin router whose constructor trips on an option of the wrong shape (an AttributeError, not a
    ConfigError of its own)."""

    name = "test_trips_on_options"

    def __init__(self, seed: int = 0, table: object = None, **kw) -> None:
        super().__init__(seed, **kw)
        self.table = {str(k): v for k, v in (table or {}).items()}

    def route(self, req, view) -> int:
        return 0


def test_options_a_router_cannot_take_are_one_config_error_naming_them() -> None:
    """A router's constructor that trips on an option of the wrong shape (not its own ConfigError) still ends in
    one line naming policy.kwargs, never a traceback from the live router's start; the shipped ones (qlm) check
    theirs and name the option."""
    with pytest.raises(ConfigError, match=r"policy.kwargs: routing policy 'test_trips_on_options' cannot be built "
                                          r"from \{'table'"):
        Decider(PolicyConfig.parse({"heuristic": "test_trips_on_options", "kwargs": {"table": "x"}}))
    with pytest.raises(ConfigError, match=r"^policy.kwargs.class_output: expected a mapping of class to \[mean, std\]"):
        Decider(PolicyConfig.parse({"heuristic": "qlm", "kwargs": {"class_output": "x"}}))
