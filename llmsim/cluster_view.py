"""What routers may observe of a cluster: :class:`ClusterView` (live, or the last stale snapshot)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmsim.cluster import Cluster
    from llmsim.instance import Instance
    from llmsim.request import Request


class ClusterView:
    """What a router may observe. Live by default; with staleness, the last scrape's snapshot."""

    def __init__(self, cluster: Cluster) -> None:
        self._c = cluster
        self.num_instances = len(cluster.instances)
        self._all = list(range(self.num_instances))
        self._snapshot: dict[str, list] | None = None
        self._cand_cache: dict[tuple[int, int], list[int]] = {}
        self.mean_output_estimate = 128.0

    @property
    def now(self) -> float:
        return self._c.env.now

    @property
    def stale(self) -> bool:
        return self._snapshot is not None

    def candidates(self, req: Request) -> list[int]:
        """Instances that can ever serve ``req`` (prompt fits max_model_len and the KV cache)."""
        if self._c.homogeneous_limits:
            return self._all
        key = (req.prompt_tokens, 0)
        c = self._cand_cache.get(key)
        if c is None:
            c = [i for i, inst in enumerate(self._c.instances) if not inst.can_ever_serve(req)] or self._all
            if len(self._cand_cache) < 65536:
                self._cand_cache[key] = c
        return c

    def queue_lengths(self) -> list[int]:
        if self._snapshot is not None:
            return self._snapshot["queue"]
        return [len(i.waiting) + len(i.running) + len(i.swapped) for i in self._c.instances]

    def num_waiting(self) -> list[int]:
        if self._snapshot is not None:
            return self._snapshot["waiting"]
        return [len(i.waiting) for i in self._c.instances]

    def num_running(self) -> list[int]:
        if self._snapshot is not None:
            return self._snapshot["running"]
        return [len(i.running) for i in self._c.instances]

    def kv_used_fractions(self) -> list[float]:
        if self._snapshot is not None:
            return self._snapshot["kv"]
        self._c.sync_all()
        return [i.kv_used / i.kv_total for i in self._c.instances]

    def kv_demand_fractions(self) -> list[float]:
        """KV in use plus the prompt blocks of waiting requests, as a fraction of capacity."""
        if self._snapshot is not None:
            return self._snapshot["kv_demand"]
        self._c.sync_all()
        return [_kv_demand(i) for i in self._c.instances]

    def work_left(self) -> list[float]:
        if self._snapshot is not None:
            return self._snapshot["work"]
        self._c.sync_all()
        est = self.mean_output_estimate
        return [_work_left(i, est) for i in self._c.instances]

    def throughput(self) -> list[float]:
        """Output tokens/s of each instance over the last completed scrape interval.

        Scrapes pause while the cluster is idle (see :mod:`llmsim.cluster`); once a skipped scrape would
        have completed an interval without tokens, this reads zero, as an unpaused scrape would have set.
        """
        c = self._c
        if c.scrape_paused and c.env.now > c.last_scrape + c.metrics_interval:
            return [0.0] * self.num_instances
        return list(c.recent_throughput)

    def requests(self, i: int) -> list[tuple[int, int, int, float | None, str]]:
        """(id, prompt_tokens, generated, predicted_output, state) of every request on instance ``i``."""
        self._c.sync_all()
        inst = self._c.instances[i]
        out = [(r.id, r.prompt_tokens, r.generated, r.predicted_output, "running") for r in inst.running]
        out += [(r.id, r.prompt_tokens, r.generated, r.predicted_output, "waiting") for r in inst.waiting]
        out += [(r.id, r.prompt_tokens, r.generated, r.predicted_output, "swapped") for r in inst.swapped]
        return out

    @property
    def central_queue_length(self) -> int:
        return len(self._c.central)

    def take_snapshot(self) -> None:
        c = self._c
        c.sync_all()
        est = self.mean_output_estimate
        insts = c.instances
        self._snapshot = {
            "queue": [len(i.waiting) + len(i.running) + len(i.swapped) for i in insts],
            "waiting": [len(i.waiting) for i in insts],
            "running": [len(i.running) for i in insts],
            "kv": [i.kv_used / i.kv_total for i in insts],
            "kv_demand": [_kv_demand(i) for i in insts],
            "work": [_work_left(i, est) for i in insts],
        }


def _kv_demand(inst: Instance) -> float:
    bs = inst.block_size
    pending = sum(-(-(r.prompt_tokens + r.generated) // bs) for r in inst.waiting)
    return (inst.kv_used + pending) / inst.kv_total


def _work_left(inst: Instance, est: float) -> float:
    w = 0.0
    for q in (inst.running, inst.waiting, inst.swapped):
        for r in q:
            pred = r.predicted_output if r.predicted_output is not None else est
            w += (r.prompt_tokens + r.generated - r.computed) + max(pred - r.generated, 1.0)
    return w
