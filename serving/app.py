"""The router's HTTP face (FastAPI): OpenAI-compatible completions and chat, ``/v1/models``, ``/health`` and its
own Prometheus ``/metrics``. Request handling is in :class:`~llmsim.serving.gateway.Gateway`."""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import ClientDisconnect

from llmsim.serving.config import RouterConfig
from llmsim.serving.gateway import Gateway
from llmsim.serving.inbound import BadRequest, check_request, parse_json
from llmsim.serving.policy import Decider


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


def create_app(cfg: RouterConfig, decider: Decider | None = None) -> FastAPI:
    """The router app; its Gateway (``app.state.gateway``) starts and stops with the app's lifespan."""
    gw = Gateway(cfg, decider)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await gw.start()
        try:
            yield
        finally:
            await gw.stop()

    app = FastAPI(title="llmsim router", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.gateway = gw

    def authorised(request: Request) -> bool:
        if not cfg.api_key:
            return True
        got = request.headers.get("authorization", "")
        return hmac.compare_digest(got.encode(), f"Bearer {cfg.api_key}".encode())

    async def openai(request: Request, path: str, chat: bool) -> Response:
        code = 200
        try:
            if not authorised(request):
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
        except ClientDisconnect:  # gone while sending its body: nobody to answer (nginx's 499)
            code = 499
            return Response(status_code=499)
        finally:
            gw.metrics.requests.labels(path, str(code)).inc()

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await openai(request, "/v1/completions", chat=False)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await openai(request, "/v1/chat/completions", chat=True)

    @app.get("/v1/models")
    async def models() -> dict:
        seen: dict[str, int] = {cfg.model_name: max(b.max_model_len for b in gw.backends)}
        for b in gw.backends:
            if b.model:
                seen[b.model] = max(seen.get(b.model, 0), b.max_model_len)
        return {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "llmsim-router",
                                            "max_model_len": n} for m, n in seen.items()]}

    @app.get("/health")
    async def health() -> Response:
        up = [b.name for b in gw.backends if b.up]
        body = {"status": "ok" if up else "no healthy backend", "healthy": up,
                "ejected": [b.name for b in gw.backends if not b.up]}
        return JSONResponse(body, status_code=200 if up else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(gw.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
