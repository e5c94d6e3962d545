"""The router's side towards its backends, without a network: a stream that stalls after its first token ends with
the SSE error event, a pooled connection closed under a request is retried once on another connection (and only
then), an interrupt fires once, and the keep-alive settings that keep the two sides from racing."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

pytest.importorskip("fastapi", reason="the serving extra is not installed: pip install 'llmsim[serve]'")

import httpx  # noqa: E402
import uvicorn  # noqa: E402

from llmsim.http_server import ReadLimits, ServerThread  # noqa: E402
from llmsim.serving.config import Limits, parse_config  # noqa: E402
from llmsim.serving.gateway import Interrupt  # noqa: E402
from llmsim.serving.metrics import RouterMetrics  # noqa: E402
from llmsim.serving.tracker import Backend, Flight  # noqa: E402
from llmsim.serving.upstream import UPSTREAM_IDLE_S, BackendFailed, Upstream  # noqa: E402

pytestmark = pytest.mark.timeout(60)
CFG = {"backends": [{"name": "b0", "url": "http://backend.test"}], "policy": {"heuristic": "jsq"},
       "timeouts": {"stall_s": 0.05}}


def upstream(transport: httpx.MockTransport | None = None) -> tuple[Upstream, Backend]:
    cfg = parse_config(CFG)
    up = Upstream(cfg, RouterMetrics(["b0"]))
    if transport is not None:
        up.open(8, transport)
    return up, Backend(0, cfg.backends[0], up=True)


async def lines_then_silence(lines: list[str]):
    """A backend's SSE lines, then nothing more (a frozen backend: the connection stays open)."""
    for line in lines:
        yield line
    await asyncio.get_running_loop().create_future()


async def lines_then_reset(lines: list[str]):
    for line in lines:
        yield line
    raise httpx.ReadError("connection reset by peer")


async def relayed(up: Upstream, b: Backend, source) -> tuple[list[str], list]:
    ended: list = []
    flight = Flight(1, 10, 8.0, None, 0.0, started=True)
    out = [x async for x in up.relay(b, flight, httpx.Response(200), source, ["data: {\"t\": 0}"], ended.append)]
    return out, ended


def error_of(out: list[str]) -> dict:
    events = [line for chunk in out for line in chunk.splitlines() if line.startswith("data: {\"error\"")]
    assert len(events) == 1, out
    return json.loads(events[0][6:])["error"]


def test_a_stream_that_stalls_after_its_first_token_ends_with_the_error_event() -> None:
    up, b = upstream()
    out, ended = asyncio.run(relayed(up, b, lines_then_silence(["data: {\"t\": 1}", "data: {\"t\": 2}"])))
    err = error_of(out)
    assert err["code"] == 504 and err["type"] == "BackendStreamError" and "stalled" in err["message"]
    assert out[-1].endswith("data: [DONE]\n\n") and out[:3] == ["data: {\"t\": 0}\n", "data: {\"t\": 1}\n",
                                                                  "data: {\"t\": 2}\n"]
    assert ended == ["stall"]


def test_a_stream_cut_by_its_backend_and_one_that_ends_are_told_apart() -> None:
    up, b = upstream()
    out, ended = asyncio.run(relayed(up, b, lines_then_reset(["data: {\"t\": 1}"])))
    assert error_of(out)["code"] == 502 and ended == [None]

    async def whole():
        for line in ["data: {\"t\": 1}", "data: [DONE]"]:
            yield line

    out, ended = asyncio.run(relayed(up, b, whole()))
    assert out[-1] == "data: [DONE]\n" and not any("error" in x for x in out) and ended == [None]


def test_a_stream_that_ends_without_done_is_cut_not_passed_on_as_complete() -> None:
    """A backend whose stream stops without ``[DONE]`` (it died and its server or a proxy closed the response
    cleanly; an in-process backend's exception) ended the client's stream as if complete: a silently truncated
    answer, with no [DONE] either. It is a cut stream: the error event (502) and ``[DONE]``."""
    up, b = upstream()

    async def stops():
        for line in ["data: {\"t\": 1}", ""]:
            yield line

    out, ended = asyncio.run(relayed(up, b, stops()))
    assert error_of(out)["code"] == 502 and "without [DONE]" in error_of(out)["message"]
    assert out[-1].endswith("data: [DONE]\n\n") and ended == [None]
    assert up.metrics.registry.get_sample_value("llmsim_router_stream_errors_total", {"backend": "b0"}) == 1


def test_a_pooled_connection_closed_under_a_request_is_retried_once_on_another() -> None:
    """The keep-alive race: the backend closed the connection as the router reused it (no byte of an answer)."""
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) == 1:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return httpx.Response(200, json={"usage": {"completion_tokens": 3}})

    up, b = upstream(httpx.MockTransport(handler))
    flight = Flight(1, 10, 8.0, None, 0.0)
    resp = asyncio.run(up.whole(b, flight, b"{}", "/v1/completions"))
    assert resp.status_code == 200 and len(calls) == 2 and flight.generated == 3
    assert up.metrics.resends.labels(b.name)._value.get() == 1


def test_a_cookie_set_by_a_backend_is_not_sent_with_later_requests() -> None:
    """The router's client is shared by all its clients: a backend's Set-Cookie must not ride along on the next
    client's request (the router keeps no cookie jar)."""
    cookies: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        cookies.append(request.headers.get("cookie"))
        return httpx.Response(200, json={"usage": {"completion_tokens": 1}},
                              headers={"set-cookie": "session=client-a; Path=/"})

    up, b = upstream(httpx.MockTransport(handler))
    for rid in (1, 2):
        resp = asyncio.run(up.whole(b, Flight(rid, 10, 8.0, None, 0.0), b"{}", "/v1/completions"))
        assert resp.status_code == 200
    assert cookies == [None, None] and len(up.client.cookies) == 0


def test_a_new_connection_that_fails_is_not_resent() -> None:
    """Only a reused connection can be the keep-alive race; a new one's backend may have read (and served) the
    request, so sending it again could serve it twice: it fails, and the gateway decides."""
    calls: list[int] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        await request.extensions["trace"]("connection.connect_tcp.started", {})  # what httpcore reports
        raise httpx.ReadError("reset")

    up, b = upstream(httpx.MockTransport(handler))
    with pytest.raises(BackendFailed):
        asyncio.run(up.whole(b, Flight(1, 10, 8.0, None, 0.0), b"{}", "/v1/completions"))
    assert len(calls) == 1
    assert up.metrics.resends.labels(b.name)._value.get() == 0


@pytest.mark.parametrize("failures, error", [(2, httpx.ReadError("reset")), (1, httpx.ConnectError("refused"))])
def test_only_one_resend_and_never_for_a_refused_connection(failures: int, error: Exception) -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        raise error

    up, b = upstream(httpx.MockTransport(handler))
    with pytest.raises(BackendFailed) as e:
        asyncio.run(up.whole(b, Flight(1, 10, 8.0, None, 0.0), b"{}", "/v1/completions"))
    assert len(calls) == failures and e.value.refused == isinstance(error, httpx.ConnectError)


def test_an_interrupt_fires_once_and_not_after_its_attempt() -> None:
    async def scenario() -> tuple[str | None, bool]:
        task = asyncio.ensure_future(asyncio.sleep(30))
        first = Interrupt(task)
        first.fire("ejected")
        first.fire("client_gone")
        with pytest.raises(asyncio.CancelledError):
            await task
        other = asyncio.ensure_future(asyncio.sleep(0))
        late = Interrupt(other)
        late.close()
        late.fire("client_gone")
        await other
        return first.reason, other.cancelled()

    assert asyncio.run(scenario()) == ("ejected", False)


def test_idle_connections_are_closed_by_the_side_that_reuses_them_first() -> None:
    """No keep-alive race: the router keeps client connections longer than httpx / the OpenAI SDK keep theirs
    (5 s) and drops its pooled backend connections sooner than uvicorn-based backends (vLLM) close them (5 s)."""
    client_pool_expiry = httpx.Limits().keepalive_expiry  # httpx's default, the OpenAI SDK's too
    assert Limits().idle_s > client_pool_expiry and ReadLimits().idle_s > client_pool_expiry
    assert uvicorn.Config(app=None).timeout_keep_alive > UPSTREAM_IDLE_S
    up, _ = upstream()
    up.open(8)
    assert up.limits.keepalive_expiry == UPSTREAM_IDLE_S



async def ok_app(scope: dict, receive, send) -> None:
    """The smallest ASGI app: 200 and ``{}`` for any HTTP request."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
    elif scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b"{}"})


class SearchRecorder:
    """A meta-path finder that only records which modules an import statement had to search for."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        self.names.append(name)


def test_a_request_to_a_backend_searches_for_no_module() -> None:
    """httpcore asks which async library runs (``import sniffio``) on every request and again when the response is
    closed; with sniffio missing, each of those imports fails after a search of sys.path (about a millisecond of the
    router's overhead per request, docs/serving.md). The serve extra installs it: after the first request, nothing
    is searched for."""
    recorder = SearchRecorder()

    async def requests(url: str) -> None:
        async with httpx.AsyncClient() as client:
            assert (await client.get(url + "/")).status_code == 200  # lazy imports of a first request happen here
            sys.meta_path.insert(0, recorder)  # type: ignore[arg-type]
            try:
                for _ in range(3):
                    assert (await client.get(url + "/")).status_code == 200
            finally:
                sys.meta_path.remove(recorder)  # type: ignore[arg-type]

    with ServerThread(ok_app, name="ok").start() as server:
        asyncio.run(requests(server.url))
    assert recorder.names == [], f"searched for on every request: {sorted(set(recorder.names))}"


def test_backends_are_reached_without_a_proxy_from_the_environment(monkeypatch) -> None:
    """HTTP_PROXY / HTTPS_PROXY in the router's environment do not divert backend traffic: requests and the monitor's
    checks both reach the pool's transport (here a mock; a proxy would have been a connection to proxy.test)."""
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.test:3128")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.test:3128")
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json={"usage": {"completion_tokens": 1}})

    up, b = upstream(httpx.MockTransport(handler))

    async def both() -> None:
        assert (await up.whole(b, Flight(1, 10, 8.0, None, 0.0), b"{}", "/v1/completions")).status_code == 200
        assert (await up.client.get("http://backend.test/health")).status_code == 200

    asyncio.run(both())
    assert seen == ["http://backend.test/v1/completions", "http://backend.test/health"]


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_that_does_not_decode_is_the_backends_failure(stream: bool) -> None:
    """A body that is not what its Content-Encoding says (here "gzip" over plain bytes) is a backend failure (retried
    elsewhere, a 502 at worst), never an error that escapes the router as an HTTP 500."""
    body = httpx.ByteStream(b"data: not gzip\n\n")  # (a stream: content= would be decoded when the mock builds it)
    up, b = upstream(httpx.MockTransport(lambda r: httpx.Response(200, stream=body,
                                                                  headers={"content-encoding": "gzip"})))
    flight = Flight(1, 10, 8.0, None, 0.0)
    call = up.first_token(b, b"{}", "/v1/completions") if stream else up.whole(b, flight, b"{}", "/v1/completions")
    with pytest.raises(BackendFailed, match="DecodingError"):
        asyncio.run(call)
