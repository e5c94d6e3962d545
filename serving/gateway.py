"""The router's core: one client request from admission to its last byte.

A request is admitted (in-flight and prompt limits), decided on the live ClusterState (serving/tracker.py) by
the configured policy (serving/decider.py; a WAIT holds it and decides again when the state moves), and forwarded.
Failures before the first token (refused connection, timeout, 5xx) are retried on another backend, ``retries``
times at most, the failed backend excluded for that request (a refused connection also ejects it until health
checks readmit it: serving/monitor.py). After the first token a failure ends the client's stream with one SSE
error event and ``[DONE]``: a half-sent answer cannot be redone elsewhere without duplicating text. A
non-streaming request that times out while the backend works is not retried either (504): the backend may
still be generating. Every client request ends exactly once (``end_request``), whichever way it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

import httpx
from starlette.responses import Response, StreamingResponse

from llmsim.errors import ConfigError
from llmsim.request import Request
from llmsim.routing import DROP, WAIT
from llmsim.serving.config import RouterConfig
from llmsim.serving.decider import Decider
from llmsim.serving.inbound import BadRequest, Inbound
from llmsim.serving.metrics import RouterMetrics
from llmsim.serving.monitor import BackendMonitor
from llmsim.serving.tracker import Backend, Flight, cluster_state

HOLD_TICK_S = 0.05  # a held (WAIT) request is decided again at least this often


class BackendFailed(Exception):
    """A backend failed a request before its first token (the request may go elsewhere)."""

    def __init__(self, backend: Backend, why: str, refused: bool = False) -> None:
        super().__init__(f"backend {backend.name!r} ({backend.cfg.url}): {why}")
        self.backend, self.refused = backend, refused


class Gateway:
    """The router's live state (backends, in-flight and held requests, its metrics) and its request path."""

    def __init__(self, cfg: RouterConfig, decider: Decider | None = None) -> None:
        self.cfg = cfg
        self.decider = decider or Decider(cfg.policy)
        self.metrics = RouterMetrics([b.name for b in cfg.backends])
        self.t0 = time.monotonic()
        self.changed = asyncio.Event()
        self.monitor = BackendMonitor(cfg, self.metrics, self.now, self.notify)
        self.backends = self.monitor.backends
        self.client: httpx.AsyncClient | None = None
        self.next_id = 0
        self.in_flight = 0
        self.queued = 0
        self.finished = 0
        self.mean_output = 128.0

    def now(self) -> float:
        return time.monotonic() - self.t0

    def notify(self) -> None:
        """Wake held requests: something finished or a scrape moved the state."""
        self.changed.set()
        self.changed = asyncio.Event()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Discover the backends, check the policy fits them (ConfigError if not), then watch them."""
        t = self.cfg.timeouts
        n = self.cfg.limits.max_in_flight + 4 * len(self.backends)
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(t.request_s, connect=t.connect_s),
                                        limits=httpx.Limits(max_connections=n, max_keepalive_connections=n))
        await self.monitor.discover_all(self.client)
        missing = [b.name for b in self.backends if not b.model]
        if missing and self.cfg.policy.onnx is not None:
            raise ConfigError(f"backends {missing}: model unknown (down at start and no 'model' in the config); an "
                              "exported policy needs every backend's model to check it was trained for them")
        self.decider.check_backends([b.policy_model for b in self.backends])
        self.monitor.watch()

    async def stop(self) -> None:
        await self.monitor.stop()
        if self.client is not None:
            await self.client.aclose()

    # ------------------------------------------------------------------ one request
    def allowed_for(self, model: str) -> list[int]:
        """The backends that serve ``model`` (all of them for the router's own ``model_name``); 404 if none."""
        if model == self.cfg.model_name:
            return [b.idx for b in self.backends]
        ks = [b.idx for b in self.backends if b.model == model]
        if not ks:
            raise BadRequest(404, f"The model `{model}` does not exist.", "NotFoundError")
        return ks

    async def choose(self, req: Request, pool: list[int]) -> Backend:
        """The policy's backend among the healthy ones of ``pool``, holding the request while it says WAIT."""
        deadline = self.now() + self.cfg.limits.max_wait_s
        held = False
        try:
            while True:
                healthy = [k for k in pool if self.backends[k].up]
                if not healthy:
                    names = [self.backends[k].name for k in pool]
                    raise BadRequest(503, f"no healthy backend for this request (tried or ejected: {names})",
                                     "ServiceUnavailableError")
                d = self.decide(req, healthy, held)
                if d != WAIT:
                    return self.backends[d]
                if not held:
                    if self.queued >= self.cfg.limits.max_queue:
                        raise BadRequest(429, "too many requests held by the routing policy; retry later",
                                         "RateLimitError")
                    held = True
                    self.queued += 1
                    self.metrics.queued.set(self.queued)
                left = deadline - self.now()
                if left <= 0:
                    raise BadRequest(503, f"held by the routing policy for over {self.cfg.limits.max_wait_s} s",
                                     "ServiceUnavailableError")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.changed.wait(), min(HOLD_TICK_S, left))
        finally:
            if held:
                self.queued -= 1
                self.metrics.queued.set(self.queued)

    def decide(self, req: Request, healthy: list[int], held: bool) -> int:
        """One decision on the live state: an index of ``healthy`` or WAIT. The policy's DROP is a 503; its choice
        of a backend outside ``healthy`` goes to the least loaded healthy one instead (counted)."""
        t = time.perf_counter()
        state = cluster_state(self.backends, self.now(), self.queued + (0 if held else 1), self.next_id,
                              self.mean_output)
        d = self.decider.decide(req, state, healthy)
        self.metrics.decision_latency.observe(time.perf_counter() - t)
        if d == DROP:
            raise BadRequest(503, "rejected by the routing policy (drop); retry later", "ServiceUnavailableError")
        if d != WAIT and d not in healthy:
            self.metrics.fallbacks.inc()
            d = min(healthy, key=lambda k: self.backends[k].instance_state().num_requests)
        return d

    async def handle(self, inbound: Inbound, path: str) -> Response:
        """Route and forward one validated client request; the response (streaming or not) or a BadRequest."""
        pool = self.allowed_for(inbound.model)
        if self.in_flight >= self.cfg.limits.max_in_flight:
            raise BadRequest(429, f"router at its limit of {self.cfg.limits.max_in_flight} requests in flight",
                             "RateLimitError")
        mpt = self.cfg.limits.max_prompt_tokens or max(self.backends[k].max_model_len for k in pool)
        if inbound.prompt_tokens > mpt:
            raise BadRequest(400, f"prompt of about {inbound.prompt_tokens} tokens exceeds the largest context "
                                  f"of the backends serving this model ({mpt} tokens)")
        rid = self.next_id
        self.next_id += 1
        # the output length a policy's oracle predictor reads: the client's cap, else the running mean answer
        req = Request(rid, self.now(), inbound.prompt_tokens, inbound.max_tokens or max(1, round(self.mean_output)))
        self.in_flight += 1
        self.metrics.in_flight.set(self.in_flight)
        handed_over = False
        try:
            resp = await self.route_and_send(req, inbound, path, pool)
            handed_over = isinstance(resp, StreamingResponse)
            return resp
        finally:
            if not handed_over:
                self.end_request()

    async def route_and_send(self, req: Request, inbound: Inbound, path: str, pool: list[int]) -> Response:
        """Choose a backend and send; on a failure before the first token, choose again without it."""
        errors: list[str] = []
        for attempt in range(self.cfg.retries + 1):
            b = await self.choose(req, pool)
            flight = Flight(req.id, req.prompt_tokens, req.predicted_output, None, req.arrival)
            b.send(flight)
            self.metrics.decisions.labels(b.name).inc()
            try:
                if inbound.stream:
                    return await self.open_stream(b, flight, inbound, path)
                return await self.forward(b, flight, inbound, path)
            except BackendFailed as e:
                errors.append(str(e))
                if e.refused and b.up:
                    self.monitor.set_up(b, False)
                if attempt < self.cfg.retries:
                    self.metrics.retries.labels(b.name).inc()
                pool = [k for k in pool if k != b.idx]
            finally:
                if not (inbound.stream and flight.started):
                    self.finish_flight(b, flight)
            if not pool:
                break
        raise BadRequest(502, "no backend answered: " + "; ".join(errors), "BadGatewayError")

    def finish_flight(self, b: Backend, flight: Flight) -> None:
        """The backend is done with ``flight``: its answer's length updates the running mean a policy may read."""
        b.finish(flight.id)
        if flight.generated:
            self.finished += 1
            self.mean_output += (flight.generated - self.mean_output) / min(self.finished, 1000)
        self.notify()

    def end_request(self) -> None:
        """A client request ended (answered, refused or cut): exactly once per request."""
        self.in_flight -= 1
        self.metrics.in_flight.set(self.in_flight)

    def upstream_body(self, b: Backend, inbound: Inbound) -> dict:
        """The client's body with ``model`` set to the chosen backend's served name."""
        return {**inbound.body, "model": b.model or inbound.model}

    async def forward(self, b: Backend, flight: Flight, inbound: Inbound, path: str) -> Response:
        """A non-streaming request: the backend's whole answer (BackendFailed on a transport error or 5xx)."""
        try:
            r = await self.client.post(f"{b.cfg.url}{path}", json=self.upstream_body(b, inbound),
                                       headers=b.headers())
        except httpx.ReadTimeout:
            raise BadRequest(504, f"backend {b.name!r} did not answer within {self.cfg.timeouts.request_s} s",
                             "GatewayTimeoutError") from None
        except httpx.TransportError as e:
            raise BackendFailed(b, f"{type(e).__name__}: {e}", refused=isinstance(e, httpx.ConnectError)) from None
        if r.status_code >= 500:
            raise BackendFailed(b, f"HTTP {r.status_code}: {r.text[:200]}")
        with contextlib.suppress(ValueError, AttributeError, TypeError, KeyError):
            flight.generated = int(r.json()["usage"]["completion_tokens"])
        return Response(r.content, status_code=r.status_code,
                        media_type=r.headers.get("content-type", "application/json"))

    async def open_stream(self, b: Backend, flight: Flight, inbound: Inbound, path: str) -> Response:
        """Open the upstream stream and wait for its first token: failures up to then may be retried."""
        t = self.cfg.timeouts
        req = self.client.build_request("POST", f"{b.cfg.url}{path}", json=self.upstream_body(b, inbound),
                                        headers=b.headers())
        try:
            resp = await asyncio.wait_for(self.client.send(req, stream=True), t.first_token_s)
        except (TimeoutError, httpx.TransportError) as e:
            raise BackendFailed(b, f"{type(e).__name__}: {e}", refused=isinstance(e, httpx.ConnectError)) from None
        if resp.status_code != 200:
            body = await resp.aread()
            await resp.aclose()
            if resp.status_code >= 500:
                raise BackendFailed(b, f"HTTP {resp.status_code}: {body[:200]!r}")
            return Response(body, status_code=resp.status_code,
                            media_type=resp.headers.get("content-type", "application/json"))
        lines = resp.aiter_lines()
        head: list[str] = []
        try:
            while True:
                line = await asyncio.wait_for(anext(lines), t.first_token_s)
                head.append(line)
                if line.startswith("data:"):
                    break
        except (TimeoutError, StopAsyncIteration, httpx.TransportError, httpx.StreamError) as e:
            await resp.aclose()
            raise BackendFailed(b, f"stream ended before its first token ({type(e).__name__})") from None
        flight.started = True
        self.count_token(flight, head[-1])
        return StreamingResponse(self.relay(b, flight, resp, lines, head), media_type="text/event-stream")

    @staticmethod
    def count_token(flight: Flight, line: str) -> None:
        """An SSE data line is one generated token, except ``[DONE]`` and the chunk that carries a finish reason."""
        if line.startswith("data:") and "[DONE]" not in line and '"finish_reason":"' not in line.replace(" ", ""):
            flight.generated += 1

    async def relay(self, b: Backend, flight: Flight, resp: httpx.Response, lines: AsyncIterator[str],
                    head: list[str]) -> AsyncIterator[str]:
        """Pass the backend's SSE lines through as they come; a backend failure ends the stream cleanly."""
        try:
            for line in head:
                yield line + "\n"
            async for line in lines:
                self.count_token(flight, line)
                yield line + "\n"
        except (httpx.TransportError, httpx.StreamError) as e:
            self.metrics.stream_errors.labels(b.name).inc()
            err = {"error": {"message": f"backend {b.name!r} failed after {flight.generated} tokens "
                                        f"({type(e).__name__}); the answer is incomplete",
                             "type": "BackendStreamError", "code": 502}}
            yield f"data: {json.dumps(err)}\n\ndata: [DONE]\n\n"
        finally:
            await resp.aclose()
            self.finish_flight(b, flight)
            self.end_request()
