"""The papers' testbeds as env factories (registered in envs/__init__.py); every default can be overridden."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from llmsim.cluster import InstanceConfig
from llmsim.engine.config import EngineConfig
from llmsim.envs.paper_timing import qos_edge_paper_profile
from llmsim.envs.routing_env import RoutingEnv
from llmsim.envs.tasks import (
    BEST_EFFORT_MODELS,
    QOS_EXPERTS,
    best_effort_mixture,
    qos_edge_experts,
    qos_edge_mixture,
    workload_router_mixture,
)
from llmsim.envs.workloads import MixtureWorkload
from llmsim.errors import ConfigError
from llmsim.schema import NonNegFloat, PosFloat, PosInt, check_choice, validated

# spec 002 Sec. 2: GPU memory split per GPU (5 % OPT-125M, 20 % OPT-1.3B, the rest OPT-6.7B)
BEST_EFFORT_MEMORY = {"opt-125m": 0.05, "opt-1.3b": 0.20, "opt-6.7b": 0.75}
# static baselines get the whole GPU (spec 002 section 4.1): vLLM's default share
STATIC_MEMORY = 0.9
# no calibration of the TITAN RTX profiles is needed with 512-token generations (docs/testbeds.md)
BEST_EFFORT_STEP_SCALE = 1.0
# spec 001: 4 x V100 16 GB; 0.97 is the smallest vLLM memory share (in hundredths) whose KV cache holds
# Llama-2-7B's 4,096-token context next to its 13.5 GB of weights (vLLM refuses to start below it)
WORKLOAD_ROUTER_GPU = "v100-16gb"
WORKLOAD_ROUTER_MEMORY = 0.97
WORKLOAD_ROUTER_MAX_SEQS = 128  # spec 001 A.8: max batch size 128
# default drain_time per testbed (the episode's time limit is the last arrival + max_wait_s + drain_time):
# a margin over the longest drain measured under heuristic and random policies (docs/testbeds.md, "Drain time")
QOS_EDGE_DRAIN_S = 60.0
WORKLOAD_ROUTER_DRAIN_S = 600.0
BEST_EFFORT_DRAIN_S = 300.0


def workload_router_instances(num_instances: int = 4, gpu: str = WORKLOAD_ROUTER_GPU,
                              max_num_seqs: int = WORKLOAD_ROUTER_MAX_SEQS,
                              gpu_memory_utilization: float = WORKLOAD_ROUTER_MEMORY,
                              step_time_scale: float = 1.0) -> list[InstanceConfig]:
    """Spec 001's cluster: ``num_instances`` x Llama-2-7B, one GPU each, vLLM V0 FCFS (docs/testbeds.md)."""
    eng = EngineConfig(policy="vllm_v0", max_num_seqs=max_num_seqs, gpu_memory_utilization=gpu_memory_utilization,
                       step_time_scale=step_time_scale)
    return [InstanceConfig(model="llama-2-7b", gpu=gpu, engine=eng) for _ in range(num_instances)]


def qos_edge_instances(experts: Sequence[str] = QOS_EXPERTS, gpu: str = "rtx4090",
                       timing: str = "paper", intercept: float | None = None) -> list[InstanceConfig]:
    """Spec 000's experts, one RTX 4090 each (vLLM V0). ``timing="paper"``: Eqs. 13-14 plus ``intercept``
    seconds per iteration (None: the measured profile's fixed step cost, see envs/paper_timing);
    ``"measured"``: the measured RTX 4090 profiles."""
    return [InstanceConfig(model=m, gpu=gpu, engine=EngineConfig(policy="vllm_v0"),
                           profile=qos_edge_paper_profile(m, gpu, intercept) if timing == "paper" else None)
            for m in experts]


def best_effort_instances(num_gpus: int = 4, gpu: str = "titan-rtx",
                          step_time_scale: float = BEST_EFFORT_STEP_SCALE) -> list[InstanceConfig]:
    """Spec 002's system: each GPU hosts OPT-125M / 1.3B / 6.7B with the paper's memory split, the three
    engines of a GPU sharing its ``device`` (busy mates slow each other by ``colocation_interference``)."""
    instances = []
    for g in range(num_gpus):
        for m in BEST_EFFORT_MODELS:
            eng = EngineConfig(policy="vllm_v0", gpu_memory_utilization=BEST_EFFORT_MEMORY[m],
                               step_time_scale=step_time_scale)
            instances.append(InstanceConfig(model=m, gpu=gpu, engine=eng, device=f"gpu{g}"))
    return instances


def static_instances(model: str, num_gpus: int = 4, gpu: str = "titan-rtx",
                     step_time_scale: float = BEST_EFFORT_STEP_SCALE) -> list[InstanceConfig]:
    """Spec 002's static baselines: one model size on every GPU with the whole GPU's memory (vLLM's 0.9)."""
    eng = EngineConfig(policy="vllm_v0", gpu_memory_utilization=STATIC_MEMORY, step_time_scale=step_time_scale)
    return [InstanceConfig(model=model, gpu=gpu, engine=eng) for _ in range(num_gpus)]


@validated("QoSEdge-v0")
def qos_edge(num_requests: PosInt = 5000, rate: PosFloat = 5.0, latency_limit: PosFloat = 0.03,
             experts: Sequence[str] | PosInt = QOS_EXPERTS, gpu: str = "rtx4090", cap: PosInt = 10,
             predictor: Any = None, timing: Literal["measured", "paper"] = "paper",
             intercept: NonNegFloat | None = None, drain_time: NonNegFloat = QOS_EDGE_DRAIN_S,
             arrival: dict[str, Any] | None = None, **kwargs: Any) -> RoutingEnv:
    """Spec 000: N ~7B experts (one RTX 4090 each, vLLM V0), Poisson arrivals, drop action, graph state,
    QoS reward (Eq. 16). Predictions: bucketised noisy oracle (10 buckets) standing in for the DistilBERT
    classifiers. Routing to an expert whose waiting queue already holds ``cap`` requests is masked.

    ``timing``: ``paper`` (default: the paper's step model, Eqs. 13-14, with ``intercept`` seconds per
    iteration, None = the measured profile's fixed step cost; under it the 30 ms/token limit binds at the
    paper's load, docs/testbeds.md) or ``measured`` (the measured RTX 4090 profiles, where it rarely does).
    ``drain_time`` (60 s): simulated time allowed after the last arrival + ``max_wait_s`` before the episode
    is truncated; heuristics drain in 4-9 s, quality-first in up to ~46 s (docs/testbeds.md). ``arrival``
    replaces the Poisson process, e.g. ``{kind: burstgpt_like, rate: 5}`` (bursty traffic averaging ``rate``,
    spec 000's real-world test; llmsim.envs.workloads). ``experts``: names, or a count N (the first N of the code's six,
    then llmsim.envs.tasks.QOS_MORE_EXPERTS, up to 10; Fig. 11's sweep)."""
    if isinstance(experts, int):
        experts = qos_edge_experts(experts)
    instances = qos_edge_instances(experts, gpu, timing, intercept)
    pred = predictor if predictor is not None else {"kind": "noisy", "len_sigma": 0.25, "q_sd": 0.03,
                                                     "len_buckets": 10, "len_max": 300.0, "q_buckets": 10}
    kw: dict[str, Any] = dict(
        num_requests=num_requests, decision="arrival", action="instance_drop",
        observation={"kind": "graph", "cap_running": cap, "cap_waiting": cap, "latency_scale": latency_limit},
        reward={"kind": "qos", "latency_limit": latency_limit}, predictor=pred, max_waiting=cap,
        drain_time=drain_time,
    )
    kw.update(kwargs)
    wl = kw.pop("workload", None) or MixtureWorkload(qos_edge_mixture(experts),
                                                     arrival or {"kind": "poisson", "rate": rate})
    return RoutingEnv(instances, wl, **kw)


@validated("WorkloadRouter-v0")
def workload_router(num_requests: PosInt = 2000, rate: PosFloat = 20.0, num_instances: PosInt = 4,
                    gpu: str = WORKLOAD_ROUTER_GPU, max_num_seqs: PosInt = WORKLOAD_ROUTER_MAX_SEQS,
                    gpu_memory_utilization: PosFloat = WORKLOAD_ROUTER_MEMORY, step_time_scale: PosFloat = 1.0,
                    task_weights: str | Mapping[str, NonNegFloat] | None = None,
                    drain_time: NonNegFloat = WORKLOAD_ROUTER_DRAIN_S, **kwargs: Any) -> RoutingEnv:
    """Spec 001: 4 x Llama-2-7B on V100 16 GB (vLLM V0 FCFS, max batch 128, memory share 0.97: the KV
    cache just holds one 4,096-token context), five-task mixture at 20 req/s, 2000 requests, a central queue
    whose head is routed or held every 0.02 s, flat state, workload-aware reward. The scalability preset of
    the paper is ``num_instances=8, rate=40, num_requests=4000``. Why these knobs: docs/testbeds.md.
    ``drain_time`` (600 s): simulated time allowed after the last arrival + ``max_wait_s`` before the episode
    is truncated; heuristics drain in 200-590 s, median ~380 s (outputs reach ~4,000 tokens; docs/testbeds.md).
    ``task_weights``: another task mix (a name of llmsim.envs.tasks.WORKLOAD_ROUTER_MIXES such as ``long_decode``,
    or task -> weight), for held-out evaluation (docs/evaluation.md); None = Table 1's mix."""
    instances = workload_router_instances(num_instances, gpu, max_num_seqs, gpu_memory_utilization, step_time_scale)
    kw: dict[str, Any] = dict(
        num_requests=num_requests, decision="tick", tick=0.02, action="instance_wait", observation="flat",
        reward="workload_aware", predictor="oracle", drain_time=drain_time,
    )
    kw.update(kwargs)
    wl = kw.pop("workload", None) or MixtureWorkload(workload_router_mixture(weights=task_weights),
                                                     {"kind": "poisson", "rate": rate})
    return RoutingEnv(instances, wl, **kw)


@validated("BestEffort-v0")
def best_effort(num_requests: PosInt = 2000, schedule: Literal["stable", "bursty", "bursty2"] = "stable",
                rate: PosFloat | None = None, num_gpus: PosInt = 4, gpu: str = "titan-rtx", deadline: PosFloat = 0.04,
                soft: bool = False, task_deadlines: Mapping[str, PosFloat] | None = None,
                tasks: Sequence[str] | None = None, out_mean: PosFloat | None = None,
                step_time_scale: PosFloat = BEST_EFFORT_STEP_SCALE, drain_time: NonNegFloat = BEST_EFFORT_DRAIN_S,
                **kwargs: Any) -> RoutingEnv:
    """Spec 002: ``num_gpus`` GPUs each hosting OPT-125M / 1.3B / 6.7B with the paper's memory split,
    model-size action routed to the least-loaded replica, four tasks (Table 1 accuracy), 40 ms/token.

    ``schedule``: ``stable`` (Poisson at ``rate``, or random rates in [0.25, 48] held 40 s when rate is
    None), ``bursty`` (unpredictable workload 1) or ``bursty2`` (workload 2). The state gets the true rate
    on ``stable`` and the 5-arrival running estimate otherwise (App. B). ``out_mean``: None (default)
    = every request generates 512 tokens; a number = LogNormal mean of the generated tokens. The engines of
    one GPU share a ``device``, so each busy mate adds ``colocation_interference`` (default 1: time slicing) to the
    step-time factor of the others (the paper leaves interference open; spec 002 lists it as optional).
    ``step_time_scale`` (default 1.0) multiplies every engine's step time. With the default request shapes
    (zero-shot prompts, 512 generated tokens; llmsim.envs.tasks) static OPT-6.7B on 4 GPUs with the whole memory
    keeps >= 95 % of deadlines up to ~2 req/s, OPT-1.3B fails near 40 req/s and OPT-125M is the best static
    choice only at the top rates, as spec 002 reports (``python -m experiments.testbeds.calibrate --testbed best_effort``).
    ``drain_time`` (300 s): simulated time allowed after the last arrival + ``max_wait_s`` before the episode
    is truncated; heuristic and random policies drain in 22-159 s (docs/testbeds.md)."""
    instances = best_effort_instances(num_gpus, gpu, step_time_scale)
    kw: dict[str, Any] = dict(
        num_requests=num_requests, decision="arrival", action="model",
        observation={"kind": "model", "rate": "true" if schedule == "stable" else "estimate"},
        reward={"kind": "best_effort", "deadline": deadline, "soft": soft,
                "task_deadlines": dict(task_deadlines or {})},
        drain_time=drain_time,
    )
    kw.update(kwargs)
    arrival = {"kind": schedule} if rate is None else {"kind": schedule, "rate": rate}
    wl = kw.pop("workload", None) or MixtureWorkload(best_effort_mixture(tasks, out_mean), arrival)
    return RoutingEnv(instances, wl, **kw)


def routing(instances: Sequence[Any] | None = None, workload: Any = None, **kwargs: Any) -> RoutingEnv:
    """Any cluster / workload / reward from kwargs (defaults: 4 x llama-2-7b on A100, Poisson 10 req/s
    over the spec-001 task mixture, per-arrival flat state, latency reward)."""
    default = [{"model": "llama-2-7b", "gpu": "a100-80gb", "count": 4}]
    insts = list(instances) if instances is not None else default
    wl = workload if workload is not None else {"kind": "mixture", "preset": "workload_router",
                                               "arrival": {"kind": "poisson", "rate": 10.0}}
    return RoutingEnv(insts, wl, **kwargs)


def make_from_config(cfg: Any) -> RoutingEnv:
    """An env from a Hydra / OmegaConf-style config (see conf/env/*.yaml): ``id`` (optional testbed name:
    qos_edge, workload_router, best_effort, routing) plus that factory's kwargs."""
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cfg, DictConfig):
            cfg = OmegaConf.to_container(cfg, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"env: expected a mapping of env options, got {type(cfg).__name__}")
    kw = dict(cfg)
    factories = {"qos_edge": qos_edge, "workload_router": workload_router, "best_effort": best_effort,
                 "routing": routing}
    factory = factories[check_choice(kw.pop("id", "routing"), factories, "env.id")]
    if "slo" in kw and kw["slo"] is not None:
        kw["slo"] = dict(kw["slo"])
    return factory(**kw)
