"""The OpenAI-compatible HTTP API of one emulated vLLM engine (FastAPI).

Endpoints as vLLM answers them: ``POST /v1/completions``, ``POST /v1/chat/completions`` (streaming as SSE or one
JSON), ``GET /v1/models``, ``GET /health``, ``GET /metrics``. Errors have OpenAI's shape
``{"error": {"message", "type", "param", "code"}}``; bodies are read and checked in :mod:`llmsim.emulator.body`.
The generated text is synthetic words.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.requests import ClientDisconnect

from llmsim.emulator.body import ApiError, Job, parse_job, read_json
from llmsim.emulator.engine import (
    EmulatorOptions,
    EngineFailed,
    RealTimeEngine,
    SyntheticText,
    Ticket,
    sampled_length,
)
from llmsim.emulator.metrics import EmulatorMetrics

_MARK = "\u0000token\u0000"  # placeholder of a token's text in a chunk template (never a generated word)


# ---------------------------------------------------------------------- answers
def _usage(t: Ticket, n: int) -> dict[str, int]:
    p = t.req.prompt_tokens
    return {"prompt_tokens": p, "completion_tokens": n, "total_tokens": p + n}


def sse_event(d: dict[str, Any]) -> str:
    """One server-sent event carrying ``d`` as compact JSON (what vLLM streams)."""
    return f"data: {json.dumps(d, separators=(',', ':'))}\n\n"


class Answer:
    """Builds the JSON of one request's answer (chunks or the whole), in the endpoint's flavour."""

    def __init__(self, t: Ticket, chat: bool, model: str) -> None:
        self.t = t
        self.chat = chat
        self.model = model
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{t.id}"
        self.created = int(time.time())
        self.obj = "chat.completion.chunk" if chat else "text_completion"
        self._tmpl: list[str] | None = None

    def chunk(self, text: str | None, finish: str | None = None, role: bool = False) -> str:
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
            if text is not None:
                delta["content"] = text
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish, "stop_reason": None}
        return sse_event({"id": self.id, "object": self.obj, "created": self.created, "model": self.model,
                          "choices": [choice]})

    def token_chunks(self, words: list[str]) -> str:
        """SSE events of several tokens, one per token, as one string (one write per wake-up, not per token):
        the JSON of a token chunk is built once with a marker in place of the text, then filled per token."""
        if self._tmpl is None:
            self._tmpl = self.chunk(_MARK).split(json.dumps(_MARK), 1)
        head, tail = self._tmpl
        return "".join(head + json.dumps(w) + tail for w in words)

    def usage_chunk(self, n: int) -> str:
        return sse_event({"id": self.id, "object": self.obj, "created": self.created, "model": self.model,
                          "choices": [], "usage": _usage(self.t, n)})

    def whole(self, text: str, n: int) -> dict[str, Any]:
        fin = self.t.finish_reason
        if self.chat:
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                      "logprobs": None, "finish_reason": fin}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": fin, "stop_reason": None}
        return {"id": self.id, "object": "chat.completion" if self.chat else "text_completion",
                "created": self.created, "model": self.model, "choices": [choice], "usage": _usage(self.t, n)}


async def stream_tokens(engine: RealTimeEngine, t: Ticket, ans: Answer, include_usage: bool) -> AsyncIterator[str]:
    """One SSE chunk per token as the engine releases it (a chat's role chunk comes with the first token, as vLLM
    sends it), then the finish chunk, usage, and [DONE].

    Leaving early (the client disconnected: the response task is cancelled) aborts the request in the engine."""
    text = SyntheticText(t.seed)
    sent = 0
    try:
        while True:
            await t.event.wait()
            t.event.clear()
            n = t.available
            if n > sent:
                chunks = ans.token_chunks(text.take(n - sent))
                yield ans.chunk(None, role=True) + chunks if sent == 0 and ans.chat else chunks
                sent = n
            if t.done:
                break
        if t.error is not None:
            yield sse_event({"error": {"message": t.error, "type": ApiError.TYPES[t.error_status], "param": None,
                                       "code": t.error_status}})
        else:
            yield ans.chunk(None if ans.chat else "", finish=t.finish_reason)
            if include_usage:
                yield ans.usage_chunk(sent)
        yield "data: [DONE]\n\n"
    finally:
        if not t.done:
            engine.abort(t)


class TicketStream(StreamingResponse):
    """The SSE answer of one request, which aborts the request however the response ends. The generator's own
    ``finally`` is not enough: a client that leaves while the response head waits for a paused transport has
    the response cancelled before the generator ever started, and it would then run in the engine to its end."""

    def __init__(self, engine: RealTimeEngine, t: Ticket, content: AsyncIterator[str]) -> None:
        super().__init__(content, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self.engine, self.ticket = engine, t

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.engine.abort(self.ticket)  # (nothing to do once it has finished)


async def client_left(request: Request) -> None:
    """Return when the client disconnects (uvicorn says so as soon as the connection drops); call it only once
    the body has been read."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def wait_done(engine: RealTimeEngine, t: Ticket, request: Request) -> bool:
    """Wait until the request finishes; False, and the request aborted at once, if the client left first (a
    watcher task reads the disconnect while the engine works)."""
    watcher = asyncio.ensure_future(client_left(request))
    watcher.add_done_callback(lambda _: t.event.set())
    try:
        while not t.done:
            await t.event.wait()
            t.event.clear()
            if watcher.done() and not watcher.cancelled() and not t.done:
                engine.abort(t)
                return False
    except asyncio.CancelledError:
        engine.abort(t)
        raise
    finally:
        watcher.cancel()
    return True


def context_error(prompt_tokens: int, max_tokens: int, max_model_len: int) -> str:
    """vLLM's words for a prompt plus ``max_tokens`` longer than the context (its OpenAI server answers 400)."""
    return (f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the completion). "
            "Please reduce the length of the messages or completion.")


async def serve_job(engine: RealTimeEngine, opts: EmulatorOptions, job: Job, request: Request) -> Response:
    """Submit a validated job and answer it: an SSE stream, or one JSON once the engine has finished it. A
    ``max_tokens`` that does not fit the context is a 400 (as vLLM); without one, the answer may fill it."""
    why = engine.prompt_error(job.prompt_tokens)
    if why:
        raise ApiError(400, why, "messages" if job.chat else "prompt")
    room = engine.max_model_len - job.prompt_tokens
    if job.max_tokens is not None and job.max_tokens > room:
        raise ApiError(400, context_error(job.prompt_tokens, job.max_tokens, engine.max_model_len), "max_tokens")
    max_tokens = job.max_tokens or room
    out = max_tokens
    if opts.output_len == "sampled" and not job.ignore_eos:
        out = min(max_tokens, max(job.min_tokens, sampled_length(job.seed)))
    why = engine.fit_error(job.prompt_tokens, out)
    if why:
        raise ApiError(400, why, "max_tokens")
    try:
        t = engine.submit(job.prompt_tokens, out, max_tokens, job.seed)
    except EngineFailed as e:
        raise ApiError(503, str(e)) from None
    ans = Answer(t, job.chat, opts.name)
    if job.stream:
        return TicketStream(engine, t, stream_tokens(engine, t, ans, job.include_usage))
    if not await wait_done(engine, t, request):
        return Response(status_code=499)  # nobody is listening (nginx's "client closed request")
    if t.error is not None:
        raise ApiError(t.error_status, t.error)
    n = t.available
    return JSONResponse(ans.whole("".join(SyntheticText(t.seed).take(n)), n))


# ---------------------------------------------------------------------- the app
def create_app(opts: EmulatorOptions | None = None, **kwargs: Any) -> FastAPI:
    """The FastAPI app of one emulated engine; bad options raise ConfigError before anything serves."""
    opts = opts or EmulatorOptions(**kwargs)
    engine = RealTimeEngine(opts)
    metrics = EmulatorMetrics(engine, opts.name)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine.start()
        yield
        engine.stop()

    app = FastAPI(title=f"llmsim emulator: {opts.name} on {opts.gpu}", lifespan=lifespan, docs_url=None,
                  redoc_url=None, openapi_url=None)
    app.state.engine = engine
    app.state.metrics = metrics
    app.state.opts = opts

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> Response:
        return exc.response()

    if opts.api_key is not None:
        app.add_middleware(RequireKey, api_key=opts.api_key)
    add_openai_routes(app, engine, opts)
    add_operations_routes(app, engine, metrics)
    return app


OPEN_PATHS = ("/health",)  # what answers without the api key (liveness probes and load balancers poll it)


def auth_problem(scope: Any, expected: bytes) -> str:
    """Why a request's credentials are refused ("" if they are not): it must carry exactly one
    ``Authorization: Bearer <api key>``, compared in constant time as raw bytes. Several Authorization headers are
    refused whatever they hold: servers and proxies disagree on which one counts."""
    got = [v for k, v in scope["headers"] if k == b"authorization"]
    if len(got) > 1:
        return (f"Unauthorized: {len(got)} Authorization headers; send exactly one, "
                "`Authorization: Bearer <api key>`")
    if not hmac.compare_digest(got[0] if got else b"", expected):
        return "Unauthorized: send the header `Authorization: Bearer <api key>`"
    return ""


class RequireKey:
    """ASGI middleware: with an api key, every route but ``/health`` needs it (``/metrics`` and unknown paths
    included: a 401 comes before a 404 or 405), checked before anything of the request is read."""

    def __init__(self, app: Any, api_key: str) -> None:
        self.app, self.expected = app, f"Bearer {api_key}".encode("ascii")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] not in OPEN_PATHS:
            problem = auth_problem(scope, self.expected)
            if problem:
                await ApiError(401, problem).response()(scope, receive, send)
                return
        await self.app(scope, receive, send)


def add_openai_routes(app: FastAPI, engine: RealTimeEngine, opts: EmulatorOptions) -> None:
    """What clients call: ``/v1/completions``, ``/v1/chat/completions``, ``/v1/models``."""
    vocab = engine.inst.profile.model.vocab

    async def generate(request: Request, chat: bool) -> Response:
        try:
            body = await read_json(request, opts.max_body_bytes)
        except ClientDisconnect:  # gone while sending its body: nobody to answer (nginx's 499)
            return Response(status_code=499)
        return await serve_job(engine, opts, parse_job(body, chat, opts, vocab), request)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await generate(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await generate(request, chat=True)

    @app.get("/v1/models")
    async def models(request: Request) -> JSONResponse:
        card = {"id": opts.name, "object": "model", "created": int(time.time()), "owned_by": "llmsim",
                "root": opts.model, "parent": None, "max_model_len": engine.max_model_len,
                "permission": []}
        return JSONResponse({"object": "list", "data": [card]})


def add_operations_routes(app: FastAPI, engine: RealTimeEngine, metrics: EmulatorMetrics) -> None:
    """What operators and routers poll: ``/health`` (never behind the API key) and ``/metrics``."""

    # (probes and load balancers may poll with HEAD, as vLLM; one route per method: one OpenAPI operation id each)
    @app.head("/health", include_in_schema=False)
    @app.get("/health")
    async def health(request: Request) -> Response:
        if engine.failed is not None or engine.stopped:
            if request.method == "HEAD":
                return Response(status_code=503, media_type="application/json")
            return JSONResponse({"error": engine.failed or "the emulator is shutting down"}, status_code=503)
        return Response(status_code=200)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
