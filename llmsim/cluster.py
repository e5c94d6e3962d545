"""A cluster of heterogeneous serving instances behind a routing hook.

Arrivals are fed lazily from the workload (one pending arrival event at a time), routed at their
arrival instant, and either submitted to an instance, held in a central queue (WAIT, decided again
whenever a request finishes and at an optional tick) or dropped (DROP, counted). A periodic scrape
(``metrics_interval``) records the queue / KV timeline and, when ``view_staleness`` > 0, refreshes the
stale snapshot routers see, as real metrics endpoints lag.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from llmsim.engine import EngineConfig
from llmsim.errors import ConfigError, LLMSimError
from llmsim.instance import Instance
from llmsim.metrics import Recorder
from llmsim.policies import DEFER, DROP, WAIT, Router
from llmsim.profile import Profile, load_profile
from llmsim.request import Request
from llmsim.simenv import ARRIVAL, OBSERVE, ROUTE, SimEnv


@dataclass
class InstanceConfig:
    """One serving instance: which model on which GPU(s), and its engine settings."""

    model: str = "llama-2-7b"
    gpu: str = "a100-80gb"
    tp: int = 1
    engine: EngineConfig = field(default_factory=EngineConfig)
    profile: Profile | None = None
    profile_kind: str = "auto"
    name: str = ""
    device: str | None = None  # instances with the same device share one GPU (and slow each other down)

    def build_profile(self) -> Profile:
        return self.profile if self.profile is not None else load_profile(self.model, self.gpu, self.tp,
                                                                          self.profile_kind)


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
        """Output tokens/s of each instance over the last completed scrape interval."""
        return list(self._c.recent_throughput)

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


class Cluster:
    def __init__(
        self,
        instances: list[InstanceConfig],
        router: Router,
        *,
        view_staleness: float = 0.0,
        metrics_interval: float = 1.0,
        central_queue_tick: float | None = None,
        on_unservable: str = "error",
        on_finish: Callable[[Request, Instance], None] | None = None,
        colocation_interference: float = 1.0,
    ) -> None:
        if not instances:
            raise ConfigError("cluster.instances: a cluster needs at least one instance, got 0")
        if on_unservable not in ("error", "drop"):
            raise ConfigError(f"cluster.on_unservable must be 'error' or 'drop', got {on_unservable!r}")
        if metrics_interval <= 0:
            raise ConfigError(f"cluster.metrics_interval must be > 0, got {metrics_interval}")
        if view_staleness < 0:
            raise ConfigError(f"cluster.view_staleness must be >= 0, got {view_staleness}")
        self.env = SimEnv()
        self.recorder = Recorder()
        self.router = router
        self.on_unservable = on_unservable
        self.user_on_finish = on_finish
        self.instance_configs = instances
        self.instances: list[Instance] = []
        for idx, ic in enumerate(instances):
            try:
                prof = ic.build_profile()
                self.instances.append(
                    Instance(idx, self.env, prof, ic.engine, self.recorder, self._on_finish, ic.name)
                )
            except LLMSimError as e:
                raise type(e)(f"cluster.instances[{idx}] ({ic.model} on {ic.gpu}): {e}") from None
        if colocation_interference < 0:
            raise ConfigError(f"cluster.colocation_interference must be >= 0, got {colocation_interference}")
        self._link_colocated(colocation_interference)
        self._max_servable_prompt = max(i.max_servable_prompt for i in self.instances)
        limits = {(i.max_model_len, i.max_prompt_blocks() * i.block_size) for i in self.instances}
        self.homogeneous_limits = len(limits) == 1
        self.view = ClusterView(self)
        self.view_staleness = float(view_staleness)
        self.metrics_interval = float(metrics_interval)
        self.central_queue_tick = central_queue_tick
        self.central: deque[Request] = deque()
        self.recent_throughput = [0.0] * len(self.instances)
        self._last_tokens = [0] * len(self.instances)
        self._retry_at = -1.0
        self._source: Iterator[Request] | None = None
        self._arrivals_done = True
        self._num_arrived = 0
        self._last_arrival = float("-inf")
        self._out_sum = 0
        self._out_n = 0
        self.deferred: deque[Request] = deque()
        self._progress: Any = None

    def _link_colocated(self, interference: float) -> None:
        """Instances on one device slow each other down (see ``Instance.slowdown``)."""
        groups: dict[str, list[Instance]] = {}
        for ic, inst in zip(self.instance_configs, self.instances):
            if ic.device is not None:
                groups.setdefault(str(ic.device), []).append(inst)
        for device, members in groups.items():
            gpus = {m.profile.gpu.name for m in members}
            if len(gpus) > 1:
                raise ConfigError(f"device {device!r} is shared by instances on different GPU types {sorted(gpus)}")
            share = sum(ic.engine.gpu_memory_utilization for ic in self.instance_configs
                        if ic.device is not None and str(ic.device) == device)
            if share > 1.0 + 1e-9:
                raise ConfigError(f"device {device!r}: the gpu_memory_utilization of its instances adds up to "
                                  f"{share:.2f} > 1; split the GPU memory between them")
            for m in members:
                m.mates = [o for o in members if o is not m]
                m.interference = float(interference)

    # ------------------------------------------------------------------ driving
    def start(self, workload: Iterable[Request]) -> None:
        self._source = iter(workload)
        self._arrivals_done = False
        self._schedule_next_arrival()
        self.env.call_at(self.env.now, OBSERVE, self._scrape)
        if self.view_staleness > 0:
            self.view.take_snapshot()  # what the metrics endpoint showed before the first arrival
            self.env.call_at(self.env.now + self.view_staleness, OBSERVE, self._refresh_view)
        if self.central_queue_tick:
            self.env.call_at(self.env.now + self.central_queue_tick, ROUTE, self._tick)

    def run(self, workload: Iterable[Request], progress: bool = False, total: int | None = None) -> None:
        self.start(workload)
        if progress:
            from tqdm import tqdm

            self._progress = tqdm(total=total, unit="req", desc="simulating", mininterval=0.5, leave=False)
        env = self.env
        step = env.step
        try:
            while env._queue:
                step()
        finally:
            if self._progress is not None:
                self._progress.close()
        self.finish()

    def finish(self) -> None:
        """Report whatever is still undecided (nothing is silently lost)."""
        now = self.env.now
        while self.central:
            self.recorder.drop(self.central.popleft(), "never_routed", now)
        while self.deferred:
            self.recorder.drop(self.deferred.popleft(), "never_routed", now)

    @property
    def done(self) -> bool:
        return self._arrivals_done and not self.central and not self.deferred and all(
            not i._busy for i in self.instances
        )

    def sync_all(self) -> None:
        env = self.env
        now = env.now
        phase = env.phase
        for inst in self.instances:
            if inst._run is not None:
                inst.sync(now, phase)

    # ------------------------------------------------------------------ arrivals and routing
    def _schedule_next_arrival(self) -> None:
        try:
            r = next(self._source)  # type: ignore[arg-type]
        except StopIteration:
            self._arrivals_done = True
            return
        if r.arrival < self._last_arrival:
            raise ConfigError(
                f"workload is not sorted by arrival: request {r.id} arrives at {r.arrival} after a request "
                f"at {self._last_arrival}"
            )
        self._last_arrival = r.arrival
        self.env.call_at(r.arrival, ARRIVAL, self._on_arrival, r)

    def _on_arrival(self, r: Request) -> None:
        r.reset_lifecycle()  # a request object replayed in a second simulation starts afresh
        self._num_arrived += 1
        if self._progress is not None and self._num_arrived % 1000 == 0:
            self._progress.update(1000)
        self._schedule_next_arrival()
        if self._unservable(r):
            return
        self._route(r, ARRIVAL)

    def _unservable(self, r: Request) -> bool:
        if r.prompt_tokens <= self._max_servable_prompt:
            return False  # some instance can take it (the common case: one comparison)
        reasons = [inst.can_ever_serve(r) for inst in self.instances]
        if all(reasons):
            if self.on_unservable == "error":
                raise ConfigError(
                    f"request {r.id} (prompt {r.prompt_tokens} tokens) can never be served: {reasons[0]} on "
                    f"every instance (max_model_len {[i.max_model_len for i in self.instances]}); fix the "
                    "workload, raise engine.max_model_len, or set cluster.on_unservable=drop to count it"
                )
            self.recorder.drop(r, reasons[0], self.env.now)
            return True
        return False

    def _route(self, r: Request, phase: int) -> bool:
        """Ask the router; returns False when the request stays in the central queue."""
        d = self.router.route(r, self.view)
        return self.apply_decision(r, d, phase)

    def apply_decision(self, r: Request, d: int, phase: int = ARRIVAL) -> bool:
        now = self.env.now
        if d >= 0:
            if d >= len(self.instances):
                raise ConfigError(f"router {self.router.name!r} returned instance {d}, but there are "
                                  f"{len(self.instances)} instances")
            inst = self.instances[d]
            why = inst.can_ever_serve(r)
            if why:
                self.recorder.drop(r, f"routed_to_unfit_instance:{why}", now)
                return True
            r.routed_time = now
            inst.submit(r, now, phase)
            return True
        if d == WAIT:
            if phase == ARRIVAL:
                self.central.append(r)
            return False
        if d == DROP:
            self.recorder.drop(r, "router", now)
            return True
        if d == DEFER:
            self.deferred.append(r)
            return True
        raise ConfigError(f"router {self.router.name!r} returned {d!r}; expected an instance index, WAIT or DROP")

    def _on_finish(self, r: Request, inst: Instance) -> None:
        self._out_sum += r.generated
        self._out_n += 1
        self.view.mean_output_estimate = self._out_sum / self._out_n
        if self.central and self._retry_at != self.env.now:
            self._retry_at = self.env.now
            self.env.call_at(self.env.now, ROUTE, self._retry)
        if self.user_on_finish is not None:
            self.user_on_finish(r, inst)

    def _retry(self) -> None:
        still = deque()
        central = self.central
        while central:
            r = central.popleft()
            if not self._route(r, ROUTE):
                still.append(r)
        self.central = still

    def _tick(self) -> None:
        if self.central:
            self._retry()
        if not (self._arrivals_done and not self.central and all(not i._busy for i in self.instances)):
            self.env.call_at(self.env.now + self.central_queue_tick, ROUTE, self._tick)

    # ------------------------------------------------------------------ observation
    def _scrape(self) -> None:
        env = self.env
        now = env.now
        tl = self.recorder.timeline
        dt = self.metrics_interval
        for k, inst in enumerate(self.instances):
            if inst._run is not None:
                inst.sync(now, OBSERVE)
            tl["time"].append(now)
            tl["instance"].append(k)
            tl["waiting"].append(len(inst.waiting))
            tl["running"].append(len(inst.running))
            tl["swapped"].append(len(inst.swapped))
            tl["kv_used_blocks"].append(inst.kv_total - inst.kv_free)
            tl["kv_total_blocks"].append(inst.kv_total)
            tl["tokens_out"].append(inst.tokens_out)
            tl["central_queue"].append(len(self.central))
            self.recent_throughput[k] = (inst.tokens_out - self._last_tokens[k]) / dt
            self._last_tokens[k] = inst.tokens_out
        if not self.done:
            env.call_at(now + dt, OBSERVE, self._scrape)

    def _refresh_view(self) -> None:
        self.view.take_snapshot()
        if not self.done:
            self.env.call_at(self.env.now + self.view_staleness, OBSERVE, self._refresh_view)
