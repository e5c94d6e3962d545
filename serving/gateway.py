"""The router's core: one client request from admission to its last byte.

A request is admitted (in-flight and prompt limits), decided on the live ClusterState (serving/tracker.py) by
the configured policy (serving/decider.py; a WAIT holds it and decides again when the state moves), and forwarded
(serving/upstream.py). Failures before the first token (refused connection, timeout, 5xx) and a backend's 429 are
retried on another backend, ``retries`` times at most, that backend excluded for that request (a refused connection
also ejects it until health checks readmit it: serving/monitor.py); a 429 reaches the client only when no backend
is left to try. After the first token a failure or a stall ends the
client's stream with one SSE error event and ``[DONE]``: a half-sent answer cannot be redone elsewhere without
duplicating text. A non-streaming request that times out while the backend works is not retried either (504): the
backend may still be generating.

Two things interrupt an attempt while it waits for a backend: the client leaving (serving/departure.py: the
upstream request is cancelled, so the backend frees its KV cache, and the client's request ends as 499), and the
backend being ejected while the request has produced nothing yet (outlier ejection moves waiting work away from
a frozen backend: the request is retried elsewhere; one that has produced output is never sent again). Both are
counted in ``llmsim_router_aborted_total{reason}``. A client that leaves while its request is held (WAIT) takes it
out of the queue at once (499, never sent to a backend). Every client request ends exactly once (``end_request``),
whichever way it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable

from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from llmsim.errors import ConfigError, LLMSimError
from llmsim.request import Request
from llmsim.routing import DROP, WAIT
from llmsim.serving.config import RouterConfig, config_secrets, redact
from llmsim.serving.decider import Decider
from llmsim.serving.departure import departed
from llmsim.serving.inbound import BadRequest, Inbound
from llmsim.serving.metrics import RouterMetrics
from llmsim.serving.monitor import BackendMonitor
from llmsim.serving.pricing import FIX_KEYS, needs_pricing, prices_backends
from llmsim.serving.tracker import Backend, Flight, cluster_state
from llmsim.serving.upstream import BackendBusy, BackendFailed, Upstream, count_token

HOLD_TICK_S = 0.05  # a held (WAIT) request is decided again at least this often
POLICY_ERRORS_LOGGED = 20  # distinct policy error messages logged (each once); the counter counts them all
log = logging.getLogger(__name__)
# a policy that prices backends by their model (qlm, shepherd, routebalance) could not load one's profile
UNPRICED = re.compile(r"\bno (profile|prior)\b")
PRICING_HINT = ("; give each backend the gpu it runs on and, for a model llmsim does not know by its name, its "
                "llmsim_model (docs/serving.md, 'What a backend is priced as')")
CLIENT_GONE = 499  # nginx's status for a client that left before its answer

__all__ = ["BackendFailed", "ClientGone", "Gateway", "Interrupt", "RelayResponse"]


class ClientGone(Exception):
    """The client left while its request was held or waited for a backend."""


class Interrupt:
    """What may stop one attempt while it waits for its backend: ``fire(reason)`` cancels the waiting task once
    ("client_gone" or "ejected"); after ``close()`` it does nothing (the attempt has moved on)."""

    def __init__(self, task: asyncio.Task) -> None:
        self.task = task
        self.reason: str | None = None
        self.closed = False

    def fire(self, reason: str) -> None:
        if self.reason is None and not self.closed:
            self.reason = reason
            self.task.cancel()

    def close(self) -> None:
        self.closed = True


def watch_client() -> tuple[Interrupt, asyncio.Future]:
    """An Interrupt of the current task that fires "client_gone" when its client leaves, and the watch on the
    client (cancel it, and close the Interrupt, once the task stops waiting)."""
    interrupt = Interrupt(asyncio.current_task())
    gone = asyncio.ensure_future(departed())
    gone.add_done_callback(lambda f: f.cancelled() or interrupt.fire("client_gone"))
    return interrupt, gone


class RelayResponse(StreamingResponse):
    """A relayed stream whose end is reported exactly once (``ended``), even when the client leaves before the
    relay starts (a generator never started runs no ``finally``)."""

    def __init__(self, content: object, ended: Callable[[str | None], None]) -> None:
        super().__init__(content, media_type="text/event-stream")
        self.ended = ended

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with contextlib.suppress(Exception):
                await self.body_iterator.aclose()
            self.ended("client_gone")


class Gateway:
    """The router's live state (backends, in-flight and held requests, its metrics) and its request path."""

    def __init__(self, cfg: RouterConfig, decider: Decider | None = None, quiet: bool = False) -> None:
        """``quiet``: a preflight's gateway, that leaves what it finds to the serving one to say (said once)."""
        self.cfg = cfg
        self.quiet = quiet
        self.decider = decider or Decider(cfg.policy)
        self.metrics = RouterMetrics([b.name for b in cfg.backends])
        self.policy_errors_seen: set[str] = set()
        self.prices = prices_backends(cfg.policy)  # the policy prices each backend by its model and GPU
        self.unpriced_seen: set[tuple[str, str]] = set()  # (backend, model) said unpriceable in the log
        self.t0 = time.monotonic()
        self.changed = asyncio.Event()
        self.monitor = BackendMonitor(cfg, self.metrics, self.now, self.notify, quiet)
        self.backends = self.monitor.backends
        self.upstream = Upstream(cfg, self.metrics)
        self.waiting: dict[int, dict[int, Interrupt]] = {b.idx: {} for b in self.backends}  # no output yet
        self.next_id = 0
        self.in_flight = 0
        self.queued = 0
        self.finished = 0
        self.mean_output = 128.0
        self.start_error: LLMSimError | None = None  # why start() refused (the policy and the backends disagree)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def notify(self) -> None:
        """Something finished, a scrape moved the state or a backend went up or down: wake held requests, and
        move the requests waiting on an ejected backend (nothing produced yet) elsewhere."""
        self.changed.set()
        self.changed = asyncio.Event()
        for k, waiting in self.waiting.items():
            if waiting and not self.backends[k].up:
                for interrupt in list(waiting.values()):
                    interrupt.fire("ejected")

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Discover the backends, check the policy fits them (ConfigError if not), say the ones it cannot price,
        then watch them."""
        client = self.upstream.open(self.cfg.limits.max_in_flight + 4 * len(self.backends))
        await self.monitor.discover_all(client)
        missing = [b.name for b in self.backends if not b.model]
        if missing and self.cfg.policy.onnx is not None:
            raise ConfigError(f"backends {missing}: model unknown (down at start and no 'model' in the config); an "
                              "exported policy needs every backend's model to check it was trained for them")
        self.decider.check_backends([b.policy_model for b in self.backends],
                                    [b.policy_model for b in self.backends if b.cfg.model_spec is None])
        for b in () if self.quiet else self.backends:
            if b.model:  # (one down at start is checked once it is up and its model known)
                self.priced(b)
        self.monitor.watch()

    async def stop(self) -> None:
        await self.monitor.stop()
        await self.upstream.close()

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
        watch: tuple[Interrupt, asyncio.Future] | None = None  # the client's departure, watched while held
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
                    watch = watch_client()
                left = deadline - self.now()
                if left <= 0:
                    raise BadRequest(503, f"held by the routing policy for over {self.cfg.limits.max_wait_s} s",
                                     "ServiceUnavailableError")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.changed.wait(), min(HOLD_TICK_S, left))
        except asyncio.CancelledError:
            if watch is None or watch[0].reason is None:
                raise
            watch[0].task.uncancel()
            raise ClientGone from None  # left while held: out of the queue, never sent to a backend
        finally:
            if self.decider.forget(req.id):  # the policy held it and forgot all: the others held are decided again
                self.notify()
            if watch is not None:
                watch[0].close()
                watch[1].cancel()
            if held:
                self.queued -= 1
                self.metrics.queued.set(self.queued)

    def decide(self, req: Request, healthy: list[int], held: bool) -> int:
        """One decision on the live state: an index of ``healthy`` or WAIT. The policy's DROP is a 503; its choice
        of a backend outside ``healthy`` goes to the least loaded healthy one instead (counted)."""
        t = time.perf_counter()
        if self.prices and not all([self.priced(self.backends[k]) for k in healthy]):
            self.metrics.unpriced_decisions.inc()  # (the policy would fail: no need to ask it)
            self.metrics.decision_latency.observe(time.perf_counter() - t)
            return self.least_loaded(healthy)
        state = cluster_state(self.backends, self.now(), self.queued + (0 if held else 1), self.next_id,
                              self.mean_output)
        try:
            d = self.decider.decide(req, state, healthy)
        except LLMSimError as e:  # e.g. a quality-aware rule on a request without per-model qualities
            self.policy_failed(e)
            return self.least_loaded(healthy)
        finally:
            self.metrics.decision_latency.observe(time.perf_counter() - t)
        if d == DROP:
            raise BadRequest(503, "rejected by the routing policy (drop); retry later", "ServiceUnavailableError")
        if d != WAIT and d not in healthy:
            self.metrics.fallbacks.inc()
            d = self.least_loaded(healthy)
        return d

    def priced(self, b: Backend) -> bool:
        """Whether a policy that prices backends by their model can price ``b`` (resolved once per model name); if
        not, said once in one log line: which backend, why, and the keys that fix it."""
        if not self.prices:
            return True
        p = b.pricing if needs_pricing(self.cfg.policy, b.policy_model) else None
        ok = p is None or p.priced
        self.metrics.unpriced.labels(b.name).set(0 if ok else 1)
        if p is not None and not ok and (b.name, p.model) not in self.unpriced_seen:
            self.unpriced_seen.add((b.name, p.model))
            text = redact(p.problem, config_secrets(self.cfg))
            table = " (or a policy.kwargs.static_tpot_ms entry for its model)" \
                if self.cfg.policy.heuristic == "routebalance" else ""
            log.warning("backend %s (model %r): policy %s cannot price it (%s); decisions while it is healthy go to "
                        "the least loaded healthy backend, counted in llmsim_router_unpriced_decisions_total; give "
                        "backends[%d] its %s%s (docs/serving.md, 'What a backend is priced as')", b.name, p.model,
                        self.cfg.policy.heuristic, text, b.idx, FIX_KEYS, table)
        return ok

    def least_loaded(self, healthy: list[int]) -> int:
        return min(healthy, key=lambda k: self.backends[k].instance_state().num_requests)

    def policy_failed(self, e: LLMSimError) -> None:
        """A decision the policy could not make: counted, and logged once for each kind of message (a rule that
        cannot work on live requests fails at every decision; the log says why once, the counter how often)."""
        self.metrics.policy_errors.inc()
        text = redact(str(e).replace("\n", " "), config_secrets(self.cfg))
        kind = re.sub(r"\d+", "#", text)  # the same failure of another request (its id) is not logged again
        if kind not in self.policy_errors_seen and len(self.policy_errors_seen) < POLICY_ERRORS_LOGGED:
            self.policy_errors_seen.add(kind)
            hint = PRICING_HINT if UNPRICED.search(text) else ""
            log.warning("the routing policy failed (%s: %s); such decisions go to the least loaded healthy backend, "
                        "counted in llmsim_router_policy_errors_total%s", type(e).__name__, text[:300], hint)

    async def handle(self, inbound: Inbound, path: str) -> Response:
        """Route and forward one validated client request; the response (streaming or not) or a BadRequest. A
        client that leaves meanwhile gets (nobody reads it) a 499."""
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
        req = Request(rid, self.now(), inbound.prompt_tokens, inbound.max_tokens or max(1, round(self.mean_output)),
                      outputs_by_model=inbound.outputs_by_model, quality_by_model=inbound.quality_by_model)
        self.in_flight += 1
        self.metrics.in_flight.set(self.in_flight)
        handed_over = False
        try:
            resp = await self.route_and_send(req, inbound, path, pool)
            handed_over = isinstance(resp, RelayResponse)
            return resp
        except ClientGone:
            return Response(status_code=CLIENT_GONE)
        finally:
            if not handed_over:
                self.end_request()

    async def route_and_send(self, req: Request, inbound: Inbound, path: str, pool: list[int]) -> Response:
        """Choose a backend and send; on a failure or a 429 before the first token, choose again without it."""
        errors: list[str] = []
        busy: Response | None = None  # the last backend's 429, passed on if no backend serves the request
        for attempt in range(self.cfg.retries + 1):
            b = await self.choose(req, pool)
            flight = Flight(req.id, req.prompt_tokens, req.predicted_output, None, req.arrival)
            b.send(flight)
            self.metrics.decisions.labels(b.name).inc()
            try:
                return await self.attempt(b, flight, inbound, path)
            except BackendFailed as e:
                errors.append(str(e))
                if isinstance(e, BackendBusy):  # refused before doing any work: busy, not failed
                    self.metrics.rate_limited.labels(b.name).inc()
                    busy = e.answer
                else:
                    self.metrics.failures.labels(b.name).inc()
                    if e.refused and b.up:
                        self.monitor.set_up(b, False)
                pool = [k for k in pool if k != b.idx]
                if attempt < self.cfg.retries and pool:  # (a retry only if a backend is left to try)
                    self.metrics.retries.labels(b.name).inc()
            finally:
                if not flight.started:
                    self.finish_flight(b, flight)
            if not pool:
                break
        if busy is not None:
            return busy
        raise BadRequest(502, "no backend answered: " + "; ".join(errors), "BadGatewayError")

    async def attempt(self, b: Backend, flight: Flight, inbound: Inbound, path: str) -> Response:
        """One try on ``b``: its whole answer, or its stream once the first token is in. Interrupted while it
        waits if the client leaves (ClientGone) or ``b`` is ejected (BackendFailed: the request goes elsewhere)."""
        interrupt, gone = watch_client()
        waiting = self.waiting[b.idx]
        waiting[flight.id] = interrupt
        body = inbound.upstream_content(b.model or inbound.model)
        try:
            if not inbound.stream:
                return await self.upstream.whole(b, flight, body, path)
            got = await self.upstream.first_token(b, body, path)
        except asyncio.CancelledError:
            if interrupt.reason is None:
                raise
            interrupt.task.uncancel()
            if interrupt.reason == "client_gone":
                self.metrics.aborted.labels("client_gone").inc()
                raise ClientGone from None
            self.metrics.aborted.labels("ejected").inc()
            raise BackendFailed(b, "ejected (failed health checks) before its first token") from None
        finally:
            interrupt.close()
            waiting.pop(flight.id, None)
            gone.cancel()
        if isinstance(got, Response):
            return got
        resp, lines, head = got
        flight.started = True
        count_token(flight, head[-1])
        ended = self.stream_end(b, flight)
        return RelayResponse(self.upstream.relay(b, flight, resp, lines, head, ended), ended)

    def stream_end(self, b: Backend, flight: Flight) -> Callable[[str | None], None]:
        """What runs once when a relayed stream ends: the abort counted by reason (stall, client_gone), the
        flight finished, the client request ended."""
        done = False

        def ended(reason: str | None) -> None:
            nonlocal done
            if done:
                return
            done = True
            if reason is not None:
                self.metrics.aborted.labels(reason).inc()
            self.finish_flight(b, flight)
            self.end_request()

        return ended

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
