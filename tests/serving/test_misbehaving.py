"""Backends that misbehave, without a network: a redirect, a 200 whose body is not a JSON object, an answer or a
stream that never ends, and a stream that turns to garbage are each the backend's failure (retried elsewhere, a
502 / 504, or the stream's error event), counted, never passed on as if answered and never held open for ever."""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest

pytest.importorskip("fastapi", reason="the serving extra is not installed: pip install 'llmsim[serve]'")

import httpx  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, PlainTextResponse, Response  # noqa: E402
from starlette.routing import Route  # noqa: E402

from llmsim.serving.app import create_app  # noqa: E402
from llmsim.serving.config import parse_config  # noqa: E402
from llmsim.serving.inbound import BadRequest  # noqa: E402
from llmsim.serving.metrics import RouterMetrics  # noqa: E402
from llmsim.serving.scrape import MetricsParseError, parse_metrics  # noqa: E402
from llmsim.serving.tracker import Backend, Flight  # noqa: E402
from llmsim.serving.upstream import BackendFailed, Upstream, capped_lines  # noqa: E402
from tests.serving.helpers import samples  # noqa: E402
from tests.serving.test_upstream import error_of  # noqa: E402

pytestmark = pytest.mark.timeout(60)
SECRET = "location-secret-3e9a"
GUARD_S = 10.0  # a call still running after this long is a hang (the router's own bounds here are 0.3 s)


def upstream(handler) -> tuple[Upstream, Backend]:
    cfg = parse_config({"backends": [{"name": "b0", "url": "http://backend.test"}], "policy": {"heuristic": "jsq"},
                        "timeouts": {"stall_s": 0.2, "request_s": 0.3, "first_token_s": 0.3}})
    up = Upstream(cfg, RouterMetrics(["b0"]))
    up.open(8, httpx.MockTransport(handler))
    return up, Backend(0, cfg.backends[0], up=True)


def attempt(up: Upstream, b: Backend, stream: bool):
    flight = Flight(1, 10, 8.0, None, 0.0)
    call = up.first_token(b, b"{}", "/v1/completions") if stream else up.whole(b, flight, b"{}", "/v1/completions")
    return asyncio.run(asyncio.wait_for(call, GUARD_S))


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_the_backends_failure_and_its_location_is_not_shown(stream: bool, status: int) -> None:
    up, b = upstream(lambda r: httpx.Response(status, headers={"location": f"http://u:{SECRET}@elsewhere/v1"}))
    with pytest.raises(BackendFailed, match=f"answered a redirect \\(HTTP {status}\\)") as e:
        attempt(up, b, stream)
    assert SECRET not in str(e.value) and "elsewhere" not in str(e.value)


@pytest.mark.parametrize("content,ctype", [(b"<html>oops</html>", "text/html"), (b"data: {}\n\ndata: [DONE]\n\n",
                                                                                 "text/event-stream"),
                                           (b"[1, 2]", "application/json"), (b"", "application/json")])
def test_a_whole_answer_that_is_not_a_json_object_is_the_backends_failure(content: bytes, ctype: str) -> None:
    up, b = upstream(lambda r: httpx.Response(200, content=content, headers={"content-type": ctype}))
    with pytest.raises(BackendFailed, match="answered HTTP 200 with a body that is not a JSON object"):
        attempt(up, b, stream=False)


async def endless_bytes():
    for i in itertools.count():
        yield b'{"choices": [' if i == 0 else b'{"text": "a"},'
        await asyncio.sleep(0.01)


def test_a_whole_answer_that_never_ends_is_a_504_after_request_s() -> None:
    up, b = upstream(lambda r: httpx.Response(200, stream=AsyncBytes(endless_bytes())))
    with pytest.raises(BadRequest) as e:
        attempt(up, b, stream=False)
    assert e.value.status == 504 and "did not answer within 0.3 s" in e.value.message, e.value.message


class AsyncBytes(httpx.AsyncByteStream):
    def __init__(self, source) -> None:
        self.source = source

    async def __aiter__(self):
        async for chunk in self.source:
            yield chunk


async def relayed(up: Upstream, b: Backend, source) -> tuple[list[str], list]:
    ended: list = []
    flight = Flight(1, 10, 8.0, None, 0.0, started=True)
    relay = up.relay(b, flight, httpx.Response(200), source, ["data: {\"t\": 0}"], ended.append)

    async def collect() -> list[str]:
        return [x async for x in relay]

    return await asyncio.wait_for(collect(), GUARD_S), ended


async def endless_lines(line: str):
    yield "data: {\"t\": 1}"
    while True:
        await asyncio.sleep(0.01)
        yield line


@pytest.mark.parametrize("line", [": keep-alive", "", "data: {\"choices\": [{\"text\": \"a\"}]}"])
def test_a_stream_that_never_ends_is_ended_after_request_s(line: str) -> None:
    up, b = upstream(lambda r: httpx.Response(500))
    out, ended = asyncio.run(relayed(up, b, endless_lines(line)))
    err = error_of(out)
    assert err["code"] == 504 and "did not finish within 0.3 s" in err["message"], err
    assert out[-1].endswith("data: [DONE]\n\n") and ended == ["deadline"]
    assert up.metrics.stream_errors.labels("b0")._value.get() == 1


async def then_garbage():
    yield "data: {\"t\": 1}"
    yield ""
    yield "\x00\ufffd garbage ]]]"
    yield "data: {\"t\": 2}"


def test_a_stream_that_turns_to_garbage_ends_with_the_error_event() -> None:
    up, b = upstream(lambda r: httpx.Response(500))
    out, ended = asyncio.run(relayed(up, b, then_garbage()))
    err = error_of(out)
    assert err["code"] == 502 and "sent a line that is not server-sent events" in err["message"], err
    assert "data: {\"t\": 2}\n" not in out and ended == [None]
    assert up.metrics.stream_errors.labels("b0")._value.get() == 1


def test_sse_fields_and_comments_pass_through() -> None:
    async def fields():
        for line in ("event: message", "id: 7", "retry: 100", ": comment", "", "data: [DONE]"):
            yield line

    up, b = upstream(lambda r: httpx.Response(500))
    out, ended = asyncio.run(relayed(up, b, fields()))
    assert not any("error" in x for x in out) and out[-1] == "data: [DONE]\n" and ended == [None]


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_error_that_is_not_json_reaches_the_client_in_openais_shape(stream: bool) -> None:
    up, b = upstream(lambda r: httpx.Response(422, content=b"<h1>Unprocessable</h1>", headers={"content-type":
                                                                                              "text/html"}))
    resp = attempt(up, b, stream)
    err = json.loads(resp.body)["error"]
    assert resp.status_code == 422 and resp.media_type == "application/json", resp.body
    assert err["code"] == 422 and err["message"] == "backend 'b0' answered HTTP 422 (text/html): <h1>Unprocessable</h1>"


@pytest.mark.parametrize("stream", [False, True])
def test_a_json_client_error_is_passed_on_as_it_is(stream: bool) -> None:
    body = b'{"error": {"message": "bad n", "code": 400}}'
    up, b = upstream(lambda r: httpx.Response(400, content=body, headers={"content-type": "application/json"}))
    resp = attempt(up, b, stream)
    assert resp.status_code == 400 and resp.body == body


BAD_EXPOSITIONS = [
    "vllm:num_requests_running NaN\n", "vllm:num_requests_waiting +Inf\n", "vllm:kv_cache_usage_perc NaN\n",
    "vllm:num_requests_running 1e308\nvllm:num_requests_waiting 1e308\n", "vllm:num_requests_running -5\n",
    "vllm:generation_tokens_total 1e308\nvllm:generation_tokens_total 1e308\n",
    "vllm:time_per_output_token_seconds_sum NaN\nvllm:time_per_output_token_seconds_count 5\n"]


@pytest.mark.parametrize("text", BAD_EXPOSITIONS)
def test_a_scrape_of_numbers_no_backend_has_is_a_scrape_failure(text: str) -> None:
    with pytest.raises(MetricsParseError, match="vllm:.* expected a finite"):
        parse_metrics(text)


@pytest.mark.parametrize("policy", [{"heuristic": "jsq"}, {"heuristic": "least_work_left"},
                                    {"onnx": "zoo:workload_router"}])
def test_a_backend_exporting_nan_load_is_routed_on_the_bookkeeping(monkeypatch, policy) -> None:
    """Its scrapes fail (counted) and requests are answered, never a 500 from a NaN in the state."""
    async def models(request: Request) -> Response:
        return JSONResponse({"data": [{"id": "llama-2-7b", "max_model_len": 4096}]})

    async def complete(request: Request) -> Response:
        return JSONResponse({"choices": [{"text": "ok"}], "usage": {"completion_tokens": 1}})

    backend = Starlette(routes=[
        Route("/v1/models", models), Route("/health", lambda r: PlainTextResponse("")),
        Route("/metrics", lambda r: PlainTextResponse("".join(BAD_EXPOSITIONS[:4]))),
        Route("/v1/completions", complete, methods=["POST"])])
    monkeypatch.setattr(httpx, "AsyncHTTPTransport", lambda **kw: httpx.ASGITransport(app=backend))
    cfg = parse_config({"backends": [{"name": "b0", "url": "http://b0.test"}, {"name": "b1", "url": "http://b1.test"}],
                        "policy": policy})
    with TestClient(create_app(cfg)) as c:
        codes = [c.post("/v1/completions", json={"model": "llmsim-router", "prompt": "x", "max_tokens": 3}).status_code
                 for _ in range(3)]
        failures = samples(c.get("/metrics").text, "llmsim_router_scrape_failures_total")
    assert codes == [200] * 3, codes
    assert sorted(failures) == [(("backend", "b0"),), (("backend", "b1"),)] and min(failures.values()) >= 1, failures


def test_each_failed_attempt_is_counted_by_backend_even_without_retries(monkeypatch) -> None:
    async def models(request: Request) -> Response:
        return JSONResponse({"data": [{"id": "m", "max_model_len": 4096}]})

    backend = Starlette(routes=[
        Route("/v1/models", models), Route("/health", lambda r: PlainTextResponse("")),
        Route("/metrics", lambda r: PlainTextResponse("")),
        Route("/v1/completions", lambda r: PlainTextResponse("<html/>", media_type="text/html"), methods=["POST"])])
    monkeypatch.setattr(httpx, "AsyncHTTPTransport", lambda **kw: httpx.ASGITransport(app=backend))
    cfg = parse_config({"backends": [{"name": "b0", "url": "http://b0.test"}], "policy": {"heuristic": "jsq"},
                        "retries": 0})
    with TestClient(create_app(cfg)) as c:
        r = c.post("/v1/completions", json={"model": "m", "prompt": "x"})
        failed = samples(c.get("/metrics").text, "llmsim_router_backend_failures_total")
    assert r.status_code == 502 and "not a JSON object" in r.json()["error"]["message"], r.text
    assert failed == {(("backend", "b0"),): 1.0}, failed


async def flood():
    while True:
        yield b"x" * 4096
        await asyncio.sleep(0)


@pytest.mark.parametrize("status", [200, 400])
@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_larger_than_any_completion_is_the_backends_failure(monkeypatch, status, stream) -> None:
    """A backend flooding the router (an endless body, at loopback speed) fails at the size cap, long before
    request_s, instead of filling the router's memory."""
    monkeypatch.setattr(Upstream, "max_answer_bytes", 64 * 1024)
    up, b = upstream(lambda r: httpx.Response(status, stream=AsyncBytes(flood())))
    with pytest.raises(BackendFailed, match="answer over 65536 bytes" if status != 200 or not stream else
                       "a line of over 65536 characters before its first token"):
        attempt(up, b, stream)


@pytest.mark.parametrize("chunks", [["data: a\n\n", "data: b\n\n"], ["data: a\r", "\ndata: b\r\n\r\n"], ["da", "ta: a",
                                    "\n", "\n", "data: [DONE]"], ["\r"], ["x\u2028y\n"], ["a\rb\r\r\n", "c"]])
def test_capped_lines_split_as_httpx_does(chunks: list[str]) -> None:
    async def lines(split) -> list[str]:
        resp = httpx.Response(200, stream=AsyncBytes(as_bytes(chunks)))
        return [x async for x in split(resp)]

    async def as_bytes(pieces):
        for p in pieces:
            yield p.encode()

    ours = asyncio.run(lines(lambda r: capped_lines(r, 1000)))
    assert ours == asyncio.run(lines(lambda r: r.aiter_lines())), ours


BUSY = b'{"error": {"message": "rate limited", "type": "RateLimitError", "code": 429}}'


def busy_backends(monkeypatch, busy: set[str]) -> None:
    """Backends b0.test and b1.test on one app; those in ``busy`` answer every completion 429 with a Retry-After."""
    async def models(request: Request) -> Response:
        return JSONResponse({"data": [{"id": "m", "max_model_len": 4096}]})

    async def complete(request: Request) -> Response:
        if request.url.hostname.split(".")[0] in busy:
            return Response(BUSY, status_code=429, media_type="application/json", headers={"retry-after": "30"})
        if (await request.json()).get("stream"):
            return PlainTextResponse('data: {"choices": [{"text": "ok"}]}\n\ndata: [DONE]\n\n',
                                     media_type="text/event-stream")
        return JSONResponse({"choices": [{"text": "ok"}], "usage": {"completion_tokens": 1}})

    backend = Starlette(routes=[
        Route("/v1/models", models), Route("/health", lambda r: PlainTextResponse("")),
        Route("/metrics", lambda r: PlainTextResponse("")), Route("/v1/completions", complete, methods=["POST"])])
    monkeypatch.setattr(httpx, "AsyncHTTPTransport", lambda **kw: httpx.ASGITransport(app=backend))


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("busy,retries,code", [({"b0"}, 2, 200), ({"b0", "b1"}, 2, 429), ({"b0"}, 0, 429)])
def test_a_backend_s_429_is_retried_on_another_and_passed_on_when_none_is_left(monkeypatch, stream, busy, retries,
                                                                               code) -> None:
    busy_backends(monkeypatch, busy)
    cfg = parse_config({"backends": [{"name": "b0", "url": "http://b0.test"}, {"name": "b1", "url": "http://b1.test"}],
                        "policy": {"heuristic": "round_robin"}, "retries": retries})
    with TestClient(create_app(cfg)) as c:
        r = c.post("/v1/completions", json={"model": "m", "prompt": "x", "stream": stream})
        text = c.get("/metrics").text
        gw = c.app.state.gateway
        assert gw.in_flight == 0 and not any(b.flights for b in gw.backends)
    assert r.status_code == code, r.text
    if code == 429:
        assert r.content == BUSY  # the backend's own answer
    tried = {"b0"} if retries == 0 else {"b0", "b1"}
    limited = samples(text, "llmsim_router_rate_limited_total")
    assert limited == {(("backend", k),): 1.0 for k in sorted(busy & tried)}, limited
    assert samples(text, "llmsim_router_decisions_total") == {(("backend", k),): float(k in tried)
                                                               for k in ("b0", "b1")}
    assert samples(text, "llmsim_router_backend_failures_total") == {}  # a busy backend has not failed
    assert samples(text, "llmsim_router_retries_total") == ({(("backend", "b0"),): 1.0} if retries else {})
