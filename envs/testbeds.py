"""The papers' testbeds as registered envs: one documented class per id, each a :class:`RoutingEnv` with defaults.

``llmsim/QoSEdge-v0`` (:class:`QoSEdgeEnv`), ``llmsim/WorkloadRouter-v0`` (:class:`WorkloadRouterEnv`) and
``llmsim/BestEffort-v0`` (:class:`BestEffortEnv`); ``llmsim/Routing-v0`` is :class:`RoutingEnv` itself. Each class
takes its testbed's options (checked like a config group: ``QoSEdge-v0.rate: expected a finite number``) and any
:class:`~llmsim.envs.config.RoutingEnvConfig` key on top (``observation=``, ``reward=``, ``time_limit=``...).
:func:`make_from_config` builds any of them from a conf/env mapping; the ``*_instances`` builders give the clusters.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from omegaconf import DictConfig, OmegaConf
from pydantic import StrictBool

from llmsim.cluster import InstanceConfig
from llmsim.engine.config import EngineConfig
from llmsim.envs.config import RoutingEnvConfig
from llmsim.envs.paper_timing import QOS_EDGE_K, qos_edge_paper_profile
from llmsim.envs.routing_env import RoutingEnv
from llmsim.envs.tasks import (
    BEST_EFFORT_ACCURACY,
    BEST_EFFORT_MODELS,
    QOS_EXPERTS,
    best_effort_mixture,
    qos_edge_experts,
    qos_edge_mixture,
    workload_router_mixture,
)
from llmsim.envs.workloads import MixtureWorkload, scale_lengths
from llmsim.errors import ConfigError, ProfileError
from llmsim.schema import Fraction, NonNegFloat, PosFloat, PosInt, check_choice, validated

# Learned Best-Effort LLM Serving, Sec. 2: GPU memory split per GPU (5 % OPT-125M, 20 % OPT-1.3B, the rest OPT-6.7B)
BEST_EFFORT_MEMORY = {"opt-125m": 0.05, "opt-1.3b": 0.20, "opt-6.7b": 0.75}
# its static baselines get the whole GPU: vLLM's default share
STATIC_MEMORY = 0.9
# no calibration of the TITAN RTX profiles is needed with 512-token generations (docs/testbeds.md)
BEST_EFFORT_STEP_SCALE = 1.0
# Intelligent Router for LLM Workloads: 4 x V100 16 GB; 0.97 is the smallest vLLM memory share (in hundredths)
# whose KV cache holds Llama-2-7B's 4,096-token context next to its 13.5 GB of weights (vLLM refuses below it)
WORKLOAD_ROUTER_GPU = "v100-16gb"
WORKLOAD_ROUTER_MEMORY = 0.97
WORKLOAD_ROUTER_MAX_SEQS = 128  # its appendix: max batch size 128
# default drain_time per testbed (the episode's time limit is the last arrival + max_wait_s + drain_time):
# a margin over the longest drain measured under heuristic and random policies (docs/testbeds.md, "Drain time")
QOS_EDGE_DRAIN_S = 60.0
WORKLOAD_ROUTER_DRAIN_S = 600.0
BEST_EFFORT_DRAIN_S = 300.0
QOS_EDGE_PREDICTOR = {"kind": "noisy", "len_sigma": 0.25, "q_sd": 0.03, "len_buckets": 10, "len_max": 300.0,
                      "q_buckets": 10}


# ---------------------------------------------------------------------------------------------- clusters
def workload_router_instances(num_instances: int = 4, gpu: str | Sequence[str] = WORKLOAD_ROUTER_GPU,
                              max_num_seqs: int = WORKLOAD_ROUTER_MAX_SEQS,
                              gpu_memory_utilization: float = WORKLOAD_ROUTER_MEMORY,
                              step_time_scale: float = 1.0) -> list[InstanceConfig]:
    """The WorkloadRouter cluster: ``num_instances`` x Llama-2-7B, one GPU each, vLLM V0 FCFS (docs/testbeds.md).
    ``gpu`` may list one GPU per instance (a heterogeneous cluster; its length must be ``num_instances``)."""
    gpus = [gpu] * num_instances if isinstance(gpu, str) else list(gpu)
    if len(gpus) != num_instances:
        raise ConfigError(f"WorkloadRouter-v0.gpu: a list needs one GPU per instance ({num_instances}), got "
                          f"{len(gpus)}: {gpus}")
    eng = EngineConfig(policy="vllm_v0", max_num_seqs=max_num_seqs, gpu_memory_utilization=gpu_memory_utilization,
                       step_time_scale=step_time_scale)
    return [InstanceConfig(model="llama-2-7b", gpu=g, engine=eng) for g in gpus]


def qos_edge_instances(experts: Sequence[str] = QOS_EXPERTS, gpu: str = "rtx4090",
                       timing: str = "paper", intercept: float | None = None) -> list[InstanceConfig]:
    """The QoS-aware edge router's experts, one RTX 4090 each (vLLM V0). ``timing="paper"``: Eqs. 13-14 plus
    ``intercept`` seconds per iteration (None: the measured profile's fixed step cost, see envs/paper_timing);
    ``"measured"``: the measured RTX 4090 profiles."""
    return [InstanceConfig(model=m, gpu=gpu, engine=EngineConfig(policy="vllm_v0"),
                           profile=paper_profile(m, gpu, intercept) if timing == "paper" else None)
            for m in experts]


def paper_profile(expert: str, gpu: str, intercept: float | None) -> Any:
    """The paper's step model of ``expert`` on ``gpu``; an unknown GPU is told under the testbed's key."""
    try:
        return qos_edge_paper_profile(expert, gpu, intercept)
    except ProfileError as e:
        raise ProfileError(f"QoSEdge-v0.gpu: {gpu!r} (expert {expert}): {e}") from None


def best_effort_instances(num_gpus: int = 4, gpu: str = "titan-rtx",
                          step_time_scale: float = BEST_EFFORT_STEP_SCALE) -> list[InstanceConfig]:
    """The BestEffort system: each GPU hosts OPT-125M / 1.3B / 6.7B with the paper's memory split, the three
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
    """BestEffort's static baselines: one model size on every GPU with the whole GPU's memory (vLLM's 0.9)."""
    eng = EngineConfig(policy="vllm_v0", gpu_memory_utilization=STATIC_MEMORY, step_time_scale=step_time_scale)
    return [InstanceConfig(model=model, gpu=gpu, engine=eng) for _ in range(num_gpus)]


def qos_edge_names(experts: Sequence[str] | int, timing: str) -> tuple[str, ...]:
    """The experts' names, checked here: the paper's step model has constants for its experts only."""
    try:
        names = qos_edge_experts(experts) if isinstance(experts, int) else tuple(experts)
    except ConfigError as e:  # the preset's own key, told as the testbed's
        raise ConfigError(str(e).replace("qos_edge experts:", "QoSEdge-v0.experts:", 1)) from None
    if not names:
        raise ConfigError(f"QoSEdge-v0.experts: expected at least one expert, got {list(names)!r}")
    for i, m in enumerate(names):
        if timing == "paper" and m not in QOS_EDGE_K:
            raise ConfigError(f"QoSEdge-v0.experts[{i}]: timing='paper' has step-time constants for "
                              f"{sorted(QOS_EDGE_K)}; got {m!r} (timing='measured' takes any model with a profile)")
    return names


def best_effort_tasks(tasks: Sequence[str] | None, task_deadlines: Mapping[str, float] | None) -> list[str]:
    """The tasks' names, and a deadline only for a task of the episode (a misspelt one would apply nowhere)."""
    names = list(BEST_EFFORT_ACCURACY) if tasks is None else list(tasks)
    if not names:
        raise ConfigError(f"BestEffort-v0.tasks: expected at least one task, got {names!r}")
    for i, t in enumerate(names):
        check_choice(t, BEST_EFFORT_ACCURACY, f"BestEffort-v0.tasks[{i}]")
    for t in task_deadlines or {}:
        check_choice(t, names, "BestEffort-v0.task_deadlines")
    return names


def check_testbed_keys(where: str, cls: type, options: Mapping[str, Any]) -> None:
    """Each extra option must be an env key; a misspelt one is matched against the testbed's own options too (the
    env's keys alone suggested ``time_limit`` for ``latency_limt`` and listed none of the testbed's options)."""
    env_keys = sorted(RoutingEnvConfig.model_fields)
    own = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "options")]
    for key in options:
        if key not in RoutingEnvConfig.model_fields:
            hint = difflib.get_close_matches(str(key), [*own, *env_keys], n=1)
            raise ConfigError(f"{where}: unknown key {key!r}{f' (did you mean {hint[0]!r}?)' if hint else ''}; "
                              f"its options: {own}; env keys: {env_keys}")


def testbed_config(instances: list[InstanceConfig], defaults: dict[str, Any], options: dict[str, Any],
                   default_workload: Any) -> RoutingEnvConfig:
    """A testbed's config: its ``defaults`` with the caller's ``options`` on top; its own workload (built only
    when the caller gives none) unless ``options`` has one."""
    kw = {**defaults, **options}
    workload = kw.pop("workload", None) or default_workload()
    return RoutingEnvConfig.of(instances=instances, workload=workload, **kw)


# ---------------------------------------------------------------------------------------------- the testbeds
class QoSEdgeEnv(RoutingEnv):
    """``llmsim/QoSEdge-v0``: the testbed of "QoS-Aware LLM Routing for Edge Computing with Multiple Experts".

    ## Description
    N ~7B experts (default the released code's six: alpaca-native, chatglm-6b, mpt-7b-instruct, koala-7b,
    baize-7b, mpt-7b), one RTX 4090 each (vLLM V0), serve a mix-instruct-like workload with Poisson arrivals
    (5 req/s, 5,000 requests). Each arrival is routed to an expert or dropped, trading answer quality (the
    expert's score on the request) against the per-token latency limit L. Step times follow the paper's
    Eqs. 13-14 plus the measured fixed step cost (``timing="paper"``; docs/testbeds.md).

    ## Action Space
    ``Discrete(N + 2)`` (8 for six experts): expert i < N, N = wait (not offered), N + 1 = drop (offered). An
    expert whose waiting queue already holds ``cap`` requests is masked (``max_waiting``).

    ## Observation Space
    The paper's heterogeneous graph state (Eqs. 6-8) as a ``Dict`` of padded arrays and masks
    (:class:`~llmsim.envs.observations.GraphObs`): the arrived request (3N), the experts (N x 3) and up to ``cap``
    running and waiting requests per expert (6 features each), features in [0, 1000].

    ## Rewards
    The QoS reward (Eq. 16, :class:`~llmsim.envs.rewards.QoSReward`): the quality of each request completed
    within L = ``latency_limit`` s per output token, minus the Eq. 15 action-impact penalty of the routing
    decision, plus the outcome terms (a drop costs -1). Predictions: a bucketised noisy oracle (10 buckets)
    standing in for the paper's classifiers.

    ## Episode End
    Terminated when all 5,000 requests finished or were dropped; truncated at the last arrival + ``max_wait_s``
    + ``drain_time`` (60 s; heuristics drain in 4-9 s, quality-first in up to ~46 s).

    ## Arguments
    ``num_requests`` (5000), ``rate`` (5.0 req/s), ``latency_limit`` (0.03 s/token), ``experts`` (names, or a
    count N up to 10: the first N of the code's six, then ``llmsim.envs.tasks.QOS_MORE_EXPERTS``; Fig. 11's
    sweep), ``gpu`` (rtx4090), ``cap`` (10: graph slots and the full-queue mask), ``predictor`` (None: the noisy
    oracle above), ``timing`` (``paper`` or ``measured``), ``intercept`` (s per iteration under ``paper``; None:
    the measured profile's fixed step cost, 0: the paper's equations exactly), ``drain_time`` (60 s),
    ``arrival`` (replaces the Poisson process, e.g. ``{kind: burstgpt_like, rate: 5}``, the paper's real-world
    test, or ``{kind: trace, trace: {kind: azure, path: ..., window: [0, 1200]}}``: a real trace's timing),
    ``lengths`` (None; ``short``, ``long`` or ``bimodal`` reshape the experts' output lengths for held-out tests:
    ``llmsim.envs.workloads.LENGTH_MIXES``), ``max_experts`` (None; M pads the graph state to M expert slots with a
    mask of the present experts, so one policy runs on any N <= M: docs/testbeds.md), plus any
    :class:`~llmsim.envs.config.RoutingEnvConfig` key.
    """

    @validated("QoSEdge-v0")
    def __init__(self, num_requests: PosInt = 5000, rate: PosFloat = 5.0, latency_limit: PosFloat = 0.03,
                 experts: Sequence[str] | PosInt = QOS_EXPERTS, gpu: str = "rtx4090", cap: PosInt = 10,
                 predictor: Any = None, timing: Literal["measured", "paper"] = "paper",
                 intercept: NonNegFloat | None = None, drain_time: NonNegFloat = QOS_EDGE_DRAIN_S,
                 arrival: dict[str, Any] | None = None,
                 lengths: Literal["short", "long", "bimodal"] | None = None, max_experts: PosInt | None = None,
                 render_mode: str | None = None, **options: Any) -> None:
        check_testbed_keys("QoSEdge-v0", QoSEdgeEnv, options)
        names = qos_edge_names(experts, timing)
        graph = {"kind": "graph", "cap_running": cap, "cap_waiting": cap, "latency_scale": latency_limit}
        if max_experts is not None:  # expert blocks padded to max_experts slots with a mask of the present ones
            graph["max_experts"] = max_experts
        defaults = dict(
            num_requests=num_requests, decision="arrival", action="instance_drop", observation=graph,
            reward={"kind": "qos", "latency_limit": latency_limit},
            predictor=predictor if predictor is not None else dict(QOS_EDGE_PREDICTOR), max_waiting=cap,
            drain_time=drain_time,
        )
        super().__init__(testbed_config(
            qos_edge_instances(names, gpu, timing, intercept), defaults, options,
            lambda: MixtureWorkload(scale_lengths(qos_edge_mixture(names), lengths),
                                    arrival or {"kind": "poisson", "rate": rate})), render_mode=render_mode)


class WorkloadRouterEnv(RoutingEnv):
    """``llmsim/WorkloadRouter-v0``: the testbed of "Intelligent Router for LLM Workloads" (heuristic-guided RL).

    ## Description
    Four Llama-2-7B instances on V100 16 GB (vLLM V0 FCFS, max batch 128, memory share 0.97: the KV cache just
    holds one 4,096-token context) serve the paper's five-task mixture (Table 1) at 20 req/s, 2,000 requests.
    Requests wait in a central queue whose head the agent routes or holds every 0.02 s tick, so that long decodes
    and heavy prefills are not mixed on one instance. The scalability preset is ``num_instances=8, rate=40,
    num_requests=4000`` (conf/env/workload_router_8.yaml). Why these knobs: docs/testbeds.md.

    ## Action Space
    ``Discrete(N + 2)`` (6 for four instances): instance i < N, N = wait (offered: hold the head another tick),
    N + 1 = drop (not offered). A tick with an empty queue is not a decision point.

    ## Observation Space
    The paper's flat state (:class:`~llmsim.envs.observations.FlatObs`), ``Box`` of 3 + 6N floats (27 for four
    instances): queue length, prompt and predicted decode bucket of the head, then per instance its requests in
    prefill and in three decode-length buckets, its free capacity and the time to its earliest completion.

    ## Rewards
    The workload-aware reward (:class:`~llmsim.envs.rewards.WorkloadAwareReward`): -(unfinished fraction) of every
    request in the system per tick, +60 per completion, and the heuristic guidance h (mixing penalty of the chosen
    instance minus the best one's; ``guidance`` weighs it: 1 = Workload-Aware RL, 0 = Baseline RL), scaled by
    1/60; a lost request costs what a served one earns.

    ## Episode End
    Terminated when all requests finished or were dropped; truncated at the last arrival + ``max_wait_s`` +
    ``drain_time`` (600 s; heuristics drain in 200-590 s, median ~380 s: outputs reach ~4,000 tokens).

    ## Arguments
    ``num_requests`` (2000), ``rate`` (20.0 req/s), ``num_instances`` (4), ``gpu`` (v100-16gb), ``max_num_seqs``
    (128), ``gpu_memory_utilization`` (0.97), ``step_time_scale`` (1.0), ``task_weights`` (another task mix: a
    name of ``llmsim.envs.tasks.WORKLOAD_ROUTER_MIXES`` such as ``long_decode``, or task -> weight, for held-out
    evaluation; None = Table 1's mix), ``drain_time`` (600 s), ``arrival`` (replaces the Poisson process at
    ``rate``, e.g. ``{kind: burstgpt_like, rate: 20}``; llmsim.envs.workloads), ``gpu`` may be a list of one GPU per
    instance (a heterogeneous cluster), plus any :class:`~llmsim.envs.config.RoutingEnvConfig` key (e.g. ``tick``,
    ``reward={kind: workload_aware, guidance: 0}``, or ``workload=`` an llmsim trace config to replay real lengths).
    """

    @validated("WorkloadRouter-v0")
    def __init__(self, num_requests: PosInt = 2000, rate: PosFloat = 20.0, num_instances: PosInt = 4,
                 gpu: str | list[str] = WORKLOAD_ROUTER_GPU, max_num_seqs: PosInt = WORKLOAD_ROUTER_MAX_SEQS,
                 gpu_memory_utilization: Fraction = WORKLOAD_ROUTER_MEMORY, step_time_scale: PosFloat = 1.0,
                 task_weights: str | Mapping[str, NonNegFloat] | None = None,
                 drain_time: NonNegFloat = WORKLOAD_ROUTER_DRAIN_S, arrival: dict[str, Any] | None = None,
                 render_mode: str | None = None, **options: Any) -> None:
        check_testbed_keys("WorkloadRouter-v0", WorkloadRouterEnv, options)
        instances = workload_router_instances(num_instances, gpu, max_num_seqs, gpu_memory_utilization,
                                              step_time_scale)
        defaults = dict(
            num_requests=num_requests, decision="tick", tick=0.02, action="instance_wait", observation="flat",
            reward="workload_aware", predictor="oracle", drain_time=drain_time,
        )
        super().__init__(testbed_config(
            instances, defaults, options,
            lambda: MixtureWorkload(workload_router_mixture(weights=task_weights),
                                    arrival or {"kind": "poisson", "rate": rate})), render_mode=render_mode)


class BestEffortEnv(RoutingEnv):
    """``llmsim/BestEffort-v0``: the testbed of "Learned Best-Effort LLM Serving".

    ## Description
    ``num_gpus`` TITAN RTX GPUs each host OPT-125M, OPT-1.3B and OPT-6.7B with the paper's memory split (5 / 20 /
    75 %); the three engines of a GPU share it, each busy mate adding ``colocation_interference`` (default 1: time
    slicing) to the others' step time. Four zero-shot tasks (Table 1 accuracies) arrive at a stable or bursty
    rate; for each the agent picks a model size, served by its least-loaded replica, trading accuracy against a
    40 ms/token deadline. Every request generates 512 tokens by default (docs/testbeds.md).

    ## Action Space
    ``Discrete(M + 2)`` = ``Discrete(5)``: model size i < 3 (OPT-125M, 1.3B, 6.7B), 3 = wait, 4 = drop (neither
    offered).

    ## Observation Space
    The paper's model-selection features (:class:`~llmsim.envs.observations.ModelSelectObs`), ``Box`` of
    4 + 3 + 1 = 8 floats: one-hot task over the paper's four task ids (hellaswag, copa, piqa, openbookqa, whichever
    subset ``tasks`` draws), batch size per model / 64, arrival rate / 48 (the true rate on ``stable``, the
    5-arrival running estimate otherwise, App. B).

    ## Rewards
    The best-effort reward (Eq. 1, :class:`~llmsim.envs.rewards.BestEffortReward`): per completion the task's
    normalised accuracy on the serving model times the deadline weight (1 if met, else 0; ``soft=True``: 1 - 0.01
    per ms late, 0 past 10 %), plus the outcome terms.

    ## Episode End
    Terminated when all requests finished or were dropped; truncated at the last arrival + ``max_wait_s`` +
    ``drain_time`` (300 s; heuristic and random policies drain in 22-159 s).

    ## Arguments
    ``num_requests`` (2000), ``schedule`` (``stable``: Poisson at ``rate``, or random rates in [0.25, 48] held
    40 s when ``rate`` is None; ``bursty``: unpredictable workload 1; ``bursty2``: workload 2), ``rate``,
    ``num_gpus`` (4), ``gpu`` (titan-rtx), ``deadline`` (0.04 s/token), ``soft`` (False), ``task_deadlines``
    (per task), ``tasks`` (a subset), ``out_mean`` (None: 512 generated tokens; a number: LogNormal mean),
    ``step_time_scale`` (1.0), ``drain_time`` (300 s), plus any :class:`~llmsim.envs.config.RoutingEnvConfig` key.
    With these defaults static OPT-6.7B on 4 GPUs keeps >= 95 % of deadlines up to ~2 req/s, OPT-1.3B fails near
    40 req/s and OPT-125M is the best static choice only at the top rates, as the paper reports
    (``python -m experiments.testbeds.calibrate --testbed best_effort``).
    """

    @validated("BestEffort-v0")
    def __init__(self, num_requests: PosInt = 2000, schedule: Literal["stable", "bursty", "bursty2"] = "stable",
                 rate: PosFloat | None = None, num_gpus: PosInt = 4, gpu: str = "titan-rtx",
                 deadline: PosFloat = 0.04, soft: StrictBool = False,
                 task_deadlines: Mapping[str, PosFloat] | None = None, tasks: Sequence[str] | None = None,
                 out_mean: PosFloat | None = None,
                 step_time_scale: PosFloat = BEST_EFFORT_STEP_SCALE, drain_time: NonNegFloat = BEST_EFFORT_DRAIN_S,
                 render_mode: str | None = None, **options: Any) -> None:
        check_testbed_keys("BestEffort-v0", BestEffortEnv, options)
        tasks = best_effort_tasks(tasks, task_deadlines)
        defaults = dict(
            num_requests=num_requests, decision="arrival", action="model",
            # the task one-hot keeps the paper's four task ids whatever subset arrives (its section 4.5 runs the
            # four-task policy on one- and two-task workloads without retraining)
            observation={"kind": "model", "rate": "true" if schedule == "stable" else "estimate",
                         "tasks": list(BEST_EFFORT_ACCURACY)},
            reward={"kind": "best_effort", "deadline": deadline, "soft": soft,
                    "task_deadlines": dict(task_deadlines or {})},
            drain_time=drain_time,
        )
        arrival = {"kind": schedule} if rate is None else {"kind": schedule, "rate": rate}
        super().__init__(testbed_config(
            best_effort_instances(num_gpus, gpu, step_time_scale), defaults, options,
            lambda: MixtureWorkload(best_effort_mixture(tasks, out_mean), arrival)), render_mode=render_mode)


# conf/env's ``id``: the testbed each name builds
TESTBEDS: dict[str, type[RoutingEnv]] = {"qos_edge": QoSEdgeEnv, "workload_router": WorkloadRouterEnv,
                                         "best_effort": BestEffortEnv, "routing": RoutingEnv}


def make_from_config(cfg: Any) -> RoutingEnv:
    """An env from a Hydra / OmegaConf-style config (see conf/env/*.yaml): ``id`` (optional testbed name:
    qos_edge, workload_router, best_effort, routing) plus that testbed's options."""
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"env: expected a mapping of env options, got {type(cfg).__name__}")
    kw = dict(cfg)
    testbed = TESTBEDS[check_choice(kw.pop("id", "routing"), TESTBEDS, "env.id")]
    if "slo" in kw and kw["slo"] is not None:
        kw["slo"] = dict(kw["slo"])
    return testbed(**kw)
