"""The emulator and departing clients: a non-streaming client that leaves while tokens flow aborts its request
(no polling that only runs after a pause in tokens), a chat stream says nothing before its first token (as vLLM),
and the server's writes of one loop turn leave as one. Wall time only bounds hangs, generously."""

from __future__ import annotations

import asyncio
import json
import socket
import time

from llmsim.emulator import EmulatorHandle, start_emulator
from llmsim.emulator.app import Answer, create_app, stream_tokens
from llmsim.emulator.engine import EmulatorOptions, RealTimeEngine, Ticket
from llmsim.http_server import CoalescingTransport
from llmsim.request import Request
from tests.emulator.helpers import MODEL, metrics, sample, wait_until_idle


def leave_when(h: EmulatorHandle, body: dict, ready) -> None:
    """Send a non-streaming request on a raw connection; close it once ``ready()``."""
    raw = json.dumps(body).encode()
    with socket.create_connection((h.host, h.port), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  b"content-length: %d\r\n\r\n%s" % (len(raw), raw))
        while not ready():  # a hang is bounded by pytest-timeout
            time.sleep(0.005)


def test_a_non_streaming_client_that_leaves_while_tokens_flow_aborts_its_request() -> None:
    """20,000 tokens at 20x last ~15 s, with a token every few ms: a disconnect check that waits for a pause in
    tokens never runs; the departure is read as it happens instead."""
    with start_emulator(MODEL, "a100-80gb", speedup=20.0) as h:
        before = metrics(h)
        body = {"model": MODEL, "prompt": "q" * 100, "max_tokens": 20000}
        leave_when(h, body, lambda: any(t.available >= 20 for t in list(h.engine.tickets.values())))
        m = wait_until_idle(h)
        ok = "vllm:request_success_total"
        assert sample(m, ok, finished_reason="abort") == sample(before, ok, finished_reason="abort") + 1
        assert sample(m, ok, finished_reason="length") == sample(before, ok, finished_reason="length")
        assert sample(m, "vllm:generation_tokens_total") - sample(before, "vllm:generation_tokens_total") < 10_000


class NoAbort:
    def abort(self, t) -> None:  # noqa: ANN001 - the engine's abort, not expected here
        raise AssertionError("aborted")


def test_a_chat_stream_sends_its_role_chunk_with_the_first_token() -> None:
    """A router may retry a stream elsewhere until its first data line: the emulator must not send one before
    the engine has produced a token (vLLM sends the role with the first output)."""
    async def scenario() -> tuple[bool, list[str]]:
        t = Ticket("1", Request(1, 0.0, 10, 3), max_tokens=3, seed=7)
        ans = Answer(t, chat=True, model=MODEL)
        gen = stream_tokens(NoAbort(), t, ans, include_usage=False)  # type: ignore[arg-type]
        first = asyncio.ensure_future(anext(gen))
        await asyncio.sleep(0.05)
        early = first.done()
        t.available = 2
        t.event.set()
        out = [await first]
        t.available, t.done = 3, True
        t.event.set()
        out += [x async for x in gen]
        return early, out

    early, out = asyncio.run(scenario())
    assert not early, "a data line went out before any token"
    events = [json.loads(line[6:]) for chunk in out for line in chunk.splitlines() if line.startswith("data: {")]
    deltas = [e["choices"][0]["delta"] for e in events]
    assert deltas[0] == {"role": "assistant", "content": ""} and all("content" in d for d in deltas[1:3])
    assert out[0].count("data: ") == 3  # the role and the first two tokens in one write
    assert out[-1] == "data: [DONE]\n\n"


class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


def test_writes_of_one_loop_turn_leave_as_one_and_close_flushes_first() -> None:
    async def scenario() -> FakeTransport:
        raw = FakeTransport()
        t = CoalescingTransport(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
        t.write(b"HTTP/1.1 200 OK\r\n\r\n")
        t.write(b"body")
        assert raw.writes == [] and t.get_extra_info("peername") == "info:peername"
        await asyncio.sleep(0)
        t.write(b"tail")
        t.close()
        return raw

    raw = asyncio.run(scenario())
    assert raw.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody", b"tail"] and raw.closed


def test_a_stream_whose_client_left_before_its_first_byte_went_out_is_aborted() -> None:
    """The response head waits for a paused transport (a client that stopped reading an earlier answer on the
    same connection) and the client leaves: Starlette cancels the response before the token generator ever
    started, so no ``finally`` of the generator can abort the request; the response itself must."""
    async def scenario() -> tuple[int, int]:
        app = create_app(EmulatorOptions(model=MODEL, gpu="a100-80gb", speedup=20.0))
        engine = app.state.engine
        body = json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 100_000, "stream": True}).encode()
        messages = [{"type": "http.request", "body": body, "more_body": False}]
        gone = asyncio.Event()

        async def receive() -> dict:
            if messages:
                return messages.pop(0)
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                gone.set()  # the client leaves while the head waits for the transport to drain
                await asyncio.sleep(3600)  # (cancelled by the disconnect)

        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": "/v1/completions", "raw_path": b"/v1/completions",
                 "query_string": b"", "root_path": "", "headers": [(b"content-type", b"application/json")],
                 "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2)}
        await app(scope, receive, send)
        for _ in range(500):  # an aborted running request leaves at its next token: a few driver wake-ups
            if not engine.tickets:
                break
            await asyncio.sleep(0.01)
        left, aborted = len(engine.tickets), engine.success["abort"]
        engine.stop()
        return left, aborted

    left, aborted = asyncio.run(scenario())
    assert left == 0 and aborted == 1, (left, aborted)


def test_an_engine_never_started_stops_outside_an_event_loop() -> None:
    engine = RealTimeEngine(EmulatorOptions(model=MODEL, gpu="a100-80gb"))
    engine.stop()  # (it brought the engine up to date first, which needs the loop it never had)
    assert engine.stopped
