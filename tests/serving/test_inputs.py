"""Every input the router takes ends in a 2xx or one clear 4xx, never a 500: HTTP bodies (deep nesting, bad
UTF-8, lone surrogates, wrong types, max_tokens beyond the context, unknown models and routes), the config file's
keys (URLs, duplicates, timeouts), and a property test throwing random JSON-ish bodies at the app. The router runs
in-process (TestClient) over an in-process fake vLLM backend: no network."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("fastapi", reason="the serving extra is not installed: pip install 'llmsim[serve]'")

import httpx  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

from llmsim.errors import ConfigError  # noqa: E402
from llmsim.serving.app import create_app  # noqa: E402
from llmsim.serving.config import load_config, parse_config  # noqa: E402
from llmsim.serving.inbound import MAX_JSON_DEPTH, BadRequest, check_request, parse_json  # noqa: E402
from tests.serving.helpers import samples  # noqa: E402

pytestmark = pytest.mark.timeout(300)

CONTEXT = 4096
COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"


def fake_vllm() -> Starlette:
    """A vLLM-like backend serving model ``m`` (context 4,096): every completion is two tokens."""
    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "m", "max_model_len": CONTEXT}]})

    async def complete(request: Request) -> Response:
        body = json.loads(await request.body())
        if body.get("stream"):
            chunks = [f"data: {json.dumps({'choices': [{'text': 'a', 'finish_reason': None}]})}\n\n"] * 2
            return StreamingResponse(iter([*chunks, "data: [DONE]\n\n"]), media_type="text/event-stream")
        return JSONResponse({"choices": [{"text": "ab"}], "usage": {"completion_tokens": 2}})

    return Starlette(routes=[
        Route("/v1/models", models), Route("/health", lambda r: PlainTextResponse("")),
        Route("/metrics", lambda r: PlainTextResponse("")),
        Route(COMPLETIONS, complete, methods=["POST"]), Route(CHAT, complete, methods=["POST"])])


@pytest.fixture
def client(monkeypatch):
    """The router app (TestClient) whose backend calls go to :func:`fake_vllm` in-process."""
    backend = fake_vllm()
    monkeypatch.setattr(httpx, "AsyncHTTPTransport", lambda **kw: httpx.ASGITransport(app=backend))
    cfg = parse_config({"backends": [{"name": "b0", "url": "http://b0.test:8000"}], "policy": {"heuristic": "jsq"}})
    with TestClient(create_app(cfg)) as c:
        assert c.get("/health").json()["healthy"] == ["b0"]
        yield c


def post(c: TestClient, raw: bytes | str, path: str = COMPLETIONS) -> httpx.Response:
    raw = raw.encode() if isinstance(raw, str) else raw
    return c.post(path, content=raw, headers={"content-type": "application/json"})


BAD_BODIES = [  # (body, endpoint, status, words the message must hold)
    ('{"model": "m", "prompt": "x", "extra": ' + "[" * 100_000 + "]" * 100_000 + "}", COMPLETIONS, 400,
     "nested deeper than"),
    ('{"model": "m", "prompt": "x", "extra": ' + "[" * (MAX_JSON_DEPTH + 5) + "]" * (MAX_JSON_DEPTH + 5) + "}",
     COMPLETIONS, 400, "nested deeper than"),
    ('{"model": "m", "prompt": "a \\ud800 b"}', COMPLETIONS, 400, "lone UTF-16 surrogate"),
    ('{"model": "m", "messages": [{"role": "user", "content": "\\udc00"}]}', CHAT, 400, "lone UTF-16 surrogate"),
    (b'{"model": "m", "prompt": "caf\xe9"}', COMPLETIONS, 400, "not UTF-8 text (byte 0xe9"),
    ('{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}', CHAT, 400,
     "messages[0].content[0].text must be a string"),
    ('{"model": "m", "messages": [{"role": "user", "content": [7]}]}', CHAT, 400, "messages[0].content[0] must be"),
    ('{"model": "m", "messages": [{"role": "user", "content": 5}]}', CHAT, 400, "messages[0].content must be"),
    ('{"model": "m", "prompt": "hi", "max_tokens": ' + str(10**30) + "}", COMPLETIONS, 400,
     f"This model's maximum context length is {CONTEXT} tokens. However, you requested"),
    ('{"model": "m", "prompt": [1, 2, 3], "max_tokens": 4094}', COMPLETIONS, 400,
     "you requested 4097 tokens (3 in the messages, 4094 in the completion)"),
    ('{"model": "m", "messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 5000}', CHAT, 400,
     "maximum context length"),
    ('{"model": "m", "prompt": "hi", "max_tokens": 0}', COMPLETIONS, 400, "'max_tokens' must be at least 1, got 0"),
    ('{"model": "m", "prompt": "hi", "max_tokens": -3}', COMPLETIONS, 400, "at least 1"),
    ('{"model": "m", "prompt": "hi", "max_tokens": 2.5}', COMPLETIONS, 400, "'max_tokens' must be an integer"),
    ('{"model": "nope", "prompt": "hi"}', COMPLETIONS, 404, "The model `nope` does not exist."),
    ('{"model": "m", "prompt": "hi", "temperature": NaN}', COMPLETIONS, 400, "NaN is not a JSON number"),
    ('{"model": "m", "prompt": "hi", "temperature": 1e400}', COMPLETIONS, 400, "out of range"),
    ('{"model": "m", "prompt": "hi", "seed": ' + "9" * 5000 + "}", COMPLETIONS, 400, "not valid JSON"),
    ('{"model": "m", "prompt": [[1, true]]}', COMPLETIONS, 400, "'prompt' must be"),
    ("[]", COMPLETIONS, 400, "must be a JSON object"),
    ('{"model": "m", "prompt": "hi", "n": 2}', COMPLETIONS, 400, "'n' must be 1 (the router routes one sequence"),
    ('{"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 8, "stream": true}', CHAT, 400,
     "'n' must be 1"),
    ('{"model": "m", "prompt": "hi", "n": "2"}', COMPLETIONS, 400, "'n' must be an integer, got \"2\""),
    ('{"model": "m", "prompt": "hi", "n": true}', COMPLETIONS, 400, "'n' must be an integer, got true"),
    ('{"model": "m", "prompt": "hi", "n": 0}', COMPLETIONS, 400, "'n' must be 1"),
]


@pytest.mark.parametrize("raw,path,status,needle", BAD_BODIES, ids=range(len(BAD_BODIES)))
def test_bad_bodies_get_one_clear_4xx(client, raw, path, status, needle) -> None:
    r = post(client, raw, path)
    err = r.json()["error"]
    assert r.status_code == status and needle in err["message"] and err["code"] == status, r.text
    assert "\n" not in err["message"]


def test_what_is_answered_is_what_is_counted(client) -> None:
    """The metrics count the code actually answered (a refused request is not a 200)."""
    assert post(client, '{"model": "m", "prompt": "a \\ud800"}').status_code == 400
    assert post(client, '{"model": "nope", "prompt": "x"}').status_code == 404
    assert post(client, '{"model": "m", "prompt": "hi", "max_tokens": 2}').status_code == 200
    assert post(client, '{"model": "m", "messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}',
                CHAT).status_code == 200  # a surrogate pair is fine
    counted = samples(client.get("/metrics").text, "llmsim_router_requests_total")
    assert counted == {(("code", "400"), ("endpoint", COMPLETIONS)): 1.0,
                       (("code", "404"), ("endpoint", COMPLETIONS)): 1.0,
                       (("code", "200"), ("endpoint", COMPLETIONS)): 1.0,
                       (("code", "200"), ("endpoint", CHAT)): 1.0}, counted


def test_unknown_routes_and_methods_answer_in_openai_shape(client) -> None:
    for r, status in ((client.get(COMPLETIONS), 405), (client.get("/v2/nothing"), 404),
                      (client.get("/openapi.json"), 404), (client.get("/docs"), 404)):
        assert r.status_code == status and r.json()["error"]["code"] == status, r.text


def test_the_client_body_is_forwarded_as_sent_when_it_names_the_backend_model() -> None:
    raw = b'{"model": "m",  "prompt": "caf\\u00e9 \\ud83d\\ude00"}'
    inbound = check_request(parse_json(raw), False, 4.0, raw)
    assert inbound.upstream_content("m") == raw  # not re-encoded
    other = json.loads(inbound.upstream_content("served-name"))
    assert other == {**json.loads(raw), "model": "served-name"}


def test_routing_hints_are_read_checked_and_never_forwarded() -> None:
    body = {"model": "m", "prompt": "hi", "llmsim": {"quality_by_model": {"a": 0.5, "b": 1},
                                                      "output_tokens_by_model": {"a": 30}}}
    raw = json.dumps(body).encode()
    inbound = check_request(parse_json(raw), False, 4.0, raw)
    assert inbound.quality_by_model == {"a": 0.5, "b": 1.0} and inbound.outputs_by_model == {"a": 30}
    for model in ("m", "served-name"):  # the client's bytes are not sent as they are: the hints come out
        assert json.loads(inbound.upstream_content(model)) == {"model": model, "prompt": "hi"}
    assert check_request({"model": "m", "prompt": "hi"}, False, 4.0).quality_by_model is None
    bad = [({"quality_by_model": {"a": 1.5}}, "llmsim.quality_by_model.a' must be a quality in [0, 1]"),
           ({"quality_by_model": {"a": True}}, "llmsim.quality_by_model.a' must be a quality"),
           ({"output_tokens_by_model": {"a": 2.5}}, "llmsim.output_tokens_by_model.a' must be an integer"),
           ({"output_tokens_by_model": {}}, "must be an object of 1 to 64 model names"),
           ({"quality_by_model": {f"m{i}": 0.1 for i in range(65)}}, "1 to 64 model names"),
           ({"quality": {"a": 0.5}}, "'llmsim' must be an object with keys among"), ([1], "'llmsim' must be an object")]
    for hints, needle in bad:
        with pytest.raises(BadRequest, match=re.escape(needle)) as e:
            check_request({"model": "m", "prompt": "hi", "llmsim": hints}, False, 4.0)
        assert e.value.status == 400 and e.value.param.startswith("llmsim")


TEXT = st.text(max_size=20) | st.text(st.characters(min_codepoint=0xD7F0, max_codepoint=0xE010), max_size=3)
JSON_LEAVES = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TEXT
JSON_VALUES = st.recursive(JSON_LEAVES, lambda inner: st.lists(inner, max_size=4) |
                           st.dictionaries(TEXT, inner, max_size=4), max_leaves=12)
PART = st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"]) | JSON_VALUES},
                             optional={"text": TEXT | JSON_VALUES})
MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "system"]) | JSON_VALUES},
                                optional={"content": TEXT | st.lists(PART, max_size=3) | JSON_VALUES})
OVERRIDES = st.fixed_dictionaries({}, optional={  # each key present or not: one field at a time goes wrong
    "model": st.sampled_from(["m", "llmsim-router", "nope", ""]) | JSON_VALUES,
    "prompt": TEXT | st.lists(st.integers(-5, 10**6), max_size=5) | JSON_VALUES,
    "messages": st.lists(MESSAGE, min_size=1, max_size=3) | JSON_VALUES,
    "max_tokens": st.integers(-2, 10**31) | JSON_VALUES, "max_completion_tokens": st.integers(-2, 5000),
    "stream": st.booleans() | JSON_VALUES, "n": JSON_VALUES,
    "llmsim": JSON_VALUES | st.fixed_dictionaries({}, optional={  # routing hints
        "quality_by_model": st.dictionaries(TEXT, JSON_VALUES, max_size=3),
        "output_tokens_by_model": st.dictionaries(TEXT, st.integers(-2, 10**6) | JSON_VALUES, max_size=3)})})
VALID = st.sampled_from([{"model": "m", "prompt": "hi", "max_tokens": 2},
                         {"model": "llmsim-router", "messages": [{"role": "user", "content": "hi"}]}])
REQUESTS = st.builds(lambda base, changes: {**base, **changes}, VALID, OVERRIDES)
BODIES = REQUESTS.map(json.dumps) | JSON_VALUES.map(json.dumps) | st.binary(max_size=64) | st.text(max_size=64)


def test_no_input_gets_a_500(client) -> None:
    """Random JSON-ish bodies on both endpoints: every answer is below 500, and an error is OpenAI-shaped."""
    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(raw=BODIES, chat=st.booleans())
    def check(raw: str | bytes, chat: bool) -> None:
        r = post(client, raw, CHAT if chat else COMPLETIONS)
        assert r.status_code < 500, (raw, r.status_code, r.text)
        if r.status_code >= 400:
            assert r.json()["error"]["message"], r.text

    check()
    counted = samples(client.get("/metrics").text, "llmsim_router_requests_total")
    assert not [k for k in counted if k[0][1].startswith("5")], counted


# ------------------------------------------------------------------------------------------ the config's inputs
BASE = {"backends": [{"name": "a", "url": "http://127.0.0.1:9001"}], "policy": {"heuristic": "jsq"}}


@pytest.mark.parametrize("change,needle", [
    ({"backends": [{"name": "a", "url": "http://[::1"}]}, "backends[0].url: expected an http:// or https:// URL "
                                                           "with its IPv6 host in closed [brackets]"),
    ({"backends": [{"name": "a", "url": "http://h:99999"}]}, "backends[0].url: expected an http:// or https:// URL "
                                                              "with a port in 1-65535"),
    ({"backends": [{"name": "a", "url": "http://h:0"}]}, "with a port in 1-65535"),
    ({"backends": [{"name": "a", "url": "http://"}]}, "backends[0].url: expected an http:// or https:// URL with a "
                                                       "host"),
    ({"backends": [{"name": "a", "url": "http://h x:1"}]}, "backends[0].url: expected an http:// or https:// URL "
                                                            "without spaces"),
    ({"backends": [{"name": "a", "url": "http://h:1/v1?x=1"}]}, "without a ?query or #fragment"),
    ({"backends": [{"name": "a", "url": "http://h:1"}, {"name": "b", "url": "http://H:1/"}]},
     "backends: expected backends with distinct URLs (backends[0] and backends[1]"),
    ({"backends": [{"name": "a", "url": "http://h:80"}, {"name": "b", "url": "http://h"}]}, "distinct URLs"),
    ({"timeouts": {"connect_s": float("inf")}}, "timeouts.connect_s: expected a finite number"),
    ({"timeouts": {"request_s": 0}}, "timeouts.request_s: expected a value > 0"),
    ({"health": {"interval_s": float("nan")}}, "health.interval_s: expected a finite number"),
    ({"port": 70000}, "port: expected a value <= 65535"),
    ({"host": "local host"}, "host: expected an address to listen on"),
    ({"model_name": ""}, "model_name: expected a string of at least 1"),
    ({"policy": {"onnx": "zoo:workload_router", "kwargs": {"path": "/tmp"}}},
     "policy: expected kwargs without 'path' (give it as policy.onnx)"),
    ({"policy": {"heuristic": "jsq", "kwargs": {"seed": 3}}}, "policy: expected kwargs without 'seed' (give it as "
                                                              "policy.seed)"),
    ({"policy": {"onnx": ""}}, "policy.onnx: expected a string of at least 1 character"),
])
def test_config_inputs_are_one_line_naming_the_key(change, needle) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config({**BASE, **change}, "r.yaml")
    assert str(e.value).startswith("r.yaml: ") and needle in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_request_checks_name_the_field() -> None:
    with pytest.raises(BadRequest, match=r"messages\[1\]\.content\[0\]\.text") as e:
        check_request({"model": "m", "messages": [{"role": "user", "content": "x"},
                                                   {"role": "user", "content": [{"type": "text", "text": 5}]}]},
                      True, 4.0)
    assert e.value.param == "messages[1].content[0].text" and e.value.body()["error"]["param"] == e.value.param
    ok = check_request({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "abcd"}, {"type": "image_url", "image_url": {"url": "x"}}]}, {"role": "assistant",
                                                                                              "content": None}]},
                       True, 4.0)
    assert ok.prompt_tokens == 1 + 4 + 0 + 4 and ok.min_prompt_tokens == 2
    assert check_request({"model": "m", "prompt": "x", "n": 1}, False, 4.0).body["n"] == 1  # one sequence is fine
    chat = check_request({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 9,
                          "max_completion_tokens": 7}, True, 4.0)
    assert (chat.max_tokens, chat.max_tokens_key) == (7, "max_completion_tokens")  # as vLLM: that one wins


@pytest.mark.parametrize("text,needle", [
    ("backends: [{name: a, url: 'http://127.0.0.1:9'}]\npolicy: {heuristic: jsq}\npolicy: {heuristic: random}\n",
     "line 3: key 'policy' given twice in one mapping"),
    ("backends:\n  - {name: a, url: 'http://127.0.0.1:9', api_key: k1k1k1, api_key: k2k2k2}\n"
     "policy: {heuristic: jsq}\n", "line 2: key 'api_key' given twice in one mapping")])
def test_a_key_given_twice_in_the_config_file_is_refused(tmp_path, text, needle) -> None:
    """YAML parsers keep the last of two equal keys without a word: a config that says two things is refused."""
    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value).startswith(f"{path}: ") and needle in str(e.value), str(e.value)
    assert "k1k1k1" not in str(e.value) and "k2k2k2" not in str(e.value)


def test_yaml_anchors_and_merge_keys_are_not_duplicates(tmp_path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("backends:\n  - &b {name: a, url: 'http://127.0.0.1:9'}\n"
                    "  - {<<: *b, name: c, url: 'http://127.0.0.1:10'}\npolicy: {heuristic: jsq}\n")
    assert [b.name for b in load_config(path).backends] == ["a", "c"]
