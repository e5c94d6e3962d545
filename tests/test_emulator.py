"""The emulated vLLM backend (llmsim.emulator): HTTP API, token timing against the engine, batching, metrics,
errors, auth, the CLI, and stopping with open streams. Loopback only; every test takes a few seconds at most."""

from __future__ import annotations

import asyncio
import json
import math
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from llmsim.emulator import EmulatorHandle, start_emulator  # noqa: E402
from llmsim.errors import LLMSimError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = "llama-3.1-8b"
TIMING_TOL_S = 0.05  # wall seconds a token may be late (measured: 1-8 ms; min_tick is 2 ms; slack for a loaded
# machine); never early. A driver releasing all tokens at once is ~0.15 s off on the first or last token here


@pytest.fixture(scope="module")
def emu() -> Any:
    with start_emulator(MODEL, "a100-80gb", speedup=20.0) as h:
        httpx.get(h.url + "/health")  # warm the first-request paths
        yield h


@pytest.fixture(scope="module")
def small() -> Any:
    """A short context (512) and a small KV cache (64 blocks of 16), fast (50x): limits and preemption."""
    with start_emulator(MODEL, "a100-80gb", speedup=50.0, max_model_len=512, num_gpu_blocks=64) as h:
        yield h


def post(h: EmulatorHandle, path: str, body: Any, **kw: Any) -> httpx.Response:
    content = body if isinstance(body, bytes | str) else json.dumps(body)
    return httpx.post(h.url + path, content=content, headers={"content-type": "application/json", **kw}, timeout=30)


def sse(lines: list[str]) -> list[Any]:
    """The data payloads of an SSE body ('[DONE]' kept as a string)."""
    out = []
    for line in lines:
        if line.startswith("data: "):
            d = line[6:]
            out.append(d if d == "[DONE]" else json.loads(d))
    return out


def metrics(h: EmulatorHandle) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics, parsed by prometheus_client's parser."""
    text = httpx.get(h.url + "/metrics", timeout=10).text
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def sample(m: dict, name: str, **labels: str) -> float:
    key = (name, tuple(sorted({"model_name": MODEL, **labels}.items())))
    return m[key]


# ---------------------------------------------------------------------- the API
def test_models_health_and_quick_start() -> None:
    t = time.monotonic()
    with start_emulator(MODEL, "a100-80gb", speedup=20.0, served_model_name="my-llama") as h:
        # a hang bound, not a speed target (a 2-core CI machine under load is slow; speed: benchmarks)
        assert time.monotonic() - t < 5.0, "start_emulator took over 5 s: it hangs or does work it should not"
        assert httpx.get(h.url + "/health").status_code == 200
        d = httpx.get(h.url + "/v1/models").json()["data"][0]
        assert d["id"] == "my-llama" and d["owned_by"] == "llmsim" and d["max_model_len"] == 131072
        assert post(h, "/v1/completions", {"model": "my-llama", "prompt": "hi", "max_tokens": 2}).status_code == 200
        t = time.monotonic()
    assert time.monotonic() - t < 5.0  # stop() is abrupt: it must not wait for anything


def test_completion_non_streaming_counts_and_determinism(emu: EmulatorHandle) -> None:
    body = {"model": MODEL, "prompt": "x" * 401, "max_tokens": 7}
    r = post(emu, "/v1/completions", body)
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["object"] == "text_completion" and d["id"].startswith("cmpl-")
    assert d["usage"] == {"prompt_tokens": 101, "completion_tokens": 7, "total_tokens": 108}  # ceil(401 / 4)
    c = d["choices"][0]
    assert c["finish_reason"] == "length" and len(c["text"].split()) == 7
    assert post(emu, "/v1/completions", body).json()["choices"][0]["text"] == c["text"]  # same request, same text
    ids = post(emu, "/v1/completions", {"model": MODEL, "prompt": list(range(37)), "max_tokens": 3}).json()
    assert ids["usage"]["prompt_tokens"] == 37  # token ids count exactly
    dflt = post(emu, "/v1/completions", {"model": MODEL, "prompt": "hello"}).json()
    assert dflt["usage"]["completion_tokens"] == 16  # vLLM's default max_tokens for completions


def test_chat_non_streaming(emu: EmulatorHandle) -> None:
    msgs = [{"role": "system", "content": "s" * 10}, {"role": "user", "content": [{"type": "text", "text": "u" * 7}]}]
    r = post(emu, "/v1/chat/completions", {"model": MODEL, "messages": msgs, "max_completion_tokens": 5})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["object"] == "chat.completion"
    assert d["choices"][0]["message"]["role"] == "assistant" and d["choices"][0]["finish_reason"] == "length"
    # ceil(17 chars / 4) + 3 per message + 3 for the reply's header
    assert d["usage"] == {"prompt_tokens": 5 + 6 + 3, "completion_tokens": 5, "total_tokens": 19}


def test_chat_default_max_tokens_is_the_rest_of_the_context(small: EmulatorHandle) -> None:
    r = post(small, "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    u = r.json()["usage"]
    assert u["prompt_tokens"] == 1 + 3 + 3 and u["total_tokens"] == 512


def test_streaming_completion(emu: EmulatorHandle) -> None:
    body = {"model": MODEL, "prompt": "hello " * 20, "max_tokens": 12, "stream": True,
            "stream_options": {"include_usage": True}}
    with httpx.stream("POST", emu.url + "/v1/completions", json=body, timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        chunks = sse(list(r.iter_lines()))
    assert chunks[-1] == "[DONE]"
    tokens, final, usage = chunks[:-3], chunks[-3], chunks[-2]
    assert len(tokens) == 12 and all(c["choices"][0]["finish_reason"] is None for c in tokens)
    assert all(c["choices"][0]["text"].strip() for c in tokens)
    assert final["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 30, "completion_tokens": 12,
                                                         "total_tokens": 42}
    whole = post(emu, "/v1/completions", {**body, "stream": False, "stream_options": None}).json()
    assert "".join(c["choices"][0]["text"] for c in tokens) == whole["choices"][0]["text"]
    body.pop("stream_options")  # no usage chunk unless asked
    with httpx.stream("POST", emu.url + "/v1/completions", json=body, timeout=30) as r:
        chunks = sse(list(r.iter_lines()))
    assert len(chunks) == 12 + 2 and not any("usage" in c for c in chunks[:-1])


def test_streaming_chat(emu: EmulatorHandle) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}
    with httpx.stream("POST", emu.url + "/v1/chat/completions", json=body, timeout=30) as r:
        chunks = sse(list(r.iter_lines()))
    assert chunks[0]["object"] == "chat.completion.chunk" and chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert [bool(c["choices"][0]["delta"].get("content")) for c in chunks[1:5]] == [True] * 4
    assert chunks[5]["choices"][0]["finish_reason"] == "length" and chunks[6] == "[DONE]"


def test_sampled_output_length() -> None:
    with start_emulator(MODEL, "a100-80gb", speedup=50.0, output_len="sampled", seed=3) as h:
        outs = []
        for k in range(4):
            d = post(h, "/v1/completions", {"model": MODEL, "prompt": f"q{k}", "max_tokens": 5000}).json()
            outs.append((d["usage"]["completion_tokens"], d["choices"][0]["finish_reason"]))
        assert all(1 <= n < 5000 and fin == "stop" for n, fin in outs) and len({n for n, _ in outs}) > 1
        again = post(h, "/v1/completions", {"model": MODEL, "prompt": "q0", "max_tokens": 5000}).json()
        assert again["usage"]["completion_tokens"] == outs[0][0]
        capped = post(h, "/v1/completions", {"model": MODEL, "prompt": "q0", "max_tokens": 2}).json()
        assert capped["usage"]["completion_tokens"] == 2 and capped["choices"][0]["finish_reason"] == "length"
        full = post(h, "/v1/completions", {"model": MODEL, "prompt": "q0", "max_tokens": 900, "ignore_eos": True})
        assert full.json()["usage"]["completion_tokens"] == 900


# ---------------------------------------------------------------------- timing against the engine
async def _timed_stream(h: EmulatorHandle, client: httpx.AsyncClient, prompt: str, n: int, delay: float,
                        ) -> tuple[str, list[float]]:
    """Send after ``delay`` s; the response id and the monotonic arrival time of each token chunk."""
    await asyncio.sleep(delay)
    times: list[float] = []
    rid = ""
    body = {"model": MODEL, "prompt": prompt, "max_tokens": n, "stream": True}
    async with client.stream("POST", h.url + "/v1/completions", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                d = json.loads(line[6:])
                rid = d["id"]
                if d["choices"][0]["finish_reason"] is None:
                    times.append(time.monotonic())
    return rid, times


def _timing_errors(h: EmulatorHandle, n: int = 250) -> list[tuple[float, float]]:
    """Three overlapping streams: (first-token error, last-token error) in wall seconds for each, where error =
    when the client saw the token - when the engine generated it (simulated time / speedup after start)."""
    async def go() -> list[tuple[str, list[float]]]:
        async with httpx.AsyncClient(timeout=30) as c:
            return await asyncio.gather(*(_timed_stream(h, c, "p" * (400 * (k + 1)), n, 0.03 * k) for k in range(3)))

    res = asyncio.run(go())
    log = {str(e["id"]): e for e in h.engine.finished_log}
    k, t0 = h.engine.speedup, h.engine.t0
    errs = []
    for rid, times in res:
        e = log[rid.split("-")[1]]
        assert len(times) == n == e["generated"]
        errs.append((times[0] - (t0 + e["first_token"] / k), times[-1] - (t0 + e["finish"] / k)))
    return errs


def test_token_times_follow_the_engine(emu: EmulatorHandle) -> None:
    """First and last token of each stream reach the client when the engine generated them (x speedup)."""
    errs = _timing_errors(emu)
    for first, last in errs:
        assert -0.002 < first < TIMING_TOL_S and -0.002 < last < TIMING_TOL_S, errs


def test_timing_check_catches_a_driver_that_releases_late() -> None:
    """The check above is not vacuous: a driver that releases tokens in bursts (every 0.5 s) fails it."""
    with start_emulator(MODEL, "a100-80gb", speedup=20.0, min_tick=0.5) as h:
        errs = _timing_errors(h)
    assert max(max(abs(a), abs(b)) for a, b in errs) > TIMING_TOL_S


# ---------------------------------------------------------------------- batching, metrics, preemption
def test_continuous_batching_and_waiting_gauge() -> None:
    with start_emulator(MODEL, "a100-80gb", speedup=20.0, max_num_seqs=2) as h:
        scrapes: list[tuple[float, float]] = []

        async def go() -> None:
            async with httpx.AsyncClient(timeout=30) as c:
                async def one(k: int) -> None:
                    await asyncio.sleep(0.01 * k)
                    r = await c.post(h.url + "/v1/completions", json={"model": MODEL, "prompt": "a" * 200,
                                                                      "max_tokens": 300})
                    assert r.status_code == 200

                async def scrape() -> None:
                    for _ in range(40):
                        text = (await c.get(h.url + "/metrics")).text
                        m = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
                        scrapes.append((m["vllm:num_requests_running"], m["vllm:num_requests_waiting"]))
                        await asyncio.sleep(0.01)

                await asyncio.gather(one(0), one(1), one(2), scrape())

        asyncio.run(go())
        assert (2.0, 1.0) in scrapes, scrapes  # two in the batch, the third waits
        log = sorted(h.engine.finished_log, key=lambda e: e["arrival"])
        a, b, c = log
        assert a["first_token"] < b["finish"] and b["first_token"] < a["finish"]  # the first two overlap
        assert c["first_token"] > min(a["finish"], b["finish"])  # the third starts once a slot frees


def test_metrics_names_units_and_counters(emu: EmulatorHandle) -> None:
    m0 = metrics(emu)
    assert sample(m0, "llmsim:speedup") == 20.0
    info = [k for k in m0 if k[0] == "vllm:cache_config_info"]
    assert len(info) == 1 and dict(info[0][1])["block_size"] == "16" and int(dict(info[0][1])["num_gpu_blocks"]) > 0
    for g in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:num_requests_swapped"):
        assert sample(m0, g) >= 0
    body = {"model": MODEL, "prompt": "z" * 4000, "max_tokens": 400, "stream": True}
    with httpx.stream("POST", emu.url + "/v1/completions", json=body, timeout=30) as r:
        it = r.iter_lines()
        for _ in range(5):
            next(it)
        mid = metrics(emu)
        assert sample(mid, "vllm:num_requests_running") == 1.0
        assert 0 < sample(mid, "vllm:gpu_cache_usage_perc") <= 1 and sample(mid, "vllm:kv_cache_usage_perc") > 0
        list(it)
    m1 = metrics(emu)
    gen = "vllm:generation_tokens_total"
    assert sample(m1, gen) - sample(m0, gen) == 400
    assert sample(m1, "vllm:prompt_tokens_total") - sample(m0, "vllm:prompt_tokens_total") == 1000
    ok = "vllm:request_success_total"
    assert sample(m1, ok, finished_reason="length") == sample(m0, ok, finished_reason="length") + 1
    for h in ("vllm:time_to_first_token_seconds", "vllm:time_per_output_token_seconds",
              "vllm:e2e_request_latency_seconds"):
        assert sample(m1, h + "_count") == sample(m0, h + "_count") + 1
    e2e = sample(m1, "vllm:e2e_request_latency_seconds_sum") - sample(m0, "vllm:e2e_request_latency_seconds_sum")
    assert 0.1 < e2e < 2.0  # wall seconds (400 tokens at ~13 ms simulated each, 20x): ~0.27 s, not ~5.4 s
    assert sample(m1, "vllm:num_requests_running") == 0.0


def test_preemption_from_the_real_engine(small: EmulatorHandle) -> None:
    """64 blocks of 16 tokens cannot hold four 100 + 200-token requests: the engine preempts, all still finish."""
    async def go() -> list[dict]:
        async with httpx.AsyncClient(timeout=30) as c:
            rs = await asyncio.gather(*(c.post(small.url + "/v1/completions", json={
                "model": MODEL, "prompt": list(range(100 + k)), "max_tokens": 200}) for k in range(4)))
        return [r.json() for r in rs]

    before = sample(metrics(small), "vllm:num_preemptions_total")
    outs = asyncio.run(go())
    assert [o["usage"]["completion_tokens"] for o in outs] == [200] * 4
    assert sample(metrics(small), "vllm:num_preemptions_total") > before


# ---------------------------------------------------------------------- errors and auth
BAD = [
    (b"{not json", 400, "not valid JSON"),
    (b"[1, 2]", 400, "must be a JSON object"),
    ({"prompt": "x"}, 400, "`model` is required"),
    ({"model": 7, "prompt": "x"}, 400, "`model` must be a string"),
    ({"model": "gpt-5", "prompt": "x"}, 404, "The model `gpt-5` does not exist."),
    ({"model": MODEL}, 400, "`prompt` is required"),
    ({"model": MODEL, "prompt": ""}, 400, "must not be empty"),
    ({"model": MODEL, "prompt": [True, 2]}, 400, "list of token ids"),
    ({"model": MODEL, "prompt": ["a", "b"]}, 400, "batched prompts"),
    ({"model": MODEL, "prompt": "x", "max_tokens": 0}, 400, "`max_tokens` must be a positive integer"),
    ({"model": MODEL, "prompt": "x", "max_tokens": "5"}, 400, "`max_tokens` must be a positive integer"),
    ({"model": MODEL, "prompt": "x", "max_tokens": 1.5}, 400, "`max_tokens` must be a positive integer"),
    ({"model": MODEL, "prompt": "x", "stream": "yes"}, 400, "`stream` must be a boolean"),
    ({"model": MODEL, "prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream=True"),
    ({"model": MODEL, "prompt": "x", "n": 2}, 400, "`n` must be 1"),
    ({"model": MODEL, "prompt": list(range(600))}, 400, "maximum context length is 512 tokens"),
]


@pytest.mark.parametrize("body,status,words", BAD, ids=[w[:24] for _, _, w in BAD])
def test_completions_bad_requests(small: EmulatorHandle, body: Any, status: int, words: str) -> None:
    r = post(small, "/v1/completions", body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert words in err["message"] and err["code"] == status
    assert err["type"] == ("NotFoundError" if status == 404 else "BadRequestError")


@pytest.mark.parametrize("body,words", [
    ({"model": MODEL}, "`messages` is required"),
    ({"model": MODEL, "messages": []}, "`messages` is required"),
    ({"model": MODEL, "messages": [{"content": "x"}]}, "string `role`"),
    ({"model": MODEL, "messages": [{"role": "user", "content": 3}]}, "`messages[0].content` must be"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": -1}, "positive integer"),
])
def test_chat_bad_requests(small: EmulatorHandle, body: Any, words: str) -> None:
    r = post(small, "/v1/chat/completions", body)
    assert r.status_code == 400 and words in r.json()["error"]["message"], r.text


def test_prompt_that_never_fits_the_kv_cache() -> None:
    with start_emulator(MODEL, "a100-80gb", speedup=50.0, num_gpu_blocks=8) as h:
        r = post(h, "/v1/completions", {"model": MODEL, "prompt": list(range(200)), "max_tokens": 2})
        assert r.status_code == 400 and "KV cache" in r.json()["error"]["message"]
        assert post(h, "/v1/completions", {"model": MODEL, "prompt": list(range(50)), "max_tokens": 2}).status_code \
            == 200


def test_body_size_limit(small: EmulatorHandle) -> None:
    big = json.dumps({"model": MODEL, "prompt": "x" * (5 * 1024 * 1024)})
    r = post(small, "/v1/completions", big)
    assert r.status_code == 413 and "limit" in r.json()["error"]["message"]


def test_api_key() -> None:
    with start_emulator(MODEL, "a100-80gb", speedup=50.0, api_key="s3cret") as h:
        body = {"model": MODEL, "prompt": "x", "max_tokens": 1}
        for hdr in ({}, {"authorization": "Bearer nope"}):
            r = post(h, "/v1/completions", body, **hdr)
            assert r.status_code == 401 and r.json()["error"]["type"] == "AuthenticationError"
        assert httpx.get(h.url + "/v1/models").status_code == 401
        assert post(h, "/v1/completions", body, authorization="Bearer s3cret").status_code == 200
        assert httpx.get(h.url + "/health").status_code == 200 and httpx.get(h.url + "/metrics").status_code == 200


def test_bad_options_raise_config_error() -> None:
    for kw in ({"speedup": 0}, {"speedup": float("nan")}, {"model": "nope"}, {"engine": "fifo"},
               {"output_len": "eos"}):
        with pytest.raises(LLMSimError):
            start_emulator(**{"model": MODEL, "gpu": "a100-80gb", **kw})


# ---------------------------------------------------------------------- disconnects and stopping
def test_client_disconnect_aborts_the_request(emu: EmulatorHandle) -> None:
    before = metrics(emu)
    body = {"model": MODEL, "prompt": "q" * 100, "max_tokens": 20000, "stream": True}
    with httpx.stream("POST", emu.url + "/v1/completions", json=body, timeout=30) as r:
        it = r.iter_lines()
        for _ in range(6):
            next(it)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        m = metrics(emu)
        if sample(m, "vllm:num_requests_running") == 0 and not emu.engine.tickets:
            break
        time.sleep(0.02)
    ok = "vllm:request_success_total"
    assert sample(m, ok, finished_reason="abort") == sample(before, ok, finished_reason="abort") + 1
    assert sample(m, "vllm:num_requests_running") == 0 and not emu.engine.tickets
    assert sample(m, "vllm:generation_tokens_total") - sample(before, "vllm:generation_tokens_total") < 2000


def test_stop_with_open_streams_does_not_hang() -> None:
    h = start_emulator(MODEL, "a100-80gb", speedup=20.0)
    got: list[int] = []
    ended: list[str] = []

    def reader() -> None:
        n = 0
        try:
            body = {"model": MODEL, "prompt": "w" * 50, "max_tokens": 50000, "stream": True}
            with httpx.stream("POST", h.url + "/v1/completions", json=body, timeout=10) as r:
                for _ in r.iter_lines():
                    n += 1
            ended.append("eof")
        except httpx.HTTPError as e:
            ended.append(type(e).__name__)
        got.append(n)

    threads = [threading.Thread(target=reader, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    while h.engine.tickets.__len__() < 3 or min(t.available for t in h.engine.tickets.values()) < 5:
        time.sleep(0.01)
    t0 = time.monotonic()
    h.stop()
    assert time.monotonic() - t0 < 3.0
    for t in threads:
        t.join(5)
        assert not t.is_alive(), "a client stream hung after the server stopped"
    assert len(ended) == 3 and min(got) > 5, (ended, got)
    with pytest.raises(httpx.ConnectError):
        httpx.get(h.url + "/health", timeout=2)


def test_a_stopping_server_lets_no_new_connection_in() -> None:
    """Once stop() has begun, the port refuses connections at once (not at uvicorn's next tick): a router's health
    check let in meanwhile was answered by the dying backend and readmitted it. The kill is held inside on_kill,
    on the server's loop, so uvicorn cannot tick meanwhile and the check is deterministic."""
    h = start_emulator(MODEL, "a100-80gb", speedup=20.0)
    in_kill, release = threading.Event(), threading.Event()
    stop_engine = h.on_kill

    def held_kill() -> None:
        stop_engine()
        in_kill.set()
        release.wait(10)

    h.on_kill = held_kill  # type: ignore[method-assign]
    stopper = threading.Thread(target=h.stop, daemon=True)
    stopper.start()
    try:
        assert in_kill.wait(10), "stop() never reached on_kill"
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((h.host, h.port), timeout=2).close()
    finally:
        release.set()
        stopper.join(10)
    assert not stopper.is_alive()


# ---------------------------------------------------------------------- the CLI
@pytest.mark.parametrize("args,flag", [
    (["--model", "nope", "--gpu", "a100-80gb"], "--model"),
    (["--model", MODEL, "--gpu", "b200x"], "--gpu"),
    (["--model", MODEL, "--gpu", "a100-80gb", "--speedup", "0"], "--speedup"),
    (["--model", MODEL, "--gpu", "a100-80gb", "--speedup", "fast"], "--speedup"),
    (["--model", MODEL, "--gpu", "a100-80gb", "--engine", "fifo"], "--engine"),
    (["--model", MODEL, "--gpu", "a100-80gb", "--max-model-len", "1000000"], "--max-model-len"),
])
def test_cli_bad_input_is_one_line_and_exit_2(args: list[str], flag: str) -> None:
    p = subprocess.run([sys.executable, "-m", "llmsim.emulator.cli", *args], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "Traceback" not in p.stderr, p.stderr


def test_cli_serves() -> None:
    p = subprocess.Popen([sys.executable, "-m", "llmsim.emulator.cli", "--model", MODEL, "--gpu", "a100-80gb",
                          "--port", "0", "--speedup", "50"], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stderr.readline()  # "llmsim-emulate: ... on http://127.0.0.1:PORT"
        url = line.strip().rsplit(" ", 1)[-1]
        assert url.startswith("http://127.0.0.1:"), line
        deadline = time.monotonic() + 20
        while True:
            try:
                r = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 3})
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert r.json()["usage"]["completion_tokens"] == 3
    finally:
        p.terminate()
        p.wait(10)


def test_import_llmsim_does_not_import_fastapi() -> None:
    code = "import sys, llmsim, llmsim.cluster.cluster; assert 'fastapi' not in sys.modules and 'uvicorn' not in sys.modules"
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


def test_output_is_capped_by_the_context(small: EmulatorHandle) -> None:
    d = post(small, "/v1/completions", {"model": MODEL, "prompt": list(range(500)), "max_tokens": 100}).json()
    assert d["usage"]["completion_tokens"] == 12 and d["choices"][0]["finish_reason"] == "length"
    assert math.isclose(d["usage"]["total_tokens"], 512)
