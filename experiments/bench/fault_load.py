"""The client side of the load-and-fault benchmark (experiments/bench/faults.py): closed-loop requests at a fixed
concurrency, each answer classified, and paired latencies at concurrency 1 for the router's overhead.

Each answer is one of:

* completed: HTTP 200 with exactly the ``max_tokens`` asked (a stream: one finish, ``[DONE]``, no error event);
* clean error: an OpenAI error body (``{"error": {"message": ...}}``, any 4xx / 5xx), or a stream that ends
  with the router's SSE error event and ``[DONE]``;
* unclean error: anything else: a transport error (``ReadError``, ``RemoteProtocolError``...), a cut stream
  without the error event, a 200 with fewer tokens than asked and no error, a body that is not JSON;
* hung: no end within ``hang_s`` (the client gives up: the configured limits should end every request sooner).

Served twice: one answer carries output of more than one backend (each emulated backend serves its own model
name, so a stream whose chunks name two models was resumed elsewhere), more tokens than asked, or two ends.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import numpy as np

ROUTER_MODEL = "llmsim-router"


@dataclass
class Outcome:
    """One client request's end: its class, latency (s), the backends whose output it carried, and why."""

    kind: str  # completed | clean_error | unclean_error | hung
    latency: float
    detail: str = ""
    backends: set[str] = field(default_factory=set)
    twice: bool = False


@dataclass
class StreamSeen:
    """What a client read of one SSE answer."""

    tokens: int = 0
    finishes: int = 0
    done: int = 0
    error: str | None = None
    models: set[str] = field(default_factory=set)

    def read(self, line: str, chat: bool) -> None:
        if not line.startswith("data:"):
            return
        data = line[5:].strip()
        if data == "[DONE]":
            self.done += 1
            return
        chunk = json.loads(data)
        if "error" in chunk:
            self.error = str(chunk["error"].get("message", chunk["error"]))
            return
        if "model" in chunk:
            self.models.add(chunk["model"])
        for c in chunk.get("choices") or ():
            piece = c.get("text") if not chat else (c.get("delta") or {}).get("content")
            if piece:
                self.tokens += 1
            if c.get("finish_reason"):
                self.finishes += 1


def request_body(i: int, model: str = ROUTER_MODEL) -> tuple[str, dict, bool, int]:
    """The i-th request of a run: (path, body, chat, tokens asked); every other one streams, one in five is chat."""
    asked = 16 + (i * 7) % 48
    chat = i % 5 == 1
    body: dict = {"model": model, "max_tokens": asked, "stream": i % 2 == 0}
    if chat:
        body["messages"] = [{"role": "user", "content": "hello " * (20 + i % 50)}]
    else:
        body["prompt"] = "x" * (100 + 37 * (i % 40))
    return ("/v1/chat/completions" if chat else "/v1/completions"), body, chat, asked


def judge_stream(seen: StreamSeen, asked: int, t: float) -> Outcome:
    twice = len(seen.models) > 1 or seen.tokens > asked or seen.done > 1 or seen.finishes > 1
    if seen.error is not None and seen.done == 1:
        return Outcome("clean_error", t, seen.error[:120], seen.models, twice)
    if seen.error is None and seen.done == 1 and seen.finishes == 1 and seen.tokens == asked:
        return Outcome("completed", t, "", seen.models, twice)
    return Outcome("unclean_error", t, f"stream cut: {seen.tokens}/{asked} tokens, done={seen.done}, "
                                       f"error={seen.error!r}", seen.models, twice)


def judge_whole(status: int, raw: bytes, asked: int, t: float) -> Outcome:
    try:
        body = json.loads(raw)
    except ValueError:
        return Outcome("unclean_error", t, f"HTTP {status}: not JSON: {raw[:80]!r}")
    if status == 200:
        n = (body.get("usage") or {}).get("completion_tokens")
        models = {body["model"]} if "model" in body else set()
        if n == asked:
            return Outcome("completed", t, "", models)
        return Outcome("unclean_error" if n is None or n < asked else "completed", t, f"{n}/{asked} tokens", models,
                       twice=n is not None and n > asked)
    if isinstance(body, dict) and isinstance(body.get("error"), dict) and body["error"].get("message"):
        return Outcome("clean_error", t, f"HTTP {status}: {body['error']['message'][:100]}")
    return Outcome("unclean_error", t, f"HTTP {status} without an error message")


async def one_request(client: httpx.AsyncClient, url: str, i: int, hang_s: float, model: str = ROUTER_MODEL,
                      headers: dict | None = None) -> Outcome:
    """Send the i-th request and classify its answer."""
    path, body, chat, asked = request_body(i, model)
    t0 = time.perf_counter()
    try:
        async with asyncio.timeout(hang_s):
            if not body["stream"]:
                r = await client.post(url + path, json=body, headers=headers)
                return judge_whole(r.status_code, r.content, asked, time.perf_counter() - t0)
            async with client.stream("POST", url + path, json=body, headers=headers) as r:
                if r.status_code != 200:
                    return judge_whole(r.status_code, await r.aread(), asked, time.perf_counter() - t0)
                seen = StreamSeen()
                async for line in r.aiter_lines():
                    seen.read(line, chat)
                return judge_stream(seen, asked, time.perf_counter() - t0)
    except TimeoutError:
        return Outcome("hung", time.perf_counter() - t0, f"no end within {hang_s} s")
    except httpx.HTTPError as e:
        return Outcome("unclean_error", time.perf_counter() - t0, f"{type(e).__name__}: {e}"[:160])
    except ValueError as e:  # a data line that is not JSON
        return Outcome("unclean_error", time.perf_counter() - t0, f"bad SSE line: {e}"[:160])


async def closed_loop(url: str, n: int, concurrency: int, hang_s: float,
                      on_progress: Callable[[int], None] | None = None) -> list[Outcome]:
    """``n`` requests, ``concurrency`` at a time (each worker sends its next as soon as one ends)."""
    out: list[Outcome | None] = [None] * n
    nxt = iter(range(n))
    finished = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(hang_s + 30, connect=hang_s)) as client:
        async def worker() -> None:
            nonlocal finished
            for i in nxt:
                out[i] = await one_request(client, url, i, hang_s)
                finished += 1
                if on_progress is not None:
                    on_progress(finished)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return [o for o in out if o is not None]


async def paired_latencies(router_url: str, direct_url: str, direct_model: str, pairs: int,
                           warmup: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """Latencies (s) of the same small non-streaming request sent one at a time to the router and directly to a
    backend, alternating which goes first; the first ``warmup`` pairs are not kept."""
    body = {"prompt": "x" * 100, "max_tokens": 8}
    via, direct = [], []
    async with httpx.AsyncClient(timeout=30) as client:
        for k in range(pairs + warmup):
            order = [(router_url, ROUTER_MODEL, via), (direct_url, direct_model, direct)]
            for url, model, into in (order if k % 2 == 0 else order[::-1]):
                t0 = time.perf_counter()
                r = await client.post(url + "/v1/completions", json={**body, "model": model})
                dt = time.perf_counter() - t0
                if r.status_code != 200:
                    raise RuntimeError(f"overhead probe to {url}: HTTP {r.status_code}: {r.text[:200]}")
                if k >= warmup:
                    into.append(dt)
    return np.array(via), np.array(direct)


def tally(outcomes: list[Outcome]) -> dict:
    """Counts by class, served twice, the unclean errors' kinds, latency quantiles (s)."""
    kinds = Counter(o.kind for o in outcomes)
    lat = np.array([o.latency for o in outcomes]) if outcomes else np.zeros(1)
    unclean = Counter(o.detail.split(":")[0] for o in outcomes if o.kind == "unclean_error")
    clean = Counter(o.detail[:60] for o in outcomes if o.kind == "clean_error")
    return {"requests": len(outcomes), "completed": kinds["completed"], "clean_errors": kinds["clean_error"],
            "unclean_errors": kinds["unclean_error"], "hung": kinds["hung"],
            "served_twice": sum(o.twice for o in outcomes), "read_errors": unclean.get("ReadError", 0),
            "unclean_kinds": dict(unclean), "clean_kinds": dict(clean.most_common(6)),
            "latency_p50_s": round(float(np.percentile(lat, 50)), 3),
            "latency_p99_s": round(float(np.percentile(lat, 99)), 3), "latency_max_s": round(float(lat.max()), 3)}
