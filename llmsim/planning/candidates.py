"""What ``llmsim-deploy`` searches over: its config groups (``deploy``, ``prices``), the candidates (GPU type x
tensor parallelism x engine variant), the checks that skip a candidate before any simulation (no price, heads that
do not split over tp, no measured profile, no KV room for one ``max_model_len`` sequence, too many GPUs), a
throughput prior that orders and starts the searches, and the :class:`Plan` the search phases of
:mod:`llmsim.planning.deploy` share.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

from pydantic import Field, StrictBool

from llmsim.engine.config import EngineConfig
from llmsim.errors import ConfigError
from llmsim.perf.hardware import get_gpu
from llmsim.perf.kv_cache_dtype import kv_value_bytes
from llmsim.perf.models import get_model
from llmsim.perf.parallel import check_degrees
from llmsim.perf.profile import load_profile
from llmsim.planning.capacity import run_config
from llmsim.planning.runner import Job, Runner
from llmsim.planning.search import CapacityConfig
from llmsim.schema import NonNegFloat, NonNegInt, PosFloat, PosInt, Schema
from llmsim.workload import build_workload


class DeployConfig(Schema):
    """``deploy`` group: the space of clusters, the target and the budget."""

    where: ClassVar[str] = "deploy"
    model: Annotated[str, Field(min_length=1)] = "llama-2-7b"
    gpus: Annotated[list[str], Field(min_length=1)] = ["a100-80gb", "h100"]
    tp: Annotated[list[Annotated[PosInt, Field(le=64)]], Field(min_length=1)] = [1]
    engines: Annotated[list[dict[str, Any]], Field(min_length=1)] = Field(
        default_factory=lambda: [{"name": "default"}])
    target_rate: PosFloat = 10.0
    max_gpus: PosInt = 64
    counts: list[PosInt] = [1, 2, 4, 8, 16, 32, 64]
    budget: PosInt = 600
    allow_estimated_profiles: StrictBool = False
    prune: StrictBool = True
    verify: StrictBool = True
    verify_parallel: PosInt = 2
    max_extra_replicas: NonNegInt = 2
    fewer_replicas_slack: Annotated[NonNegFloat, Field(lt=1)] = 0.1
    measure_chosen: StrictBool = True


class Prices(Schema):
    """``prices`` group: on-demand price per GPU-hour by GPU name (see conf/prices/*.yaml for sources)."""

    where: ClassVar[str] = "prices"
    currency: str = "USD"
    source: str = ""
    date: str = ""
    per_gpu_hour: dict[str, PosFloat]

    def table(self) -> dict[str, float]:
        """Prices by canonical GPU name (aliases such as ``a100`` accepted)."""
        out = {}
        for name, price in self.per_gpu_hour.items():
            try:
                out[get_gpu(name).name] = float(price)
            except ConfigError as e:
                raise ConfigError(f"prices.per_gpu_hour.{name}: {e}") from None
        return out


@dataclass
class Candidate:
    """One (GPU, tp, engine variant): its single-replica capacity and the replica count it needs."""

    gpu: str
    tp: int
    engine_name: str
    engine: dict[str, Any]
    price: float  # per GPU-hour
    kv_cache_dtype: str = "auto"  # an instance key (vLLM's --kv-cache-dtype), given with the engine variant
    prior_rps: float = 0.0  # analytic throughput estimate of one replica
    estimated_profile: bool = False
    job: Job | None = None
    status: str = "pending"
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.gpu} tp{self.tp} {self.engine_name}"

    @property
    def replica_cost(self) -> float:
        return self.tp * self.price

    @property
    def capacity(self) -> float:
        return self.job.search.capacity if self.job else 0.0

    def replicas_for(self, rate: float, capacity: float | None = None) -> int | None:
        c = self.capacity if capacity is None else capacity
        return math.ceil(rate / c - 1e-9) if c > 0 else None

    def cluster(self, model: str, n: int) -> dict[str, Any]:
        return {"instances": [{"model": model, "gpu": self.gpu, "tp": self.tp, "count": n,
                               "kv_cache_dtype": self.kv_cache_dtype, "engine": dict(self.engine)}]}


def enumerate_candidates(dcfg: DeployConfig, prices: dict[str, float], base: dict[str, Any],
                         ) -> tuple[list[Candidate], list[dict[str, Any]]]:
    """Every (GPU, tp, engine variant), split into those worth simulating and the skipped ones (with reasons)."""
    try:
        model = get_model(dcfg.model)
    except ConfigError as e:
        raise ConfigError(f"deploy.model: {e}") from None
    engines = {}
    for k, spec in enumerate(dcfg.engines):
        over = dict(spec)
        name = over.pop("name", None)
        if not isinstance(name, str) or not name or name in engines:
            raise ConfigError(f"deploy.engines[{k}].name: expected a unique non-empty name for the engine variant, "
                              f"got {name!r}")
        kv_dtype = over.pop("kv_cache_dtype", "auto")  # the instance's cache dtype, varied like an engine key
        try:
            kv_value_bytes(kv_dtype)
        except ConfigError as e:
            raise ConfigError(f"deploy.engines[{k}].{e}") from None
        eng = EngineConfig.parse({**(base.get("engine") or {}), **over}, f"deploy.engines[{k}]")
        try:
            eng.resolved(model.max_position, model.name)  # (checked here; resolved for each GPU in check_candidate)
        except ConfigError as e:
            raise ConfigError(f"deploy.engines[{k}] ({name}): {e}") from None
        engines[name] = (over, str(kv_dtype).lower(), eng)
    keep, skipped = [], []
    for k, g in enumerate(dcfg.gpus):
        try:
            gpu = get_gpu(g).name
        except ConfigError as e:
            raise ConfigError(f"deploy.gpus[{k}]: {e}") from None
        for tp in sorted(set(dcfg.tp)):
            for ename, (over, kv_dtype, eng) in engines.items():
                cand = Candidate(gpu, tp, ename, over, prices.get(gpu, 0.0), kv_cache_dtype=kv_dtype)
                # the model as the user gave it (a config path resolves to its own spec; its registered name
                # would give the registry's, e.g. another context length)
                reason, detail = check_candidate(cand, dcfg.model, eng, dcfg)
                if reason:
                    skipped.append({"gpu": gpu, "tp": tp, "engine": ename, "reason": reason, "detail": detail})
                else:
                    keep.append(cand)
    return keep, skipped


def check_candidate(cand: Candidate, model: str, eng: Any, dcfg: DeployConfig) -> tuple[str, str]:
    """("", "") if the candidate can run, else (reason, detail); also fills its throughput prior."""
    if cand.price <= 0:
        return "no_price", f"no prices.per_gpu_hour entry for {cand.gpu}"
    if cand.tp > dcfg.max_gpus:
        return "exceeds_max_gpus", f"tp {cand.tp} > deploy.max_gpus {dcfg.max_gpus}"
    try:
        check_degrees(get_model(model), cand.tp)
    except ConfigError as e:
        return "does_not_split", str(e)  # vLLM refuses to start (the heads do not split over tp)
    prof = load_profile(model, cand.gpu, cand.tp, "auto", kv_cache_dtype=cand.kv_cache_dtype)
    # measured: its own file or that of a registered model of the same architecture (llmsim.perf.profile_table)
    measured = prof.describe().get("kind") == "measured"
    if not measured and not dcfg.allow_estimated_profiles:
        return "no_profile", f"no measured profile for {model} on {cand.gpu} tp{cand.tp}"
    cand.estimated_profile = not measured  # the roofline stands in (allow_estimated_profiles)
    spec = get_model(model)
    eng = eng.resolved(spec.max_position, spec.name, prof.gpu)  # (the GPU's default budget and seats)
    try:
        kv = (eng.num_gpu_blocks * eng.block_size if eng.num_gpu_blocks
              else prof.kv_capacity_tokens(eng.gpu_memory_utilization))
    except ConfigError as e:
        return "does_not_fit", " ".join(str(e).split())
    if kv < eng.max_model_len:
        return "does_not_fit", (f"KV cache of {kv} tokens < max_model_len {eng.max_model_len} "
                                f"(gpu_memory_utilization {eng.gpu_memory_utilization})")
    cand.info["kv_tokens"] = int(kv)
    cand.info["profile"] = prof
    cand.info["engine_resolved"] = eng
    return "", ""


def workload_means(workload: dict[str, Any], seed: int, n: int = 256) -> tuple[float, float]:
    """Mean prompt and output tokens of the first ``n`` requests (lengths do not depend on the rate)."""
    wl = {k: v for k, v in workload.items() if k not in ("max_requests", "num_requests", "duration")}
    wl["num_requests" if wl.get("kind") == "synthetic" else "max_requests"] = n
    reqs = list(build_workload(wl, seed))
    return (sum(r.prompt_tokens for r in reqs) / len(reqs), sum(r.output_tokens for r in reqs) / len(reqs))


def throughput_prior(cand: Candidate, prompt: float, output: float) -> float:
    """Requests/s one replica sustains when saturated, from its profile: a batch of B sequences (KV- and
    max_num_seqs-limited) decodes ``output`` steps while each of the B prompts is prefilled once.

    Only a starting rate and an ordering: the search measures the real capacity."""
    prof, eng = cand.info["profile"], cand.info["engine_resolved"]
    per_req = max(1.0, prompt + output)
    b = max(1, min(eng.max_num_seqs, int(cand.info["kv_tokens"] // per_req)))
    t_dec = prof.step_time(b, b, 0, 0, b, int(b * (prompt + output / 2)))
    p = max(1, int(prompt))
    t_pre = prof.step_time(p, 1, p * p, 0, 0, 0)
    return b / (output * t_dec + b * t_pre)


@dataclass
class Plan:
    """Everything one deployment search needs, shared by its phases."""

    base: dict[str, Any]
    cap: CapacityConfig
    dcfg: DeployConfig
    modes: Callable[[int], tuple[str, float]]  # how a rate in req/s is set, by requests per run (rate_modes)
    runner: Runner
    verify_cut: bool = False  # the budget ran out before every cluster queued for verification was simulated

    def configs(self, cand: Candidate, n: int, rate: float) -> list[dict[str, Any]]:
        """Per-seed run configs of ``n`` replicas at ``rate``: ``num_requests`` per replica."""
        c = self.cap
        mode = self.modes(c.num_requests * n)
        return [run_config(self.base, cand.cluster(self.dcfg.model, n), self.base["policy"], rate, c.seed0 + k,
                           c.num_requests * n, mode) for k in range(c.seeds)]
