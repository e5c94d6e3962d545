"""The live router with peers that leave, freeze or crawl: a client that leaves a non-streaming request cancels it
at the backend; a frozen backend's waiting requests move elsewhere (and none is served twice); a stream that stalls
after its first token ends with the SSE error event; slow clients lose their connections. Freezes block an emulator's
event loop (``ServerThread.freeze``), as SIGSTOP stops a process. Wall time only bounds hangs, generously."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest

pytest.importorskip("fastapi", reason="the serving extra is not installed: pip install 'llmsim[serve]'")

import httpx  # noqa: E402

from llmsim.emulator import start_emulator  # noqa: E402
from llmsim.routing import WAIT, Router, register_router  # noqa: E402
from llmsim.serving.runner import start_router  # noqa: E402
from tests.serving.helpers import one, router_cfg, samples  # noqa: E402

pytestmark = pytest.mark.timeout(120)
HANG_S = 30.0  # a bound on waits for an event, far above what each takes


@register_router
class FirstUp(Router):
    """The first backend the router may use (b0 while it is up): requests go where the test wants them."""

    name = "test_first_up"

    def route(self, req, view) -> int:
        return view.candidates(req)[0]


@register_router
class HoldForever(Router):
    """Holds every request (WAIT): it stays in the router's queue until it leaves or ``max_wait_s`` passes."""

    name = "test_hold_forever"

    def route(self, req, view) -> int:
        return WAIT


def fast_health(urls: list[str], **kw) -> dict:
    """A router that ejects a backend after two health checks unanswered for 1 s (a frozen one within ~2.2 s: time
    enough for a test's requests to reach it first, even on a loaded machine)."""
    cfg = router_cfg(urls, {"heuristic": "test_first_up"}, **kw)
    cfg["timeouts"] = {**cfg["timeouts"], "scrape_s": 1.0}
    return cfg


def wait_for(what, message: str) -> None:
    """Poll until ``what()``; a hang is bounded by pytest-timeout (``message`` says what was awaited)."""
    while not what():
        time.sleep(0.01)


def counted(url: str, name: str) -> dict:
    return samples(httpx.get(url + "/metrics", timeout=10).text, name)


def send_and_leave(url: str, body: dict, ready) -> None:
    """Send a non-streaming request on a raw connection and close it once ``ready()`` (the request is in work)."""
    host, port = url.removeprefix("http://").split(":")
    raw = json.dumps(body).encode()
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  b"content-length: %d\r\n\r\n%s" % (len(raw), raw))
        wait_for(ready, "the request never reached the backend")


def closed_by_peer(s: socket.socket) -> bool:
    """Read until the peer closes (EOF or reset); a socket timeout (HANG_S) raises instead."""
    with s:
        try:
            while s.recv(4096):
                pass
        except ConnectionResetError:
            pass
    return True


def test_a_client_that_leaves_a_non_streaming_request_cancels_it_at_the_backend() -> None:
    """At 1x a 3,000-token answer takes ~40 s: the abort comes from the departure, not from the answer's end."""
    slow = start_emulator("llama-3.1-8b", "a100-80gb", speedup=1.0)
    try:
        with start_router(router_cfg([slow.url], {"heuristic": "jsq"})) as r:
            body = {"model": "llmsim-router", "prompt": "x" * 400, "max_tokens": 3000}
            send_and_leave(r.url, body, lambda: any(t.req.generated > 0 for t in slow.engine.tickets.values()))
            wait_for(lambda: slow.engine.success["abort"] == 1 and not slow.engine.tickets,
                     "the backend kept generating for a client that left")
            wait_for(lambda: r.gateway.in_flight == 0, "the router kept the request")
            assert counted(r.url, "llmsim_router_aborted_total") == {(("reason", "client_gone"),): 1.0}
            codes = counted(r.url, "llmsim_router_requests_total")
            assert codes == {(("code", "499"), ("endpoint", "/v1/completions")): 1.0}, codes
            assert slow.engine.success["length"] == 0 and not r.gateway.backends[0].flights
    finally:
        slow.stop()


def test_a_client_that_leaves_while_its_request_is_held_leaves_the_queue_at_once() -> None:
    """Held by a WAIT policy for up to 30 s: the departure ends it at once (499, never routed); without that the
    hold would end at max_wait_s as a 503 nobody reads."""
    h = start_emulator("llama-3.1-8b", "a100-80gb", speedup=20.0)
    try:
        cfg = router_cfg([h.url], {"heuristic": "test_hold_forever"}, limits={"max_wait_s": 30})
        with start_router(cfg) as r:
            body = {"model": "llmsim-router", "prompt": "x" * 40, "max_tokens": 8}
            send_and_leave(r.url, body, lambda: r.gateway.queued == 1)
            wait_for(lambda: r.gateway.in_flight == 0, "the router kept the held request")
            codes = counted(r.url, "llmsim_router_requests_total")
            assert codes == {(("code", "499"), ("endpoint", "/v1/completions")): 1.0}, codes
            assert r.gateway.queued == 0 and counted(r.url, "llmsim_router_queued") == {(): 0.0}
            assert counted(r.url, "llmsim_router_decisions_total") == {(("backend", "b0"),): 0.0}
            assert counted(r.url, "llmsim_router_aborted_total") == {}  # no upstream request to cancel
            assert sum(h.engine.success.values()) == 0 and not h.engine.tickets
    finally:
        h.stop()


def test_a_frozen_backend_s_waiting_requests_move_and_none_is_served_twice() -> None:
    a = start_emulator("llama-3.1-8b", "a100-80gb", speedup=20.0, seed=1)
    b = start_emulator("llama-3.1-8b", "a100-80gb", speedup=20.0, seed=2)
    try:
        with start_router(fast_health([a.url, b.url])) as r:
            gw = r.gateway
            a.freeze(6.0)  # accepts connections, answers nothing (its event loop is stopped)

            async def two() -> list[dict]:
                async with httpx.AsyncClient(timeout=HANG_S) as c:
                    return await asyncio.gather(one(c, r.url, 0, stream=True, chat=True, max_tokens=400),
                                                one(c, r.url, 1, stream=False, chat=False, max_tokens=400))

            # 400 tokens last ~0.15 s at 20x: after its thaw the frozen backend reads the departures long before
            results = asyncio.run(two())
            assert [(x["status"], x["tokens"], x["error"]) for x in results] == [(200, 400, None)] * 2
            assert counted(r.url, "llmsim_router_aborted_total") == {(("reason", "ejected"),): 2.0}
            sent = counted(r.url, "llmsim_router_decisions_total")
            assert sent == {(("backend", "b0"),): 2.0, (("backend", "b1"),): 2.0}  # once each, then moved once
            assert b.engine.success["length"] == 2 and gw.in_flight == 0
            wait_for(lambda: httpx.get(a.url + "/health", timeout=HANG_S).status_code == 200, "no thaw")
            wait_for(lambda: not a.engine.tickets, "the frozen backend kept requests nobody waits for")
            assert a.engine.success["length"] == 0  # what it got while frozen was cancelled, never answered
    finally:
        a.stop()
        b.stop()


def test_a_stream_that_stalls_after_its_first_token_ends_cleanly_and_is_not_sent_again() -> None:
    a = start_emulator("llama-3.1-8b", "a100-80gb", speedup=2.0, seed=1)
    b = start_emulator("llama-3.1-8b", "a100-80gb", speedup=20.0, seed=2)
    try:
        cfg = fast_health([a.url, b.url])
        cfg["timeouts"]["stall_s"] = 0.5
        with start_router(cfg) as r:
            body = {"model": "llmsim-router", "prompt": "x" * 100, "max_tokens": 2000, "stream": True}
            seen: list[str] = []
            with httpx.stream("POST", r.url + "/v1/completions", json=body, timeout=HANG_S) as resp:
                for line in resp.iter_lines():
                    seen.append(line)
                    if len(seen) == 3:
                        a.freeze(3.0)
            events = [json.loads(x[6:]) for x in seen if x.startswith("data: {")]
            err = events[-1]["error"]
            assert err["code"] == 504 and "stalled" in err["message"] and [x for x in seen if x][-1] == "data: [DONE]"
            assert 1 <= len(events) - 1 < 2000
            assert counted(r.url, "llmsim_router_aborted_total") == {(("reason", "stall"),): 1.0}
            assert counted(r.url, "llmsim_router_decisions_total") == {(("backend", "b0"),): 1.0,
                                                                       (("backend", "b1"),): 0.0}
            assert b.engine.success["length"] == 0 and r.gateway.in_flight == 0
    finally:
        a.stop()
        b.stop()


def test_slow_clients_lose_their_connections_at_the_read_deadlines() -> None:
    h = start_emulator("llama-3.1-8b", "a100-80gb", speedup=20.0)
    try:
        limits = {"header_read_s": 0.3, "body_read_s": 0.3, "idle_s": 0.3}
        with start_router(router_cfg([h.url], {"heuristic": "jsq"}, limits=limits)) as r:
            port = r.port
            starts = [b"", b"POST /v1/completions HTTP/1.1\r\nhost: x\r\n",
                      b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"model\":"]
            socks = [socket.create_connection(("127.0.0.1", port), timeout=HANG_S) for _ in range(3 * len(starts))]
            for i, s in enumerate(socks):
                s.sendall(starts[i % len(starts)])
            assert all(closed_by_peer(s) for s in socks)  # each within the deadlines (0.3 s), or a timeout error
            ok = httpx.post(r.url + "/v1/completions", json={"model": "llmsim-router", "prompt": "hi", "max_tokens": 2},
                            timeout=HANG_S)
            assert ok.status_code == 200
    finally:
        h.stop()
