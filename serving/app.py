"""The router's HTTP face (FastAPI): OpenAI-compatible completions and chat, ``/v1/models``, ``/health`` and its
own Prometheus ``/metrics``. The routes only check the client (bearer token, body size, request fields) and
answer; routing and forwarding are :class:`~llmsim.serving.gateway.Gateway`'s.

Every answer is a 2xx or a 4xx / 5xx in OpenAI's error shape with one clear message, redacted (no key, no
password: :func:`~llmsim.serving.config.redact`); the metrics count the code actually answered. With an
``api_key`` every route but ``/health`` needs it (:class:`RequireKey`, before any body is read);
``/openapi.json`` and ``/docs`` exist only with ``openapi: true``."""

from __future__ import annotations

import contextlib
import hmac
import json
from collections.abc import AsyncIterator, Callable, Mapping

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from llmsim.errors import LLMSimError
from llmsim.serving.config import RouterConfig, config_secrets, redact
from llmsim.serving.decider import Decider
from llmsim.serving.gateway import Gateway
from llmsim.serving.inbound import BadRequest, Inbound, check_context, check_request, parse_json
from llmsim.serving.monitor import AUTH_REFUSED

CLIENT_GONE = 499  # nginx's status for a client that left before its answer
OPEN_PATHS = ("/health",)  # what answers without the api_key (load balancers and liveness probes poll it)
OPENAI_PATHS = ("/v1/completions", "/v1/chat/completions")  # counted in llmsim_router_requests_total
ERROR_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 403: "PermissionDeniedError",
               404: "NotFoundError", 405: "MethodNotAllowedError", 413: "PayloadTooLargeError"}


def create_app(cfg: RouterConfig, decider: Decider | None = None) -> FastAPI:
    """The router app; its Gateway (``app.state.gateway``) starts and stops with the app's lifespan."""
    gw = Gateway(cfg, decider)
    docs = cfg.openapi
    app = FastAPI(title="llmsim router", lifespan=gateway_lifespan(gw), openapi_url="/openapi.json" if docs else None,
                  docs_url="/docs" if docs else None, redoc_url=None)
    app.state.gateway = gw
    app.add_exception_handler(HTTPException, http_error)  # 404 / 405 of unknown routes, in OpenAI's shape
    if cfg.api_key:
        app.add_middleware(RequireKey, api_key=cfg.api_key, refused=lambda path: count(gw, path, 401))

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await answer(gw, request, "/v1/completions", chat=False)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await answer(gw, request, "/v1/chat/completions", chat=True)

    @app.get("/v1/models")
    async def models() -> dict:
        return model_list(gw)

    # (probes and load balancers may poll with HEAD; one route per method: one OpenAPI operation id each)
    @app.head("/health", include_in_schema=False)
    @app.get("/health")
    async def health(request: Request) -> Response:
        return headless(health_answer(gw), request.method)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(gw.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def gateway_lifespan(gw: Gateway) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    """The app's lifespan: the gateway starts (discovers its backends) before the first request, stops after."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            await gw.start()
        except LLMSimError as e:  # kept for whoever started the server (start_router raises it)
            gw.start_error = e
            raise
        try:
            yield
        finally:
            await gw.stop()

    return lifespan


class RequireKey:
    """ASGI middleware: with an ``api_key``, every route but ``/health`` needs ``Authorization: Bearer <api_key>``
    (compared in constant time), checked before anything of the request is read; else 401."""

    def __init__(self, app: ASGIApp, api_key: str, refused: Callable[[str], None]) -> None:
        self.app, self.expected, self.refused = app, f"Bearer {api_key}".encode("ascii"), refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in OPEN_PATHS:
            problem = self.problem(scope)
            if problem:
                self.refused(scope["path"])
                err = BadRequest(401, problem, "AuthenticationError")
                await refusal(err, headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def problem(self, scope: Scope) -> str:
        """Why the request's credentials are refused ("" if they are not). Several Authorization headers are
        refused whatever they hold: servers and proxies disagree on which one counts."""
        got = [v for k, v in scope["headers"] if k == b"authorization"]
        if len(got) > 1:
            return f"{len(got)} Authorization headers; send exactly one Authorization header (Bearer <api_key>)"
        if not hmac.compare_digest(got[0] if got else b"", self.expected):
            return "missing or wrong bearer token (Authorization: Bearer <api_key>)"
        return ""


async def answer(gw: Gateway, request: Request, path: str, chat: bool) -> Response:
    """One OpenAI request: refused with a clear 4xx, or handed to the gateway; counted once by endpoint and the
    code actually answered (500 only if something below failed unexpectedly: then Starlette answers 500)."""
    cfg = gw.cfg
    code = 500
    try:
        raw = await read_body(request, cfg.limits.max_body_bytes)
        inbound = check_request(parse_json(raw), chat, cfg.chars_per_token, raw)
        admit(gw, inbound)
        resp = await gw.handle(inbound, path)
        if resp.status_code in AUTH_REFUSED:  # the backend's answer to the router's credentials, not the client's
            raise BadRequest(503, f"a backend refused the router's credentials (HTTP {resp.status_code}): the "
                                  "router's backends are misconfigured (authentication)", "ServiceUnavailableError")
        code = resp.status_code
        return scrubbed(resp, config_secrets(cfg))  # (a stream's lines are scrubbed by its relay)
    except BadRequest as e:
        code = e.status
        return refusal(e, config_secrets(cfg))
    except ClientDisconnect:  # gone while sending its body: nobody to answer
        code = CLIENT_GONE
        return Response(status_code=CLIENT_GONE)
    finally:
        count(gw, path, code)


def refusal(e: BadRequest, secrets: tuple[str, ...] = (), headers: Mapping[str, str] | None = None) -> Response:
    """A client's error answer: OpenAI's shape, its message redacted, as ASCII JSON (any text the client sent and
    the message quotes, a lone surrogate included, encodes)."""
    body = json.dumps(e.body(redact(e.message, secrets))).encode("ascii")
    return Response(body, status_code=e.status, media_type="application/json", headers=headers)


def count(gw: Gateway, path: str, code: int) -> None:
    """One answered request in ``llmsim_router_requests_total`` (the OpenAI endpoints only: bounded labels)."""
    if path in OPENAI_PATHS:
        gw.metrics.requests.labels(path, str(code)).inc()


def admit(gw: Gateway, inbound: Inbound) -> None:
    """What is refused before routing: an unknown model (404, vLLM's words), more tokens than the largest context
    of the healthy backends serving it (400, vLLM's words), and, when none of its backends is up because they
    refuse the router's credentials, a 503 saying so."""
    pool = [gw.backends[k] for k in gw.allowed_for(inbound.model)]
    up = [b.max_model_len for b in pool if b.up]  # discovered: their context is known
    if up:
        check_context(inbound, max(up))
    refused = [b.problem for b in pool if b.refused_status]
    if refused and not any(b.up for b in pool):
        raise BadRequest(503, f"backends misconfigured (authentication): {'; '.join(refused)}; check their "
                              "api_key; no healthy backend for this request", "ServiceUnavailableError")


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused (413) as soon as it passes ``limit`` bytes, whatever Content-Length claims."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"request body of {declared} bytes exceeds the limit of {limit} bytes",
                         "PayloadTooLargeError")
    chunks, n = [], 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > limit:
            raise BadRequest(413, f"request body exceeds the limit of {limit} bytes", "PayloadTooLargeError")
        chunks.append(chunk)
    return b"".join(chunks)


def scrubbed(resp: Response, secrets: tuple[str, ...]) -> Response:
    """A backend's answer passed on, with any secret it echoes taken out (a key is never shown)."""
    body = getattr(resp, "body", None)
    if not isinstance(body, bytes) or not any(s.encode() in body for s in secrets):
        return resp
    text = redact(body.decode("utf-8", "replace"), secrets)
    return Response(text.encode(), status_code=resp.status_code, media_type=resp.media_type)


async def http_error(request: Request, exc: HTTPException) -> Response:
    """Starlette's own refusals (an unknown route, a wrong method) in OpenAI's error shape."""
    status = exc.status_code
    err = BadRequest(status, f"{exc.detail}: {request.method} {request.url.path}", ERROR_TYPES.get(status, "Error"))
    return refusal(err, headers=exc.headers)


def model_list(gw: Gateway) -> dict:
    """``/v1/models``: the router's own name (the policy picks any backend) and every backend's model."""
    seen: dict[str, int] = {gw.cfg.model_name: max(b.max_model_len for b in gw.backends)}
    for b in gw.backends:
        if b.model:
            seen[b.model] = max(seen.get(b.model, 0), b.max_model_len)
    return {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "llmsim-router",
                                        "max_model_len": n} for m, n in seen.items()]}


def headless(resp: Response, method: str) -> Response:
    """``resp`` as a HEAD request gets it: the same status and media type, no body."""
    if method != "HEAD":
        return resp
    return Response(status_code=resp.status_code, media_type=resp.media_type)


def health_answer(gw: Gateway) -> Response:
    """``/health``: 200 with the healthy and ejected backends, 503 when none is healthy; backends that refuse the
    router's credentials are named in ``detail`` (``misconfigured: 401 from backend b0``). Names only: no URL."""
    up = [b.name for b in gw.backends if b.up]
    body = {"status": "ok" if up else "no healthy backend", "healthy": up,
            "ejected": [b.name for b in gw.backends if not b.up]}
    refused = [b for b in gw.backends if b.refused_status]
    if refused:
        body["misconfigured"] = [b.name for b in refused]
        body["detail"] = "misconfigured: " + "; ".join(b.problem for b in refused)
    return JSONResponse(body, status_code=200 if up else 503)
