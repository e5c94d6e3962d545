"""The router's HTTP face (FastAPI): OpenAI-compatible completions and chat, ``/v1/models``, ``/health`` and its
own Prometheus ``/metrics``. The routes only check the client (bearer token, body size, request fields) and
answer; routing and forwarding are :class:`~llmsim.serving.gateway.Gateway`'s."""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import ClientDisconnect

from llmsim.serving.config import RouterConfig
from llmsim.serving.decider import Decider
from llmsim.serving.gateway import Gateway
from llmsim.serving.inbound import BadRequest, check_request, parse_json

CLIENT_GONE = 499  # nginx's status for a client that left before its answer


def create_app(cfg: RouterConfig, decider: Decider | None = None) -> FastAPI:
    """The router app; its Gateway (``app.state.gateway``) starts and stops with the app's lifespan."""
    gw = Gateway(cfg, decider)
    app = FastAPI(title="llmsim router", lifespan=gateway_lifespan(gw), docs_url=None, redoc_url=None)
    app.state.gateway = gw

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await answer(gw, request, "/v1/completions", chat=False)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await answer(gw, request, "/v1/chat/completions", chat=True)

    @app.get("/v1/models")
    async def models() -> dict:
        return model_list(gw)

    @app.get("/health")
    async def health() -> Response:
        return health_answer(gw)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(gw.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def gateway_lifespan(gw: Gateway) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    """The app's lifespan: the gateway starts (discovers its backends) before the first request, stops after."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await gw.start()
        try:
            yield
        finally:
            await gw.stop()

    return lifespan


async def answer(gw: Gateway, request: Request, path: str, chat: bool) -> Response:
    """One OpenAI request: refused with a clear 4xx, or handed to the gateway; counted once by endpoint and code."""
    cfg = gw.cfg
    code = 200
    try:
        if not authorised(request, cfg.api_key):
            raise BadRequest(401, "missing or wrong bearer token (Authorization: Bearer <api_key>)",
                             "AuthenticationError")
        raw = await read_body(request, cfg.limits.max_body_bytes)
        inbound = check_request(parse_json(raw), chat, cfg.chars_per_token)
        resp = await gw.handle(inbound, path)
        code = resp.status_code
        return resp
    except BadRequest as e:
        code = e.status
        return JSONResponse(e.body(), status_code=e.status)
    except ClientDisconnect:  # gone while sending its body: nobody to answer
        code = CLIENT_GONE
        return Response(status_code=CLIENT_GONE)
    finally:
        gw.metrics.requests.labels(path, str(code)).inc()


def authorised(request: Request, api_key: str | None) -> bool:
    """True without an ``api_key``; else the request must carry it as a bearer token (compared in constant time)."""
    if not api_key:
        return True
    got = request.headers.get("authorization", "")
    return hmac.compare_digest(got.encode(), f"Bearer {api_key}".encode())


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


def model_list(gw: Gateway) -> dict:
    """``/v1/models``: the router's own name (the policy picks any backend) and every backend's model."""
    seen: dict[str, int] = {gw.cfg.model_name: max(b.max_model_len for b in gw.backends)}
    for b in gw.backends:
        if b.model:
            seen[b.model] = max(seen.get(b.model, 0), b.max_model_len)
    return {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "llmsim-router",
                                        "max_model_len": n} for m, n in seen.items()]}


def health_answer(gw: Gateway) -> Response:
    """``/health``: 200 with the healthy and ejected backends, 503 when none is healthy."""
    up = [b.name for b in gw.backends if b.up]
    body = {"status": "ok" if up else "no healthy backend", "healthy": up,
            "ejected": [b.name for b in gw.backends if not b.up]}
    return JSONResponse(body, status_code=200 if up else 503)
