"""The env options' schema, the action layout, and the interface observation builders and rewards see.

The option field types are llmsim's (:mod:`llmsim.schema`), so ``tick=0``, ``num_requests=1.5`` or
``time_limit=nan`` fail at construction with one line naming the option, as in the CLI.

:class:`EnvContext` is everything an observation builder or a reward may read of the env: static facts
(instances, models, tasks), the public :class:`~llmsim.state.cluster_state.ClusterState` (``state()`` as the router
sees it, ``true_state()`` for rewards), the predictor's outputs and the router's own bookkeeping. It lives
here, below ``llmsim.envs.routing_env``, so that builders and rewards never import the env that calls them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal, Protocol

from llmsim.schema import NonNegFloat, NonNegInt, PosFloat, PosInt, Schema

if TYPE_CHECKING:
    import numpy as np

    from llmsim.perf.models import ModelSpec
    from llmsim.request import Request
    from llmsim.state.cluster_state import ClusterState

# action kinds: what the first indices choose (instances or models), and which of wait / drop are offered
ACTIONS = ("instance", "instance_wait", "instance_drop", "instance_wait_drop",
           "model", "model_wait", "model_drop", "model_wait_drop")
FALLBACKS = ("least_loaded", "drop")


def action_layout(kind: str, n_instances: int, n_models: int) -> tuple[int, bool, bool]:
    """(number of choices K, wait offered, drop offered). The space is always Discrete(K + 2): index i < K
    is choice i, K is wait and K + 1 is drop, in every env; the mask offers wait / drop as ``kind`` says."""
    base = kind.split("_")[0]
    k = n_models if base == "model" else n_instances
    return k, "wait" in kind, "drop" in kind


class EnvOptions(Schema):
    """Scalar options of :class:`llmsim.envs.routing_env.RoutingEnv` (instances, workload and the pluggable parts are
    checked by their own schemas and registries)."""

    where: ClassVar[str] = "env"
    num_requests: PosInt = 1000
    decision: Literal["arrival", "tick"] = "arrival"
    tick: PosFloat = 0.02
    tick_when_empty: bool = False
    action: Literal[ACTIONS] = "instance"  # type: ignore[valid-type]
    time_limit: NonNegFloat | None = None
    drain_time: NonNegFloat = 600.0
    max_wait_s: PosFloat | None = 10.0
    wait_fallback: Literal["least_loaded", "drop"] = "least_loaded"
    view_staleness: NonNegFloat = 0.0
    max_waiting: NonNegInt | None = None
    fixed_workload_seed: NonNegInt | None = None
    metrics_interval: PosFloat = 1.0
    on_unservable: Literal["error", "drop"] = "drop"
    colocation_interference: NonNegFloat = 1.0
    # disaggregated clusters (llmsim.cluster.disagg, envs/pd_stage.py): which routing stage the agent drives
    stage: Literal["prefill", "decode", "both"] = "prefill"
    first_stage: str = "least_kv"  # the heuristic for new requests with stage="decode"
    kv_link: Literal["nvlink", "infiniband", "pcie", "ethernet"] = "infiniband"
    kv_transfer: Literal["overlap", "blocking"] = "overlap"


class EnvContext(Protocol):
    """What observation builders and rewards may read of the env (implemented by ``RoutingEnv``).

    ``state()`` is what the agent's router observes (stale with ``view_staleness``); ``true_state()`` is the
    simulator's exact state, which rewards judge by; ``true_progress()`` is its ``(central_queue,
    ((num_requests, progress) per instance))`` without building it (what a per-tick backlog term reads).
    ``request(id)`` returns a request with its hidden
    ground truth (true output length, quality): rewards only. ``routed_quality`` is the predicted quality
    of each routed request on the model it was sent to (the router's own bookkeeping)."""

    num_instances: int
    instance_models: list[str]
    models: list[str]
    inst_model_idx: np.ndarray
    model_specs: dict[str, ModelSpec]
    task_names: list[str]
    decision: str
    tick: float
    routed_quality: dict[int, float]

    def state(self) -> ClusterState: ...

    def true_state(self) -> ClusterState: ...

    def true_progress(self) -> tuple[int, tuple[tuple[int, float], ...]]: ...

    def predictions(self, req: Request) -> tuple[np.ndarray, np.ndarray]: ...

    def request(self, request_id: int) -> Request: ...
