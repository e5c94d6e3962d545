"""When the emulator's tokens come out and what its engine does meanwhile: the driver releases each token at its
engine time, streams over HTTP follow the engine, continuous batching, /metrics names, units and counters, and
preemption from the real engine.

No test asserts a tight wall-clock tolerance (a loaded machine makes those flaky): the exact timing is checked on
a virtual clock (:class:`tests.emulator.helpers.VirtualLoop`); over HTTP a token must never be early and may be
late only by less than a stall; what must be seen while something lasts is given a second or more to be seen."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmsim.emulator import EmulatorHandle, start_emulator
from llmsim.emulator.engine import EmulatorOptions, RealTimeEngine
from llmsim.emulator.metrics import EmulatorMetrics
from tests.emulator.helpers import MODEL, VirtualLoop, metrics, sample, wait_until_idle

MIN_TICK = EmulatorOptions().min_tick  # wall seconds: the driver's shortest sleep, so its largest lateness
STALL_S = 2.0  # over HTTP, a token later than this is a stall, not scheduling noise (measured lateness: 1-8 ms)
ARRIVALS = (0.0, 0.03, 0.06)  # three overlapping requests, 30 ms apart (wall seconds)


# ---------------------------------------------------------------------- the driver, on a virtual clock
def _driver_lateness(min_tick: float, n: int = 250) -> list[tuple[float, float]]:
    """Three overlapping requests of ``n`` tokens driven on a virtual clock: for each, (first token, last token)
    lateness in wall seconds = when the driver released the token - when the engine generated it (simulated
    time / speedup after start)."""
    engine = RealTimeEngine(EmulatorOptions(model=MODEL, gpu="a100-80gb", speedup=20.0, min_tick=min_tick))
    loop = VirtualLoop()
    engine.start(loop)  # type: ignore[arg-type]
    arrivals = list(ARRIVALS)
    tickets = []
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    while arrivals or not all(t.done for t in tickets):
        due = loop.next_time()
        if arrivals and (due is None or arrivals[0] <= due):
            loop.run_until(arrivals.pop(0))
            k = len(tickets)
            tickets.append(engine.submit(100 * (k + 1), n, n, seed=k))
        else:
            loop.run_next()
        for t in tickets:
            if t.available and t.id not in first:
                first[t.id] = loop.now
            if t.done and t.id not in last:
                last[t.id] = loop.now
    assert [t.req.generated for t in tickets] == [n] * 3
    return [(first[t.id] - engine.wall_of(t.req.first_token), last[t.id] - engine.wall_of(t.req.finish))
            for t in tickets]


def test_driver_releases_each_token_at_its_engine_time() -> None:
    """First and last token of each request are released when the engine generated them: never early, late by at
    most min_tick (the driver sleeps until the next engine event or decode boundary, but never less than that)."""
    late = _driver_lateness(MIN_TICK)
    assert all(-1e-9 <= x <= MIN_TICK + 1e-9 for pair in late for x in pair), late


def test_timing_check_catches_a_driver_that_releases_late() -> None:
    """The check above is not vacuous: a driver that releases tokens in bursts (every 0.5 s) fails it."""
    late = _driver_lateness(0.5)
    assert max(x for pair in late for x in pair) > 0.1, late


# ---------------------------------------------------------------------- the same over HTTP
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
            return await asyncio.gather(*(_timed_stream(h, c, "p" * (400 * (k + 1)), n, at)
                                          for k, at in enumerate(ARRIVALS)))

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
    """A client sees each stream's first and last token after the engine generated them (x speedup), never
    before, and without a stall (the exact lateness is the driver test's, on the virtual clock)."""
    errs = _timing_errors(emu)
    for first, last in errs:
        assert -0.002 < first < STALL_S and -0.002 < last < STALL_S, errs


def test_gauges_mid_stream(emu: EmulatorHandle) -> None:
    """Tokens are streamed as the engine makes them, not when the request ends: with the first chunks read, the
    engine still runs the request (20,000 tokens, ~15 s at 20x) and holds KV blocks for it. Closing the stream
    then aborts it."""
    body = {"model": MODEL, "prompt": "z" * 4000, "max_tokens": 20000, "stream": True}
    with httpx.stream("POST", emu.url + "/v1/completions", json=body, timeout=30) as r:
        it = r.iter_lines()
        for _ in range(5):
            next(it)
        mid = metrics(emu)
    assert sample(mid, "vllm:num_requests_running") == 1.0
    assert 0 < sample(mid, "vllm:gpu_cache_usage_perc") <= 1 and sample(mid, "vllm:kv_cache_usage_perc") > 0
    wait_until_idle(emu)


# ---------------------------------------------------------------------- batching, metrics, preemption
def test_continuous_batching_and_waiting_gauge() -> None:
    """max_num_seqs=2, three requests: two run while the third waits (seen on /metrics: each request lasts about
    a second of wall time at 4x, so the scrapes see it whatever the load), and it starts once a slot frees."""
    with start_emulator(MODEL, "a100-80gb", speedup=4.0, max_num_seqs=2) as h:
        scrapes: list[tuple[float, float]] = []

        async def go() -> None:
            async with httpx.AsyncClient(timeout=60) as c:
                async def one(k: int) -> None:
                    await asyncio.sleep(0.01 * k)
                    r = await c.post(h.url + "/v1/completions", json={"model": MODEL, "prompt": "a" * 200,
                                                                      "max_tokens": 300})
                    assert r.status_code == 200

                requests = asyncio.gather(one(0), one(1), one(2))
                while not requests.done() and (2.0, 1.0) not in scrapes:
                    text = (await c.get(h.url + "/metrics")).text
                    m = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
                    scrapes.append((m["vllm:num_requests_running"], m["vllm:num_requests_waiting"]))
                    await asyncio.sleep(0.01)
                await requests

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
        list(r.iter_lines())
    m1 = metrics(emu)
    gen = "vllm:generation_tokens_total"
    assert sample(m1, gen) - sample(m0, gen) == 400
    assert sample(m1, "vllm:prompt_tokens_total") - sample(m0, "vllm:prompt_tokens_total") == 1000
    ok = "vllm:request_success_total"
    assert sample(m1, ok, finished_reason="length") == sample(m0, ok, finished_reason="length") + 1
    for h in ("vllm:time_to_first_token_seconds", "vllm:request_time_per_output_token_seconds",
              "vllm:e2e_request_latency_seconds"):
        assert sample(m1, h + "_count") == sample(m0, h + "_count") + 1
    # as vLLM 0.11+: the inter-token latency once per gap (399 between 400 tokens), adding up to the request's
    # decode time; the per-request mean under its own name; the deprecated per-gap alias gone
    itl, tpot = "vllm:inter_token_latency_seconds", "vllm:request_time_per_output_token_seconds"
    assert sample(m1, itl + "_count") - sample(m0, itl + "_count") == 399
    decode = (sample(m1, tpot + "_sum") - sample(m0, tpot + "_sum")) * 399
    assert sample(m1, itl + "_sum") - sample(m0, itl + "_sum") == pytest.approx(decode, rel=1e-6)
    assert not [k for k in m1 if k[0].startswith("vllm:time_per_output_token_seconds")]
    e2e = sample(m1, "vllm:e2e_request_latency_seconds_sum") - sample(m0, "vllm:e2e_request_latency_seconds_sum")
    # simulated seconds / speedup (so a pure function of the engine, whatever the load): 400 tokens at ~13 ms
    # simulated each, 20x, is ~0.27 s, not the ~5.4 s simulated
    assert 0.1 < e2e < 2.0
    assert sample(m1, "vllm:num_requests_running") == 0.0


def test_preemption_from_the_real_engine() -> None:
    """64 blocks of 16 tokens cannot hold four 100 + 200-token requests: the engine preempts, all still finish.
    At 2x each request lasts about a second of wall time, so the four overlap whatever the machine's load."""
    with start_emulator(MODEL, "a100-80gb", speedup=2.0, max_model_len=512, num_gpu_blocks=64) as h:
        async def go() -> list[dict]:
            async with httpx.AsyncClient(timeout=60) as c:
                rs = await asyncio.gather(*(c.post(h.url + "/v1/completions", json={
                    "model": MODEL, "prompt": list(range(100 + k)), "max_tokens": 200}) for k in range(4)))
            return [r.json() for r in rs]

        before = sample(metrics(h), "vllm:num_preemptions_total")
        outs = asyncio.run(go())
        assert [o["usage"]["completion_tokens"] for o in outs] == [200] * 4
        assert sample(metrics(h), "vllm:num_preemptions_total") > before


def test_an_aborted_request_is_in_ttft_as_its_first_token_is_out_and_in_no_per_request_histogram() -> None:
    """vLLM V1 observes the time to first token at the engine step that produced it, and its per-request
    statistics (e2e latency, time per output token) only for requests that finish, not for one the client
    aborted. The emulator observed TTFT at the finish, so an aborted request was never in it."""
    engine = RealTimeEngine(EmulatorOptions(model=MODEL, gpu="a100-80gb", speedup=20.0))
    m = EmulatorMetrics(engine, MODEL)
    loop = VirtualLoop()
    engine.start(loop)  # type: ignore[arg-type]

    def count(name: str) -> float:
        return m.registry.get_sample_value(name + "_count", {"model_name": MODEL})

    t = engine.submit(500, 200, 200, seed=1)
    while t.available < 5:
        loop.run_next()
    assert count("vllm:time_to_first_token_seconds") == 1  # as soon as it is out, not when the request ends
    assert m.registry.get_sample_value("vllm:time_to_first_token_seconds_sum", {"model_name": MODEL}) == \
        pytest.approx((t.req.first_token - t.req.arrival) / 20.0)
    engine.abort(t)
    while not t.done:
        loop.run_next()
    assert engine.success["abort"] == 1 and t.req.generated < 200
    assert count("vllm:time_to_first_token_seconds") == 1
    assert count("vllm:e2e_request_latency_seconds") == 0
    assert count("vllm:request_time_per_output_token_seconds") == 0
    done = engine.submit(100, 3, 3, seed=2)  # one that finishes: each histogram once, TTFT not twice
    while not done.done:
        loop.run_next()
    assert [count(h) for h in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
                               "vllm:request_time_per_output_token_seconds")] == [2, 1, 1]
