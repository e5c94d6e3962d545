"""The live router's limits and fault paths: policies that hold (WAIT) or drop, the in-flight and queue limits,
a backend that comes back after being ejected, and bearer tokens towards backends."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("fastapi", reason="the serving extra is not installed: pip install 'llmsim[serve]'")

import httpx  # noqa: E402

from llmsim.emulator import start_emulator  # noqa: E402
from llmsim.routing import DROP, WAIT, Router, register_router  # noqa: E402
from llmsim.serving.runner import start_router  # noqa: E402
from tests.serving.helpers import router_cfg, samples  # noqa: E402

pytestmark = pytest.mark.timeout(120)
BODY = {"model": "llmsim-router", "prompt": "hello", "max_tokens": 4}


@register_router
class HoldThenFirst(Router):
    """WAIT for the first ``holds`` decisions, then the first candidate (or DROP with ``drop``)."""

    name = "test_hold_then_first"

    def __init__(self, seed: int = 0, holds: int = 0, drop: bool = False, **kw) -> None:
        super().__init__(seed, **kw)
        self.holds, self.drop, self.calls = holds, drop, 0

    def route(self, req, view) -> int:
        self.calls += 1
        if self.drop:
            return DROP
        return WAIT if self.calls <= self.holds else view.candidates(req)[0]


@pytest.fixture
def backend():
    h = start_emulator("llama-3.1-8b", "a100-80gb", speedup=20.0)
    yield h
    h.stop()


def policy(**kw) -> dict:
    return {"heuristic": "test_hold_then_first", "kwargs": kw}


def test_a_held_request_is_decided_again_and_served(backend) -> None:
    # held for at most 5 s: a 200 means the WAITs were decided again promptly (no wall-clock assertion)
    with start_router(router_cfg([backend.url], policy(holds=3), limits={"max_wait_s": 5})) as r:
        resp = httpx.post(r.url + "/v1/completions", json=BODY, timeout=30)
        assert resp.status_code == 200, resp.text
        text = httpx.get(r.url + "/metrics").text
        assert samples(text, "llmsim_router_decision_latency_seconds_count")[()] == 4  # 3 WAITs, then routed
        assert samples(text, "llmsim_router_queued")[()] == 0


def test_hold_limits_and_drop_are_clear_errors(backend) -> None:
    cases = [(policy(holds=10**9), {"max_wait_s": 0.3}, 503, "held by the routing policy"),
             (policy(holds=10**9), {"max_queue": 0}, 429, "too many requests held"),
             (policy(drop=True), {}, 503, "rejected by the routing policy")]
    for pol, limits, code, needle in cases:
        with start_router(router_cfg([backend.url], pol, limits=limits)) as r:
            resp = httpx.post(r.url + "/v1/completions", json=BODY, timeout=30)
            assert resp.status_code == code and needle in resp.json()["error"]["message"], resp.text


def test_in_flight_limit_is_429(backend) -> None:
    slow = start_emulator("llama-3.1-8b", "a100-80gb", speedup=1.0)
    try:
        with start_router(router_cfg([slow.url], {"heuristic": "jsq"}, limits={"max_in_flight": 1})) as r, \
                httpx.stream("POST", r.url + "/v1/completions", timeout=30,
                             json={**BODY, "max_tokens": 300, "stream": True}) as first:
            lines = first.iter_lines()  # kept: a dropped iterator closes the stream (the client goes away)
            next(lines)  # the first request is streaming
            second = httpx.post(r.url + "/v1/completions", json=BODY, timeout=30)
            assert second.status_code == 429 and "in flight" in second.json()["error"]["message"]
    finally:
        slow.stop()


def test_an_ejected_backend_is_readmitted_when_it_comes_back() -> None:
    a = start_emulator("llama-3.1-8b", "a100-80gb", speedup=20.0)
    b = start_emulator("llama-3.1-8b", "a100-80gb", speedup=20.0)
    port = b.port
    try:
        with start_router(router_cfg([a.url, b.url], {"heuristic": "round_robin"})) as r:
            b.stop()

            def up() -> list[str]:
                return httpx.get(r.url + "/health").json()["healthy"]

            while up() != ["b0"]:  # a hang is bounded by pytest-timeout
                time.sleep(0.05)
            assert up() == ["b0"]
            for _ in range(4):  # all to the healthy one meanwhile
                assert httpx.post(r.url + "/v1/completions", json=BODY, timeout=30).status_code == 200
            b = start_emulator("llama-3.1-8b", "a100-80gb", speedup=20.0, port=port)  # back on its address
            while up() != ["b0", "b1"]:
                time.sleep(0.05)
            assert up() == ["b0", "b1"]
            before = samples(httpx.get(r.url + "/metrics").text, "llmsim_router_decisions_total")
            for _ in range(4):
                assert httpx.post(r.url + "/v1/completions", json=BODY, timeout=30).status_code == 200
            after = samples(httpx.get(r.url + "/metrics").text, "llmsim_router_decisions_total")
            assert after[(("backend", "b1"),)] - before[(("backend", "b1"),)] == 2  # round robin again
    finally:
        a.stop()
        b.stop()


def test_backend_bearer_tokens() -> None:
    h = start_emulator("llama-3.1-8b", "a100-80gb", speedup=20.0, api_key="backend-secret")
    try:
        cfg = router_cfg([h.url], {"heuristic": "jsq"})
        cfg["backends"][0]["api_key"] = "backend-secret"
        with start_router(cfg) as r:
            assert httpx.post(r.url + "/v1/completions", json=BODY, timeout=30).status_code == 200
        cfg["backends"][0]["api_key"] = "wrong"
        with start_router(cfg) as r:  # the backend refuses the router: never admitted, a clear 503
            resp = httpx.post(r.url + "/v1/completions", json=BODY, timeout=30)
            assert resp.status_code == 503 and "no healthy backend" in resp.json()["error"]["message"]
    finally:
        h.stop()


def test_a_client_that_leaves_mid_stream_frees_the_backend() -> None:
    slow = start_emulator("llama-3.1-8b", "a100-80gb", speedup=1.0)
    try:
        with start_router(router_cfg([slow.url], {"heuristic": "jsq"})) as r:
            with httpx.stream("POST", r.url + "/v1/completions", timeout=30,
                              json={**BODY, "max_tokens": 300, "stream": True}) as resp:
                lines = resp.iter_lines()
                next(lines)
            while True:  # the router closes its upstream stream: the engine aborts it (pytest-timeout bounds this)
                aborted = samples(httpx.get(slow.url + "/metrics").text, "vllm:request_success_total")
                if any(("finished_reason", "abort") in k and v == 1 for k, v in aborted.items()):
                    break
                time.sleep(0.05)
            assert any(("finished_reason", "abort") in k and v == 1 for k, v in aborted.items()), aborted
            assert r.gateway.in_flight == 0 and not r.gateway.backends[0].flights
    finally:
        slow.stop()
