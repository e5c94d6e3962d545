"""The emulated vLLM backend's HTTP API (llmsim.emulator): completions and chat as vLLM answers them (usage counts,
determinism, streaming chunks, sampled lengths), errors in OpenAI's shape, auth, and option checks. Loopback only;
every test takes a few seconds at most."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmsim.emulator import EmulatorHandle, EmulatorOptions, start_emulator
from llmsim.emulator.app import create_app
from llmsim.emulator.engine import RealTimeEngine
from llmsim.errors import ConfigError, LLMSimError
from tests.emulator.helpers import MODEL, VirtualLoop, post, sse
from tests.perf.helpers import tiny


# ---------------------------------------------------------------------- the API
@pytest.mark.timeout(60)  # a hang bound: start() itself fails if the server does not start in 10 s
def test_models_health_and_quick_start() -> None:
    with start_emulator(MODEL, "a100-80gb", speedup=20.0, served_model_name="my-llama") as h:
        assert httpx.get(h.url + "/health").status_code == 200
        d = httpx.get(h.url + "/v1/models").json()["data"][0]
        assert d["id"] == "my-llama" and d["owned_by"] == "llmsim" and d["max_model_len"] == 131072
        assert post(h, "/v1/completions", {"model": "my-llama", "prompt": "hi", "max_tokens": 2}).status_code == 200
    assert not h.thread_alive  # stop() returned with the server's thread ended: it did not wait out its timeout


def test_completion_non_streaming_counts_and_determinism(emu: EmulatorHandle) -> None:
    body = {"model": MODEL, "prompt": "x" * 401, "max_tokens": 7}
    r = post(emu, "/v1/completions", body)
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["object"] == "text_completion" and d["id"].startswith("cmpl-")
    assert d["usage"] == {"prompt_tokens": 101, "completion_tokens": 7, "total_tokens": 108}  # ceil(401 / 4)
    c = d["choices"][0]
    assert c["finish_reason"] == "length" and len(c["text"].split()) == 7
    assert post(emu, "/v1/completions", body).json()["choices"][0]["text"] == c["text"]  # same request, same text
    ids = post(emu, "/v1/completions", {"model": MODEL, "prompt": list(range(37)), "max_tokens": 3}).json()
    assert ids["usage"]["prompt_tokens"] == 37  # token ids count exactly
    dflt = post(emu, "/v1/completions", {"model": MODEL, "prompt": "hello"}).json()
    assert dflt["usage"]["completion_tokens"] == 16  # vLLM's default max_tokens for completions


def test_chat_non_streaming(emu: EmulatorHandle) -> None:
    msgs = [{"role": "system", "content": "s" * 10}, {"role": "user", "content": [{"type": "text", "text": "u" * 7}]}]
    r = post(emu, "/v1/chat/completions", {"model": MODEL, "messages": msgs, "max_completion_tokens": 5})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["object"] == "chat.completion"
    assert d["choices"][0]["message"]["role"] == "assistant" and d["choices"][0]["finish_reason"] == "length"
    # ceil(17 chars / 4) + 3 per message + 3 for the reply's header
    assert d["usage"] == {"prompt_tokens": 5 + 6 + 3, "completion_tokens": 5, "total_tokens": 19}


def test_chat_default_max_tokens_is_the_rest_of_the_context(small: EmulatorHandle) -> None:
    r = post(small, "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    u = r.json()["usage"]
    assert u["prompt_tokens"] == 1 + 3 + 3 and u["total_tokens"] == 512


def test_streaming_completion(emu: EmulatorHandle) -> None:
    body = {"model": MODEL, "prompt": "hello " * 20, "max_tokens": 12, "stream": True,
            "stream_options": {"include_usage": True}}
    with httpx.stream("POST", emu.url + "/v1/completions", json=body, timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        chunks = sse(list(r.iter_lines()))
    assert chunks[-1] == "[DONE]"
    tokens, final, usage = chunks[:-3], chunks[-3], chunks[-2]
    assert len(tokens) == 12 and all(c["choices"][0]["finish_reason"] is None for c in tokens)
    assert all(c["choices"][0]["text"].strip() for c in tokens)
    assert final["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 30, "completion_tokens": 12,
                                                         "total_tokens": 42}
    whole = post(emu, "/v1/completions", {**body, "stream": False, "stream_options": None}).json()
    assert "".join(c["choices"][0]["text"] for c in tokens) == whole["choices"][0]["text"]
    body.pop("stream_options")  # no usage chunk unless asked
    with httpx.stream("POST", emu.url + "/v1/completions", json=body, timeout=30) as r:
        chunks = sse(list(r.iter_lines()))
    assert len(chunks) == 12 + 2 and not any("usage" in c for c in chunks[:-1])


def test_streaming_chat(emu: EmulatorHandle) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}
    with httpx.stream("POST", emu.url + "/v1/chat/completions", json=body, timeout=30) as r:
        chunks = sse(list(r.iter_lines()))
    assert chunks[0]["object"] == "chat.completion.chunk" and chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert [bool(c["choices"][0]["delta"].get("content")) for c in chunks[1:5]] == [True] * 4
    assert chunks[5]["choices"][0]["finish_reason"] == "length" and chunks[6] == "[DONE]"


def test_response_ids_are_random_as_vllm_makes_them(emu: EmulatorHandle) -> None:
    """``cmpl-`` / ``chatcmpl-`` and 32 hex digits (a random UUID, as vLLM): sequential ids (``cmpl-1``) repeated
    across emulators and restarts, so a client or router keyed on them mixed answers up. Identical requests get
    distinct ids and the same text (the simulation does not depend on ids); a stream's chunks share one id."""
    body = {"model": MODEL, "prompt": "same", "max_tokens": 3}
    a, b = post(emu, "/v1/completions", body).json(), post(emu, "/v1/completions", body).json()
    assert re.fullmatch(r"cmpl-[0-9a-f]{32}", a["id"]) and re.fullmatch(r"cmpl-[0-9a-f]{32}", b["id"]), (a, b)
    assert a["id"] != b["id"] and a["choices"] == b["choices"]
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True}
    with httpx.stream("POST", emu.url + "/v1/chat/completions", json=chat, timeout=30) as r:
        ids = {c["id"] for c in sse(list(r.iter_lines())) if c != "[DONE]"}
    assert len(ids) == 1 and re.fullmatch(r"chatcmpl-[0-9a-f]{32}", ids.pop())

    def first_ticket_id() -> str:  # a fresh engine, as after a restart or in a second emulator
        engine = RealTimeEngine(EmulatorOptions(model=MODEL, gpu="a100-80gb"))
        engine.start(VirtualLoop())  # type: ignore[arg-type]
        return engine.submit(10, 2, 2, seed=0).id

    assert first_ticket_id() != first_ticket_id()


def test_sampled_output_length() -> None:
    with start_emulator(MODEL, "a100-80gb", speedup=50.0, output_len="sampled", seed=3) as h:
        outs = []
        for k in range(4):
            d = post(h, "/v1/completions", {"model": MODEL, "prompt": f"q{k}", "max_tokens": 5000}).json()
            outs.append((d["usage"]["completion_tokens"], d["choices"][0]["finish_reason"]))
        assert all(1 <= n < 5000 and fin == "stop" for n, fin in outs) and len({n for n, _ in outs}) > 1
        again = post(h, "/v1/completions", {"model": MODEL, "prompt": "q0", "max_tokens": 5000}).json()
        assert again["usage"]["completion_tokens"] == outs[0][0]
        capped = post(h, "/v1/completions", {"model": MODEL, "prompt": "q0", "max_tokens": 2}).json()
        assert capped["usage"]["completion_tokens"] == 2 and capped["choices"][0]["finish_reason"] == "length"
        full = post(h, "/v1/completions", {"model": MODEL, "prompt": "q0", "max_tokens": 900, "ignore_eos": True})
        assert full.json()["usage"]["completion_tokens"] == 900
        least = post(h, "/v1/completions", {"model": MODEL, "prompt": "q0", "max_tokens": 5000,
                                            "min_tokens": outs[0][0] + 7}).json()  # no end before min_tokens
        assert least["usage"]["completion_tokens"] == outs[0][0] + 7
        ok = {"temperature": 0, "top_p": 1, "top_k": -1, "stop": ["\n"], "seed": -1, "min_tokens": 0}
        assert post(h, "/v1/completions", {"model": MODEL, "prompt": "q0", "max_tokens": 5000, **ok}).json()[
            "usage"]["completion_tokens"] == outs[0][0]  # vLLM's defaults change nothing (seed -1: none)


# ---------------------------------------------------------------------- errors and auth
BAD = [
    (b"{not json", 400, "not valid JSON"),
    (b"[1, 2]", 400, "must be a JSON object"),
    ({"model": 7, "prompt": "x"}, 400, "`model` must be a string"),
    ({"model": "gpt-5", "prompt": "x"}, 404, "The model `gpt-5` does not exist."),
    ({"model": MODEL}, 400, "`prompt` is required"),
    ({"model": MODEL, "prompt": ""}, 400, "must not be empty"),
    ({"model": MODEL, "prompt": [True, 2]}, 400, "list of token ids"),
    ({"model": MODEL, "prompt": ["a", "b"]}, 400, "batched prompts"),
    # a token id the model cannot embed: vLLM's 400, never a 200 (Llama-3.1's vocabulary is 128256 tokens)
    ({"model": MODEL, "prompt": [1, 128256]}, 400, "Token id 128256 is out of vocabulary"),
    ({"model": MODEL, "prompt": [10**30]}, 400, f"Token id {10**30} is out of vocabulary"),
    ({"model": MODEL, "prompt": "x", "max_tokens": 0}, 400, "`max_tokens` must be a positive integer"),
    ({"model": MODEL, "prompt": "x", "max_tokens": "five"}, 400, "`max_tokens` must be a positive integer"),
    ({"model": MODEL, "prompt": "x", "max_tokens": 1.5}, 400, "`max_tokens` must be a positive integer"),
    ({"model": MODEL, "prompt": "x", "stream": "maybe"}, 400, "`stream` must be a boolean"),
    ({"model": MODEL, "prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream=True"),
    ({"model": MODEL, "prompt": "x", "n": 2}, 400, "`n` must be 1"),
    ({"model": MODEL, "prompt": list(range(600))}, 400, "maximum context length is 512 tokens"),
    # a parser's limits are the client's error (400), never a 500 with a traceback
    (b"[" * 100_000 + b"]" * 100_000, 400, "nested too deeply"),
    (b'{"model": "%s", "prompt": "x", "max_tokens": %s}' % (MODEL.encode(), b"9" * 5000), 400, "4300 digits"),
    (b'{"model": "\\ud800", "prompt": "x"}', 404, "does not exist"),  # a lone surrogate quoted back
    ({"model": MODEL, "prompt": "x", "max_tokens": [[[1]]]}, 400, "got a list of 1 items"),
    # sampling options are not applied, but refused where vLLM refuses them (they were silently ignored)
    ({"model": MODEL, "prompt": "x", "temperature": -1}, 400, "`temperature` must be a number in [0, 2], got -1"),
    ({"model": MODEL, "prompt": "x", "temperature": "hot"}, 400, "`temperature` must be a number"),
    ({"model": MODEL, "prompt": "x", "top_p": 0}, 400, "`top_p` must be a number in (0, 1]"),
    ({"model": MODEL, "prompt": "x", "top_k": -2}, 400, "`top_k` must be 0 or -1"),
    ({"model": MODEL, "prompt": "x", "presence_penalty": 3}, 400, "`presence_penalty` must be a number in [-2, 2]"),
    ({"model": MODEL, "prompt": "x", "repetition_penalty": 0}, 400, "`repetition_penalty` must be a number grea"),
    ({"model": MODEL, "prompt": "x", "stop": ""}, 400, "`stop` must be a non-empty string"),
    ({"model": MODEL, "prompt": "x", "stop": ["a", 3]}, 400, "`stop` must be a non-empty string"),
    ({"model": MODEL, "prompt": "x", "seed": "abc"}, 400, "`seed` must be a 64-bit integer, got \"abc\""),
    ({"model": MODEL, "prompt": "x", "seed": 2**64}, 400, "`seed` must be a 64-bit integer"),
    ({"model": MODEL, "prompt": "x", "max_tokens": 4, "min_tokens": 5}, 400, "at most max_tokens=4, got 5"),
]


@pytest.mark.parametrize("body,status,words", BAD, ids=[w[:24] for _, _, w in BAD])
def test_completions_bad_requests(small: EmulatorHandle, body: Any, status: int, words: str) -> None:
    r = post(small, "/v1/completions", body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert words in err["message"] and err["code"] == status
    assert err["type"] == ("NotFoundError" if status == 404 else "BadRequestError")


@pytest.mark.parametrize("body,words", [
    ({"model": MODEL}, "`messages` is required"),
    ({"model": MODEL, "messages": []}, "`messages` is required"),
    ({"model": MODEL, "messages": [{"content": "x"}]}, "string `role`"),
    ({"model": MODEL, "messages": [{"role": "user", "content": 3}]}, "`messages[0].content` must be"),
    ({"model": MODEL, "messages": [{"role": "user", "content": [  # (an image was dropped silently, 0 tokens)
        {"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": "data:,"}}]}]},
     "`messages[0].content[1]` is of type \"image_url\": the emulator serves text only"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": -1}, "positive integer"),
])
def test_chat_bad_requests(small: EmulatorHandle, body: Any, words: str) -> None:
    r = post(small, "/v1/chat/completions", body)
    assert r.status_code == 400 and words in r.json()["error"]["message"], r.text


@pytest.mark.parametrize("model", ["absent", None, ""])
def test_a_request_without_model_is_served_by_the_served_model(small: EmulatorHandle, model: Any) -> None:
    """As vLLM: ``model`` is optional (``str | None``), and a missing, null or empty one means the first served model
    (the emulator answered 400 "`model` is required"). The answer names the served model."""
    for path, body in (("/v1/completions", {"prompt": "x", "max_tokens": 2}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2})):
        if model != "absent":
            body["model"] = model
        r = post(small, path, body)
        assert r.status_code == 200, r.text
        assert r.json()["model"] == MODEL and r.json()["usage"]["completion_tokens"] == 2


# `n` as vLLM's pydantic model takes it: an int in pydantic's lax mode (true, 1.0 and "1" are 1), then at least 1;
# completions declare `n: int` (null refused), chat `n: int | None` (null is 1). Only 1 is served.
N_VALUES = [(True, "both", 200, ""), (1.0, "both", 200, ""), ("1", "both", 200, ""), (" 1 ", "both", 200, ""),
            (None, "chat", 200, ""), (None, "completions", 400, "`n` must be an integer, got null"),
            (1.5, "both", 400, "`n` must be an integer, got 1.5"), ("one", "both", 400, "`n` must be an integer"),
            ([1], "both", 400, "`n` must be an integer, got a list of 1 items"),
            (0, "both", 400, "`n` must be at least 1, got 0"), (False, "both", 400, "`n` must be at least 1, got 0"),
            (2, "both", 400, "`n` must be 1 (the emulator returns one choice per request), got 2")]


@pytest.mark.parametrize("n,where,status,words", N_VALUES, ids=[f"{n!r}-{w}" for n, w, _, _ in N_VALUES])
def test_n_is_taken_as_vllm_takes_it(small: EmulatorHandle, n: Any, where: str, status: int, words: str) -> None:
    for path, body in (("/v1/completions", {"prompt": "x"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})):
        if where != "both" and path != {"chat": "/v1/chat/completions", "completions": "/v1/completions"}[where]:
            continue
        r = post(small, path, {"model": MODEL, "max_tokens": 1, "n": n, **body})
        assert r.status_code == status, (path, r.text)
        if status == 400:
            err = r.json()["error"]
            assert err["message"] == words or err["message"].startswith(words + ","), (path, err)
            assert err["param"] == "n"
        else:
            assert len(r.json()["choices"]) == 1


def test_prompt_that_never_fits_the_kv_cache() -> None:
    with start_emulator(MODEL, "a100-80gb", speedup=50.0, num_gpu_blocks=8) as h:
        r = post(h, "/v1/completions", {"model": MODEL, "prompt": list(range(200)), "max_tokens": 2})
        assert r.status_code == 400 and "KV cache" in r.json()["error"]["message"]
        assert post(h, "/v1/completions", {"model": MODEL, "prompt": list(range(50)), "max_tokens": 2}).status_code \
            == 200
        # a prompt that fits, with more output than the cache holds: refused before it starts (the engine dropped
        # it once grown past the cache: a 500, or a stream's error event after its tokens, counted nowhere)
        for stream in (False, True):
            r = post(h, "/v1/completions", {"model": MODEL, "prompt": list(range(50)), "max_tokens": 200,
                                            "stream": stream})
            err = r.json()["error"]
            assert r.status_code == 400 and err["param"] == "max_tokens", r.text
            assert err["message"].startswith("This request needs 50 + 200 tokens of KV cache, more than this "
                                             "engine's whole cache holds (8 usable blocks of 16 tokens"), r.text


def test_body_size_limit(small: EmulatorHandle) -> None:
    big = json.dumps({"model": MODEL, "prompt": "x" * (5 * 1024 * 1024)})
    r = post(small, "/v1/completions", big)
    assert r.status_code == 413 and "limit" in r.json()["error"]["message"]


def test_api_key() -> None:
    with start_emulator(MODEL, "a100-80gb", speedup=50.0, api_key="s3cret") as h:
        body = {"model": MODEL, "prompt": "x", "max_tokens": 1}
        for hdr in ({}, {"authorization": "Bearer nope"}):
            r = post(h, "/v1/completions", body, **hdr)
            assert r.status_code == 401 and r.json()["error"]["type"] == "AuthenticationError"
        assert httpx.get(h.url + "/v1/models").status_code == 401
        assert post(h, "/v1/completions", body, authorization="Bearer s3cret").status_code == 200
        two = httpx.post(h.url + "/v1/completions", content=json.dumps(body), timeout=30,
                         headers=[("authorization", "Bearer s3cret"), ("authorization", "Bearer other")])
        assert two.status_code == 401 and "2 Authorization headers" in two.json()["error"]["message"], two.text
        assert httpx.get(h.url + "/health").status_code == 200


KEY = "s3cret"
# (method, path, status with the key): every route but /health needs the key, unknown paths and methods included
ROUTES = [
    ("POST", "/v1/completions", 200), ("POST", "/v1/chat/completions", 200), ("GET", "/v1/models", 200),
    ("GET", "/metrics", 200), ("POST", "/metrics", 405), ("GET", "/v1/completions", 405),
    ("GET", "/nothing-here", 404), ("DELETE", "/v1/models", 405), ("GET", "/docs", 404),
    ("GET", "/openapi.json", 404), ("GET", "/health/", 307), ("GET", "/Health", 404),
]


@pytest.fixture(scope="module")
def keyed() -> Any:
    with start_emulator(MODEL, "a100-80gb", speedup=50.0, api_key=KEY) as h:
        yield h


@pytest.mark.parametrize("method,path,with_key", ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES])
def test_every_route_but_health_needs_the_key(keyed: EmulatorHandle, method: str, path: str, with_key: int) -> None:
    """Authentication, when configured, covers every route but /health (/metrics was open: it showed the load and
    the served model to anyone); a 401 comes before a 404 or 405, so no path answers without the key."""
    chat = path == "/v1/chat/completions"
    body = {"model": MODEL, "max_tokens": 1, **({"messages": [{"role": "user", "content": "x"}]} if chat
                                                 else {"prompt": "x"})}
    kw: dict[str, Any] = {"json": body} if method == "POST" else {}
    for hdr in ({}, {"authorization": "Bearer nope"}, {"authorization": "Basic czNjcmV0"}):
        r = httpx.request(method, keyed.url + path, headers=hdr, timeout=30, **kw)
        assert r.status_code == 401 and r.json()["error"]["type"] == "AuthenticationError", (hdr, r.text)
    r = httpx.request(method, keyed.url + path, headers={"authorization": f"Bearer {KEY}"}, timeout=30, **kw)
    assert r.status_code == with_key, r.text


def test_health_needs_no_key(keyed: EmulatorHandle) -> None:
    assert httpx.get(keyed.url + "/health").status_code == 200
    assert httpx.get(keyed.url + "/health", headers={"authorization": "Bearer nope"}).status_code == 200


def test_health_answers_head_without_the_key(keyed: EmulatorHandle) -> None:
    """A probe polling with HEAD got a 405; HEAD elsewhere still needs the key."""
    r = httpx.head(keyed.url + "/health")
    assert (r.status_code, r.content) == (200, b"")
    assert httpx.head(keyed.url + "/metrics").status_code == 401


def test_bad_options_raise_config_error() -> None:
    for kw in ({"speedup": 0}, {"speedup": float("nan")}, {"model": "nope"}, {"engine": "fifo"},
               {"output_len": "eos"}, {"api_key": ""}, {"api_key": "clé"}, {"api_key": "a b"}, {"model": 5},
               {"gpu": None}, {"served_model_name": 5}, {"expert_parallel": "yes"}):  # (a TypeError before)
        with pytest.raises(LLMSimError):
            start_emulator(**{"model": MODEL, "gpu": "a100-80gb", **kw})
    with pytest.raises(LLMSimError, match="^--api-key: expected a string") as e:
        start_emulator(MODEL, "a100-80gb", api_key=987654321)
    assert "987654321" not in str(e.value)  # a key is never shown
    opts = EmulatorOptions(api_key="s3cret-key")
    assert "s3cret-key" not in repr(opts) and "s3cret-key" not in str(opts)


def test_max_tokens_past_the_context_is_refused_as_vllm_does(small: EmulatorHandle) -> None:
    """vLLM's OpenAI server answers 400 (it does not cap silently); what fits is served to the last token."""
    for path, body in (("/v1/completions", {"prompt": list(range(500)), "max_tokens": 100}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                 "max_tokens": 10**30})):
        r = post(small, path, {"model": MODEL, **body})
        err = r.json()["error"]
        assert r.status_code == 400 and err["param"] == "max_tokens", r.text
        assert err["message"].startswith("This model's maximum context length is 512 tokens. However, you requested")
    d = post(small, "/v1/completions", {"model": MODEL, "prompt": list(range(500)), "max_tokens": 12}).json()
    assert d["usage"]["completion_tokens"] == 12 and d["choices"][0]["finish_reason"] == "length"
    assert math.isclose(d["usage"]["total_tokens"], 512)


# Every number and boolean the emulator reads, as vLLM's pydantic models read them (lax mode), then vLLM's range:
# (field, value, status, for a 200: the completion tokens or whether the answer streams; for a 400: the message)
LAX_VALUES: list[tuple[str, Any, int, Any]] = [
    ("max_tokens", "5", 200, 5), ("max_tokens", " 5 ", 200, 5), ("max_tokens", 5.0, 200, 5),
    ("max_tokens", True, 200, 1),
    ("max_tokens", "abc", 400, '`max_tokens` must be a positive integer, got "abc"'),
    ("max_tokens", 5.5, 400, "`max_tokens` must be a positive integer, got 5.5"),
    ("max_tokens", "5.5", 400, "`max_tokens` must be a positive integer"),
    ("max_tokens", False, 400, "`max_tokens` must be a positive integer, got false"),
    ("max_completion_tokens", "3", 200, 3), ("max_completion_tokens", 2.5, 400, "`max_completion_tokens` must be a"),
    ("min_tokens", "1", 200, 2), ("min_tokens", 1.0, 200, 2),
    ("min_tokens", None, 400, "`min_tokens` must be an integer >= 0 and at most max_tokens=2, got null"),
    ("min_tokens", "3", 400, "`min_tokens` must be an integer >= 0 and at most max_tokens=2, got \"3\""),
    ("seed", "7", 200, 2), ("seed", 7.0, 200, 2), ("seed", 7.5, 400, "`seed` must be a 64-bit integer, got 7.5"),
    ("seed", str(2**64), 400, "`seed` must be a 64-bit integer"),
    ("top_k", "-1", 200, 2), ("top_k", 1.0, 200, 2), ("top_k", "1.5", 400, "`top_k` must be 0 or -1"),
    ("top_k", -2.0, 400, "`top_k` must be 0 or -1 (disable), or at least 1, got -2.0"),
    ("temperature", "0.5", 200, 2), ("temperature", True, 200, 2), ("temperature", "1e0", 200, 2),
    ("temperature", "warm", 400, '`temperature` must be a number in [0, 2], got "warm"'),
    ("temperature", "nan", 400, "`temperature` must be a number in [0, 2]"),
    ("temperature", "3", 400, "`temperature` must be a number in [0, 2]"),
    ("top_p", "0.9", 200, 2), ("top_p", False, 400, "`top_p` must be a number in (0, 1], got false"),
    ("min_p", "0.1", 200, 2), ("presence_penalty", "-2", 200, 2), ("repetition_penalty", "1.1", 200, 2),
    ("frequency_penalty", "2.5", 400, "`frequency_penalty` must be a number in [-2, 2]"),
    ("stream", "true", 200, True), ("stream", 1, 200, True), ("stream", "off", 200, False),
    ("stream", None, 200, False),
    ("stream", 2, 400, "`stream` must be a boolean, got 2"), ("stream", "maybe", 400, "`stream` must be a boolean"),
    ("ignore_eos", "yes", 200, 2), ("ignore_eos", 0, 200, 2),
    ("ignore_eos", None, 400, "`ignore_eos` must be a boolean, got null"),
    ("ignore_eos", "sure", 400, "`ignore_eos` must be a boolean"),
]


@pytest.mark.parametrize("field,value,status,want", LAX_VALUES, ids=[f"{f}={v!r}" for f, v, _, _ in LAX_VALUES])
def test_numbers_and_booleans_are_read_as_vllm_reads_them(small: EmulatorHandle, field: str, value: Any,
                                                          status: int, want: Any) -> None:
    """vLLM serves ``max_tokens: "5"`` (pydantic's lax int) where the emulator answered 400; a value vLLM refuses
    stays a 400 naming the field."""
    chat = field == "max_completion_tokens"
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 2, field: value,
                            **({"messages": [{"role": "user", "content": "x"}]} if chat else {"prompt": "x"})}
    r = post(small, "/v1/chat/completions" if chat else "/v1/completions", body)
    assert r.status_code == status, r.text
    if status == 400:
        err = r.json()["error"]
        assert want in err["message"] and err["param"] == field, err
    elif field == "stream":
        assert r.headers["content-type"].startswith("text/event-stream") is want
    else:
        assert r.json()["usage"]["completion_tokens"] == want


@pytest.mark.parametrize("options,usage", [({}, True), ({"continuous_usage_stats": False}, True),
                                           ({"include_usage": "yes"}, True), ({"include_usage": None}, False),
                                           ({"include_usage": "0"}, False)])
def test_stream_options_are_read_as_vllm_reads_them(small: EmulatorHandle, options: dict[str, Any],
                                                    usage: bool) -> None:
    """vLLM's ``StreamOptions`` declares ``include_usage: bool | None = True``: ``{}`` asks for the usage chunk (the
    emulator sent none), and a boolean is read in pydantic's lax mode (``"yes"`` was a 400)."""
    body = {"model": MODEL, "prompt": "x", "max_tokens": 2, "stream": True, "stream_options": options}
    with httpx.stream("POST", small.url + "/v1/completions", json=body, timeout=30) as r:
        assert r.status_code == 200, r.read()
        chunks = sse(list(r.iter_lines()))
    assert ("usage" in chunks[-2] and chunks[-2]["usage"]["completion_tokens"] == 2) is usage, chunks[-2:]
    # and, as vLLM, empty options without `stream` are no error (its check tests the raw value's truth)
    assert post(small, "/v1/completions", {**body, "stream": False, "stream_options": {}}).status_code == 200


def test_a_plain_model_name_is_never_read_from_the_working_directory(tmp_path, monkeypatch) -> None:
    """``--model my-finetune`` started an emulator of whatever config.json a file named ``my-finetune`` in the
    working directory held; only an explicit path (``./my-finetune``) is read, a plain name is the registry's."""
    (tmp_path / "my-finetune").write_text(Path(tiny("tiny-llama")).read_text())
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^unknown model 'my-finetune': give a registered name"):
        create_app(EmulatorOptions(model="my-finetune", gpu="a100-80gb"))
    app = create_app(EmulatorOptions(model="./my-finetune", gpu="a100-80gb"))
    assert app.state.engine.inst.profile.model.name == "tiny-llama"
