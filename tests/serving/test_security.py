"""Secrets stay in the router's process and authentication is explicit: no api key or URL password in any answer,
header, log record or metric whichever way a request fails; an empty key is a config error; with a key every
route but ``/health`` needs it (compared in constant time); ``/openapi.json`` and ``/docs`` only on request; a
backend that refuses the router's credentials is reported as misconfigured, not silently ejected."""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

import pytest

pytest.importorskip("fastapi", reason="the serving extra is not installed: pip install 'llmsim[serve]'")

import httpx  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from prometheus_client import generate_latest  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

from llmsim.emulator import start_emulator  # noqa: E402
from llmsim.errors import ConfigError  # noqa: E402
from llmsim.serving.app import create_app  # noqa: E402
from llmsim.serving.config import BackendConfig, parse_config, redact  # noqa: E402
from llmsim.serving.metrics import RouterMetrics  # noqa: E402
from llmsim.serving.monitor import BackendMonitor  # noqa: E402
from llmsim.serving.runner import start_router  # noqa: E402
from tests.serving.helpers import SPEEDUP, router_cfg, samples  # noqa: E402

pytestmark = pytest.mark.timeout(180)

ROUTER_KEY = "router-key-4f0c9e1d"
WRONG_BACKEND_KEY = "backend-key-wrong-77d1"
GOOD_BACKEND_KEY = "backend-key-good-5b2e"
URL_PASSWORD = "url-password-a9c3e"
SECRETS = (ROUTER_KEY, WRONG_BACKEND_KEY, GOOD_BACKEND_KEY, URL_PASSWORD)
AUTH = {"Authorization": f"Bearer {ROUTER_KEY}"}


class HangingBackend:
    """A backend that looks healthy (``/health``, ``/v1/models``, ``/metrics``) but never answers a completion and
    fails every chat (HTTP 500)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        release = self.release

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                body = json.dumps({"data": [{"id": "hung", "max_model_len": 4096}]}).encode() \
                    if self.path == "/v1/models" else b""
                self.send_response(200)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802
                if self.path == "/v1/chat/completions":
                    self.send_response(500)
                    self.send_header("content-length", "4")
                    self.end_headers()
                    self.wfile.write(b"boom")
                    return
                release.wait(60)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def every_failure(url: str) -> list[httpx.Response]:
    """Requests that fail in every way: 502 (a 500 upstream), 502 / 504 (no first token, no answer), 503 (ejected,
    misconfigured), 4xx."""
    body = {"prompt": "hello", "max_tokens": 3}
    chat = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 3, "model": "hung"}
    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        out = [await c.post("/v1/chat/completions", json=chat, headers=AUTH),
               await c.post("/v1/completions", json={**body, "model": "hung", "stream": True}, headers=AUTH),
               await c.post("/v1/completions", json={**body, "model": "hung"}, headers=AUTH),
               await c.post("/v1/completions", json={**body, "model": "dead"}, headers=AUTH),
               await c.post("/v1/completions", json={**body, "model": "llama-3.1-8b"}, headers=AUTH),
               await c.post("/v1/completions", json={**body, "model": "nope"}, headers=AUTH),
               await c.post("/v1/completions", content=b"{", headers=AUTH),
               await c.post("/v1/completions", json={**body, "model": "hung"}),
               await c.post("/v1/completions", json={**body, "model": "hung"},
                            headers={"Authorization": f"Bearer {ROUTER_KEY}x"}),
               await c.get("/v1/models"), await c.get("/metrics"), await c.get("/health"),
               await c.get("/v1/models", headers=AUTH)]
        out.append(await c.get("/metrics", headers=AUTH))
    return out


def test_no_secret_leaves_the_process_whichever_way_a_request_fails(caplog) -> None:
    caplog.set_level(logging.DEBUG)
    hung, emu = HangingBackend(), start_emulator("llama-3.1-8b", "a100-80gb", speedup=SPEEDUP,
                                                 api_key=GOOD_BACKEND_KEY)
    cfg = router_cfg([], {"heuristic": "jsq"}, api_key=ROUTER_KEY, retries=0,
                     timeouts={"connect_s": 5, "first_token_s": 1, "request_s": 1.5, "scrape_s": 1})
    cfg["backends"] = [
        {"name": "b0", "url": f"http://admin:{URL_PASSWORD}@127.0.0.1:{closed_port()}", "model": "dead"},
        {"name": "b1", "url": f"http://admin:{URL_PASSWORD}@127.0.0.1:{hung.port}/"},
        {"name": "b2", "url": emu.url, "model": "llama-3.1-8b", "api_key": WRONG_BACKEND_KEY}]
    try:
        with start_router(cfg) as r:
            answers = asyncio.run(every_failure(r.url))
            codes = [a.status_code for a in answers]
            assert codes[0] == 502 and codes[1] in (502, 504) and codes[2] == 504, codes
            assert codes[3:] == [503, 503, 404, 400, 401, 401, 401, 401, 200, 200, 200], codes
            assert f"127.0.0.1:{hung.port}" in answers[0].text  # the 502 names the backend, without its password
            for a in answers:
                shown = a.text + json.dumps(dict(a.headers))
                assert not [s for s in SECRETS if s in shown], (a.request.url, shown)
            log = "\n".join(f"{rec.getMessage()} {rec.args!r} {rec.exc_text or ''}" for rec in caplog.records)
            assert not [s for s in SECRETS if s in log], log
            assert f"backend b2 ({emu.url}) answered 401" in log, log
    finally:
        hung.stop()
        emu.stop()


def test_a_backend_refusing_the_router_is_reported_misconfigured(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="llmsim.serving")
    h = start_emulator("llama-3.1-8b", "a100-80gb", speedup=SPEEDUP, api_key=GOOD_BACKEND_KEY)
    cfg = router_cfg([h.url], {"heuristic": "jsq"})
    cfg["backends"][0]["api_key"] = WRONG_BACKEND_KEY
    try:
        with start_router(cfg) as r:
            health = httpx.get(r.url + "/health")
            assert health.status_code == 503 and health.json()["detail"] == "misconfigured: 401 from backend b0"
            resp = httpx.post(r.url + "/v1/completions", json={"model": "llmsim-router", "prompt": "x"}, timeout=30)
            msg = resp.json()["error"]["message"]
            assert resp.status_code == 503 and "misconfigured (authentication): 401 from backend b0" in msg, msg
            metric = samples(httpx.get(r.url + "/metrics").text, "llmsim_router_backend_misconfigured")
            assert metric == {(("backend", "b0"),): 1.0}
        said = [rec.getMessage() for rec in caplog.records if "answered 401" in rec.getMessage()]
        assert said and f"backend b0 ({h.url}) answered 401 to /v1/models: misconfigured" in said[0], said
        assert len(said) == 1, said  # said once, not at every health check
    finally:
        h.stop()


def test_misconfiguration_clears_when_the_backend_accepts_again() -> None:
    cfg = parse_config(router_cfg(["http://127.0.0.1:9"], {"heuristic": "jsq"}))
    metrics = RouterMetrics(["b0"])
    mon = BackendMonitor(cfg, metrics, lambda: 0.0, lambda: None)
    b = mon.backends[0]
    mon.refused(b, 403, "/metrics")
    assert (b.up, b.problem) == (False, "403 from backend b0")
    mon.accepted(b)
    assert b.refused_status is None and b.problem == ""
    text = generate_latest(metrics.registry).decode()
    assert samples(text, "llmsim_router_backend_misconfigured") == {(("backend", "b0"),): 0.0}


# ------------------------------------------------------------------------------------------ authentication
def app_client(**kw) -> TestClient:
    """The router app in-process over one backend that is down (auth needs none up)."""
    return TestClient(create_app(parse_config(router_cfg(["http://127.0.0.1:9"], {"heuristic": "jsq"}, **kw))))


@pytest.mark.parametrize("path", ["/v1/models", "/metrics", "/openapi.json", "/docs", "/nothing-here"])
def test_every_route_but_health_needs_the_key(path) -> None:
    with app_client(api_key=ROUTER_KEY, openapi=True) as c:
        for headers in ({}, {"Authorization": f"Bearer {ROUTER_KEY[:-1]}"}, {"Authorization": ROUTER_KEY},
                        {"Authorization": f"Basic {ROUTER_KEY}"}):
            r = c.get(path, headers=headers)
            assert r.status_code == 401 and r.json()["error"]["type"] == "AuthenticationError", (headers, r.text)
            assert r.headers["www-authenticate"] == "Bearer"
        assert c.get(path, headers=AUTH).status_code == (404 if path == "/nothing-here" else 200)
        assert c.get("/health").status_code == 503  # open, and says the backend is down


def test_health_answers_head_without_the_key_and_nothing_else_does() -> None:
    """Load balancers and probes may poll with HEAD: it was a 405. It answers as GET does (status, no body),
    without the key; HEAD on any other route still needs it."""
    with app_client(api_key=ROUTER_KEY) as c:
        r = c.head("/health")
        assert (r.status_code, r.content) == (503, b"")  # (its one backend is down, as GET says)
        assert c.head("/health", headers={"Authorization": "Bearer nope"}).status_code == 503
        for path in ("/metrics", "/v1/models", "/v1/completions"):
            assert c.head(path).status_code == 401, path


def test_openapi_and_docs_are_off_unless_asked_for() -> None:
    with app_client(api_key=ROUTER_KEY) as c:
        assert c.get("/openapi.json", headers=AUTH).status_code == 404
        assert c.get("/docs", headers=AUTH).status_code == 404
    with app_client() as c:
        assert c.get("/openapi.json").status_code == 404 and c.get("/docs").status_code == 404
    with app_client(openapi=True) as c:
        assert "/v1/completions" in c.get("/openapi.json").json()["paths"]


def test_refused_clients_are_counted_and_keys_compared_in_constant_time(monkeypatch) -> None:
    compared = []

    def spy(a, b) -> bool:
        compared.append((a, b))
        return real(a, b)

    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", spy)
    with app_client(api_key=ROUTER_KEY) as c:
        r = c.post("/v1/completions", json={"model": "llmsim-router", "prompt": "x"},
                   headers={"Authorization": "Bearer guess"})
        assert r.status_code == 401
        assert (b"Bearer guess", f"Bearer {ROUTER_KEY}".encode()) in compared
        counted = samples(c.get("/metrics", headers=AUTH).text, "llmsim_router_requests_total")
        assert counted == {(("code", "401"), ("endpoint", "/v1/completions")): 1.0}, counted


# ------------------------------------------------------------------------------------------ keys in the config
@pytest.mark.parametrize("where", ["router", "backend"])
@pytest.mark.parametrize("value,env,needle", [
    ("", None, "expected a non-empty key"), ("env:LLMSIM_TEST_KEY", None, "'LLMSIM_TEST_KEY' is not set"),
    ("env:LLMSIM_TEST_KEY", "", "'LLMSIM_TEST_KEY' is empty"),
    ("env:LLMSIM_TEST_KEY", "two words", "expected visible ASCII characters without spaces")])
def test_an_empty_or_malformed_key_is_a_config_error(monkeypatch, where, value, env, needle) -> None:
    monkeypatch.delenv("LLMSIM_TEST_KEY", raising=False)
    if env is not None:
        monkeypatch.setenv("LLMSIM_TEST_KEY", env)
    data = {"backends": [{"name": "a", "url": "http://127.0.0.1:9001"}], "policy": {"heuristic": "jsq"}}
    if where == "router":
        data["api_key"] = value
    else:
        data["backends"][0]["api_key"] = value
    with pytest.raises(ConfigError) as e:
        parse_config(data, "r.yaml")
    key = "r.yaml: api_key" if where == "router" else "r.yaml: backends[0].api_key"
    assert str(e.value).startswith(key) and needle in str(e.value), str(e.value)
    assert "two words" not in str(e.value)


def test_url_credentials_leave_the_url_and_errors_never_show_them() -> None:
    b = parse_config({"backends": [{"name": "a", "url": f"https://admin:{URL_PASSWORD}@gpu0:8443/"}],
                      "policy": {"heuristic": "jsq"}}).backends[0]
    assert b.url == "https://gpu0:8443" and URL_PASSWORD not in repr(b)
    assert b.auth_headers()["Authorization"].startswith("Basic ")
    keyed = BackendConfig(name="k", url="http://h:1", api_key=GOOD_BACKEND_KEY)
    assert GOOD_BACKEND_KEY not in repr(keyed) and keyed.auth_headers() == {
        "Authorization": f"Bearer {GOOD_BACKEND_KEY}"}
    for url, needle in ((f"http://admin:{URL_PASSWORD}@h:99999", "port in 1-65535"),
                        (f"http://admin:{URL_PASSWORD}/x@h", "numeric port"),
                        (f"http://admin:{URL_PASSWORD}@h:1/?token={URL_PASSWORD}", "?query")):
        with pytest.raises(ConfigError, match="backends\\[0\\].url") as e:
            parse_config({"backends": [{"name": "a", "url": url}], "policy": {"heuristic": "jsq"}})
        assert URL_PASSWORD not in str(e.value) and needle in str(e.value), str(e.value)
    with pytest.raises(ConfigError, match="either an api_key or user:password@ in the url, not both"):
        parse_config({"backends": [{"name": "a", "url": "http://u:p@h:1", "api_key": "k" * 8}],
                      "policy": {"heuristic": "jsq"}})


def test_redact_takes_passwords_query_values_and_keys_out_of_any_text() -> None:
    text = f"backend 'b0' (http://u:{URL_PASSWORD}@h:1/v1?sig={URL_PASSWORD}&x=1): refused; key {ROUTER_KEY}"
    out = redact(text, [ROUTER_KEY])
    assert not [s for s in SECRETS if s in out] and "http://***@h:1/v1?sig=***&x=***" in out, out
    assert redact("no secret here: http://h:1/v1/models", [ROUTER_KEY]) == "no secret here: http://h:1/v1/models"


def echoing_backend() -> Starlette:
    """A backend (model ``m``) whose every completion is a 400 quoting the Authorization header it got, as some
    servers' validation errors quote the request."""
    async def models(request: Request) -> Response:
        return JSONResponse({"data": [{"id": "m", "max_model_len": 4096}]})

    async def complete(request: Request) -> Response:
        got = request.headers.get("authorization", "")
        return JSONResponse({"error": {"message": f"rejected request with authorization {got!r} ({got[6:]})"}},
                            status_code=400)

    return Starlette(routes=[Route("/v1/models", models), Route("/health", lambda r: PlainTextResponse("")),
                             Route("/metrics", lambda r: PlainTextResponse("")),
                             Route("/v1/completions", complete, methods=["POST"])])


@pytest.mark.parametrize("how,secret", [("url", URL_PASSWORD), ("url", 'pa"ss\\word-9f1'),
                                        ("api_key", 'key"with\\quote-77')])
def test_a_backend_echoing_the_routers_credentials_shows_none_of_them(monkeypatch, how, secret) -> None:
    """Whatever form the backend echoes them in: the basic credentials' base64, the password, a JSON-escaped key."""
    backend = echoing_backend()
    monkeypatch.setattr(httpx, "AsyncHTTPTransport", lambda **kw: httpx.ASGITransport(app=backend))
    b0 = {"name": "b0", "url": f"http://admin:{quote(secret, safe='')}@b0.test:8000"} if how == "url" else \
        {"name": "b0", "url": "http://b0.test:8000", "api_key": secret}
    cfg = parse_config({"backends": [b0], "policy": {"heuristic": "jsq"}})
    token = base64.b64encode(f"admin:{secret}".encode()).decode()
    with TestClient(create_app(cfg)) as c:
        r = c.post("/v1/completions", json={"model": "m", "prompt": "x"})
    assert r.status_code == 400 and "rejected request" in r.text, r.text
    shown = [s for s in (token, secret, json.dumps(secret)[1:-1]) if s in r.text]
    assert not shown, r.text


def test_several_authorization_headers_are_refused() -> None:
    with app_client(api_key=ROUTER_KEY) as c:
        for both in ([AUTH["Authorization"], "Bearer wrong"], ["Bearer wrong", AUTH["Authorization"]],
                     [AUTH["Authorization"]] * 2):
            r = c.get("/v1/models", headers=[("Authorization", v) for v in both])
            assert r.status_code == 401 and "exactly one Authorization header" in r.json()["error"]["message"], both
        assert c.get("/v1/models", headers=AUTH).status_code == 200


def test_a_backend_echoing_its_key_in_an_answer_or_a_stream_shows_none_of_it(monkeypatch) -> None:
    async def models(request: Request) -> Response:
        return JSONResponse({"data": [{"id": "m", "max_model_len": 4096}]})

    async def complete(request: Request) -> Response:
        got = request.headers.get("authorization", "")
        if (await request.json()).get("stream"):
            lines = [f"data: {json.dumps({'choices': [{'text': got}]})}\n\n", "data: [DONE]\n\n"]
            return StreamingResponse(iter(lines), media_type="text/event-stream")
        return JSONResponse({"choices": [{"text": got}], "usage": {"completion_tokens": 1}})

    backend = Starlette(routes=[Route("/v1/models", models), Route("/health", lambda r: PlainTextResponse("")),
                                Route("/metrics", lambda r: PlainTextResponse("")),
                                Route("/v1/completions", complete, methods=["POST"])])
    monkeypatch.setattr(httpx, "AsyncHTTPTransport", lambda **kw: httpx.ASGITransport(app=backend))
    cfg = parse_config({"backends": [{"name": "b0", "url": "http://b0.test:8000", "api_key": GOOD_BACKEND_KEY}],
                        "policy": {"heuristic": "jsq"}})
    with TestClient(create_app(cfg)) as c:
        for stream in (False, True):
            r = c.post("/v1/completions", json={"model": "m", "prompt": "x", "stream": stream})
            assert r.status_code == 200 and "Bearer ***" in r.text and GOOD_BACKEND_KEY not in r.text, r.text
