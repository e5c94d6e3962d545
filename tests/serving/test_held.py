"""Requests a central-queue policy (edf, qlm, shepherd) holds (WAIT) that leave the router without the policy
routing them: released elsewhere, timed out, or their client gone. The policy must not keep them."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("fastapi", reason="the serving extra is not installed: pip install 'llmsim[serve]'")

from llmsim.errors import LLMSimError  # noqa: E402
from llmsim.request import Request  # noqa: E402
from llmsim.routing import WAIT  # noqa: E402
from llmsim.serving import decider as decider_module  # noqa: E402
from llmsim.serving.config import parse_config  # noqa: E402
from llmsim.serving.gateway import Gateway  # noqa: E402
from llmsim.serving.inbound import BadRequest  # noqa: E402
from llmsim.serving.tracker import Flight  # noqa: E402

pytestmark = pytest.mark.timeout(60)
BUSY = 300  # flights that fill a backend's queue: the policies hold new work


def gateway(policy: str, models: list[str], max_wait_s: float = 5.0) -> Gateway:
    """A gateway over backends serving ``models`` on A100s (none up yet), without a network."""
    cfg = parse_config({"backends": [{"name": f"b{i}", "url": f"http://127.0.0.1:{9001 + i}", "gpu": "a100-80gb"}
                                     for i in range(len(models))],
                        "policy": {"heuristic": policy}, "limits": {"max_wait_s": max_wait_s}})
    gw = Gateway(cfg, quiet=True)
    for b, m in zip(gw.backends, models, strict=True):
        b.model = m
    return gw


async def held_then_backend_up(gw: Gateway, timeout_s: float | None = None) -> str:
    """A request held while b0 (filled) is the only healthy backend, then b1 comes up: where the request went."""
    gw.backends[0].up = True
    fill(gw, 0)
    task = asyncio.ensure_future(gw.choose(Request(0, gw.now(), 100, 10), [0, 1]))
    await asyncio.sleep(0.2)
    assert not task.done() and gw.queued == 1
    gw.monitor.set_up(gw.backends[1], True)
    return (await asyncio.wait_for(task, timeout_s)).name


def fill(gw: Gateway, k: int) -> None:
    for j in range(BUSY):
        gw.backends[k].send(Flight(10_000 + j, 100, 10, None, 0.0))


@pytest.mark.parametrize("policy", ["shepherd", "qlm"])
def test_a_held_request_released_to_an_unpriced_backend_that_came_up_is_not_kept_by_the_policy(policy) -> None:
    """A request held while the only healthy backend was busy goes to a backend the policy cannot price once it
    is up (the least loaded): the policy, bypassed, kept it in its queue for ever."""
    gw = gateway(policy, ["llama-3.1-8b", "my-finetune"])

    assert asyncio.run(held_then_backend_up(gw, timeout_s=10)) == "b1"
    assert not gw.decider.router._held  # the policy's own queue (a test may look inside)
    assert gw.queued == 0 and not gw.decider.holding


@pytest.mark.parametrize("policy", ["edf", "shepherd"])
def test_a_held_request_goes_to_a_backend_that_came_up_while_it_waited(policy) -> None:
    """A policy takes a held request's candidates when it admits it: a backend that came up later (idle) was
    never offered it, and the request waited for the busy one until it timed out (503)."""
    gw = gateway(policy, ["llama-3.1-8b", "llama-3.1-8b"], max_wait_s=3.0)
    assert asyncio.run(held_then_backend_up(gw)) == "b1"
    assert gw.queued == 0 and not gw.decider.holding


@pytest.mark.parametrize("policy", ["edf", "qlm"])
@pytest.mark.parametrize("leaves", ["timed out", "client gone"])
def test_a_request_that_left_while_held_does_not_hold_the_next_ones(policy, leaves) -> None:
    """A held request that timed out (503) or whose client left stayed at the head of the policy's queue: every
    later request was held behind it, however free the backend, until it timed out too."""
    gw = gateway(policy, ["llama-3.1-8b"], max_wait_s=0.3 if leaves == "timed out" else 5.0)

    async def run() -> str:
        gw.backends[0].up = True
        fill(gw, 0)
        first = asyncio.ensure_future(gw.choose(Request(0, gw.now(), 100, 10), [0]))
        await asyncio.sleep(0.1)
        assert not first.done()
        if leaves == "client gone":
            first.cancel()
        with pytest.raises((BadRequest, asyncio.CancelledError)):
            await first
        for j in range(BUSY - 1):  # one left running: room for the next request
            gw.backends[0].finish(10_000 + j)
        gw.notify()
        return (await asyncio.wait_for(gw.choose(Request(1, gw.now(), 100, 10), [0]), 10)).name

    assert asyncio.run(run()) == "b0"
    assert gw.queued == 0 and not gw.decider.holding


class Failing:
    """A policy that never holds and fails its decisions (a quality rule on requests without hints, say)."""

    def __init__(self) -> None:
        self.resets = 0

    def route(self, req, view) -> int:  # noqa: ANN001
        raise LLMSimError("no qualities")

    def reset(self, seed=None) -> None:  # noqa: ANN001
        self.resets += 1


def test_a_policy_that_never_holds_is_never_reset() -> None:
    """Only a policy that keeps a central queue (it has answered WAIT) is reset when a request it may hold leaves:
    another's state (a prefix tree, a round-robin turn) is never wiped by its failed decisions."""
    gw = gateway("round_robin", ["llama-3.1-8b"])
    gw.decider.router = policy = Failing()
    gw.backends[0].up = True
    for i in range(3):
        assert asyncio.run(gw.choose(Request(i, gw.now(), 100, 10), [0])).name == "b0"
    assert policy.resets == 0 and not gw.decider.holding


class _HoldingExport:
    """An exported policy's stand-in: answers WAIT, remembers what it saw, counts its resets."""

    def __init__(self) -> None:
        self.resets = 0

    def route(self, req, view) -> int:
        return WAIT

    def reset(self, seed=None) -> None:
        self.resets += 1


def test_an_exported_policy_that_answers_wait_is_never_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ONNX policy's WAIT leaves the request with the gateway: resetting it when a held request was decided over
    other backends, or left, wiped its predictions for the requests in flight, and a live WorkloadRouter export then
    sent a whole burst to one backend."""
    fake = _HoldingExport()
    monkeypatch.setattr(decider_module, "make_router", lambda *a, **k: fake)
    monkeypatch.setattr(decider_module, "StateView", lambda state, allowed: None)
    backends = [{"name": f"b{i}", "url": f"http://127.0.0.1:{9001 + i}"} for i in range(2)]
    d = decider_module.Decider(parse_config({"backends": backends, "policy": {"onnx": "some/export"}}).policy)
    req = Request(id=1, arrival=0.0, prompt_tokens=10, output_tokens=5)
    assert d.decide(req, None, [0, 1]) == WAIT
    assert d.decide(req, None, [1]) == WAIT  # decided over other backends than when it was held
    assert not d.forget(1) and fake.resets == 0
