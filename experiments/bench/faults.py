"""Load and faults through the live router: ``python -m experiments.bench faults --requests N --concurrency C
[--kill BACKEND] [--freeze BACKEND [--freeze-s S]] [--backends 4] [--speedup K]``.

It starts ``--backends`` emulated vLLM backends (``llmsim-emulate``) and the router (``llmsim-router``), each its
own process, so that SIGKILL and SIGSTOP are real. First the router's overhead: ``--overhead-pairs`` small
non-streaming requests one at a time, each sent to the router and straight to a backend (alternating which goes
first); the overhead at a quantile is the router's latency at that quantile minus the direct one's. Then the load:
``--requests`` requests (every other one streaming, one in five chat), ``--concurrency`` at a time; once
``--fault-at`` of them have ended, backend ``--kill`` gets SIGKILL and backend ``--freeze`` SIGSTOP (and SIGCONT
``--freeze-s`` seconds later). Every answer is classified (experiments/bench/fault_load.py: completed, clean error,
unclean error, hung, served twice) and the router's own counters are read at the end.

Backends are named b0, b1, ...: ``--kill b1 --freeze b2``. ``--json`` prints the whole result as one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import yaml
from prometheus_client.parser import text_string_to_metric_families

from experiments.bench.fault_load import closed_loop, paired_latencies, tally
from experiments.harness.timing import print_json, process_cpu_s

OVERHEAD_WARMUP = 20  # probe pairs sent before the kept ones
START_S = 60.0  # a process that has not announced its URL by then failed to start
URL_LINE = re.compile(r"on (http://[\w.:\[\]]+)")
ROUTER_COUNTERS = ("llmsim_router_requests_total", "llmsim_router_retries_total", "llmsim_router_ejections_total",
                   "llmsim_router_stream_errors_total", "llmsim_router_aborted_total")


@dataclass
class Proc:
    """A started server process, its URL and its log file."""

    name: str
    popen: subprocess.Popen
    url: str
    log: Path


def launch(name: str, argv: list[str], log: Path) -> Proc:
    """Start ``argv`` with stderr to ``log`` and wait for its ``... on http://host:port`` line."""
    with log.open("w") as f:
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=f, start_new_session=True)
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        m = URL_LINE.search(log.read_text())
        if m:
            return Proc(name, p, m.group(1), log)
        if p.poll() is not None:
            break
        time.sleep(0.05)
    p.kill()
    raise RuntimeError(f"{name} did not start: {log.read_text()[-600:]}")


def start_backends(args: argparse.Namespace, tmp: Path) -> list[Proc]:
    procs = []
    for i in range(args.backends):
        argv = [sys.executable, "-m", "llmsim.emulator.cli", "--model", args.model, "--gpu", args.gpu, "--port", "0",
                "--speedup", str(args.speedup), "--served-model-name", f"bench-b{i}", "--seed", str(i)]
        procs.append(launch(f"b{i}", argv, tmp / f"b{i}.log"))
    return procs


def start_router(args: argparse.Namespace, backends: list[Proc], tmp: Path) -> Proc:
    cfg = {"backends": [{"name": b.name, "url": b.url, "model": f"bench-b{i}"} for i, b in enumerate(backends)],
           "policy": {"heuristic": args.policy}, "port": 0}
    if args.stall_s is not None:
        cfg["timeouts"] = {"stall_s": args.stall_s}
    path = tmp / "router.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return launch("router", [sys.executable, "-m", "llmsim.serving.cli", "--config", str(path)], tmp / "router.log")


def stop_all(procs: list[Proc]) -> None:
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.popen.pid, signal.SIGCONT)
            p.popen.terminate()
    for p in procs:
        try:
            p.popen.wait(10)
        except subprocess.TimeoutExpired:
            p.popen.kill()


def counters(url: str) -> dict[str, float]:
    """The router's fault counters, each summed over its labels (aborted split by reason)."""
    out: dict[str, float] = {}
    text = httpx.get(url + "/metrics", timeout=10).text
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in ROUTER_COUNTERS:
                key = s.name.removeprefix("llmsim_router_").removesuffix("_total")
                if key == "aborted":
                    key = f"aborted[{s.labels.get('reason')}]"
                out[key] = out.get(key, 0.0) + s.value
    return out


class Faults:
    """SIGKILL and SIGSTOP / SIGCONT of the named backends, once ``at`` requests have ended."""

    def __init__(self, by_name: dict[str, Proc], kill: str | None, freeze: str | None, freeze_s: float,
                 at: int) -> None:
        self.by_name, self.kill, self.freeze, self.freeze_s, self.at = by_name, kill, freeze, freeze_s, at
        self.fired_at: float | None = None
        self.thawed = asyncio.Event()
        if not freeze:
            self.thawed.set()

    def progress(self, finished: int) -> None:
        if self.fired_at is None and finished >= self.at and (self.kill or self.freeze):
            self.fired_at = time.perf_counter()
            if self.kill:
                os.killpg(self.by_name[self.kill].popen.pid, signal.SIGKILL)
            if self.freeze:
                os.killpg(self.by_name[self.freeze].popen.pid, signal.SIGSTOP)
                asyncio.get_running_loop().call_later(self.freeze_s, self.thaw)

    def thaw(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.by_name[self.freeze].popen.pid, signal.SIGCONT)
        self.thawed.set()


async def run_load(args: argparse.Namespace, router: Proc, backends: list[Proc]) -> dict:
    """The overhead probe, then the load with its faults; the tally of the answers and the router's counters."""
    res: dict = {}
    if args.overhead_pairs:
        cpu0 = process_cpu_s(router.popen.pid)
        via, direct = await paired_latencies(router.url, backends[0].url, "bench-b0", args.overhead_pairs,
                                             warmup=OVERHEAD_WARMUP)
        cpu1 = process_cpu_s(router.popen.pid)
        if cpu0 is not None and cpu1 is not None:  # its health checks and scrapes meanwhile included
            res["router_cpu_ms_per_request"] = round((cpu1 - cpu0) / (args.overhead_pairs + OVERHEAD_WARMUP) * 1e3, 3)
        for q in (50, 99):
            res[f"overhead_p{q}_ms"] = round(float(np.percentile(via, q) - np.percentile(direct, q)) * 1e3, 3)
            res[f"router_p{q}_ms"] = round(float(np.percentile(via, q)) * 1e3, 3)
            res[f"direct_p{q}_ms"] = round(float(np.percentile(direct, q)) * 1e3, 3)
    faults = Faults({b.name: b for b in backends}, args.kill, args.freeze, args.freeze_s,
                    max(1, int(args.fault_at * args.requests)))
    t0 = time.perf_counter()
    outcomes = await closed_loop(router.url, args.requests, args.concurrency, args.hang_s, faults.progress)
    res["load_wall_s"] = round(time.perf_counter() - t0, 2)
    res.update(tally(outcomes))
    if faults.fired_at is not None:
        res["fault_after_s"] = round(faults.fired_at - t0, 2)
    await faults.thawed.wait()
    res["router"] = counters(router.url)
    return res


def report(args: argparse.Namespace, res: dict) -> None:
    """The human-readable summary."""
    faults = " ".join(f for f in (args.kill and f"--kill {args.kill}",
                                  args.freeze and f"--freeze {args.freeze} --freeze-s {args.freeze_s:g}") if f)
    print(f"{res['requests']} requests at concurrency {args.concurrency} over {args.backends} backends "
          f"(speedup {args.speedup:g}, policy {args.policy}) {faults or 'no fault'}: {res['load_wall_s']} s")
    print(f"  completed       {res['completed']}")
    print(f"  clean errors    {res['clean_errors']}  {res['clean_kinds'] or ''}")
    print(f"  unclean errors  {res['unclean_errors']}  {res['unclean_kinds'] or ''} (ReadError: {res['read_errors']})")
    print(f"  hung (> {args.hang_s:g} s)   {res['hung']}")
    print(f"  served twice    {res['served_twice']}")
    print(f"  latency         p50 {res['latency_p50_s']} s, p99 {res['latency_p99_s']} s, "
          f"max {res['latency_max_s']} s")
    if "overhead_p50_ms" in res:
        print(f"  router overhead p50 {res['overhead_p50_ms']} ms, p99 {res['overhead_p99_ms']} ms at concurrency 1 "
              f"(router p50 {res['router_p50_ms']} / p99 {res['router_p99_ms']} ms, direct "
              f"{res['direct_p50_ms']} / {res['direct_p99_ms']} ms, {args.overhead_pairs} pairs)")
        if "router_cpu_ms_per_request" in res:
            print(f"  router CPU      {res['router_cpu_ms_per_request']} ms per request at concurrency 1 (its health "
                  "checks and scrapes meanwhile included)")
    print(f"  router counters {res['router']}")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench faults", description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=200)
    ap.add_argument("--backends", type=int, default=4)
    ap.add_argument("--speedup", type=float, default=10.0, help="the emulated backends' speedup (default 10)")
    ap.add_argument("--kill", default=None, help="backend to SIGKILL (b0, b1, ...)")
    ap.add_argument("--freeze", default=None, help="backend to SIGSTOP, then SIGCONT after --freeze-s")
    ap.add_argument("--freeze-s", type=float, default=60.0)
    ap.add_argument("--fault-at", type=float, default=0.2, help="share of requests ended before the faults")
    ap.add_argument("--hang-s", type=float, default=60.0, help="a request with no end by then is 'hung'")
    ap.add_argument("--stall-s", type=float, default=None, help="the router's timeouts.stall_s (default: its own)")
    ap.add_argument("--policy", default="jsq", help="the router's heuristic (default jsq)")
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--gpu", default="a100-80gb")
    ap.add_argument("--overhead-pairs", type=int, default=300, help="requests each way at concurrency 1 (0: skip)")
    ap.add_argument("--json", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    names = [f"b{i}" for i in range(args.backends)]
    for flag, v in (("--kill", args.kill), ("--freeze", args.freeze)):
        if v is not None and v not in names:
            ap.error(f"{flag} {v}: expected one of {', '.join(names)}")
    if args.requests < 1 or args.concurrency < 1 or args.backends < 1:
        ap.error("--requests, --concurrency and --backends must be at least 1")
    procs: list[Proc] = []
    with tempfile.TemporaryDirectory(prefix="llmsim-faults-") as tmp:
        try:
            backends = start_backends(args, Path(tmp))
            procs += backends
            router = start_router(args, backends, Path(tmp))
            procs.append(router)
            res = asyncio.run(run_load(args, router, backends))
        finally:
            stop_all(procs)
    if args.json:
        print_json({"args": vars(args), **res})
    else:
        report(args, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
