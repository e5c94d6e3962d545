"""The router's side of the wire towards its backends: one pooled HTTP client, one attempt of a request on one
backend (the whole answer, or a stream up to its first token), and the relay of a stream after it.

Connection reuse. The pool keeps an idle connection for ``UPSTREAM_IDLE_S`` only, less than the keep-alive of
vLLM's server (uvicorn's 5 s): the backend never closes a connection the router is about to reuse. When a reused
pooled connection fails anyway before any byte of the answer came back (reset, or closed without a response: the
keep-alive race), the request is sent once more on another connection of the same backend
(``llmsim_router_upstream_resends_total``), and the backend is not blamed; a new connection's failure is not resent,
as its backend may have read and served the request. Any other failure before the first token is a
:class:`BackendFailed`, and a 429 a :class:`BackendBusy` (the gateway retries either elsewhere).

Stalls. A stream whose backend stops producing for ``timeouts.stall_s`` after its first token is ended with the
SSE error event (``BackendStreamError``, code 504) and ``[DONE]``: its text so far cannot be redone elsewhere
without duplicating it. Before the first token the gateway moves a request away from a backend that is ejected
(serving/gateway.py); ``first_token_s`` bounds the wait in any case.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from http.cookiejar import CookieJar

import httpx
from starlette.responses import Response

from llmsim.serving.config import RouterConfig, config_secrets, redact
from llmsim.serving.inbound import BadRequest
from llmsim.serving.metrics import RouterMetrics
from llmsim.serving.tracker import Backend, Flight

UPSTREAM_IDLE_S = 2.0  # pooled connections idle longer are closed by the router, never by the backend (5 s)
STALE_CONNECTION = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
# an answer that broke off, or whose body does not decode as its Content-Encoding says: the backend's failure
BROKEN_ANSWER = (httpx.TransportError, httpx.StreamError, httpx.DecodingError)
MAX_ANSWER_BYTES = 256 * 1024 * 1024  # an answer, or one line of a stream: far above any completion (logprobs too)
NEWLINES = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # where str.splitlines (and httpx) end a line
TOO_MANY_REQUESTS = 429  # a backend's (or a proxy's before it) "busy": retried elsewhere, as a failure is
SSE_FIELDS = ("data", "event", "id", "retry")  # the fields of a server-sent event (a line of another is garbage)


class NoCookies(CookieJar):
    """A cookie jar that keeps nothing: the router's client is shared by every client's requests, so a cookie one
    backend answer sets must not ride along on other clients' requests (a gateway forwards, it has no session). It
    also spares httpx's cookie bookkeeping on every request."""

    def extract_cookies(self, response: object, request: object) -> None:
        pass

    def add_cookie_header(self, request: object) -> None:
        pass

    def set_cookie(self, cookie: object) -> None:
        pass


class BackendFailed(Exception):
    """A backend failed a request before its first token (the request may go elsewhere)."""

    def __init__(self, backend: Backend, why: str, refused: bool = False) -> None:
        super().__init__(f"backend {backend.name!r} ({backend.cfg.url}): {why}")
        self.backend, self.refused = backend, refused


class BackendBusy(BackendFailed):
    """A backend answered 429 (too many requests): it did no work, so the request may go elsewhere. ``answer`` is
    that 429 for the client, passed on when no other backend is left to try."""

    def __init__(self, backend: Backend, answer: Response) -> None:
        super().__init__(backend, "answered HTTP 429 (too many requests)")
        self.answer = answer


def count_token(flight: Flight, line: str) -> None:
    """An SSE data line is one generated token, except ``[DONE]`` and the chunk that carries a finish reason."""
    if line.startswith("data:") and "[DONE]" not in line and '"finish_reason":"' not in line.replace(" ", ""):
        flight.generated += 1


def is_done(line: str) -> bool:
    """The SSE line that ends an OpenAI stream (``data: [DONE]``)."""
    return line.startswith("data:") and line[5:].strip() == "[DONE]"


def error_event(message: str, code: int) -> str:
    """The SSE event that ends a cut stream cleanly, then ``[DONE]``."""
    err = {"error": {"message": message, "type": "BackendStreamError", "code": code}}
    return f"data: {json.dumps(err)}\n\ndata: [DONE]\n\n"


class Upstream:
    """The pooled client to every backend and what one attempt on one backend does."""

    max_answer_bytes = MAX_ANSWER_BYTES

    def __init__(self, cfg: RouterConfig, metrics: RouterMetrics) -> None:
        self.cfg, self.metrics = cfg, metrics
        self.secrets = config_secrets(cfg)  # what a relayed line must not show (a backend echoing its key)
        self.client: httpx.AsyncClient | None = None
        self.limits: httpx.Limits | None = None
        self.transport: httpx.AsyncBaseTransport | None = None
        self.timeout: dict[str, float | None] = {}

    def open(self, connections: int, transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
        """The shared connection pool and a client on it for the monitor: ``connections`` at most, idle ones kept
        ``UPSTREAM_IDLE_S``, no cookie jar (:class:`NoCookies`), no proxy from the environment (backends are
        addressed as configured; a CA bundle in ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` still counts for https
        backends); ``transport`` replaces the network (tests). Requests go to the pool's transport
        directly (:meth:`send`): the client's layer (default headers, auth, redirects, cookies, event hooks) did
        nothing for them and cost about a fifth of the router's CPU per request."""
        t = self.cfg.timeouts
        self.limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections,
                                   keepalive_expiry=UPSTREAM_IDLE_S)
        self.transport = transport or httpx.AsyncHTTPTransport(limits=self.limits)
        timeout = httpx.Timeout(t.request_s, connect=t.connect_s)
        self.timeout = timeout.as_dict()
        # (a client given its transport mounts no proxy from the environment, whatever trust_env says)
        self.client = httpx.AsyncClient(timeout=timeout, cookies=NoCookies(), transport=self.transport)
        return self.client

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()

    async def send(self, b: Backend, path: str, body: bytes) -> httpx.Response:
        """POST the JSON ``body`` to the backend and return once its answer's headers are in (the body is
        streamed); sent once more, on another connection, when a reused pooled one fails before any byte of the
        answer. A new connection that fails is not resent: its backend may have read the request."""
        url = f"{b.cfg.url}{path}"
        headers = {"content-type": "application/json", **b.headers()}
        opened: list[str] = []

        async def trace(event: str, info: dict) -> None:
            if event == "connection.connect_tcp.started":
                opened.append(event)

        try:
            return await self.post(url, body, headers, trace)
        except STALE_CONNECTION:
            if opened:
                raise
            self.metrics.resends.labels(b.name).inc()
            return await self.post(url, body, headers)

    async def post(self, url: str, body: bytes, headers: dict[str, str], trace: Callable | None = None
                   ) -> httpx.Response:
        """POST on the pool's transport, its body not read yet (close the response to give the connection back)."""
        ext = {"timeout": self.timeout} if trace is None else {"timeout": self.timeout, "trace": trace}
        request = httpx.Request("POST", url, content=body, headers=headers, extensions=ext)
        resp = await self.transport.handle_async_request(request)
        resp.request = request
        return resp

    async def whole(self, b: Backend, flight: Flight, body: bytes, path: str) -> Response:
        """A non-streaming request: the backend's whole answer within ``request_s`` (a 504 past it: the backend may
        still be generating, so no retry). BackendFailed on a transport error, a 5xx, a redirect, or a 2xx whose
        body is not a JSON object (not an answer: never passed on as one)."""
        deadline = asyncio.get_running_loop().time() + self.cfg.timeouts.request_s
        try:
            async with asyncio.timeout_at(deadline):
                resp = await self.send(b, path, body)
        except (TimeoutError, httpx.TimeoutException) as e:
            raise self.timed_out(b, e) from None
        except httpx.TransportError as e:
            raise BackendFailed(b, f"{type(e).__name__}: {e}", refused=isinstance(e, httpx.ConnectError)) from None
        try:
            async with asyncio.timeout_at(deadline):
                content = await self.read_capped(b, resp)
        except (TimeoutError, httpx.TimeoutException) as e:
            raise self.timed_out(b, e) from None
        except BROKEN_ANSWER as e:
            raise BackendFailed(b, f"answer cut ({type(e).__name__}: {e})") from None
        finally:
            await close_quietly(resp)
        answer = json_or_none(content)
        not_passed_on(b, resp, content, answer)
        if 200 <= resp.status_code < 300 and not isinstance(answer, dict):
            ctype = resp.headers.get("content-type", "no content-type")
            raise BackendFailed(b, f"answered HTTP {resp.status_code} with a body that is not a JSON object "
                                   f"({ctype}, {len(content)} bytes)")
        with contextlib.suppress(ValueError, AttributeError, TypeError, KeyError):
            flight.generated = int(answer["usage"]["completion_tokens"])
        return passed_on(b, resp, content, answer)

    def timed_out(self, b: Backend, e: Exception) -> Exception:
        """A connect timeout is a failure (retried elsewhere); a read timeout a 504 (not retried)."""
        if isinstance(e, httpx.ConnectTimeout):
            return BackendFailed(b, f"ConnectTimeout: {e}", refused=True)
        return BadRequest(504, f"backend {b.name!r} did not answer within {self.cfg.timeouts.request_s} s",
                          "GatewayTimeoutError")

    async def first_token(self, b: Backend, body: bytes, path: str
                          ) -> tuple[httpx.Response, AsyncIterator[str], list[str]] | Response:
        """Open a stream and read up to its first data line, all within ``first_token_s``: the open response, its
        line iterator and the lines read; a non-200 answer as is (BackendFailed for a 5xx or any failure)."""
        wait = self.cfg.timeouts.first_token_s
        deadline = asyncio.get_running_loop().time() + wait
        try:
            async with asyncio.timeout_at(deadline):
                resp = await self.send(b, path, body)
        except TimeoutError:
            raise BackendFailed(b, f"no answer within {wait:g} s") from None
        except httpx.TransportError as e:
            raise BackendFailed(b, f"{type(e).__name__}: {e}", refused=isinstance(e, httpx.ConnectError)) from None
        try:
            async with asyncio.timeout_at(deadline):
                if resp.status_code != 200:
                    return await self.refusal(b, resp)
                lines = capped_lines(resp, self.max_answer_bytes)
                head = [await anext(lines)]
                while not head[-1].startswith("data:"):
                    check_sse(head[-1])
                    head.append(await anext(lines))
                return resp, lines, head
        except NotSSE as e:
            await close_quietly(resp)
            raise BackendFailed(b, f"{e} before its first token") from None
        except (TimeoutError, StopAsyncIteration, *BROKEN_ANSWER) as e:
            await close_quietly(resp)
            raise BackendFailed(b, f"stream ended before its first token ({type(e).__name__})") from None
        except BaseException:  # cancelled (the client left, the backend was ejected): the stream is closed
            await close_quietly(resp)
            raise

    async def read_capped(self, b: Backend, resp: httpx.Response) -> bytes:
        """The answer's body (decoded), or BackendFailed past ``max_answer_bytes``: a backend flooding the router
        fails there instead of filling its memory until a timeout."""
        chunks, n = [], 0
        async for chunk in resp.aiter_bytes():
            n += len(chunk)
            if n > self.max_answer_bytes:
                raise BackendFailed(b, f"answer over {self.max_answer_bytes} bytes (no completion is that long)")
            chunks.append(chunk)
        return b"".join(chunks)

    async def refusal(self, b: Backend, resp: httpx.Response) -> Response:
        """A non-200 answer to a stream request, passed on (BackendFailed for a 5xx)."""
        try:
            content = await self.read_capped(b, resp)
        finally:
            await close_quietly(resp)
        answer = json_or_none(content)
        not_passed_on(b, resp, content, answer)
        return passed_on(b, resp, content, answer)

    async def relay(self, b: Backend, flight: Flight, resp: httpx.Response, lines: AsyncIterator[str],
                    head: list[str], ended: Callable[[str | None], None]) -> AsyncIterator[str]:
        """Pass the backend's SSE lines on as they come. A backend failure, a line that is not SSE, a stall (no
        line for ``stall_s``) or a stream still going ``request_s`` after its first token ends the stream with the
        error event. ``ended(reason)`` runs once at the end: reason None when the stream ended by itself or the
        backend failed, "stall", "deadline", or "client_gone" when the client left first."""
        reason: str | None = "client_gone"
        try:
            for line in head:
                yield self.shown(line)
            async with contextlib.aclosing(self.checked(b, lines, any(map(is_done, head)))) as checked:
                async for line in checked:
                    count_token(flight, line)
                    yield self.shown(line)
            reason = None
        except StreamCut as e:
            reason = e.reason
            self.metrics.stream_errors.labels(b.name).inc()
            yield error_event(f"backend {b.name!r} {e.why} after {flight.generated} tokens; the answer is "
                              "incomplete", e.code)
        finally:
            try:
                await close_quietly(resp)
            finally:
                ended(reason)

    def shown(self, line: str) -> str:
        """A relayed line as the client gets it: any secret it echoes taken out."""
        if self.secrets and any(s in line for s in self.secrets):
            line = redact(line, self.secrets)
        return line + "\n"

    async def checked(self, b: Backend, lines: AsyncIterator[str], done: bool = False) -> AsyncIterator[str]:
        """The backend's lines after the first token, each an SSE line within ``stall_s`` of the one before and
        all within ``request_s``, the stream ended by ``[DONE]`` (``done``: already seen); else
        :class:`StreamCut` saying why (a stream that stops without ``[DONE]`` was cut, however cleanly)."""
        stall, whole = self.cfg.timeouts.stall_s, self.cfg.timeouts.request_s
        loop = asyncio.get_running_loop()
        deadline = loop.time() + whole
        while True:
            left = deadline - loop.time()
            try:
                if left <= 0:
                    raise TimeoutError
                async with asyncio.timeout(min(stall, left)):
                    line = await anext(lines)
                check_sse(line)
            except StopAsyncIteration:
                if not done:
                    raise StreamCut(None, "ended its stream without [DONE]", 502) from None
                return
            except TimeoutError:
                if left < stall:
                    raise StreamCut("deadline", f"did not finish within {whole:g} s", 504) from None
                raise StreamCut("stall", f"stalled: no token for {stall:g} s", 504) from None
            except NotSSE as e:
                raise StreamCut(None, str(e), 502) from None
            except BROKEN_ANSWER as e:
                raise StreamCut(None, f"failed ({type(e).__name__})", 502) from None
            done = done or is_done(line)
            yield line


class NotSSE(Exception):
    """A backend line that is not server-sent events (garbage, or an answer of another kind)."""


class StreamCut(Exception):
    """Why a relayed stream ends early: its ``reason`` (counted in ``aborted``; None: the backend's failure), what
    the error event says of the backend (``why``) and its ``code``."""

    def __init__(self, reason: str | None, why: str, code: int) -> None:
        super().__init__(why)
        self.reason, self.why, self.code = reason, why, code


async def capped_lines(resp: httpx.Response, limit: int) -> AsyncIterator[str]:
    """The answer's lines as ``resp.aiter_lines()`` splits them, but none may grow past ``limit`` characters
    (NotSSE): bytes without a line end would otherwise pile up until a timeout."""
    parts: list[str] = []  # the line being received (a list: no quadratic joining)
    size, cr = 0, False
    async for text in resp.aiter_text():
        text = ("\r" if cr else "") + text
        cr = text.endswith("\r")  # maybe half of a \r\n: decided with the next piece
        text = text[:-1] if cr else text
        if not text:
            continue
        lines = text.splitlines()
        tail = None if text[-1] in NEWLINES else lines.pop()
        if lines and parts:
            lines[0] = "".join(parts) + lines[0]
            parts, size = [], 0
        if tail is not None:
            parts.append(tail)
            size += len(tail)
            if size > limit:
                raise NotSSE(f"sent a line of over {limit} characters")
        for line in lines:
            yield line
    if parts or cr:
        yield "".join(parts)


def check_sse(line: str) -> None:
    """An SSE line (a field of the standard's four, a comment or a blank line), else NotSSE."""
    if line and line[0] != ":" and line.partition(":")[0] not in SSE_FIELDS:
        raise NotSSE(f"sent a line that is not server-sent events ({line[:40]!r})")


def passed_on(b: Backend, resp: httpx.Response, content: bytes, answer: object) -> Response:
    """The backend's answer for the client: as it is, but a client error whose body is not a JSON object (an HTML
    page, plain text) is put in OpenAI's error shape, as OpenAI clients read it, saying whose it is."""
    ctype = resp.headers.get("content-type", "application/json")
    if resp.status_code < 400 or isinstance(answer, dict):
        return Response(content, status_code=resp.status_code, media_type=ctype)
    text = content[:200].decode("utf-8", "replace")
    err = {"message": f"backend {b.name!r} answered HTTP {resp.status_code} ({ctype.split(';')[0]}): {text}",
           "type": "BackendError", "param": None, "code": resp.status_code}
    return Response(json.dumps({"error": err}).encode("ascii"), status_code=resp.status_code,
                    media_type="application/json")


def json_or_none(content: bytes) -> object:
    try:
        return json.loads(content)
    except ValueError:
        return None


def not_passed_on(b: Backend, resp: httpx.Response, content: bytes, answer: object) -> None:
    """BackendFailed for an answer that is the backend's failure, not the client's: a 5xx, or a redirect (the
    router does not follow it; where it points is not shown: a Location may carry credentials); BackendBusy for a
    429 (the backend refused before doing any work: another may serve it; its Retry-After is not waited for)."""
    status = resp.status_code
    if status == TOO_MANY_REQUESTS:
        raise BackendBusy(b, passed_on(b, resp, content, answer))
    if 300 <= status < 400:
        raise BackendFailed(b, f"answered a redirect (HTTP {status}); the router follows none: set the backend's "
                               "url to where the server answers")
    if status >= 500:
        raise BackendFailed(b, f"HTTP {status}: {content[:200]!r}")


async def close_quietly(resp: httpx.Response) -> None:
    """Close an upstream response; a failure to close it must never cut the client's answer."""
    with contextlib.suppress(Exception):
        await resp.aclose()
