"""What the live router's tests share: a router config over test backends, one client request and a burst of
them, and reading a Prometheus exposition (the router's or an emulated backend's)."""

from __future__ import annotations

import asyncio
import json

import httpx
from prometheus_client.parser import text_string_to_metric_families

SPEEDUP = 50.0  # emulated backends run this many times faster than real time


def samples(text: str, name: str) -> dict[tuple, float]:
    """The samples of metric ``name`` in a Prometheus text exposition, keyed by their sorted labels."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def router_cfg(urls: list[str], policy: dict, **kw) -> dict:
    """A router config over ``urls`` (backends b0, b1, ...) on a free port, scraping and checking health often."""
    return {"backends": [{"name": f"b{i}", "url": u} for i, u in enumerate(urls)], "policy": policy, "port": 0,
            "scrape_interval_s": 0.05, "health": {"interval_s": 0.1, "eject_after": 2, "readmit_after": 1},
            # connect_s as generous as the rest: 201 requests at once on a loaded 2-core CI machine took over the
            # default 2 s to connect once, and the retry made 202 routing decisions
            "timeouts": {"connect_s": 20, "first_token_s": 20, "request_s": 60, "scrape_s": 5}, **kw}


async def one(client: httpx.AsyncClient, url: str, i: int, stream: bool, chat: bool, max_tokens: int = 0,
              extra: dict | None = None) -> dict:
    """One client request (``extra``: more body fields); returns what came back (status, tokens asked and
    received, a stream error if any)."""
    asked = max_tokens or 8 + i % 24
    body = {"model": "llmsim-router", "max_tokens": asked, "stream": stream, **(extra or {})}
    if chat:
        body["messages"] = [{"role": "user", "content": "hello " * (20 + i % 50)}]
    else:
        body["prompt"] = "x" * (100 + 37 * (i % 40))
    path = "/v1/chat/completions" if chat else "/v1/completions"
    if not stream:
        r = await client.post(url + path, json=body)
        out = {"status": r.status_code, "tokens": 0, "error": None, "asked": asked}
        if r.status_code == 200:
            out["tokens"] = r.json()["usage"]["completion_tokens"]
        else:
            out["error"] = r.json()["error"]
        return out
    out = {"status": None, "tokens": 0, "error": None, "done": False, "asked": asked}
    async with client.stream("POST", url + path, json=body) as r:
        out["status"] = r.status_code
        if r.status_code != 200:
            out["error"] = json.loads(await r.aread())["error"]
            return out
        async for line in r.aiter_lines():
            read_sse_line(line, chat, out)
    return out


def read_sse_line(line: str, chat: bool, out: dict) -> None:
    """Account one line of a streamed answer in ``out``: a token, the stream's error event or its end."""
    if not line.startswith("data:"):
        return
    data = line[5:].strip()
    if data == "[DONE]":
        out["done"] = True
        return
    chunk = json.loads(data)
    if "error" in chunk:
        out["error"] = chunk["error"]
    elif chunk.get("choices"):
        c = chunk["choices"][0]
        piece = c.get("text") if not chat else (c.get("delta") or {}).get("content")
        if piece:
            out["tokens"] += 1


async def burst(url: str, n: int, gap: float = 0.0, long_every: int = 0, extra: dict | None = None,
                long_tokens: int = 400) -> list[dict]:
    """``n`` requests ``gap`` s apart, every other one streaming, some chat; every ``long_every``-th asks for
    ``long_tokens`` tokens (streams that are still open a while later); ``extra``: more fields in every body."""
    async with httpx.AsyncClient(timeout=60) as client:
        async def later(i: int) -> dict:
            await asyncio.sleep(gap * i)
            long = long_every and i % long_every == 0
            return await one(client, url, i, stream=i % 2 == 0, chat=i % 5 == 1, max_tokens=long_tokens if long else 0,
                             extra=extra)
        return await asyncio.gather(*(later(i) for i in range(n)))
