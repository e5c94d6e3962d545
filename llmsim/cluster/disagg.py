"""Prefill/decode disaggregation: prefill instances hand each request's KV cache to a decode instance.

Roles (``cluster.instances[*].role``): ``mixed`` (the default: an instance does both phases, as before),
``prefill`` (prompts only) and ``decode`` (takes prefilled requests only). A new request is routed among the
prefill and mixed instances (``ClusterView.stage == "prefill"``). When its prefill ends on a prefill instance
the first token is out (TTFT is counted there, as DistServe and Splitwise count it) and the request leaves that
engine; the cluster asks the router for a decode instance of the same model (``Router.route_decode``, the
view's ``stage`` is then ``"decode"`` and ``candidates`` lists the decode and mixed instances), and the KV
moves as vLLM's disaggregated serving pulls it (NIXL connector):

1. the decode instance reserves blocks for the prompt's KV (and the next token) as soon as it has room (FCFS
   among the copies waiting for room there; the prefill instance keeps its blocks meanwhile, so memory is held
   on both sides); a request whose KV landed waits ahead of those that still need blocks, so it always starts;
2. the copy takes ``latency + bytes / bandwidth`` over the link ``sim.kv_link`` of the hardware table
   (:data:`llmsim.perf.hardware.LINKS`), bytes = prompt tokens x the model's KV bytes per token;
3. then the prefill instance frees its blocks (its prefix cache keeps them) and the request joins the decode
   instance's waiting queue with its prompt computed; its next iteration decodes the second token.

``sim.kv_transfer``: ``overlap`` (default) - the copy runs beside both engines' iterations; ``blocking`` -
the prefill engine stalls until the copies it started are done (a synchronous send), so long transfers cost
prefill throughput as well as decode latency. Every request's KV crosses the link once (preempted on the
decode side, it recomputes there).
"""

from __future__ import annotations

from array import array
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsim.cluster.view import kv_format, takes_copies_of
from llmsim.engine.handoff import DECODE, MIXED, PREFILL
from llmsim.errors import ConfigError, LLMSimError
from llmsim.event_loop import ENGINE
from llmsim.perf.hardware import LINKS, transfer_seconds
from llmsim.routing.base import DEFER

if TYPE_CHECKING:
    from llmsim.request import Request

class Transfer:
    """One request's KV on its way from a prefill to a decode instance."""

    __slots__ = ("r", "src", "dst", "src_blocks", "src_state", "dst_blocks", "ready", "start", "nbytes")

    def __init__(self, r: Request, src: Any, dst: Any | None, ready: float) -> None:
        self.r = r
        self.src = src
        self.dst = dst
        self.src_blocks = r.blocks  # what the prefill engine keeps until the copy is done
        self.src_state = r.prefix_state
        self.dst_blocks = 0
        self.ready = ready  # prefill done: the transfer may start
        self.start = -1.0
        self.nbytes = 0


class KVTransfers:
    """The cluster's KV copies: decode-instance choice, room reservation, link time, and their record."""

    def __init__(self, cluster: Any, link: str, mode: str) -> None:
        if link not in LINKS:
            raise ConfigError(f"sim.kv_link: {link!r} is not one of {sorted(LINKS)}")
        self.cluster = cluster
        self.link = LINKS[link]
        self.blocking = mode == "blocking"
        self.env = cluster.env
        # one row per landed transfer: request id, source, destination, ready, start, end, bytes
        self.log: dict[str, array] = {"id": array("q"), "src": array("q"), "dst": array("q"), "ready": array("d"),
                                      "start": array("d"), "end": array("d"), "bytes": array("q")}
        self.in_flight = 0
        self.deferred: deque[Transfer] = deque()  # waiting for an outside driver's decode choice (a Gym env)
        self._check_roles()

    def _check_roles(self) -> None:
        """Refuse role layouts that cannot work, one line each; give each prefill instance its decode peers."""
        insts = self.cluster.instances
        for i in insts:
            if i.role != MIXED and i.host is not None:  # (a copy cannot land on a cache a model swap rebuilds)
                raise ConfigError(f"cluster.instances[{i.idx}] ({i.name}): a {i.role} instance cannot load other "
                                  "models (models: [...]); give it one model")
        if all(i.role == DECODE for i in insts):
            raise ConfigError("cluster.instances: every instance has role decode; new requests need a prefill or "
                              "mixed instance")
        for i in insts:
            if i.role == PREFILL and not any(takes_copies_of(p, kv_format(i)) for p in insts):
                raise ConfigError(f"cluster.instances[{i.idx}] ({i.name}): a prefill instance of "
                                  f"{i.profile.model.name} needs a decode or mixed instance of the same model with "
                                  f"the same KV cache dtype ({i.profile.model.kv_bytes_per_token} bytes per token; "
                                  "vLLM's KV transfer refuses another) and no other models (models: [...])")
        senders = {kv_format(i) for i in insts if i.role == PREFILL}  # (a mixed instance keeps its requests)
        for i in insts:
            if i.role == DECODE and kv_format(i) not in senders:
                raise ConfigError(f"cluster.instances[{i.idx}] ({i.name}): a decode instance of "
                                  f"{i.profile.model.name} needs a prefill instance of the same model with the same KV "
                                  f"cache dtype ({i.profile.model.kv_bytes_per_token} bytes per token): no request "
                                  "could ever reach it")
        for i in insts:  # what a prefill instance can take depends on the decode instances its copies may go to
            if i.role == PREFILL:
                i.limits.peers = [p for p in insts if takes_copies_of(p, kv_format(i))]

    def send(self, r: Request, src: Any, now: float) -> None:
        """``r``'s prefill ended on ``src``: choose its decode instance and queue the copy there (or hold it for an
        outside driver whose router answers DEFER: :meth:`dispatch` then carries its choice out)."""
        t = Transfer(r, src, None, now)
        src.kv.outside += r.blocks  # held for the copy, by a request no longer running there
        r.blocks = 0
        r.prefix_state = None  # the decode side names no blocks of it: it holds the copy, not the prefix cache
        if self.blocking:
            src.handoff.sends_in_flight += 1
        src.handoff.copies += 1
        self.in_flight += 1
        d = self.cluster.route_decode(r, src)
        if d == DEFER:
            self.deferred.append(t)
            return
        self.dispatch(t, d)

    def dispatch(self, t: Transfer, d: int) -> None:
        """Queue ``t``'s copy at decode instance ``d`` (checked by ``Cluster.route_decode`` or the caller)."""
        now = self.env.now
        t.dst = dst = self.cluster.instances[d]
        dst.handoff.pending.append(t)
        if not dst.busy:
            self.start_ready(dst, now)
        else:  # a decode run planned its blocks: reserve at its next boundary
            dst.stop_run_at(now, False)

    def start_ready(self, dst: Any, now: float) -> None:
        """Start the copies waiting at ``dst`` (FCFS) for which it has room now (at a boundary of its engine, or
        while it is idle: a decode run's planned blocks are never taken from under it)."""
        q = dst.handoff.pending
        kv = dst.kv
        while q:
            t = q[0]
            need = kv.blocks_for(t.r.computed + 1)  # the prompt's KV and room for the next token
            if need > kv.free - kv.watermark:
                if need > kv.max_allocation:
                    raise LLMSimError(f"instance {dst.name}: request {t.r.id}'s KV ({need} blocks) can never fit its "
                                      f"cache of {kv.total}; the decode candidates should have excluded it")
                return
            q.popleft()
            kv.reserve(need)
            dst.handoff.copies += 1
            t.dst_blocks = need
            t.start = now
            t.nbytes = t.r.computed * t.src.profile.model.kv_bytes_per_token
            dt = transfer_seconds(t.nbytes, self.link, t.src.profile.gpu, t.src.profile.tp, dst.profile.tp)
            self.env.call_at(now + dt, ENGINE, self._land, t)

    def _land(self, t: Transfer) -> None:
        now = self.env.now
        r, src, dst = t.r, t.src, t.dst
        r.blocks, r.prefix_state = t.src_blocks, t.src_state
        src.kv.outside -= t.src_blocks
        src.kv.release(r)  # (its prompt blocks stay in the prefix cache there)
        r.prefix_state = None
        r.blocks = t.dst_blocks
        self.in_flight -= 1
        src.handoff.copies -= 1
        dst.handoff.copies -= 1
        log = self.log
        for k, v in (("id", r.id), ("src", src.idx), ("dst", dst.idx), ("ready", t.ready), ("start", t.start),
                     ("end", now), ("bytes", t.nbytes)):
            log[k].append(v)
        dst.handoff.take_landed(r, now, ENGINE)
        src.handoff.sent_landed(now)

    def summary(self) -> dict[str, float]:
        """Summary keys of the copies (``kv_transfers``, bytes, time on the link and waiting for room)."""
        log = self.log
        n = len(log["id"])
        if not n:
            return {"kv_transfers": 0, "kv_transfer_gb": 0.0, "mean_kv_transfer_ms": 0.0, "p99_kv_transfer_ms": 0.0,
                    "mean_kv_transfer_wait_ms": 0.0}
        link = (np.frombuffer(log["end"]) - np.frombuffer(log["start"])) * 1e3
        wait = (np.frombuffer(log["start"]) - np.frombuffer(log["ready"])) * 1e3
        return {"kv_transfers": n, "kv_transfer_gb": float(sum(log["bytes"]) / 1e9),
                "mean_kv_transfer_ms": float(link.mean()), "p99_kv_transfer_ms": float(np.percentile(link, 99)),
                "mean_kv_transfer_wait_ms": float(wait.mean())}
